/* src/prof.c -- the sampled heap profiler: the sampling, the records, dumps (contract and
 * invariants P1-P3 in prof.h; the file format in prof_write.c).
 *
 * The small count follows guarded.c's method, in bytes, one count a thread for every size
 * class: a request reaches the sampler only when its page's allocation list is empty (sizes
 * up to KITE_DIRECT_MAX; larger ones come every time and are popped at once while their page
 * has a block), so the list the slow path hands to the fast path is counted whole, class size
 * times blocks, with one subtract and compare. When the gap ends inside it, the list is cut
 * after the blocks that fit (the rest goes to the page's local free list, where the next
 * refill finds it and counts it then), and the class is marked cut: its next visit here is
 * the sampled allocation, so a gap that ends in one class's list is never served by another
 * class, whose blocks have other sizes and other call sites. The next gap starts at the cut
 * (the sampled block's place in the count's order), so the other classes' lists go on being
 * counted meanwhile. A list that cannot be cut (its page has local frees) samples the
 * class's next visit, after the whole list. heap_reclaim leaves current pages alone while
 * profiling (heap.c), so no list grows behind the count. A thread's first visit of a class
 * is a refill like any other: nothing is drawn per class.
 */
#define _GNU_SOURCE
#include "prof.h"
#include "heap.h"
#include "page.h"
#include "pagemap.h"
#include "stack.h"
#include "message.h"
#include "os.h"
#include <errno.h>
#include <string.h>

#define STACKS_MAX (1u << 16)   /* distinct stacks; later ones share entry 0 */
#define STACK_BUCKETS (1u << 14)
#define LIVE_MAX (1u << 20)     /* live sampled blocks recorded at once */
#define LIVE_BUCKETS (1u << 14)
#define RUNS_KEPT 64            /* single-unit runs kept for sampled small blocks (P4) */

typedef struct {
  uint64_t hash;
  uint32_t next, depth;         /* bucket chain (0: end); frames in pc[] */
  uint32_t live_k;              /* its records in the live table */
  double alloc_n, alloc_b;      /* weighted allocations since start */
  double live_n, live_b;        /* weighted live blocks, kept as records come and go (P5) */
  void *pc[KITE_STACK_FRAMES];
} pstack_t;

typedef struct {
  uintptr_t ptr;                /* the block (0: a free entry) */
  uint32_t next, stack;         /* bucket chain or free list (0: end); its stack */
  uint64_t size;                /* the request */
  double weight;                /* 1 / P(sampled) */
} plive_t;

static kite_lock_t prof_lock = KITE_LOCK_INIT; /* lock: the profile's stacks and live records, the kept runs */
static pstack_t *stacks;        /* STACKS_MAX entries, entry 0 the overflow (depth 0) */
static uint32_t *stack_bucket;
static uint32_t n_stacks = 1;
static plive_t *lives;          /* LIVE_MAX entries, entry 0 unused */
static uint32_t *live_bucket;
static uint32_t live_fresh = 1, live_free;
static double live_bytes, peak_mark; /* weighted live bytes; the next KITE_PROF_PEAK dump's mark */
static uint32_t peak_dumps;
static int tables_state;        /* 0: not made, 1: made, 2: failed (no records) */
static kite_page_t *runs_kept[RUNS_KEPT];
static uint32_t n_runs_kept;
uint64_t _kite_prof_huge_live;

/* The thread's sampling state (prof.h). */
__thread kite_prof_thread_t _kite_prof_thread __attribute__((tls_model("initial-exec")));
#define pt _kite_prof_thread

static uint64_t mix(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static uint64_t rng_next(void) { /* xorshift64* */
  uint64_t x = pt.rng;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  pt.rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static int64_t mean(void) { return _kite_opt(KITE_OPT_PROF_SAMPLE); }

/* Bytes to the next sample: exponential of mean KITE_PROF_SAMPLE. */
static int64_t draw(void) {
  double u = (double)((rng_next() >> 11) + 1) * 0x1p-53; /* (0, 1] */
  double g = -_kite_ln(u) * (double)mean();
  return g < 1e15 ? (int64_t)g : (int64_t)1e15;
}

/* A thread's generator is seeded from a word of the process's (drawn from the kernel by
 * the first thread that samples) and the thread's number in the order threads start
 * sampling: no system call a thread (programs that make many short threads start one at
 * each), and no two threads of the process on one sequence (a new thread may get a dead
 * one's TLS address). Two threads that draw the word at once keep the first one stored. */
static uint64_t seed_word, threads_seeded;

static void thread_start(void) {
  uint64_t w = __atomic_load_n(&seed_word, __ATOMIC_RELAXED);
  if (unlikely(w == 0)) {
    uint64_t mine = 0;
    _kite_os_random(&mine, sizeof mine);
    mine |= 1;
    w = __atomic_compare_exchange_n(&seed_word, &w, mine, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? mine : w;
  }
  uint64_t k = __atomic_add_fetch(&threads_seeded, 1, __ATOMIC_RELAXED);
  pt.rng = mix(w ^ mix(k ^ (uintptr_t)&pt)) | 1;
  pt.left_large = draw();
  pt.left_small = draw();
}

/* ---- the small count ---- */

static bool is_cut(unsigned c) { return (pt.cut[c / 64] >> (c % 64)) & 1; }

/* account_list's rare part: the gap ends inside the list pg just handed out for class c, k
 * blocks of s bytes, of which the count covers m (0 <= m < k): block m is the sampled one.
 * The list is cut after m blocks (the rest, block m first, goes to the page's local free
 * list, where a later refill finds it and counts it then), and c is marked cut, so its next
 * visit is the sampled allocation (P7). The next gap starts behind block m, now: by
 * memorylessness, an exponential gap from there is the law of the next sample, whatever
 * other classes allocate before c's next visit. A list that cannot be cut (its page has local
 * frees too) is handed out whole and c's visit after it is the sampled one; the blocks behind
 * block m are then counted on the new gap. Owner only. */
static KITE_NOINLINE void cut_list(kite_page_t *pg, unsigned c, int64_t s, int64_t k) {
  int64_t left = pt.left_small;
  int64_t m = left < 0 ? 0 : left / s;
  pt.cut[c / 64] |= (uint64_t)1 << (c % 64);
  if (pg->local_free != KITE_LINK_END) { /* no room for the rest: sampled after the list */
    pt.left_small = draw() - (k - m - 1) * s;
    return;
  }
  pt.left_small = draw();
  uint16_t *l = pg->links;
  if (m == 0) {
    pg->local_free = pg->free;
    pg->free = KITE_LINK_END;
    return;
  }
  uint32_t j = pg->free;
  for (int64_t i = 1; i < m; i++) j = l[j];
  uint32_t rest = l[j];
  __atomic_store_n(&l[j], (uint16_t)KITE_LINK_END, __ATOMIC_RELAXED);
  pg->local_free = (uint16_t)rest;
}

/* The list on the current page of class c of h (after the pop that served this allocation)
 * goes to the fast path: count it (P6), and cut it where the gap ends. Owner only. */
static inline __attribute__((always_inline)) void account_list(kite_heap_t *h, unsigned c, int64_t s) {
  kite_page_t *pg = h->queue[c].first;
  if (!pg || pg->free == KITE_LINK_END) return;
  /* |free| + |local_free| by page.h's invariant on used (the pin's +1 included) */
  int64_t k = (int64_t)pg->capacity + (h->pinned[c] == pg) - (int64_t)_kite_page_used(pg);
  if (likely(pt.left_small >= k * s)) {
    pt.left_small -= k * s;
    return;
  }
  cut_list(pg, c, s, k);
}

/* The allocation of class c (blocks of s bytes) from h, counted, and the list its refill
 * hands out counted too. */
static inline __attribute__((always_inline)) void *counted(kite_heap_t *h, unsigned c, int64_t s) {
  pt.left_small -= s;
  void *p = _kite_malloc_small_cls(h, c);
  if (likely(p != NULL)) account_list(h, c, s);
  return p;
}

/* _kite_prof_malloc_small's rare part, out of line so that its common one keeps few
 * registers across its call: the thread's first visit (no heap or no seed yet: its count
 * is 0 until then, below every class's size), and the sampled allocation: class c is cut
 * (its next visit was due), or the gap ends inside this block. Not while the thread
 * captures (the count stays spent, or the class cut, for its next visit). */
static KITE_NOINLINE void *malloc_small_rare(kite_heap_t *h, size_t n, size_t *weigh, unsigned c, int64_t s) {
  if (pt.rng == 0 || h == &_kite_heap_empty) {
    kite_heap_t *made = h == &_kite_heap_empty ? _kite_heap_get() : h;
    if (!made) return _kite_malloc_small_generic(h, n);
    h = made;
    if (pt.rng == 0) thread_start();
  }
  bool cut = is_cut(c);
  if (!cut && pt.left_small >= s) return counted(h, c, s);
  if (_kite_stack_busy()) return counted(h, c, s);
  if (cut) /* the gap was restarted when the list was cut */
    pt.cut[c / 64] &= ~((uint64_t)1 << (c % 64));
  else /* the next gap starts behind this block */
    pt.left_small = draw();
  *weigh = (size_t)s;
  return NULL;
}

void *_kite_prof_malloc_small(kite_heap_t *h, size_t n, unsigned c, size_t *weigh) {
  *weigh = 0;
  int64_t s = (int64_t)_kite_class_size_[c];
  if (unlikely(pt.left_small < s || is_cut(c) || h == &_kite_heap_empty)) /* (the thread's first visit too: P7) */
    return malloc_small_rare(h, n, weigh, c, s);
  return counted(h, c, s);
}

bool _kite_prof_large_due(size_t n) {
  if (unlikely(pt.rng == 0)) thread_start();
  if (pt.left_large >= (int64_t)n) {
    pt.left_large -= (int64_t)n;
    return false;
  }
  if (_kite_stack_busy()) return false;
  pt.left_large = draw();
  return true;
}

/* ---- the tables ---- */

#define PAGE_UP(n) (((n) + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1))

/* The four tables in one mapping (one system call a process; pages are touched as used). */
static KITE_COLD bool tables_make(void) {
  if (tables_state) return tables_state == 1;
  size_t a = PAGE_UP((size_t)STACKS_MAX * sizeof(pstack_t)), b = PAGE_UP(STACK_BUCKETS * sizeof(uint32_t));
  size_t c = PAGE_UP((size_t)LIVE_MAX * sizeof(plive_t)), d = PAGE_UP(LIVE_BUCKETS * sizeof(uint32_t));
  char *m = _kite_os_map_aligned(a + b + c + d, KITE_OS_PAGE, NULL);
  if (m) {
    stacks = (pstack_t *)m;
    stack_bucket = (uint32_t *)(m + a);
    lives = (plive_t *)(m + a + b);
    live_bucket = (uint32_t *)(m + a + b + c);
  }
  tables_state = m ? 1 : 2;
  return tables_state == 1;
}

/* The entry of stack st, made if new (entry 0 once the table is full). prof_lock held. */
static uint32_t stack_find(const kite_stack_t *st) {
  /* one multiply a frame, one mix at the end (its low bits pick the bucket) */
  uint64_t hash = st->depth;
  for (uint32_t i = 0; i < st->depth; i++) hash = (hash ^ (uintptr_t)st->pc[i]) * 0x9e3779b97f4a7c15ull;
  hash = mix(hash);
  uint32_t *b = &stack_bucket[hash & (STACK_BUCKETS - 1)];
  for (uint32_t e = *b; e; e = stacks[e].next) {
    pstack_t *x = &stacks[e];
    if (x->hash == hash && x->depth == st->depth && memcmp(x->pc, st->pc, st->depth * sizeof(void *)) == 0) return e;
  }
  if (n_stacks == STACKS_MAX) return 0;
  uint32_t e = n_stacks++;
  pstack_t *x = &stacks[e];
  x->hash = hash;
  x->depth = st->depth;
  memcpy(x->pc, st->pc, st->depth * sizeof(void *));
  x->next = *b;
  *b = e;
  return e;
}

static uint32_t *live_slot(uintptr_t p) { return &live_bucket[mix(p) & (LIVE_BUCKETS - 1)]; }

/* Take p's record off its chain (prof_lock held): its entry, or 0 when there is none. */
static uint32_t live_take(uintptr_t p) {
  for (uint32_t *link = live_slot(p); *link; link = &lives[*link].next) {
    uint32_t e = *link;
    if (lives[e].ptr != p) continue;
    *link = lives[e].next;
    return e;
  }
  return 0;
}

/* A live record of stack s comes (d = 1) or goes (d = -1): the stack's live figures (P5). */
static void stack_live(uint32_t s, double w, uint64_t n, int d) {
  pstack_t *x = &stacks[s];
  x->live_k += (uint32_t)d;
  if (x->live_k == 0) { /* exactly 0, not what the rounding of the sums would leave */
    x->live_n = x->live_b = 0;
    return;
  }
  x->live_n += d * w;
  x->live_b += d * w * (double)n;
}

static void live_release(uint32_t e) {
  plive_t *r = &lives[e];
  live_bytes -= r->weight * (double)r->size;
  stack_live(r->stack, r->weight, r->size, -1);
  r->ptr = 0;
  r->next = live_free;
  live_free = e;
}

/* Record p (prof_lock held): false when the live table is full (P1: not marked then). */
static bool live_add(uintptr_t p, uint32_t stack, size_t n, double w) {
  uint32_t e = live_take(p); /* a stale record (a block freed behind the profiler's back) */
  if (e) live_release(e);
  if (live_free) {
    e = live_free;
    live_free = lives[e].next;
  } else if (live_fresh < LIVE_MAX) {
    e = live_fresh++;
  } else {
    return false;
  }
  plive_t *r = &lives[e];
  *r = (plive_t){.ptr = p, .stack = stack, .size = n, .weight = w};
  uint32_t *b = live_slot(p);
  r->next = *b;
  *b = e;
  live_bytes += w * (double)n;
  stack_live(stack, w, n, 1);
  return true;
}

static KITE_COLD void peak_dump(void);

void _kite_prof_record(void *p, size_t n, size_t weigh) {
  kite_stack_t st;
  _kite_stack_capture_caller(&st); /* P3: before the lock */
  double w = 1.0 / _kite_one_minus_exp_neg((double)weigh / (double)mean());
  bool huge = _kite_pagemap_kind((uintptr_t)p) == KITE_PM_HUGE, kept = false, peaked = false;
  _kite_lock(&prof_lock);
  if (tables_make()) {
    uint32_t s = stack_find(&st);
    stacks[s].alloc_n += w;
    stacks[s].alloc_b += w * (double)n;
    kept = live_add((uintptr_t)p, s, n, w);
    int64_t step = _kite_opt(KITE_OPT_PROF_PEAK);
    if (step > 0 && live_bytes >= peak_mark + (double)step * 1048576.0) {
      peak_mark = live_bytes;
      peaked = true;
    }
  }
  if (kept && huge) __atomic_add_fetch(&_kite_prof_huge_live, 1, __ATOMIC_RELAXED); /* free reads it unlocked */
  _kite_unlock(&prof_lock);
  if (kept && !huge) _kite_page_head(_kite_unit_of((uintptr_t)p))->sampled = 1; /* P1 */
  if (peaked) peak_dump();
}

/* Forget p's record, if any (prof_lock held); may_be_huge: p may be a huge block (a large
 * run's head is not). */
static void forget(uintptr_t p, bool may_be_huge) {
  uint32_t e = tables_state == 1 ? live_take(p) : 0;
  if (!e) return;
  live_release(e);
  if (may_be_huge && _kite_pagemap_kind(p) == KITE_PM_HUGE) __atomic_sub_fetch(&_kite_prof_huge_live, 1, __ATOMIC_RELAXED);
}

void _kite_prof_free(void *p) {
  _kite_lock(&prof_lock);
  forget((uintptr_t)p, true);
  _kite_unlock(&prof_lock);
}

/* The record and the run cache under one taking of the lock: a sampled run's free is one
 * lock round trip, as its allocation's record is. */
bool _kite_prof_free_run(void *p, kite_page_t *pg) {
  bool keep = pg->order == 0 && pg->owned.owner == NULL, kept = false;
  _kite_lock(&prof_lock);
  forget((uintptr_t)p, false);
  uint32_t k = n_runs_kept; /* written under the lock, read without it (a hint) */
  if (keep && k < RUNS_KEPT) {
    runs_kept[k] = pg;
    __atomic_store_n(&n_runs_kept, k + 1, __ATOMIC_RELAXED);
    kept = true;
  }
  _kite_unlock(&prof_lock);
  return kept;
}

kite_page_t *_kite_prof_cached_run(void) {
  if (!__atomic_load_n(&n_runs_kept, __ATOMIC_RELAXED)) return NULL;
  _kite_lock(&prof_lock);
  uint32_t k = n_runs_kept;
  kite_page_t *pg = k ? runs_kept[k - 1] : NULL;
  if (k) __atomic_store_n(&n_runs_kept, k - 1, __ATOMIC_RELAXED);
  _kite_unlock(&prof_lock);
  return pg;
}

bool _kite_prof_sampled_huge(const void *p) {
  if (!__atomic_load_n(&_kite_prof_huge_live, __ATOMIC_RELAXED)) return false;
  _kite_lock(&prof_lock);
  bool found = false;
  for (uint32_t e = *live_slot((uintptr_t)p); e && !found; e = lives[e].next) found = lives[e].ptr == (uintptr_t)p;
  _kite_unlock(&prof_lock);
  return found;
}

/* ---- dumps ---- */

typedef struct { uint32_t next; } walk_t;

static bool next_row(void *arg, kite_prof_row_t *row) {
  walk_t *w = arg;
  while (w->next < n_stacks) {
    const pstack_t *x = &stacks[w->next++];
    if (x->alloc_n == 0 && x->live_n == 0) continue;
    *row = (kite_prof_row_t){x->depth, x->pc, x->alloc_n, x->alloc_b, x->live_n, x->live_b};
    return true;
  }
  return false;
}

int _kite_prof_dump(const char *path) {
  int fd = _kite_os_open(path, true);
  if (fd < 0) return errno;
  _kite_lock(&prof_lock);
  int rc = 0;
  walk_t w = {0};
  if (tables_state != 1) w.next = n_stacks; /* no sample yet: a profile without samples */
  rc = _kite_prof_write(fd, next_row, &w, (size_t)n_stacks * KITE_STACK_FRAMES, (uint64_t)mean());
  _kite_unlock(&prof_lock);
  _kite_os_close(fd);
  return rc;
}

/* PREFIX.<pid>[.peak.<k>].pb into buf (PREFIX "kite-prof" when KITE_PROF gave none). */
static void profile_name(char *buf, size_t cap, const char *what, uint32_t k) {
  kite_out_t o = {.len = 0, .fd = -1};
  _kite_out_str(&o, _kite_prof_prefix[0] ? _kite_prof_prefix : "kite-prof");
  _kite_out_str(&o, ".");
  _kite_out_u64(&o, (uint64_t)_kite_os_getpid());
  if (what) {
    _kite_out_str(&o, what);
    _kite_out_u64(&o, k);
  }
  _kite_out_str(&o, ".pb");
  size_t n = o.len < cap - 1 ? o.len : cap - 1;
  memcpy(buf, o.buf, n);
  buf[n] = 0;
}

static KITE_COLD void peak_dump(void) {
  char path[300];
  profile_name(path, sizeof path, ".peak.", __atomic_add_fetch(&peak_dumps, 1, __ATOMIC_RELAXED));
  _kite_prof_dump(path);
}

static void leak_line(const char *path) {
  double n = 0, b = 0;
  uint32_t sites = 0;
  _kite_lock(&prof_lock);
  if (tables_state == 1) {
    for (uint32_t s = 0; s < n_stacks; s++) {
      n += stacks[s].live_n;
      b += stacks[s].live_b;
      sites += stacks[s].live_n > 0;
    }
  }
  _kite_unlock(&prof_lock);
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: leaks at exit: about ");
  _kite_out_u64(&o, (uint64_t)(n + 0.5));
  _kite_out_str(&o, " blocks, ");
  _kite_out_bytes(&o, (uint64_t)(b + 0.5));
  _kite_out_str(&o, ", from ");
  _kite_out_u64(&o, sites);
  _kite_out_str(&o, " sampled stacks");
  if (path) {
    _kite_out_str(&o, " (profile ");
    _kite_out_str(&o, path);
    _kite_out_str(&o, ")");
  }
  _kite_out_str(&o, "\n");
  _kite_out_flush(&o);
}

void _kite_prof_exit(void) {
  if (!__atomic_load_n(&_kite_prof_enabled, __ATOMIC_RELAXED)) return;
  char path[300];
  bool wrote = false;
  if (_kite_prof_prefix[0]) {
    profile_name(path, sizeof path, NULL, 0);
    int rc = _kite_prof_dump(path);
    wrote = rc == 0;
    if (rc) {
      kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
      _kite_out_str(&o, "kite: profile not written: ");
      _kite_out_str(&o, path);
      _kite_out_str(&o, ": error ");
      _kite_out_u64(&o, (uint64_t)rc);
      _kite_out_str(&o, "\n");
      _kite_out_flush(&o);
    }
  }
  if (_kite_opt(KITE_OPT_PROF_LEAKS)) leak_line(wrote ? path : NULL);
}

void _kite_prof_fork_prepare(void) { _kite_lock(&prof_lock); }
void _kite_prof_fork_parent(void) { _kite_unlock(&prof_lock); }
/* The child's threads made from now on draw from a word of its own, not on the sequences
 * of the parent's next threads (the forking thread goes on with its own generator). */
void _kite_prof_fork_child(void) {
  _kite_lock_fork_child(&prof_lock);
  __atomic_store_n(&seed_word, 0, __ATOMIC_RELAXED);
}
