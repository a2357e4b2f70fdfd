/* tools/replay.c -- kite-replay: run an allocation trace against a lab policy, kite, or the
 * process malloc, checking it or timing it.
 *
 *   kite-replay --list
 *   kite-replay [--policy NAME | --kite | --malloc] [--check] [-r START [END]]... [--json]
 *               [--heap-size BYTES] FILE
 *
 * Data structures:
 *   trace        the parsed ops (lab/trace/trace_io.h); ids are already dense slots
 *   blocks[s]    per slot: user pointer, pointer to hand back to free (differs only for an
 *                over-aligned block carved out of a lab policy), requested size, fill tag
 *   ranges[]     sorted, non-overlapping [start, end] line ranges (inclusive, 1-based); an op
 *                is timed when its line lies in a range; each range keeps its own latencies
 * Invariants: blocks[s] describes a live block exactly while the trace has slot s allocated;
 * in --check mode every live block holds the pattern of its tag over its whole requested size.
 *
 * Measuring: only the allocator call itself sits between the two clock reads of an op; the
 * checking, the bookkeeping and the utilization accounting happen outside. The clock is the
 * calibrated time-stamp counter where it is invariant (rp_now), else CLOCK_MONOTONIC. The
 * cost of one clock read pair (calibrated at start, minimum of many) is subtracted from each
 * sample. A
 * sample during which the thread was involuntarily switched out (getrusage's nivcsw moved,
 * checked after the second clock read) is dropped, and the range's total is its average
 * times the number of requests: on a shared machine a preemption adds milliseconds to one
 * request, which would otherwise swamp a sum of nanosecond requests.
 * Utilization (lab policies only) = peak live requested bytes / the heap's span: the highest
 * block end ever minus the lowest block start ever (block start = payload - header_size).
 * Peak RSS growth (every backend, timing runs only: every block is touched once a page
 * outside the timed calls, as the traced program would have) = VmHWM after clearing it at the
 * start, minus the RSS at the start; it is the one footprint comparable between policies and
 * real mallocs. A real malloc gets no utilization: RSS counts pages, and a malloc can reuse
 * pages that were resident before the replay began, so a ratio could pass 100%.
 *
 * Exit status: 0 success, 1 a check failed, 2 bad usage or a malformed trace, 3 the
 * allocator ran out of memory (the message names the trace line).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "trace_io.h"
#ifdef KITE_REPLAY_HAVE_POLICIES
#include "policy.h"
#endif
#ifdef KITE_REPLAY_HAVE_KITE
#include "kite.h"
#endif

#define RP_EXIT_CHECK 1
#define RP_EXIT_USAGE 2
#define RP_EXIT_OOM 3
#define RP_MAX_RANGES 64

typedef struct {
  void *ptr;
  void *base;
  uint64_t size;
  uint32_t tag;
} rp_block_t;

typedef struct {
  const char *name;
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*realloc)(void *, size_t);
  void *(*calloc)(size_t, size_t);
  int (*memalign)(void **, size_t, size_t); /* NULL: over-allocate from malloc */
  size_t (*usable)(void *);
  size_t min_align;
  bool is_policy;
} rp_backend_t;

typedef struct {
  uint64_t start, end; /* inclusive lines; end UINT64_MAX = to the end */
  uint64_t counts[5];  /* per enum kt_kind */
  uint64_t requests;   /* ops timed */
  uint64_t n;          /* samples kept (preempted ones are dropped) */
  double total_ns;     /* their sum */
  uint64_t preempted;
  double *lat;         /* n samples, ns */
} rp_range_t;

static const char *rp_file;
static kt_trace_t rp_trace;
static rp_block_t *rp_blocks;
static rp_backend_t rp_be;
static bool rp_check, rp_json;
static rp_range_t rp_ranges[RP_MAX_RANGES];
static int rp_nranges;
static uint64_t rp_timer_overhead;
static uint64_t rp_live, rp_peak_live;
static uintptr_t rp_min_start = UINTPTR_MAX, rp_max_end;
static size_t rp_header_size;
static size_t rp_heap_size = (size_t)4 << 30;
static uint64_t rp_free_at; /* --free-at LINE: print the policy's free blocks after it */

/* ---- backends ---- */

static size_t rp_glibc_usable(void *p) { return malloc_usable_size(p); }
static const rp_backend_t rp_malloc_backend = {
    "malloc", malloc, free, realloc, calloc, posix_memalign, rp_glibc_usable, 16, false};

#ifdef KITE_REPLAY_HAVE_KITE
static size_t rp_kite_usable(void *p) { return kite_malloc_usable_size(p); }
static const rp_backend_t rp_kite_backend = {"kite",      kite_malloc,         kite_free,
                                             kite_realloc, kite_calloc,        kite_posix_memalign,
                                             rp_kite_usable, 16, false};
#endif

#ifdef KITE_REPLAY_HAVE_POLICIES
static const lab_policy_t *rp_policy;
static void *rp_pol_malloc(size_t n) { return rp_policy->malloc(n); }
static void rp_pol_free(void *p) { rp_policy->free(p); }
static void *rp_pol_realloc(void *p, size_t n) { return rp_policy->realloc(p, n); }
static void *rp_pol_calloc(size_t n, size_t size) {
  void *p = rp_policy->malloc(n * size); /* the parser rejected overflowing products */
  if (p) memset(p, 0, n * size);
  return p;
}
static size_t rp_pol_usable(void *p) { return rp_policy->usable_size(p); }
#endif

/* ---- timing ---- */

/* The clock: the time-stamp counter where the CPU has an invariant one (x86-64 with
 * constant_tsc and nonstop_tsc in /proc/cpuinfo), read with lfence on both sides so the
 * allocator call cannot leak out of the pair; its rate is calibrated against
 * CLOCK_MONOTONIC over ~50 ms at start. Elsewhere (or with KITE_REPLAY_CLOCK=monotonic)
 * clock_gettime. Readings are in ticks; rp_ticks_ns converts. A request of a few ns then
 * measures as a few ns, where clock_gettime's ~20 ns read pair left many at 0. */
static bool rp_use_tsc;
static double rp_ns_per_tick = 1.0;

static inline uint64_t rp_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t rp_now(void) {
  if (!rp_use_tsc) return rp_mono();
  _mm_lfence();
  uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
static bool rp_tsc_invariant(void) {
  const char *env = getenv("KITE_REPLAY_CLOCK");
  if (env && !strcmp(env, "monotonic")) return false;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[4096];
  bool c = false, n = false;
  while (fgets(line, sizeof line, f) && !(c && n)) {
    if (strncmp(line, "flags", 5)) continue;
    c = strstr(line, " constant_tsc") != NULL;
    n = strstr(line, " nonstop_tsc") != NULL;
  }
  fclose(f);
  return c && n;
}
#else
static inline uint64_t rp_now(void) { return rp_mono(); }
static bool rp_tsc_invariant(void) { return false; }
#endif

static inline double rp_ticks_ns(uint64_t ticks) { return (double)ticks * rp_ns_per_tick; }

static void rp_calibrate(void) {
  rp_use_tsc = rp_tsc_invariant();
  if (rp_use_tsc) {
    uint64_t m0 = rp_mono(), t0 = rp_now(), m1;
    do m1 = rp_mono(); while (m1 - m0 < 50000000u);
    uint64_t t1 = rp_now();
    rp_ns_per_tick = t1 > t0 ? (double)(m1 - m0) / (double)(t1 - t0) : 1.0;
  }
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 2000; i++) {
    uint64_t a = rp_now(), b = rp_now();
    if (b - a < best) best = b - a;
  }
  rp_timer_overhead = best; /* in ticks */
}

/* Was this thread switched out involuntarily since the last call? Such a sample holds
 * another process's time slice, not the allocator's work (on a busy 2-core machine a few
 * milliseconds now and then), so it is dropped; the number dropped is reported. */
static bool rp_keep_preempted;
static long rp_last_nivcsw;
static bool rp_preempted(void) {
  if (rp_keep_preempted) return false;
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return false;
  bool moved = ru.ru_nivcsw != rp_last_nivcsw;
  rp_last_nivcsw = ru.ru_nivcsw;
  return moved;
}

/* ---- checking ---- */

static inline unsigned char rp_pat(uint32_t tag, uint64_t i) {
  return (unsigned char)(tag * 131u + (uint32_t)i * 7u + (uint32_t)(i >> 8));
}
static void rp_fill(void *p, uint64_t n, uint32_t tag) {
  unsigned char *b = p;
  for (uint64_t i = 0; i < n; i++) b[i] = rp_pat(tag, i);
}
/* Index of the first byte not holding the pattern, or n. */
static uint64_t rp_verify(const void *p, uint64_t n, uint32_t tag) {
  const unsigned char *b = p;
  for (uint64_t i = 0; i < n; i++)
    if (b[i] != rp_pat(tag, i)) return i;
  return n;
}

static void rp_fail(const kt_op_t *op, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void rp_fail(const kt_op_t *op, const char *fmt, ...) {
  va_list ap;
  if (op) fprintf(stderr, "%s:%u: check failed (%s): ", rp_file, op->line, rp_be.name);
  else fprintf(stderr, "%s: check failed (%s): ", rp_file, rp_be.name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(RP_EXIT_CHECK);
}

static void rp_oom(const kt_op_t *op) __attribute__((noreturn));
static void rp_oom(const kt_op_t *op) {
  static const char *const verbs[] = {"malloc", "calloc", "aligned alloc", "realloc", "free"};
  fprintf(stderr, "%s:%u: out of memory: %s could not %s %" PRIu64 " bytes", rp_file, op->line,
          rp_be.name, verbs[op->kind], op->size);
  if (rp_be.is_policy) fprintf(stderr, " (heap of %zu bytes; try --heap-size)", rp_heap_size);
  fputc('\n', stderr);
  exit(RP_EXIT_OOM);
}

static void rp_check_new(const kt_op_t *op, rp_block_t *b, uint64_t align) {
  if (!b->ptr) return; /* realloc to 0 freed the block; nothing to check */
  uintptr_t a = (uintptr_t)b->ptr;
  /* C only asks a real malloc to align a block for the objects that fit in it: a block of
   * fewer than 16 bytes may be 8-aligned (mimalloc does so), so require the largest power
   * of two not above its size. */
  if (!rp_be.is_policy && op->kind != KT_ALIGNED && b->size < align) {
    uint64_t w = 1;
    while (w * 2 <= b->size) w *= 2;
    align = w;
  }
  if (a & (align - 1)) rp_fail(op, "block %p is not aligned to %" PRIu64, b->ptr, align);
#ifdef KITE_REPLAY_HAVE_KITE
  if (rp_be.usable == rp_kite_usable && !kite_owns(b->ptr))
    rp_fail(op, "kite_owns(%p) is false for a block kite just returned", b->ptr);
#endif
  if (b->base == b->ptr) {
    size_t u = rp_be.usable(b->ptr);
    if (u < b->size)
      rp_fail(op, "usable size %zu of %p is below the %" PRIu64 " bytes asked", u, b->ptr, b->size);
  }
}

#ifdef KITE_REPLAY_HAVE_POLICIES
typedef struct {
  uintptr_t *payload;
  size_t *cap;
  size_t n, max;
  bool overflow;
} rp_walk_t;
static void rp_walk_cb(void *ctx, void *payload, size_t capacity, bool is_free) {
  rp_walk_t *w = ctx;
  if (is_free) return;
  if (w->n == w->max) {
    w->overflow = true;
    return;
  }
  w->payload[w->n] = (uintptr_t)payload;
  w->cap[w->n++] = capacity;
}
static int rp_cmp_uptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}
/* Every live block is exactly one allocated block of the walk, big enough; no other block
 * is allocated; blocks do not overlap. */
static void rp_check_walk(void) {
  size_t live = 0;
  for (size_t s = 0; s < rp_trace.n_slots; s++)
    if (rp_blocks[s].base) live++;
  rp_walk_t w = {calloc(live + 1, sizeof(uintptr_t)), calloc(live + 1, sizeof(size_t)), 0, live + 1, false};
  uintptr_t *mine = calloc(live + 1, sizeof(uintptr_t));
  if (!w.payload || !w.cap || !mine) rp_fail(NULL, "out of memory for the final walk");
  rp_policy->walk(rp_walk_cb, &w);
  if (w.overflow || w.n != live)
    rp_fail(NULL, "the heap walk shows %s%zu allocated blocks, the trace has %zu live",
            w.overflow ? "more than " : "", w.n, live);
  size_t k = 0;
  for (size_t s = 0; s < rp_trace.n_slots; s++)
    if (rp_blocks[s].base) mine[k++] = (uintptr_t)rp_blocks[s].base;
  qsort(mine, live, sizeof *mine, rp_cmp_uptr);
  for (size_t i = 0; i < live; i++) {
    if (w.payload[i] != mine[i])
      rp_fail(NULL, "block %zu of the walk is %p, the trace's is %p", i, (void *)w.payload[i],
              (void *)mine[i]);
    if (i + 1 < live && w.payload[i] + w.cap[i] > w.payload[i + 1])
      rp_fail(NULL, "blocks %p and %p overlap", (void *)w.payload[i], (void *)w.payload[i + 1]);
  }
  free(w.payload);
  free(w.cap);
  free(mine);
}
#endif

#ifdef KITE_REPLAY_HAVE_POLICIES
/* --free-at: the free structure's contents at a line, as the seed's peaks tool shows them:
 * "free-at LINE: BLOCKS free blocks, SIZES distinct capacities" then "CAPACITY COUNT" lines
 * (capacity order), on stderr so --json output stays one object. */
static void rp_free_cb(void *ctx, void *payload, size_t capacity, bool is_free) {
  (void)payload;
  if (!is_free) return;
  rp_walk_t *w = ctx;
  if (w->n < w->max) w->cap[w->n++] = capacity;
  else w->overflow = true;
}
static int rp_cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}
static void rp_dump_free(uint32_t line) {
  size_t n = rp_policy->walk(NULL, NULL);
  rp_walk_t w = {NULL, calloc(n + 1, sizeof(size_t)), 0, n + 1, false};
  if (!w.cap) return;
  rp_policy->walk(rp_free_cb, &w);
  qsort(w.cap, w.n, sizeof *w.cap, rp_cmp_size);
  size_t distinct = 0;
  for (size_t i = 0; i < w.n; i++) distinct += i == 0 || w.cap[i] != w.cap[i - 1];
  fprintf(stderr, "free-at %u: %zu free blocks, %zu distinct capacities\n", line, w.n, distinct);
  for (size_t i = 0; i < w.n;) {
    size_t j = i;
    while (j < w.n && w.cap[j] == w.cap[i]) j++;
    fprintf(stderr, "%zu %zu\n", w.cap[i], j - i);
    i = j;
  }
  free(w.cap);
}
#endif

/* ---- the replay loop ---- */

/* A real malloc's footprint is its resident memory, so every block is touched once a page
 * (outside the timed call), as the traced program would have touched it. */
static inline void rp_touch(const rp_block_t *b) {
  volatile unsigned char *p = b->ptr;
  for (uint64_t i = 0; i < b->size; i += 4096) p[i] = 1;
  if (b->size) p[b->size - 1] = 1;
}

static inline void rp_account_new(const rp_block_t *b) {
  if (!rp_check && b->ptr) rp_touch(b);
  rp_live += b->size;
  if (rp_live > rp_peak_live) rp_peak_live = rp_live;
  if (rp_be.is_policy && b->base) {
    uintptr_t start = (uintptr_t)b->base - rp_header_size;
    uintptr_t end = (uintptr_t)b->base + rp_be.usable(b->base);
    if (start < rp_min_start) rp_min_start = start;
    if (end > rp_max_end) rp_max_end = end;
  }
}

/* Allocate an aligned block from a backend without memalign: over-allocate and round up. */
static void *rp_overaligned(rp_block_t *b, uint64_t align, uint64_t size) {
  if (align <= rp_be.min_align) {
    b->base = rp_be.malloc(size);
    return b->base;
  }
  if (size > UINT64_MAX - align) return NULL;
  b->base = rp_be.malloc(size + align - 1);
  if (!b->base) return NULL;
  return (void *)(((uintptr_t)b->base + align - 1) & ~(uintptr_t)(align - 1));
}

static void rp_run(void) {
  const kt_op_t *ops = rp_trace.ops;
  int ri = 0;
  rp_range_t *r = rp_nranges ? &rp_ranges[0] : NULL;
  for (size_t i = 0; i < rp_trace.n_ops; i++) {
    const kt_op_t *op = &ops[i];
    while (r && op->line > r->end) r = ++ri < rp_nranges ? &rp_ranges[ri] : NULL;
    bool timed = r && op->line >= r->start;
    uint64_t t0 = 0, t1 = 0;
    uint32_t tag = (uint32_t)i + 1;
    switch (op->kind) {
    case KT_MALLOC:
    case KT_CALLOC:
    case KT_ALIGNED: {
      rp_block_t *b = &rp_blocks[op->slot];
      uint64_t align = rp_be.min_align;
      if (timed) t0 = rp_now();
      if (op->kind == KT_MALLOC) {
        b->base = b->ptr = rp_be.malloc(op->size);
      } else if (op->kind == KT_CALLOC) {
        b->base = b->ptr = rp_be.calloc(op->align, op->size / (op->align ? op->align : 1));
      } else if (rp_be.memalign) {
        void *p = NULL;
        if (op->align <= sizeof(void *)) p = rp_be.malloc(op->size);
        else if (rp_be.memalign(&p, op->align, op->size) != 0) p = NULL;
        b->base = b->ptr = p;
      } else {
        b->ptr = rp_overaligned(b, op->align, op->size);
      }
      if (timed) t1 = rp_now();
      if (!b->ptr) rp_oom(op);
      if (op->kind == KT_ALIGNED && op->align > align) align = op->align;
      b->size = op->size;
      b->tag = tag;
      rp_account_new(b);
      if (rp_check) {
        rp_check_new(op, b, align);
        if (op->kind == KT_CALLOC)
          for (uint64_t k = 0; k < op->size; k++)
            if (((unsigned char *)b->ptr)[k]) rp_fail(op, "calloc block not zeroed at byte %" PRIu64, k);
        rp_fill(b->ptr, b->size, tag);
      }
      break;
    }
    case KT_REALLOC: {
      rp_block_t old = {0};
      if (op->old_slot != KT_NO_SLOT) old = rp_blocks[op->old_slot];
      if (rp_check && old.ptr) {
        uint64_t bad = rp_verify(old.ptr, old.size, old.tag);
        if (bad != old.size) rp_fail(op, "block of line's old id corrupted at byte %" PRIu64 " before realloc", bad);
      }
      void *np;
      if (timed) t0 = rp_now();
      if (old.base != old.ptr) { /* over-aligned policy block: move it */
        np = rp_be.malloc(op->size);
        if (np) {
          memcpy(np, old.ptr, old.size < op->size ? old.size : op->size);
          rp_be.free(old.base);
        }
      } else {
        np = rp_be.realloc(old.ptr, op->size);
      }
      if (timed) t1 = rp_now();
      if (!np && op->size) rp_oom(op);
      if (op->old_slot != KT_NO_SLOT) {
        rp_live -= old.size;
        rp_blocks[op->old_slot] = (rp_block_t){0};
      }
      rp_block_t *b = &rp_blocks[op->slot];
      b->base = b->ptr = np;
      b->size = np ? op->size : 0;
      b->tag = tag;
      rp_account_new(b);
      if (rp_check && np) {
        rp_check_new(op, b, rp_be.min_align);
        uint64_t keep = old.size < b->size ? old.size : b->size;
        if (old.ptr) {
          uint64_t bad = rp_verify(np, keep, old.tag);
          if (bad != keep) rp_fail(op, "realloc lost the content at byte %" PRIu64, bad);
        }
        rp_fill(np, b->size, tag);
      }
      break;
    }
    case KT_FREE: {
      if (op->slot == KT_NO_SLOT) {
        if (!(op->flags & KT_OP_NULL)) continue; /* a pointer allocated before tracing: skipped */
        if (timed) t0 = rp_now(); /* a .script "f" of a NULL slot: free(NULL) */
        rp_be.free(NULL);
        if (timed) t1 = rp_now();
        break;
      }
      rp_block_t *b = &rp_blocks[op->slot];
      if (rp_check && b->ptr) {
        uint64_t bad = rp_verify(b->ptr, b->size, b->tag);
        if (bad != b->size) rp_fail(op, "block corrupted at byte %" PRIu64 " before free", bad);
      }
      void *base = b->base;
      if (timed) t0 = rp_now();
      rp_be.free(base);
      if (timed) t1 = rp_now();
      rp_live -= b->size;
      *b = (rp_block_t){0};
      break;
    }
    }
    if (timed) {
      uint64_t dt = t1 - t0;
      double d = rp_ticks_ns(dt > rp_timer_overhead ? dt - rp_timer_overhead : 0);
      r->requests++;
      r->counts[op->kind]++;
      if (rp_preempted()) {
        r->preempted++;
      } else {
        r->lat[r->n++] = d;
        r->total_ns += d;
      }
    }
#ifdef KITE_REPLAY_HAVE_POLICIES
    if (rp_check && rp_be.is_policy && !rp_policy->validate())
      rp_fail(op, "%s validate() failed after this op", rp_policy->name);
    if (rp_free_at && (i + 1 == rp_trace.n_ops || ops[i + 1].line > rp_free_at)) {
      rp_dump_free(op->line);
      rp_free_at = 0;
      /* nothing after this line is checked or timed: stop here */
      if (!rp_check && (!rp_nranges || rp_ranges[rp_nranges - 1].end <= op->line)) break;
    }
#endif
  }
  if (rp_check) {
    for (size_t s = 0; s < rp_trace.n_slots; s++) {
      rp_block_t *b = &rp_blocks[s];
      if (!b->ptr) continue;
      uint64_t bad = rp_verify(b->ptr, b->size, b->tag);
      if (bad != b->size) rp_fail(NULL, "a block live at the end is corrupted at byte %" PRIu64, bad);
    }
#ifdef KITE_REPLAY_HAVE_POLICIES
    if (rp_be.is_policy) rp_check_walk();
#endif
  }
}

/* ---- resident memory of the process, for a real malloc's footprint ---- */

static uint64_t rp_status_kib(const char *key) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strstr(buf, key);
  return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static void rp_reset_hwm(void) {
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "5", 1) != 1) { /* older kernels: the HWM then includes the parse */ }
    close(fd);
  }
}

/* ---- output ---- */

static int rp_cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double rp_pct(const double *v, uint64_t n, unsigned pct) {
  if (!n) return 0;
  uint64_t k = (n * pct + 99) / 100; /* nearest-rank */
  return v[k ? k - 1 : 0];
}

/* footprint: a policy's heap span, a real malloc's peak RSS growth; rss: the peak RSS growth
 * of any backend (0 in --check mode, which does not touch the blocks page by page). */
static void rp_report(uint64_t footprint, uint64_t rss) {
  const char *fmt = rp_trace.format == KT_FORMAT_KITE ? "kite-trace" : "script";
  double util = footprint ? (double)rp_peak_live / (double)footprint : 0;
  if (rp_json) {
    printf("{\"trace\": \"%s\", \"format\": \"%s\", \"allocator\": \"%s\", \"ops\": %zu, "
           "\"lines\": %zu, \"check\": %s, \"timer\": \"%s\", \"timer_overhead_ns\": %.1f, "
           "\"ranges\": [",
           rp_file, fmt, rp_be.name, rp_trace.n_ops, rp_trace.n_lines, rp_check ? "true" : "false",
           rp_use_tsc ? "tsc" : "monotonic", rp_ticks_ns(rp_timer_overhead));
  } else {
    printf("trace: %s (%s, %zu ops, %zu lines)\nallocator: %s\n", rp_file, fmt, rp_trace.n_ops,
           rp_trace.n_lines, rp_be.name);
  }
  for (int i = 0; i < rp_nranges; i++) {
    rp_range_t *r = &rp_ranges[i];
    qsort(r->lat, r->n, sizeof *r->lat, rp_cmp_dbl);
    double avg = r->n ? r->total_ns / (double)r->n : 0;
    /* the total over every request of the range, the dropped ones at the average */
    uint64_t total = (uint64_t)(avg * (double)r->requests + 0.5);
    uint64_t end = r->end == UINT64_MAX ? rp_trace.n_lines : r->end;
    if (rp_json) {
      printf("%s{\"start\": %" PRIu64 ", \"end\": %" PRIu64 ", \"requests\": %" PRIu64
             ", \"malloc\": %" PRIu64 ", \"calloc\": %" PRIu64 ", \"aligned\": %" PRIu64
             ", \"realloc\": %" PRIu64 ", \"free\": %" PRIu64 ", \"samples\": %" PRIu64
             ", \"preempted\": %" PRIu64 ", \"total_ns\": %" PRIu64
             ", \"avg_ns\": %.2f, \"p50_ns\": %.1f, \"p90_ns\": %.1f"
             ", \"p99_ns\": %.1f, \"max_ns\": %.1f}",
             i ? ", " : "", r->start, end, r->requests, r->counts[KT_MALLOC], r->counts[KT_CALLOC],
             r->counts[KT_ALIGNED], r->counts[KT_REALLOC], r->counts[KT_FREE], r->n, r->preempted,
             total, avg,
             rp_pct(r->lat, r->n, 50), rp_pct(r->lat, r->n, 90), rp_pct(r->lat, r->n, 99),
             r->n ? r->lat[r->n - 1] : 0.0);
    } else {
      printf("range %" PRIu64 "-%" PRIu64 ": %" PRIu64 " requests (malloc %" PRIu64 ", calloc %" PRIu64
             ", aligned %" PRIu64 ", realloc %" PRIu64 ", free %" PRIu64 "), total %" PRIu64 " ns, avg %.1f ns, "
             "p50 %.1f ns, p90 %.1f ns, p99 %.1f ns, max %.1f ns"
             " (%" PRIu64 " preempted samples dropped)\n",
             r->start, end, r->requests, r->counts[KT_MALLOC], r->counts[KT_CALLOC], r->counts[KT_ALIGNED],
             r->counts[KT_REALLOC], r->counts[KT_FREE], total, avg,
             rp_pct(r->lat, r->n, 50), rp_pct(r->lat, r->n, 90), rp_pct(r->lat, r->n, 99),
             r->n ? r->lat[r->n - 1] : 0.0, r->preempted);
    }
  }
  const char *what = rp_be.is_policy ? "highest block end - lowest block start" : "peak RSS growth";
  if (rp_json) {
    printf("], \"peak_live_bytes\": %" PRIu64 ", \"footprint_bytes\": %" PRIu64
           ", \"footprint_kind\": \"%s\", \"rss_bytes\": %" PRIu64 ", \"utilization\": ",
           rp_peak_live, footprint, what, rss);
    if (rp_be.is_policy && footprint) printf("%.6f}\n", util);
    else printf("null}\n");
  } else {
    if (rp_be.is_policy) {
      printf("utilization: peak live %" PRIu64 " B / footprint %" PRIu64 " B (%s) = ", rp_peak_live,
             footprint, what);
      if (footprint) printf("%.2f%%\n", 100 * util);
      else printf("n/a\n");
    } else {
      /* RSS counts whole pages the process touched, not this malloc's blocks alone: a ratio
       * against it is not comparable with a policy's, so none is printed */
      printf("utilization: n/a for a real malloc (peak live %" PRIu64 " B)\n", rp_peak_live);
    }
    if (!rp_check) printf("peak RSS growth: %" PRIu64 " B\n", rss);
    if (rp_check)
      printf("check: passed (every block filled and verified%s)\n",
             rp_be.is_policy ? ", validate() after each op, final heap walk" : "");
  }
}

/* The replay's own arrays come from mmap, touched up front, so a real malloc's footprint
 * (RSS growth) and its free lists hold only the trace's blocks. */
static void *rp_vm(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memset(p, 0, n);
  return p;
}

/* ---- arguments ---- */

static void rp_usage(FILE *f) {
  fprintf(f,
          "usage: kite-replay [-h] --list\n"
          "       kite-replay [--policy NAME | --kite | --malloc] [--check] [-r START [END]]...\n"
          "                   [--json] [--heap-size BYTES] [--keep-preempted] [--free-at LINE] FILE\n"
          "FILE is a kite trace (\"# kite-trace v1\" header) or a .script (a/r/f lines).\n"
          "-r times the ops on lines START..END (inclusive; no END: to the end of the file);\n"
          "ranges must not overlap. Without -r and --check the whole trace is timed.\n"
          "--heap-size: the region handed to a lab policy (default 4G; K, M, G suffixes).\n"
          "--free-at LINE: after LINE, print a lab policy's free blocks on stderr (capacity,\n"
          "count), the free structure's contents at that point (e.g. the heap's peak); the\n"
          "replay stops there unless --check or a later -r range needs the rest.\n"
          "A timed request during which the thread was preempted is dropped from the latency\n"
          "samples (the total counts it at the average) unless --keep-preempted is given.\n"
          "exit: 0 ok, 1 check failed, 2 usage or malformed trace, 3 out of memory.\n");
}

static bool rp_parse_u64(const char *s, uint64_t *out) {
  if (!*s) return false;
  uint64_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  uint64_t mul = 1;
  if (*s == 'K' || *s == 'k') mul = 1ull << 10, s++;
  else if (*s == 'M' || *s == 'm') mul = 1ull << 20, s++;
  else if (*s == 'G' || *s == 'g') mul = 1ull << 30, s++;
  if (*s) return false;
  *out = v * mul;
  return true;
}
static bool rp_is_number(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

static void rp_list(void) {
#ifdef KITE_REPLAY_HAVE_POLICIES
  for (const lab_policy_t *const *p = lab_policies(); *p; p++) printf("%s\n", (*p)->name);
#endif
#ifdef KITE_REPLAY_HAVE_KITE
  printf("kite\n");
#endif
  printf("malloc\n");
}

static int rp_cmp_range(const void *a, const void *b) {
  const rp_range_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

int main(int argc, char **argv) {
  const char *policy = NULL;
  bool use_kite = false, use_malloc = false;
  enum { OPT_LIST = 256, OPT_POLICY, OPT_KITE, OPT_MALLOC, OPT_CHECK, OPT_KEEP, OPT_JSON, OPT_HEAP, OPT_FREE_AT };
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},          {"list", no_argument, NULL, OPT_LIST},
      {"policy", required_argument, NULL, OPT_POLICY}, {"kite", no_argument, NULL, OPT_KITE},
      {"malloc", no_argument, NULL, OPT_MALLOC}, {"check", no_argument, NULL, OPT_CHECK},
      {"keep-preempted", no_argument, NULL, OPT_KEEP}, {"json", no_argument, NULL, OPT_JSON},
      {"heap-size", required_argument, NULL, OPT_HEAP}, {"free-at", required_argument, NULL, OPT_FREE_AT},
      {NULL, 0, NULL, 0}};
  int c;
  /* "-": FILE comes back in order (as option 1), so -r can tell whether a number after its
   * START is an END or the FILE, and options may follow FILE. */
  while ((c = getopt_long(argc, argv, "-hr:", longopts, NULL)) != -1) {
    switch (c) {
      case OPT_LIST: rp_list(); return 0;
      case 'h': rp_usage(stdout); return 0;
      case OPT_POLICY: policy = optarg; break;
      case OPT_KITE: use_kite = true; break;
      case OPT_MALLOC: use_malloc = true; break;
      case OPT_CHECK: rp_check = true; break;
      case OPT_KEEP: rp_keep_preempted = true; break;
      case OPT_JSON: rp_json = true; break;
      case OPT_FREE_AT:
        if (!rp_parse_u64(optarg, &rp_free_at) || !rp_free_at) {
          fprintf(stderr, "kite-replay: bad --free-at '%s'\n", optarg);
          return RP_EXIT_USAGE;
        }
        break;
      case OPT_HEAP: {
        uint64_t v;
        if (!rp_parse_u64(optarg, &v) || v == 0 || v > ((uint64_t)1 << 46)) {
          fprintf(stderr, "kite-replay: bad --heap-size '%s'\n", optarg);
          return RP_EXIT_USAGE;
        }
        rp_heap_size = (size_t)v;
        break;
      }
      case 'r': {
        if (!rp_is_number(optarg)) {
          fprintf(stderr, "kite-replay: -r needs START [END] line numbers\n");
          return RP_EXIT_USAGE;
        }
        if (rp_nranges == RP_MAX_RANGES) {
          fprintf(stderr, "kite-replay: at most %d ranges\n", RP_MAX_RANGES);
          return RP_EXIT_USAGE;
        }
        rp_range_t *r = &rp_ranges[rp_nranges++];
        rp_parse_u64(optarg, &r->start);
        r->end = UINT64_MAX;
        /* END is present when the next argument is a number and a FILE still follows it (or
         * came before). */
        if (optind < argc && rp_is_number(argv[optind]) && (optind + 1 < argc || rp_file))
          rp_parse_u64(argv[optind++], &r->end);
        if (r->start < 1 || r->end < r->start) {
          fprintf(stderr, "kite-replay: bad range -r %s: lines are 1-based and START <= END\n",
                  argv[optind - 1]);
          return RP_EXIT_USAGE;
        }
        break;
      }
      case 1:
        if (rp_file) {
          fprintf(stderr, "kite-replay: more than one trace file given ('%s', '%s')\n", rp_file,
                  optarg);
          return RP_EXIT_USAGE;
        }
        rp_file = optarg;
        break;
      default: rp_usage(stderr); return RP_EXIT_USAGE;
    }
  }
  if (!rp_file) {
    rp_usage(stderr);
    return RP_EXIT_USAGE;
  }
  if ((policy != NULL) + use_kite + use_malloc > 1) {
    fprintf(stderr, "kite-replay: choose one of --policy NAME, --kite, --malloc\n");
    return RP_EXIT_USAGE;
  }
  if (policy && !strcmp(policy, "malloc")) policy = NULL, use_malloc = true;
  if (policy && !strcmp(policy, "kite")) policy = NULL, use_kite = true;
  qsort(rp_ranges, (size_t)rp_nranges, sizeof rp_ranges[0], rp_cmp_range);
  for (int i = 1; i < rp_nranges; i++)
    if (rp_ranges[i].start <= rp_ranges[i - 1].end) {
      fprintf(stderr, "kite-replay: ranges %" PRIu64 "-%" PRIu64 " and %" PRIu64 "- overlap\n",
              rp_ranges[i - 1].start, rp_ranges[i - 1].end, rp_ranges[i].start);
      return RP_EXIT_USAGE;
    }

  /* The allocator. */
  rp_be = rp_malloc_backend;
  if (use_kite) {
#ifdef KITE_REPLAY_HAVE_KITE
    rp_be = rp_kite_backend;
#else
    fprintf(stderr, "kite-replay: this build has no kite core (--kite unavailable)\n");
    return RP_EXIT_USAGE;
#endif
  }
  if (policy) {
#ifdef KITE_REPLAY_HAVE_POLICIES
    rp_policy = lab_policy_find(policy);
    if (!rp_policy) {
      fprintf(stderr, "kite-replay: unknown policy '%s'; kite-replay --list shows them\n", policy);
      return RP_EXIT_USAGE;
    }
    rp_be = (rp_backend_t){rp_policy->name, rp_pol_malloc, rp_pol_free, rp_pol_realloc,
                           rp_pol_calloc, NULL, rp_pol_usable, rp_policy->alignment, true};
#else
    fprintf(stderr, "kite-replay: this build has no lab policies (--policy unavailable)\n");
    return RP_EXIT_USAGE;
#endif
  }

  char err[512];
  if (kt_parse_file(rp_file, &rp_trace, err, sizeof err) != 0) {
    fprintf(stderr, "kite-replay: %s\n", err);
    return RP_EXIT_USAGE;
  }
  for (int i = 0; i < rp_nranges; i++)
    if (rp_ranges[i].start > rp_trace.n_lines) {
      fprintf(stderr, "kite-replay: range starts at line %" PRIu64 " but %s has %zu lines\n",
              rp_ranges[i].start, rp_file, rp_trace.n_lines);
      return RP_EXIT_USAGE;
    }
  if (!rp_nranges && !rp_check) {
    rp_nranges = 1;
    rp_ranges[0].start = 1;
    rp_ranges[0].end = UINT64_MAX;
  }
  /* Bookkeeping is allocated and touched before the replay so it is not counted as the
   * allocator's footprint. */
  rp_blocks = rp_vm((rp_trace.n_slots + 1) * sizeof *rp_blocks);
  if (!rp_blocks) {
    fprintf(stderr, "kite-replay: out of memory for %zu blocks\n", rp_trace.n_slots);
    return RP_EXIT_OOM;
  }
  for (int i = 0; i < rp_nranges; i++) {
    rp_range_t *r = &rp_ranges[i];
    size_t n = 0;
    for (size_t k = 0; k < rp_trace.n_ops; k++)
      if (rp_trace.ops[k].line >= r->start && rp_trace.ops[k].line <= r->end) n++;
    r->lat = rp_vm((n + 1) * sizeof *r->lat);
    if (!r->lat) return RP_EXIT_OOM;
  }
  rp_calibrate();

#ifdef KITE_REPLAY_HAVE_POLICIES
  void *heap = NULL;
  if (rp_be.is_policy) {
    heap = mmap(NULL, rp_heap_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (heap == MAP_FAILED) {
      fprintf(stderr, "kite-replay: cannot map a heap of %zu bytes: %s\n", rp_heap_size, strerror(errno));
      return RP_EXIT_OOM;
    }
    if (!rp_policy->init(heap, rp_heap_size)) {
      fprintf(stderr, "kite-replay: policy %s refused a heap of %zu bytes\n", rp_policy->name, rp_heap_size);
      return RP_EXIT_OOM;
    }
    rp_header_size = rp_policy->header_size;
  }
#endif
  /* Peak RSS growth, the same measure for every backend: free memory a malloc already holds
   * resident is handed back first (malloc_trim), then the high-water mark is cleared. */
  if (!rp_be.is_policy) malloc_trim(0);
  rp_reset_hwm();
  uint64_t rss0 = rp_status_kib("VmRSS:");
  rp_run();
  uint64_t hwm = rp_status_kib("VmHWM:");
  uint64_t rss = !rp_check && hwm > rss0 ? (hwm - rss0) * 1024 : 0;
  uint64_t footprint = rp_be.is_policy ? (rp_max_end > rp_min_start ? rp_max_end - rp_min_start : 0) : rss;
  rp_report(footprint, rss);
  return 0;
}
