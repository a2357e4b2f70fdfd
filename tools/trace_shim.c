/* tools/trace_shim.c -- libkite-trace.so: an LD_PRELOAD shim that records every malloc-family
 * call of a program (all threads) into a kite trace (docs/trace-format.md).
 *
 *   KITE_TRACE_FILE=PATH LD_PRELOAD=build/libkite-trace.so PROGRAM ...
 * PATH may contain %p (replaced by the process id); without it ".PID" is appended, so every
 * process of a traced program tree (fork, exec, posix_spawn) writes its own file. The files
 * are "raw": each op line starts with a global sequence number and lines of different threads
 * are interleaved in chunks. tools/kite-trace sorts them into the final trace.
 * Without KITE_TRACE_FILE the shim only forwards calls.
 *
 * Data structures (all in the shim's own mmap'd memory; the shim never calls malloc):
 *   stripes[256]  pointer -> trace id maps: open addressing with linear probing and
 *                 backward-shift deletion, each under its own spin lock, chosen by a hash of
 *                 the pointer; a table doubles at load 1/2
 *   tbuf          one 64 KiB output buffer per thread, on a global list; a buffer is flushed
 *                 with one write(2) to the O_APPEND file when nearly full, when its thread
 *                 exits (a pthread key destructor) and at process exit (all buffers)
 *   kt_seq        global atomic sequence number, taken inside the stripe lock that makes a
 *                 block known (allocation) or forgotten (free), so for every block its
 *                 allocation's number is below its free's number: sorted by number, the trace
 *                 is a valid single-threaded history.
 *   kt_boot       a static bump buffer serving the calls dlsym makes before the real
 *                 functions are known; its blocks are never freed and never recorded
 * Reentrancy: a thread-local flag is set while the shim works or calls the real allocator;
 * malloc calls made meanwhile (by dlsym, by a preloaded peer's own init) are forwarded
 * untraced.
 * Ordering detail for realloc: the old pointer is removed from its map before the real call
 * (the real realloc may free it, and another thread may get it from malloc at once); if the
 * call fails the pointer is put back with its id.
 * A pointer the shim never saw allocated (allocated before tracing, or inherited over fork:
 * the child forgets the parent's map) is recorded as id "-".
 *
 * Allocation sites (KITE_TRACE_SITES=1): every allocation (and realloc) line carries, after
 * " @", up to KT_SITE_FRAMES return addresses in hex: the caller's (__builtin_return_address)
 * and those found by walking the saved frame pointers. The walk only reads words inside the
 * thread's own stack ([sp, top): the main thread's top is __libc_stack_end, another thread's
 * comes from pthread_getattr_np, asked once per thread through the untraced path), stops at
 * the first frame pointer that does not climb, so code built without frame pointers yields
 * fewer frames, never a fault. At exit the executable mappings (/proc/self/maps) are written
 * as "# map" comment lines for symbolizing. tools/kitetrace.py's finalize turns the " @"
 * suffix into a "#@ ID PC..." comment line after the op (docs/trace-format.md).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KT_EXPORT __attribute__((visibility("default")))
#define KT_TLS __attribute__((tls_model("initial-exec")))
#define KT_FOREIGN UINT64_MAX
#define KT_NSTRIPES 256
#define KT_BUF_SIZE (64 * 1024)
#define KT_LINE_MAX 256
#define KT_SITE_FRAMES 4

/* ---- the real functions ---- */

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_reallocarray)(void *, size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);
static size_t (*real_malloc_usable_size)(void *);

static _Atomic int kt_state; /* 0 not started, 1 resolving, 2 ready */
static bool kt_tracing;       /* set once at init: KITE_TRACE_FILE was given and opened */
static _Atomic bool kt_final; /* process exit flushed everything: write each op at once */
static int kt_fd = -1;
static char kt_path_template[1024];
static _Atomic uint64_t kt_seq, kt_next_id;
static pthread_key_t kt_key;
static long kt_page;
static bool kt_sites; /* KITE_TRACE_SITES=1: record allocation sites */
static _Atomic bool kt_maps_written;
extern void *__libc_stack_end;

static __thread int kt_in KT_TLS;          /* inside the shim on this thread */
static __thread uint32_t kt_tid KT_TLS;
static __thread uintptr_t kt_stack_lo KT_TLS, kt_stack_hi KT_TLS; /* 0: not asked yet */

/* ---- bootstrap buffer for dlsym's own allocations ---- */

static _Alignas(64) char kt_boot[64 * 1024];
static _Atomic size_t kt_boot_used;

static bool kt_is_boot(const void *p) {
  return (const char *)p >= kt_boot && (const char *)p < kt_boot + sizeof kt_boot;
}
static void *kt_boot_alloc(size_t n, size_t align) {
  if (align < 16) align = 16;
  for (;;) {
    size_t off = atomic_load(&kt_boot_used);
    size_t start = (off + 16 + align - 1) & ~(align - 1); /* 16 bytes before: the size */
    if (start + n > sizeof kt_boot || n > sizeof kt_boot) return NULL;
    if (atomic_compare_exchange_weak(&kt_boot_used, &off, start + n)) {
      memcpy(kt_boot + start - 16, &n, sizeof n);
      return kt_boot + start; /* static storage: already zero, as calloc needs */
    }
  }
}
static size_t kt_boot_size(const void *p) {
  size_t n;
  memcpy(&n, (const char *)p - 16, sizeof n);
  return n;
}

/* ---- small helpers that never allocate ---- */

static inline void kt_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void kt_lock(_Atomic int *l) {
  for (;;) {
    if (!atomic_exchange_explicit(l, 1, memory_order_acquire)) return;
    while (atomic_load_explicit(l, memory_order_relaxed)) kt_pause();
  }
}
static void kt_unlock(_Atomic int *l) { atomic_store_explicit(l, 0, memory_order_release); }

static void *kt_map(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static char *kt_put_u64(char *o, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *o++ = tmp[--n];
  return o;
}

static char *kt_put_hex(char *o, uint64_t v) {
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  while (n) *o++ = tmp[--n];
  return o;
}

static void kt_write_all(const char *p, size_t n) {
  while (n) {
    ssize_t w = write(kt_fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return; /* the trace is lost; the program must not be disturbed */
    }
    p += w;
    n -= (size_t)w;
  }
}

/* ---- allocation sites ---- */

typedef struct {
  int n;
  uintptr_t pc[KT_SITE_FRAMES];
} kt_site_t;

/* This thread's stack bounds, asked once. A thread whose bounds cannot be known gets
 * lo = hi = 1, which stops every walk at the first frame. */
static void kt_stack_bounds(void) {
  if (kt_stack_hi) return;
  kt_stack_lo = kt_stack_hi = 1;
  if (!kt_tid) kt_tid = (uint32_t)syscall(SYS_gettid);
  if (kt_tid == (uint32_t)getpid()) {
    /* the main stack: from its start down by at most the stack limit (the kernel keeps
     * other mappings at least that far away) */
    struct rlimit rl;
    uintptr_t lim = (uintptr_t)8 << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) lim = rl.rlim_cur;
    kt_stack_hi = (uintptr_t)__libc_stack_end;
    kt_stack_lo = kt_stack_hi > lim ? kt_stack_hi - lim : 1;
    return;
  }
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void *addr;
  size_t size;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
    kt_stack_lo = (uintptr_t)addr;
    kt_stack_hi = (uintptr_t)addr + size;
  }
  pthread_attr_destroy(&attr);
}

/* Called from an interposed function (fp: its frame address, ret: its return address).
 * Frames past the first are found through saved frame pointers ([fp] = the caller's fp,
 * [fp + 8] = its return address), each read checked to lie in [sp, top) of this stack. */
static __attribute__((noinline)) void kt_site_walk(kt_site_t *s, void *fp, void *ret) {
  s->n = 0;
  if (!kt_sites) return;
  s->pc[s->n++] = (uintptr_t)ret;
  kt_stack_bounds();
  uintptr_t sp = (uintptr_t)&s, hi = kt_stack_hi;
  if (sp < kt_stack_lo || sp >= hi) return; /* on a stack of its own (a coroutine): stop */
  uintptr_t f = (uintptr_t)fp;
  while (s->n < KT_SITE_FRAMES) {
    if (f < sp || f > hi - 2 * sizeof(uintptr_t) || (f & (sizeof(uintptr_t) - 1))) break;
    uintptr_t next = ((const uintptr_t *)f)[0];
    if (next <= f) break; /* frames climb toward the stack top */
    if (next > hi - 2 * sizeof(uintptr_t) || (next & (sizeof(uintptr_t) - 1))) break;
    uintptr_t pc = ((const uintptr_t *)next)[1];
    if (pc < 4096) break;
    s->pc[s->n++] = pc;
    f = next;
  }
}

/* Each interposed function takes its site with this (the return address must be its own),
 * on its traced path only (inside the shim, kt_in > 0, so the walk's own calls are untraced). */
#define KT_SITE(s, traced)                                                                     \
  kt_site_t s;                                                                                 \
  s.n = 0;                                                                                     \
  if (kt_sites && (traced)) kt_site_walk(&s, __builtin_frame_address(0), __builtin_return_address(0))

/* ---- pointer -> id maps ---- */

typedef struct {
  uintptr_t key; /* 0 = empty */
  uint64_t id;
} kt_slot_t;

typedef struct {
  _Atomic int lock;
  size_t cap, used;
  kt_slot_t *tab;
  char pad_[32];
} kt_stripe_t;

static kt_stripe_t kt_stripes[KT_NSTRIPES];

static inline uint64_t kt_mix(uintptr_t p) {
  uint64_t x = (uint64_t)p >> 4;
  x *= 0x9e3779b97f4a7c15ull;
  return x ^ (x >> 29);
}
static inline kt_stripe_t *kt_stripe_of(uintptr_t p) {
  return &kt_stripes[kt_mix(p) >> 56 & (KT_NSTRIPES - 1)];
}

static bool kt_map_grow(kt_stripe_t *s) {
  size_t ncap = s->cap ? s->cap * 2 : 512;
  kt_slot_t *nt = kt_map(ncap * sizeof *nt);
  if (!nt) return false;
  for (size_t i = 0; i < s->cap; i++) {
    if (!s->tab[i].key) continue;
    size_t j = kt_mix(s->tab[i].key) & (ncap - 1);
    while (nt[j].key) j = (j + 1) & (ncap - 1);
    nt[j] = s->tab[i];
  }
  if (s->tab) munmap(s->tab, s->cap * sizeof *s->tab);
  s->tab = nt;
  s->cap = ncap;
  return true;
}

/* Caller holds s->lock. A pointer already present (the program freed it behind our back,
 * e.g. through an untraced path) simply gets the new id. */
static void kt_map_put(kt_stripe_t *s, uintptr_t p, uint64_t id) {
  if ((s->used + 1) * 2 > s->cap && !kt_map_grow(s)) return;
  size_t j = kt_mix(p) & (s->cap - 1);
  while (s->tab[j].key && s->tab[j].key != p) j = (j + 1) & (s->cap - 1);
  if (!s->tab[j].key) s->used++;
  s->tab[j].key = p;
  s->tab[j].id = id;
}

/* Caller holds s->lock. Removes p, returning its id, or KT_FOREIGN if unknown. */
static uint64_t kt_map_take(kt_stripe_t *s, uintptr_t p) {
  if (!s->cap) return KT_FOREIGN;
  size_t mask = s->cap - 1, j = kt_mix(p) & mask;
  while (s->tab[j].key != p) {
    if (!s->tab[j].key) return KT_FOREIGN;
    j = (j + 1) & mask;
  }
  uint64_t id = s->tab[j].id;
  /* backward-shift deletion keeps every probe sequence unbroken */
  size_t hole = j;
  for (size_t k = (j + 1) & mask; s->tab[k].key; k = (k + 1) & mask) {
    size_t home = kt_mix(s->tab[k].key) & mask;
    bool movable = hole <= k ? (home <= hole || home > k) : (home <= hole && home > k);
    if (movable) {
      s->tab[hole] = s->tab[k];
      hole = k;
    }
  }
  s->tab[hole].key = 0;
  s->used--;
  return id;
}

/* ---- per-thread output buffers ---- */

typedef struct kt_tbuf_s {
  _Atomic int lock;
  _Atomic int in_use;
  size_t len;
  struct kt_tbuf_s *next;
  char data[KT_BUF_SIZE];
} kt_tbuf_t;

static _Atomic(kt_tbuf_t *) kt_buffers;
static __thread kt_tbuf_t *kt_mine KT_TLS;

static void kt_flush_locked(kt_tbuf_t *b) {
  if (b->len && kt_fd >= 0) kt_write_all(b->data, b->len);
  b->len = 0;
}

static void kt_thread_exit(void *arg) {
  kt_tbuf_t *b = arg;
  kt_lock(&b->lock);
  kt_flush_locked(b);
  kt_unlock(&b->lock);
  if (kt_mine == b) kt_mine = NULL;
  atomic_store(&b->in_use, 0);
}

static kt_tbuf_t *kt_buffer(void) {
  if (kt_mine) return kt_mine;
  kt_tbuf_t *b;
  for (b = atomic_load(&kt_buffers); b; b = b->next) {
    int zero = 0;
    if (atomic_compare_exchange_strong(&b->in_use, &zero, 1)) break;
  }
  if (!b) {
    b = kt_map(sizeof *b);
    if (!b) return NULL;
    atomic_store(&b->in_use, 1);
    kt_tbuf_t *head = atomic_load(&kt_buffers);
    do b->next = head;
    while (!atomic_compare_exchange_weak(&kt_buffers, &head, b));
  }
  kt_mine = b;
  pthread_setspecific(kt_key, b);
  return b;
}

/* Append one raw line "SEQ OP F1 F2 ... TID[ @ PC...]\n"; KT_FOREIGN fields print as "-";
 * the site's return addresses (hex) follow " @" when site is given and not empty. */
static void kt_emit(uint64_t seq, char op, const uint64_t *f, int nf, const kt_site_t *site) {
  kt_tbuf_t *b = kt_buffer();
  if (!b) return;
  if (!kt_tid) kt_tid = (uint32_t)syscall(SYS_gettid);
  kt_lock(&b->lock);
  if (b->len + KT_LINE_MAX > KT_BUF_SIZE) kt_flush_locked(b);
  char *o = b->data + b->len;
  o = kt_put_u64(o, seq);
  *o++ = ' ';
  *o++ = op;
  for (int i = 0; i < nf; i++) {
    *o++ = ' ';
    if (f[i] == KT_FOREIGN) *o++ = '-';
    else o = kt_put_u64(o, f[i]);
  }
  *o++ = ' ';
  o = kt_put_u64(o, kt_tid);
  if (site && site->n) {
    *o++ = ' ';
    *o++ = '@';
    for (int i = 0; i < site->n; i++) {
      *o++ = ' ';
      o = kt_put_hex(o, site->pc[i]);
    }
  }
  *o++ = '\n';
  b->len = (size_t)(o - b->data);
  if (atomic_load_explicit(&kt_final, memory_order_relaxed)) kt_flush_locked(b);
  kt_unlock(&b->lock);
}

static void kt_flush_all(void) {
  for (kt_tbuf_t *b = atomic_load(&kt_buffers); b; b = b->next) {
    kt_lock(&b->lock);
    kt_flush_locked(b);
    kt_unlock(&b->lock);
  }
}

/* ---- recording ---- */

/* A new block p (allocation, or the result of realloc). Returns its sequence number. */
static uint64_t kt_known(void *p, uint64_t *id) {
  kt_stripe_t *s = kt_stripe_of((uintptr_t)p);
  *id = atomic_fetch_add_explicit(&kt_next_id, 1, memory_order_relaxed);
  kt_lock(&s->lock);
  kt_map_put(s, (uintptr_t)p, *id);
  uint64_t seq = atomic_fetch_add_explicit(&kt_seq, 1, memory_order_relaxed);
  kt_unlock(&s->lock);
  return seq;
}

static uint64_t kt_forget(void *p, uint64_t *seq) {
  kt_stripe_t *s = kt_stripe_of((uintptr_t)p);
  kt_lock(&s->lock);
  uint64_t id = kt_map_take(s, (uintptr_t)p);
  if (seq) *seq = atomic_fetch_add_explicit(&kt_seq, 1, memory_order_relaxed);
  kt_unlock(&s->lock);
  return id;
}

static void kt_record_alloc(char op, void *p, uint64_t a, uint64_t size, const kt_site_t *site) {
  uint64_t id, seq = kt_known(p, &id);
  uint64_t f[3] = {id, a, size};
  if (op == 'm') kt_emit(seq, op, (uint64_t[]){id, size}, 2, site);
  else kt_emit(seq, op, f, 3, site);
}

/* ---- init and exit ---- */

static void kt_open_trace(void) {
  char path[1100];
  size_t o = 0;
  bool has_pid = false;
  pid_t pid = getpid();
  for (const char *t = kt_path_template; *t && o < sizeof path - 32; t++) {
    if (t[0] == '%' && t[1] == 'p') {
      o = (size_t)(kt_put_u64(path + o, (uint64_t)pid) - path);
      has_pid = true;
      t++;
    } else {
      path[o++] = *t;
    }
  }
  if (!has_pid) {
    path[o++] = '.';
    o = (size_t)(kt_put_u64(path + o, (uint64_t)pid) - path);
  }
  path[o] = 0;
  kt_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (kt_fd < 0) return;
  /* header: format, pid, command line */
  char hdr[4096];
  char *h = hdr;
  static const char v[] = "# kite-trace v1 raw\n# pid ";
  memcpy(h, v, sizeof v - 1);
  h += sizeof v - 1;
  h = kt_put_u64(h, (uint64_t)pid);
  static const char c[] = "\n# command:";
  memcpy(h, c, sizeof c - 1);
  h += sizeof c - 1;
  int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (cfd >= 0) {
    char cmd[2048];
    ssize_t n = read(cfd, cmd, sizeof cmd);
    close(cfd);
    for (ssize_t i = 0; i < n; i++) {
      char ch = cmd[i];
      if (ch == 0) ch = ' ';
      if (ch == '\n' || ch == '\r') ch = ' ';
      if (i == 0) *h++ = ' ';
      *h++ = ch;
    }
    while (h > hdr && h[-1] == ' ') h--;
  }
  *h++ = '\n';
  if (kt_sites) {
    static const char st[] = "# sites 4\n";
    _Static_assert(KT_SITE_FRAMES == 4, "the header names the frame count");
    memcpy(h, st, sizeof st - 1);
    h += sizeof st - 1;
  }
  kt_write_all(hdr, (size_t)(h - hdr));
}

/* At exit with sites on: the executable mappings, as "# map LINE-OF-/proc/self/maps", so the
 * return addresses can be symbolized after the process is gone. */
static void kt_write_maps(void) {
  if (!kt_sites || atomic_exchange(&kt_maps_written, true)) return;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char in[8192], out[KT_LINE_MAX * 2 + 16];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fd, in + have, sizeof in - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 && have == 0) break;
    if (r > 0) have += (size_t)r;
    char *nl = memchr(in, '\n', have);
    if (!nl && r > 0 && have < sizeof in) continue;
    size_t len = nl ? (size_t)(nl - in) : have; /* a line longer than the buffer: cut */
    /* "start-end perms offset dev inode path": keep executable mappings of a file */
    char *sp1 = memchr(in, ' ', len);
    bool exec = sp1 && sp1 + 4 < in + len && sp1[3] == 'x';
    bool file = memchr(in, '/', len) != NULL;
    if (exec && file && len <= KT_LINE_MAX * 2) {
      memcpy(out, "# map ", 6);
      memcpy(out + 6, in, len);
      out[6 + len] = '\n';
      kt_write_all(out, len + 7);
    }
    size_t used = nl ? len + 1 : len;
    memmove(in, in + used, have - used);
    have -= used;
    if (r <= 0 && have == 0) break;
  }
  close(fd);
}

static void kt_atfork_prepare(void) {
  if (!kt_tracing) return;
  for (int i = 0; i < KT_NSTRIPES; i++) kt_lock(&kt_stripes[i].lock);
}
static void kt_atfork_parent(void) {
  if (!kt_tracing) return;
  for (int i = KT_NSTRIPES - 1; i >= 0; i--) kt_unlock(&kt_stripes[i].lock);
}
/* The child starts a trace of its own: its own file, an empty map (blocks inherited from the
 * parent are foreign to it), no buffered lines of the parent's threads. */
static void kt_atfork_child(void) {
  if (!kt_tracing) return;
  for (int i = 0; i < KT_NSTRIPES; i++) {
    kt_stripe_t *s = &kt_stripes[i];
    if (s->tab) munmap(s->tab, s->cap * sizeof *s->tab);
    s->tab = NULL;
    s->cap = s->used = 0;
    atomic_store(&s->lock, 0);
  }
  for (kt_tbuf_t *b = atomic_load(&kt_buffers); b; b = b->next) {
    b->len = 0;
    atomic_store(&b->lock, 0);
    if (b != kt_mine) atomic_store(&b->in_use, 0);
  }
  kt_tid = 0;
  close(kt_fd);
  kt_fd = -1;
  kt_open_trace();
}

static void kt_exit_flush(void) {
  if (!kt_tracing) return;
  kt_in++;
  atomic_store(&kt_final, true);
  kt_flush_all();
  kt_write_maps();
  kt_in--;
}

static void kt_init(void) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&kt_state, &expect, 1)) {
    while (atomic_load(&kt_state) != 2 && !kt_in) kt_pause();
    return;
  }
  kt_in++;
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_reallocarray = dlsym(RTLD_NEXT, "reallocarray");
  real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  real_valloc = dlsym(RTLD_NEXT, "valloc");
  real_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
  real_malloc_usable_size = dlsym(RTLD_NEXT, "malloc_usable_size");
  kt_page = sysconf(_SC_PAGESIZE);
  const char *sites = getenv("KITE_TRACE_SITES");
  kt_sites = sites && *sites && strcmp(sites, "0") != 0;
  const char *path = getenv("KITE_TRACE_FILE");
  if (path && *path && strlen(path) < sizeof kt_path_template && real_malloc && real_free &&
      real_calloc && real_realloc) {
    strcpy(kt_path_template, path);
    if (pthread_key_create(&kt_key, kt_thread_exit) == 0) {
      kt_open_trace();
      if (kt_fd >= 0) {
        pthread_atfork(kt_atfork_prepare, kt_atfork_parent, kt_atfork_child);
        atexit(kt_exit_flush);
        kt_tracing = true;
      }
    }
  }
  atomic_store(&kt_state, 2);
  kt_in--;
}

__attribute__((constructor)) static void kt_ctor(void) {
  if (atomic_load(&kt_state) != 2) kt_init();
}
__attribute__((destructor)) static void kt_dtor(void) { kt_exit_flush(); }

/* True when this call must just be forwarded (or served from the boot buffer). */
static inline bool kt_passthrough(void) {
  if (__builtin_expect(atomic_load_explicit(&kt_state, memory_order_acquire) != 2, 0)) kt_init();
  return kt_in || !kt_tracing;
}

/* ---- the interposed functions ---- */

KT_EXPORT void *malloc(size_t n) {
  if (kt_passthrough()) return real_malloc ? real_malloc(n) : kt_boot_alloc(n, 16);
  kt_in++;
  KT_SITE(site, 1);
  void *p = real_malloc(n);
  if (p) kt_record_alloc('m', p, 0, n, &site);
  kt_in--;
  return p;
}

KT_EXPORT void *calloc(size_t n, size_t size) {
  if (kt_passthrough()) {
    if (real_calloc) return real_calloc(n, size);
    if (size && n > SIZE_MAX / size) return NULL;
    return kt_boot_alloc(n * size, 16);
  }
  kt_in++;
  KT_SITE(site, 1);
  void *p = real_calloc(n, size);
  if (p) kt_record_alloc('c', p, n, size, &site);
  kt_in--;
  return p;
}

KT_EXPORT void free(void *p) {
  if (!p || kt_is_boot(p)) return;
  if (kt_passthrough()) {
    if (real_free) real_free(p);
    return;
  }
  kt_in++;
  uint64_t seq, id = kt_forget(p, &seq);
  kt_emit(seq, 'f', &id, 1, NULL);
  real_free(p);
  kt_in--;
}

/* realloc and reallocarray share this; `size` is the product already checked. */
static void *kt_realloc_common(void *p, size_t size, void *(*call)(void *, size_t, size_t),
                               size_t a, size_t b, const kt_site_t *site) {
  if (!p) {
    void *q = call(NULL, a, b);
    if (q) kt_record_alloc('m', q, 0, size, site);
    return q;
  }
  uint64_t old = kt_forget(p, NULL);
  void *q = call(p, a, b);
  if (!q) {
    if (size == 0 || a == 0 || b == 0) { /* realloc(p, 0) freed p */
      uint64_t seq = atomic_fetch_add_explicit(&kt_seq, 1, memory_order_relaxed);
      kt_emit(seq, 'f', &old, 1, NULL);
    } else if (old != KT_FOREIGN) { /* failed: p unchanged, known again */
      kt_stripe_t *s = kt_stripe_of((uintptr_t)p);
      kt_lock(&s->lock);
      kt_map_put(s, (uintptr_t)p, old);
      kt_unlock(&s->lock);
    }
    return q;
  }
  uint64_t id, seq = kt_known(q, &id);
  uint64_t f[3] = {old, id, size};
  kt_emit(seq, 'r', f, 3, site);
  return q;
}

static void *kt_call_realloc(void *p, size_t a, size_t b) { return real_realloc(p, a * b); }
static void *kt_call_reallocarray(void *p, size_t a, size_t b) {
  return real_reallocarray(p, a, b);
}

KT_EXPORT void *realloc(void *p, size_t n) {
  if (p && kt_is_boot(p)) { /* a block dlsym got early: move it to the real heap */
    void *q = malloc(n);
    if (q) {
      size_t old = kt_boot_size(p);
      memcpy(q, p, old < n ? old : n);
    }
    return q;
  }
  if (kt_passthrough()) return real_realloc ? real_realloc(p, n) : kt_boot_alloc(n, 16);
  kt_in++;
  KT_SITE(site, 1);
  void *q = kt_realloc_common(p, n, kt_call_realloc, n, 1, &site);
  kt_in--;
  return q;
}

KT_EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  if (!real_reallocarray || (p && kt_is_boot(p))) return realloc(p, n * size);
  if (kt_passthrough()) return real_reallocarray(p, n, size);
  kt_in++;
  KT_SITE(site, 1);
  void *q = kt_realloc_common(p, n * size, kt_call_reallocarray, n, size, &site);
  kt_in--;
  return q;
}

KT_EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  if (kt_passthrough()) {
    if (real_posix_memalign) return real_posix_memalign(out, align, n);
    void *p = kt_boot_alloc(n, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
  }
  kt_in++;
  KT_SITE(site, 1);
  int rc = real_posix_memalign(out, align, n);
  if (rc == 0) kt_record_alloc('a', *out, align, n, &site);
  kt_in--;
  return rc;
}

static void *kt_aligned_common(void *(*fn)(size_t, size_t), size_t align, size_t n,
                               size_t rec_align, size_t rec_size, const kt_site_t *site) {
  if (kt_passthrough()) return fn ? fn(align, n) : kt_boot_alloc(n, align);
  kt_in++;
  void *p = fn(align, n);
  if (p) kt_record_alloc('a', p, rec_align, rec_size, site);
  kt_in--;
  return p;
}

KT_EXPORT void *aligned_alloc(size_t align, size_t n) {
  if (kt_state != 2) kt_init();
  kt_in++;
  KT_SITE(site, kt_in == 1 && kt_tracing);
  kt_in--;
  return kt_aligned_common(real_aligned_alloc, align, n, align, n, &site);
}
KT_EXPORT void *memalign(size_t align, size_t n) {
  if (kt_state != 2) kt_init();
  kt_in++;
  KT_SITE(site, kt_in == 1 && kt_tracing);
  kt_in--;
  return kt_aligned_common(real_memalign, align, n, align, n, &site);
}

static void *kt_call_valloc(size_t align, size_t n) { return real_valloc(n); }
static void *kt_call_pvalloc(size_t align, size_t n) { return real_pvalloc(n); }

KT_EXPORT void *valloc(size_t n) {
  if (kt_state != 2) kt_init();
  kt_in++;
  KT_SITE(site, kt_in == 1 && kt_tracing);
  kt_in--;
  return kt_aligned_common(real_valloc ? kt_call_valloc : NULL, (size_t)kt_page, n,
                           (size_t)kt_page, n, &site);
}
KT_EXPORT void *pvalloc(size_t n) {
  if (kt_state != 2) kt_init();
  size_t pg = (size_t)kt_page, rounded = n ? (n + pg - 1) & ~(pg - 1) : pg;
  kt_in++;
  KT_SITE(site, kt_in == 1 && kt_tracing);
  kt_in--;
  return kt_aligned_common(real_pvalloc ? kt_call_pvalloc : NULL, pg, n, pg, rounded, &site);
}

KT_EXPORT size_t malloc_usable_size(void *p) {
  if (!p) return 0;
  if (kt_is_boot(p)) return kt_boot_size(p);
  if (kt_state != 2) kt_init();
  return real_malloc_usable_size ? real_malloc_usable_size(p) : 0;
}
