/* tests/integration/test_guarded.c -- sampled guarded allocations (src/guarded.h) and the
 * stack capture they use (src/stack.h), through the kite_* API of the internals build.
 *
 * The fault reports are checked in child processes (this program run again with "child
 * MODE" and KITE_GUARDED_SAMPLE=1): the kind of error, the offset, the block, that the
 * allocating and freeing stacks hold the test's own allocating and freeing functions
 * (their addresses, which the child prints before it faults, and the module+offset form of
 * the same frames), and that the child died of SIGABRT. The rest runs in this process with
 * the option set through kite_option_set: the sampling rate against a binomial bound,
 * content, calloc, realloc across guarded and plain blocks, aligned blocks, usable sizes,
 * kite_owns, misuse, threads, fork, thread exit, and kite_check after each.
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include "guarded.h"
#include "stack.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <alloca.h>

static volatile char sink;
/* kite_check(): stack.h's message.h defines an assertion macro of that name */
static int check_all(void) { return (kite_check)(); }
static char *self_path;

/* The allocating and freeing sites the reports must name: a store after each call keeps
 * the call from becoming a jump, so its return address lies inside the function. */
__attribute__((noinline, used)) char *site_alloc(size_t n) {
  char *p = kite_malloc(n);
  sink = 0;
  return p;
}
__attribute__((noinline, used)) void site_free(void *p) {
  kite_free(p);
  sink = 0;
}

static uint64_t guarded_allocs(void) {
  uint64_t a, f;
  _kite_guarded_counts(&a, &f);
  return a;
}
static uint64_t guarded_frees(void) {
  uint64_t a, f;
  _kite_guarded_counts(&a, &f);
  return f;
}

/* ---- children: one fault each ---- */

static void child_print_sites(void) {
  Dl_info di;
  void *bias = dladdr((void *)site_alloc, &di) ? di.dli_fbase : NULL;
  printf("site_alloc=%p site_free=%p bias=%p\n", (void *)site_alloc, (void *)site_free, bias);
  fflush(stdout);
}

static void *child_thread_alloc(void *arg) { return site_alloc((size_t)(uintptr_t)arg); }
static void *child_thread_free(void *arg) { site_free(arg); return NULL; }

static int child(const char *mode) {
  child_print_sites();
  if (strcmp(mode, "uaf") == 0) {
    char *p = site_alloc(100);
    memset(p, 7, 100);
    site_free(p);
    sink = ((volatile char *)p)[3];
  } else if (strcmp(mode, "overflow") == 0) {
    char *p = site_alloc(100);
    ((volatile char *)p)[112] = 1; /* the first byte past the usable size */
  } else if (strcmp(mode, "underflow") == 0) {
    char *p = site_alloc(100);
    ((volatile char *)p)[96 - (long)test_os_page()] = 1; /* past the start of the block's page (-4000 at 4 KiB) */
  } else if (strcmp(mode, "threads") == 0) {
    /* allocated by one thread, freed by another, used by a third (the main one) */
    pthread_t a, b;
    void *p;
    pthread_create(&a, NULL, child_thread_alloc, (void *)(uintptr_t)200);
    pthread_join(a, &p);
    pthread_create(&b, NULL, child_thread_free, p);
    pthread_join(b, NULL);
    sink = ((volatile char *)p)[0];
  } else if (strcmp(mode, "every") == 0) {
    /* KITE_GUARDED_SAMPLE=1 from the start: every request of at most KITE_GUARDED_MAX bytes
     * is guarded, malloc(0), calloc and the very first one included; larger ones are not */
    enum { LIVE = 64 };
    char *live[LIVE] = {0};
    int plain = 0, big_guarded = 0;
    for (int i = 0; i < 3000; i++) {
      int k = i % LIVE;
      kite_free(live[k]);
      size_t n = i % 7 == 0 ? 0 : i % 5 == 0 ? 1025 + (size_t)(i * 131) % (KITE_GUARDED_MAX - 1024) : (size_t)(i * 37) % 1025;
      live[k] = i % 3 == 0 ? kite_calloc(1, n) : kite_malloc(n);
      plain += _kite_guarded_usable(live[k]) == 0;
      if (i % 100 == 0) {
        char *big = kite_malloc(KITE_GUARDED_MAX + 1 + (size_t)i);
        big_guarded += _kite_guarded_usable(big) != 0;
        kite_free(big);
      }
    }
    for (int k = 0; k < LIVE; k++) kite_free(live[k]);
    printf("plain %d big_guarded %d\n", plain, big_guarded);
    return plain == 0 && big_guarded == 0 && check_all() ? 0 : 1;
  } else if (strcmp(mode, "reuse") == 0) {
    /* a slot freed, then every other slot taken, so that the next block reuses it: its page
     * was kept (guarded.c G6), so the block works at once, without a fault; freed in turn,
     * it is a use after free as any (the report names this block's two stacks) */
    char *p0 = site_alloc(100), *q = NULL;
    memset(p0, 1, 100); /* (its page committed: a page never written is never kept) */
    kite_free(p0);
    for (int i = 0; i < 4 * 4096 && q != p0; i++) {
      q = site_alloc(100);
      if (q != p0) kite_free(q);
    }
    if (q != p0) return 2;
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    memset(q, 5, 112);
    for (int i = 0; i < 112; i++) if (((volatile char *)q)[i] != 5) return 3;
    getrusage(RUSAGE_THREAD, &r1);
    printf("reuse faults %ld\n", r1.ru_minflt - r0.ru_minflt);
    fflush(stdout);
    site_free(q);
    sink = ((volatile char *)q)[3];
  } else if (strcmp(mode, "fork") == 0) {
    char *q = site_alloc(64);
    memset(q, 9, 64);
    pid_t pid = fork();
    if (pid == 0) {
      /* the grandchild: the inherited guarded block, new ones, then a use after free */
      for (int i = 0; i < 64; i++) if (q[i] != 9) _exit(3);
      kite_free(q);
      for (int i = 0; i < 100; i++) {
        char *r = kite_malloc(1 + i * 37);
        memset(r, i, 1 + i * 37);
        kite_free(r);
      }
      if (!check_all()) _exit(4);
      char *p = site_alloc(100);
      site_free(p);
      sink = ((volatile char *)p)[3];
      _exit(5);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT ? 42 : 1;
  }
  return 0; /* not reached when the fault is caught */
}

/* ---- the parent's side ---- */

typedef struct { char out[4096], err[16384]; int status; } child_run_t;

static void read_all(int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    if (n == cap - 1) break;
  }
  buf[n] = 0;
  close(fd);
}

static void run_child(const char *mode, child_run_t *r) {
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]); close(pe[0]); close(po[1]); close(pe[1]);
    setenv("KITE_GUARDED_SAMPLE", "1", 1);
    test_execl_self(self_path, "child", (char *)mode, (char *)NULL);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  read_all(po[0], r->out, sizeof r->out);
  read_all(pe[0], r->err, sizeof r->err);
  waitpid(pid, &r->status, 0);
}

/* Does the stack printed after the line starting with `title` hold a frame inside the
 * function at fn (within win bytes of it)? Its module+offset must agree with the bias. */
static bool stack_has(const char *err, const char *title, uintptr_t fn, uintptr_t win, uintptr_t bias, unsigned *tid) {
  const char *s = strstr(err, title);
  if (!s) return false;
  if (tid) *tid = (unsigned)strtoul(s + strlen(title), NULL, 10);
  s = strchr(s, '\n');
  bool found = false;
  while (s && strncmp(s + 1, "    #", 5) == 0) {
    unsigned long pc = 0, off = 0;
    const char *line = s + 1;
    const char *hex = strstr(line, " 0x");
    if (hex) pc = strtoul(hex + 1, NULL, 16);
    const char *plus = strstr(line, "+0x");
    const char *eol = strchr(line, '\n');
    if (plus && (!eol || plus < eol)) off = strtoul(plus + 1, NULL, 16);
    if (pc > fn && pc < fn + win) {
      found = true;
      if (off != pc - bias) { fprintf(stderr, "frame %lx: module offset %lx, expected %lx\n", pc, off, pc - bias); return false; }
    }
    s = strchr(line, '\n');
  }
  return found;
}

/* The report's block line: the block's address and its size as asked (size) and usable
 * (rounded up to 16), and the fault address at the stated offset from that block. */
static void check_block_line(const char *err, size_t size, const char *offset) {
  const char *fa = strstr(err, "  fault address: 0x"), *bl = strstr(err, "  block: 0x");
  unsigned long fault = 0, block = 0, n = 0, usable = 0;
  expect_true(fa && sscanf(fa, "  fault address: 0x%lx", &fault) == 1);
  expect_true(bl && sscanf(bl, "  block: 0x%lx, %lu bytes (usable %lu)\n", &block, &n, &usable) == 3);
  expect_uint_eq(n, size);
  expect_uint_eq(usable, (size + 15) & ~(size_t)15);
  expect_int_eq((long)(fault - block), strtol(offset, NULL, 10));
}

static child_run_t last_child; /* check_fault's run, for more checks of its output */

static void check_fault(const char *mode, const char *kind, const char *offset, bool freed, int want_exit,
                        size_t size) {
  child_run_t r;
  run_child(mode, &r);
  if (want_exit) {
    expect_true(WIFEXITED(r.status) && WEXITSTATUS(r.status) == want_exit);
  } else {
    expect_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT);
  }
  void *sa = NULL, *sf = NULL, *bias = NULL;
  expect_int_eq(sscanf(r.out, "site_alloc=%p site_free=%p bias=%p", &sa, &sf, &bias), 3);
  char want[128];
  snprintf(want, sizeof want, "kite: guarded allocation: %s\n  fault address: 0x", kind);
  expect_true(strstr(r.err, want) != NULL);
  snprintf(want, sizeof want, "  offset from the block's start: %s\n", offset);
  expect_true(strstr(r.err, want) != NULL);
  expect_true(strstr(r.err, "kite: aborting\n") != NULL);
  check_block_line(r.err, size, offset);
  uintptr_t a = (uintptr_t)sa, f = (uintptr_t)sf;
  uintptr_t win = a > f ? a - f : f - a;
  if (win > 64) win = 64;
  unsigned ta = 0, tf = 0;
  expect_true(stack_has(r.err, "  allocated by thread ", a, win, (uintptr_t)bias, &ta));
  expect_true(!stack_has(r.err, "  allocated by thread ", f, win, (uintptr_t)bias, NULL));
  if (freed) {
    expect_true(stack_has(r.err, "  freed by thread ", f, win, (uintptr_t)bias, &tf));
  } else {
    expect_true(strstr(r.err, "freed by thread") == NULL);
  }
  if (strcmp(mode, "threads") == 0) expect_true(ta != 0 && tf != 0 && ta != tf);
  if (test_current_failed) fprintf(stderr, "--- child %s stdout:\n%s--- stderr:\n%s---\n", mode, r.out, r.err);
  last_child = r;
}

TEST(use_after_free) { check_fault("uaf", "use after free", "+3", true, 0, 100); }
TEST(overflow) { check_fault("overflow", "buffer overflow", "+112", false, 0, 100); }
TEST(underflow) {
  char off[32];
  snprintf(off, sizeof off, "%ld", 96 - (long)test_os_page());
  check_fault("underflow", "buffer underflow", off, false, 0, 100);
}
TEST(freed_by_another_thread) { check_fault("threads", "use after free", "+0", true, 0, 200); }
TEST(forked_child) { check_fault("fork", "use after free", "+3", true, 42, 100); }
/* A reused slot works at once (its page kept, no fault) and is caught again after its free. */
TEST(reused_slot) {
  check_fault("reuse", "use after free", "+3", true, 0, 100);
  expect_true(strstr(last_child.out, "reuse faults 0\n") != NULL);
  if (test_current_failed) fprintf(stderr, "--- child reuse stdout:\n%s---\n", last_child.out);
}

/* With the option set from the start, every eligible request is guarded (and nothing
 * else): the sampler sees each one (the lists it hands the fast path are counted from the
 * process's first request, before the options are read). */
TEST(every_one_at_1) {
  child_run_t r;
  run_child("every", &r);
  expect_true(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
  expect_true(strstr(r.out, "plain 0 big_guarded 0\n") != NULL);
  if (test_current_failed) fprintf(stderr, "--- child every stdout:\n%s--- stderr:\n%s---\n", r.out, r.err);
}

/* ---- in this process ---- */

/* With N = 100 over 100000 allocations the guarded count is Binomial(100000, 1/100)
 * (mean 1000): Chernoff's bounds put it outside [780, 1220] with probability below 4e-10.
 * The sizes mix the direct classes (counted by the lists the fast path is given) with
 * larger ones up to KITE_GUARDED_MAX (counted one by one, and their fresh pages make the
 * heap reclaim other classes' pages), and blocks are freed in random order. */
TEST(sampling_rate) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 100);
  enum { LIVE = 200, OPS = 100000 };
  void *live[LIVE] = {0};
  size_t sz[LIVE] = {0};
  uint64_t before = guarded_allocs();
  for (int i = 0; i < OPS; i++) {
    int k = (int)test_rng_below(LIVE);
    if (live[k]) {
      if (!test_verify(live[k], sz[k], (uint64_t)k)) { expect_true(!"content"); break; }
      kite_free(live[k]);
    }
    sz[k] = test_rng_below(8) ? test_rng_below(300) : test_rng_below(KITE_GUARDED_MAX + 1);
    live[k] = kite_malloc(sz[k]);
    test_fill(live[k], sz[k], (uint64_t)k);
  }
  uint64_t got = guarded_allocs() - before;
  for (int k = 0; k < LIVE; k++) kite_free(live[k]);
  fprintf(stderr, "  %llu guarded of %d allocations at 1 in 100\n", (unsigned long long)got, OPS);
  expect_true(got >= 780 && got <= 1220);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* The lists the fast path is given, counted whole at each refill: one size of the direct
 * range, 64 blocks live and freed in random order (each refill hands out the page's local
 * list), at N = 10 so that the sampled allocation often falls inside a list (cut there).
 * Binomial(100000, 1/10): mean 10000, standard deviation 95; [9430, 10570] is 6
 * deviations either side. */
TEST(sampling_rate_lists) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 10);
  enum { LIVE = 64, OPS = 100000 };
  void *live[LIVE] = {0};
  uint64_t before = guarded_allocs();
  for (int i = 0; i < OPS; i++) {
    int k = (int)test_rng_below(LIVE);
    kite_free(live[k]);
    live[k] = kite_malloc(48);
    assert_true(live[k] != NULL);
    memset(live[k], k, 48);
  }
  uint64_t got = guarded_allocs() - before;
  for (int k = 0; k < LIVE; k++) kite_free(live[k]);
  fprintf(stderr, "  %llu guarded of %d allocations of 48 bytes at 1 in 10\n", (unsigned long long)got, OPS);
  expect_true(got >= 9430 && got <= 10570);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* The lists of the generic refill (heap.c's: a fresh page's carving, a page taken from
 * further down the queue or from the full list), counted from the page's counts before
 * their first pop: rounds of ROUND blocks allocated and kept, then all freed, at sizes whose
 * fresh pages are carved a few blocks at a time (1 KiB: 4 a carving; 4 KiB and 16 KiB: 1),
 * so that most allocations come by a generic refill of a short list and a charge of the
 * wrong size (one block more or less a list) moves the rate by a fifth or more. At N = 10,
 * Binomial(100000, 1/10): mean 10000, standard deviation 95; [9430, 10570] is 6 deviations
 * either side. */
TEST(sampling_rate_generic) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 10);
  enum { ROUND = 1000, OPS = 100000 };
  static const size_t sizes[] = {1024, 4096, 16384};
  static void *live[ROUND];
  uint64_t before = guarded_allocs();
  for (int i = 0; i < OPS / ROUND; i++) {
    size_t n = sizes[i % 3];
    for (int k = 0; k < ROUND; k++) {
      live[k] = kite_malloc(n);
      assert_true(live[k] != NULL);
      memset(live[k], k, 64);
    }
    for (int k = 0; k < ROUND; k++) kite_free(live[k]);
  }
  uint64_t got = guarded_allocs() - before;
  fprintf(stderr, "  %llu guarded of %d allocations of 1, 4 and 16 KiB at 1 in 10\n", (unsigned long long)got, OPS);
  expect_true(got >= 9430 && got <= 10570);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* A generic refill that takes a page from further down the queue holding frees of both
 * kinds: its collect puts the other threads' frees on the allocation list and leaves the
 * page's own on its local list. The list the fast path is handed is the allocation list
 * alone, and the quick refill that follows hands it the local list: the count must take
 * each block once (counted at the generic refill and again at the quick one, the local
 * list's blocks would bring the samples early; a cut of the allocation list, where the
 * sampled allocation falls inside the count, would find the local list taken and give the
 * whole list uncounted, bringing them late). Rounds of ROUND blocks of 256 bytes (a few
 * pages), the odd ones freed by another thread, the even ones here, so that the pages
 * behind the current one are queued with both kinds; at N = 10 most lists are cut, at
 * N = 1000 few. Binomial(100000, 1/10): [9430, 10570] is 6 deviations either side;
 * Binomial(1000000, 1/1000): mean 1000, outside [780, 1220] with probability below 4e-10
 * (Chernoff, as sampling_rate). */
static void *free_blocks(void *arg) {
  void **v = arg;
  for (size_t i = 0; v[i]; i++) kite_free(v[i]);
  return NULL;
}
TEST(sampling_rate_collected) {
  enum { ROUND = 2000 };
  static void *live[ROUND], *theirs[ROUND / 2 + 1];
  static const struct { int n, ops; uint64_t lo, hi; } rates[] = {{10, 100000, 9430, 10570}, {1000, 1000000, 780, 1220}};
  for (int r = 0; r < 2; r++) {
    kite_option_set(KITE_OPTION_GUARDED_SAMPLE, rates[r].n);
    uint64_t before = guarded_allocs();
    for (int i = 0; i < rates[r].ops / ROUND; i++) {
      for (int k = 0; k < ROUND; k++) {
        live[k] = kite_malloc(256);
        assert_true(live[k] != NULL);
        memset(live[k], k, 256);
      }
      for (int k = 0; k < ROUND / 2; k++) theirs[k] = live[2 * k + 1];
      theirs[ROUND / 2] = NULL;
      pthread_t t;
      assert_int_eq(pthread_create(&t, NULL, free_blocks, theirs), 0);
      pthread_join(t, NULL);
      for (int k = 0; k < ROUND; k += 2) kite_free(live[k]);
    }
    uint64_t got = guarded_allocs() - before;
    fprintf(stderr, "  %llu guarded of %d allocations of 256 bytes at 1 in %d, half freed by another thread\n",
            (unsigned long long)got, rates[r].ops, rates[r].n);
    expect_true(got >= rates[r].lo && got <= rates[r].hi);
  }
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* Off: no allocation is guarded. */
TEST(off_means_none) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
  uint64_t before = guarded_allocs();
  for (int i = 0; i < 20000; i++) kite_free(kite_malloc(1 + (size_t)(i % 5000)));
  expect_uint_eq(guarded_allocs(), before);
}

typedef struct { char *p; size_t n; uint64_t tag; } blk_t;

/* Every operation of the malloc family with one in 3 allocations guarded: content, zeroes,
 * realloc in both directions between guarded and plain blocks, alignment, usable sizes. */
TEST(normal_operation) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 3);
  enum { LIVE = 200, OPS = 30000 };
  blk_t b[LIVE] = {{0}};
  uint64_t before = guarded_allocs(), tag = 1;
  unsigned g2p = 0, p2g = 0, aligned = 0;
  for (int i = 0; i < OPS; i++) {
    int k = (int)test_rng_below(LIVE);
    blk_t *x = &b[k];
    if (x->p && !test_verify(x->p, x->n, x->tag)) { expect_true(!"content kept"); break; }
    unsigned op = (unsigned)test_rng_below(6);
    size_t n = test_rng_below(8) == 0 ? test_rng_below(20000) : test_rng_below(300);
    if (x->p && op == 0) {
      bool was = _kite_guarded_usable(x->p) != 0;
      char *q = kite_realloc(x->p, n + 1);
      assert_true(q != NULL);
      size_t keep = x->n < n + 1 ? x->n : n + 1;
      if (!test_verify(q, keep, x->tag)) { expect_true(!"realloc keeps content"); break; }
      bool is = _kite_guarded_usable(q) != 0;
      g2p += was && !is;
      p2g += !was && is;
      x->p = q;
      x->n = n + 1;
      test_fill(q, x->n, x->tag);
      continue;
    }
    if (x->p) kite_free(x->p);
    x->tag = ++tag;
    if (op == 1) {
      x->p = kite_calloc(1, n);
      assert_true(x->p != NULL);
      for (size_t j = 0; j < n; j++) if (x->p[j]) { expect_true(!"calloc zeroed"); return; }
    } else if (op == 2) {
      size_t al = (size_t)1 << (4 + test_rng_below(9));
      x->p = kite_aligned_alloc(al, n ? n : 1);
      assert_true(x->p != NULL);
      expect_uint_eq((uintptr_t)x->p % al, 0);
      aligned++;
    } else {
      x->p = kite_malloc(n);
      assert_true(x->p != NULL);
      expect_uint_eq((uintptr_t)x->p % 16, 0);
    }
    size_t u = kite_malloc_usable_size(x->p);
    expect_true(u >= n);
    expect_true(kite_owns(x->p));
    if (_kite_guarded_usable(x->p)) expect_uint_eq(u, n ? (n + 15) & ~(size_t)15 : 16);
    x->n = u; /* the whole usable size is the program's */
    test_fill(x->p, x->n, x->tag);
    if (i % 3000 == 0) expect_true(check_all());
  }
  for (int k = 0; k < LIVE; k++) {
    if (b[k].p && !test_verify(b[k].p, b[k].n, b[k].tag)) expect_true(!"content at the end");
    kite_free(b[k].p);
  }
  uint64_t got = guarded_allocs() - before;
  fprintf(stderr, "  %llu guarded; realloc guarded->plain %u, plain->guarded %u\n", (unsigned long long)got, g2p, p2g);
  expect_true(got > 1000);
  expect_true(g2p > 0 && p2g > 0 && aligned > 0);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* A guarded block of n bytes (sampling at 1 in 1: at most the thread's count left from an
 * earlier rate goes by first). */
static char *guarded_malloc(size_t n) {
  for (int i = 0; i < 10000; i++) {
    char *p = kite_malloc(n);
    if (_kite_guarded_usable(p)) return p;
    kite_free(p);
  }
  return NULL;
}

/* Whether the kernel's page that holds p, a freed guarded block (its page PROT_NONE), is
 * resident: the kernel's page, not test_os_page()'s (the page16k/page64k builds run kite
 * with a larger page than the kernel's, and mincore writes one byte per kernel page). The
 * page is made readable around the mincore call and inaccessible again (qemu-user refuses
 * mincore on an inaccessible page; a protection change neither commits nor gives back). */
static bool freed_page_resident(const void *p) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char v = 0;
  void *at = (void *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
  if (mprotect(at, pg, PROT_READ) != 0) return false;
  int r = mincore(at, pg, &v);
  if (mprotect(at, pg, PROT_NONE) != 0) abort();
  return r == 0 && (v & 1);
}

/* A freed guarded block's page stays committed while the slot waits (guarded.c G6), is
 * given back by malloc_trim, and at once with a purge delay of 0; the slot is inaccessible
 * all along (the children above). */
TEST(freed_page_held) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1);
  long delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1000);
  char *p = guarded_malloc(100);
  assert_true(p != NULL);
  memset(p, 3, 100);
  kite_free(p);
  expect_true(freed_page_resident(p));
  kite_malloc_trim(0);
  expect_true(!freed_page_resident(p));
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 0);
  p = guarded_malloc(100);
  assert_true(p != NULL);
  memset(p, 3, 100);
  kite_free(p);
  expect_true(!freed_page_resident(p));
  expect_true(check_all());
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, delay);
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* A freed slot's page is given back once it has waited its time: checked at a later
 * guarded free (the hold shortened to 50 ms; the purge delay positive). */
int64_t _kite_test_guarded_hold(int64_t ms);
TEST(freed_page_aged) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1);
  long delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1000);
  int64_t hold = _kite_test_guarded_hold(50);
  kite_malloc_trim(0); /* (no slot held from earlier tests: each free ages at most 64) */
  char *p = guarded_malloc(100);
  assert_true(p != NULL);
  memset(p, 3, 100);
  kite_free(p);
  expect_true(freed_page_resident(p));
  usleep(120 * 1000);
  char *q = guarded_malloc(200);
  assert_true(q != NULL);
  memset(q, 4, 200);
  kite_free(q); /* p waited 120 ms: given back now; q stays */
  expect_true(!freed_page_resident(p));
  expect_true(freed_page_resident(q));
  expect_true(check_all());
  _kite_test_guarded_hold(hold);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, delay);
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* The thread id a capture records is the capturing thread's, in a thread and in a forked
 * child (whose one thread kept its parent thread's cached id: the fork hook clears it). */
static void *tid_thread(void *arg) {
  kite_stack_t st;
  _kite_stack_capture(&st, 0);
  *(long *)arg = (long)st.tid == (long)syscall(SYS_gettid) && (long)st.tid != (long)getpid();
  return NULL;
}
TEST(capture_thread_id) {
  kite_stack_t st;
  _kite_stack_capture(&st, 0);
  expect_int_eq(st.tid, (long)syscall(SYS_gettid));
  _kite_stack_capture(&st, 0);
  expect_int_eq(st.tid, (long)syscall(SYS_gettid));
  long ok = 0;
  pthread_t t;
  pthread_create(&t, NULL, tid_thread, &ok);
  pthread_join(t, NULL);
  expect_int_eq(ok, 1);
  pid_t pid = fork();
  if (pid == 0) {
    kite_stack_t c;
    _kite_stack_capture(&c, 0);
    _exit((long)c.tid == (long)syscall(SYS_gettid) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* realloc of a guarded block to a huge size and back keeps the content. */
TEST(realloc_to_huge) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1);
  char *p = guarded_malloc(1000);
  assert_true(p != NULL);
  test_fill(p, 1000, 77);
  char *q = kite_realloc(p, (size_t)20 << 20);
  assert_true(q != NULL && _kite_guarded_usable(q) == 0);
  expect_true(test_verify(q, 1000, 77));
  q[(20 << 20) - 1] = 1;
  char *r = kite_realloc(q, 500);
  assert_true(r != NULL);
  expect_true(test_verify(r, 500, 77));
  kite_free(r);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* Misuse of guarded blocks is reported and counted like other misuse; nothing changes. */
TEST(misuse) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1);
  kite_stats_t s0, s1;
  char *p = guarded_malloc(100), *q = guarded_malloc(40);
  assert_true(_kite_guarded_usable(p) == 112 && _kite_guarded_usable(q) == 48);
  kite_stats_get(&s0);
  kite_free(p);
  expect_true(!kite_owns(p));
  kite_free(p);      /* double free */
  kite_free(q + 16); /* not a block start */
  errno = 0;
  expect_true(kite_realloc(p, 10) == NULL);
  expect_int_eq(errno, EINVAL);
  kite_stats_get(&s1);
  /* the double free and the interior free: invalid_frees counts free's reports, not realloc's */
  expect_uint_eq(s1.invalid_frees - s0.invalid_frees, 2);
  expect_uint_eq(kite_malloc_usable_size(q), 48);
  memset(q, 1, 48);
  kite_free(q);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* 4 threads, one in 3 allocations guarded, every block freed by another thread. */
enum { TQ = 4096 };
static struct { pthread_mutex_t lock; blk_t q[TQ]; unsigned n; } xq = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};
static int xq_bad;
static void *churn(void *arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < 6000; i++) {
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
    size_t n = 1 + seed % 3000;
    char *p = kite_malloc(n);
    test_fill(p, n, seed);
    blk_t got = {0};
    pthread_mutex_lock(&xq.lock);
    if (xq.n == TQ || (xq.n > 0 && (seed & 1))) got = xq.q[--xq.n];
    if (xq.n < TQ) xq.q[xq.n++] = (blk_t){p, n, seed};
    else { got.p = NULL; }
    pthread_mutex_unlock(&xq.lock);
    if (got.p) {
      if (!test_verify(got.p, got.n, got.tag)) __atomic_store_n(&xq_bad, 1, __ATOMIC_RELAXED);
      kite_free(got.p);
    }
  }
  return NULL;
}
TEST(threads) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 3);
  uint64_t a0 = guarded_allocs(), f0 = guarded_frees();
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)(i + 1));
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (unsigned i = 0; i < xq.n; i++) {
    if (!test_verify(xq.q[i].p, xq.q[i].n, xq.q[i].tag)) xq_bad = 1;
    kite_free(xq.q[i].p);
  }
  xq.n = 0;
  expect_int_eq(xq_bad, 0);
  uint64_t a = guarded_allocs() - a0, f = guarded_frees() - f0;
  /* About 8000 of the 24000 allocations are drawn. At 4 KiB pages the region has a slot for
   * each; at a forced 64 KiB page it has 511, and once they are all live or waiting a drawn
   * allocation is served unguarded, so only the slot count is certain there. */
  expect_true(a > 500);
  expect_uint_eq(f, a);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* A thread's exit: a TLS destructor allocates and frees a guarded block (both capture a
 * stack while the thread is being torn down). */
static pthread_key_t exit_key;
static void exit_dtor(void *v) {
  (void)v;
  char *p = kite_malloc(77);
  memset(p, 3, 77);
  kite_free(p);
}
static void *exiting(void *arg) { pthread_setspecific(exit_key, arg); return NULL; }
TEST(thread_exit) {
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1);
  pthread_key_create(&exit_key, exit_dtor);
  uint64_t a0 = guarded_allocs(), f0 = guarded_frees();
  pthread_t t;
  pthread_create(&t, NULL, exiting, (void *)1);
  pthread_join(t, NULL);
  expect_true(guarded_allocs() > a0);
  expect_uint_eq(guarded_frees() - f0, guarded_allocs() - a0);
  expect_true(check_all());
  kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0);
}

/* The stack module alone: a capture holds its caller, never re-enters malloc, and works in
 * the forked child of a process whose other thread was capturing during the fork. */
__attribute__((noinline)) static uint32_t capture_here(kite_stack_t *st) {
  uint32_t d = _kite_stack_capture(st, 0);
  sink = 0;
  return d;
}
static volatile int capturing_stop;
static void *capture_loop(void *arg) {
  (void)arg;
  kite_stack_t st;
  while (!__atomic_load_n(&capturing_stop, __ATOMIC_RELAXED)) _kite_stack_capture(&st, 0);
  return NULL;
}
TEST(stack_capture) {
  kite_stack_t st;
  assert_true(capture_here(&st) >= 2);
  uintptr_t f = (uintptr_t)capture_here;
  expect_true((uintptr_t)st.pc[0] > f && (uintptr_t)st.pc[0] < f + 64);
  expect_uint_eq(st.tid, (uint32_t)gettid());
  pthread_t t;
  pthread_create(&t, NULL, capture_loop, NULL);
  for (int i = 0; i < 20; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(20); /* a deadlock ends as SIGALRM, not as a hung test */
      kite_stack_t c;
      _exit(capture_here(&c) >= 2 ? 0 : 1);
    }
    int s = 0;
    waitpid(pid, &s, 0);
    expect_true(WIFEXITED(s) && WEXITSTATUS(s) == 0);
  }
  __atomic_store_n(&capturing_stop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  expect_uint_eq(_kite_stack_reentered, 0);
}

/* The walk of the unwind tables gives the frames libgcc's unwinder gives (stack.h S4),
 * through frames whose CFA is the frame pointer (alloca), a large frame, and recursion
 * deeper than a stack keeps, on the main thread and on another, without handing the
 * capture to libgcc. */
/* stack.c walks the tables itself on x86-64 with glibc 2.35 or later (its STACK_WALK); on
 * other targets (aarch64) every capture is libgcc's unwinder's, counted in
 * _kite_stack_by_libgcc, and the walk alone finds no frame. */
#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define STACK_WALKS 1
#else
#define STACK_WALKS 0
#endif
static kite_stack_t cw_fast, cw_slow;
static uintptr_t cw_leaf_at;
__attribute__((noinline)) static void cw_leaf(void) {
  _kite_stack_capture(&cw_fast, 0);
  _kite_stack_capture_libgcc(&cw_slow, 0);
  sink = 0;
}
__attribute__((noinline)) static void cw_alloca(int n) {
  volatile char *b = alloca((size_t)n);
  b[0] = 1;
  cw_leaf();
  sink = b[0];
}
__attribute__((noinline)) static void cw_big(int n) {
  volatile char big[20000];
  big[n] = 1;
  cw_alloca(n + 16);
  sink = big[n];
}
__attribute__((noinline)) static void cw_recurse(int d) {
  if (d) cw_recurse(d - 1);
  else cw_big(3);
  sink = (char)d;
}
static void cw_compare(int depth) {
  uint64_t slow0 = __atomic_load_n(&_kite_stack_by_libgcc, __ATOMIC_RELAXED);
  cw_recurse(depth);
  expect_uint_eq(__atomic_load_n(&_kite_stack_by_libgcc, __ATOMIC_RELAXED), slow0 + !STACK_WALKS);
  expect_uint_eq(cw_fast.depth, cw_slow.depth);
  assert_true(cw_fast.depth >= 6);
  /* pc[0]: the two calls' own return addresses in cw_leaf */
  expect_true((uintptr_t)cw_fast.pc[0] > cw_leaf_at && (uintptr_t)cw_fast.pc[0] < cw_leaf_at + 96);
  expect_true((uintptr_t)cw_slow.pc[0] > cw_leaf_at && (uintptr_t)cw_slow.pc[0] < cw_leaf_at + 96);
  for (uint32_t i = 1; i < cw_fast.depth && i < cw_slow.depth; i++)
    if (cw_fast.pc[i] != cw_slow.pc[i]) {
      printf("frame %u: walk %p, libgcc %p\n", i, cw_fast.pc[i], cw_slow.pc[i]);
      expect_true(cw_fast.pc[i] == cw_slow.pc[i]);
      break;
    }
}
static void *cw_thread(void *arg) {
  cw_compare((int)(intptr_t)arg);
  return NULL;
}
TEST(stack_walk_matches_libgcc) {
  cw_leaf_at = (uintptr_t)cw_leaf;
  for (int d = 0; d < 3; d++) cw_compare(d); /* the first fills the cache, the next read it */
  cw_compare(40);
  expect_uint_eq(cw_fast.depth, KITE_STACK_FRAMES);
  pthread_t t;
  pthread_create(&t, NULL, cw_thread, (void *)(intptr_t)1);
  pthread_join(t, NULL);
}

/* Code built without unwind tables (stack_notables.c) ends the stack at its frame, for
 * the walk as for libgcc's unwinder, and faults neither (stack.h S4). */
void notables_call(void (*f)(void));
static void cw_leaf_void(void) { cw_recurse(0); }
TEST(stack_no_unwind_tables) {
  cw_leaf_at = (uintptr_t)cw_leaf;
  notables_call(cw_leaf_void);
  uintptr_t nt = (uintptr_t)notables_call;
  expect_uint_eq(cw_fast.depth, cw_slow.depth);
  assert_true(cw_fast.depth >= 2);
  /* the last frame is the one inside notables_call; nothing past it */
  uintptr_t last = (uintptr_t)cw_fast.pc[cw_fast.depth - 1];
  expect_true(last > nt && last < nt + 64);
  for (uint32_t i = 1; i < cw_fast.depth && i < cw_slow.depth; i++) expect_true(cw_fast.pc[i] == cw_slow.pc[i]);
}

/* A corrupt stack ends the walk, never faults it (stack.h S5): walks from return addresses
 * kite has seen and from arbitrary ones, over a stack between two inaccessible pages
 * filled with random words, pointers into itself and code addresses. */
TEST(stack_walk_garbage) {
  cw_leaf_at = (uintptr_t)cw_leaf;
  cw_recurse(2);
  uintptr_t code[KITE_STACK_FRAMES + 4];
  uint32_t nc = 0;
  for (uint32_t i = 0; i < cw_fast.depth; i++) code[nc++] = (uintptr_t)cw_fast.pc[i];
  code[nc++] = (uintptr_t)cw_big + 7;
  code[nc++] = (uintptr_t)memcpy + 40;
  code[nc++] = (uintptr_t)pthread_create + 100;
  size_t pg = 4096, pages = 16;
  char *m = mmap(NULL, (pages + 2) * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  assert_int_eq(mprotect(m + pg, pages * pg, PROT_READ | PROT_WRITE), 0);
  uintptr_t lo = (uintptr_t)m + pg, hi = lo + pages * pg;
  uint64_t *w = (uint64_t *)lo;
  size_t nw = pages * pg / 8;
  uint32_t deep = 0, none = 0;
  for (int round = 0; round < 300; round++) {
    for (size_t i = 0; i < nw; i++) {
      uint64_t r = test_rng_next();
      switch (r % 4) {
      case 0: w[i] = lo + (r >> 8) % (hi - lo + 64) - 32; break; /* near or in the stack */
      case 1: w[i] = code[(r >> 8) % nc] + (r >> 40) % 64; break;
      case 2: w[i] = (r >> 8) % 4096; break;
      default: w[i] = r; break;
      }
    }
    for (int k = 0; k < 50; k++) {
      kite_stack_t st;
      uintptr_t pc = k % 5 == 4 ? test_rng_next() : code[test_rng_below(nc)] + test_rng_below(4);
      uintptr_t sp = lo + 8 * test_rng_below(nw);
      bool walked = _kite_stack_walk_test(&st, pc, sp, w[test_rng_below(nw)], hi);
      assert_true(st.depth <= KITE_STACK_FRAMES);
      deep += st.depth > 1;
      none += !walked && st.depth == 0;
    }
  }
  if (STACK_WALKS)
    expect_true(deep > 0); /* some walks went past their first frame */
  else
    expect_uint_eq(none, 300 * 50); /* no walk on this target: each hands over at once */
  munmap(m, (pages + 2) * pg);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  self_path = realpath("/proc/self/exe", NULL);
  test_rng_init(20261126);
  /* KITE_GUARDED_TEST_INPROCESS=1: the TSan build's run (its runtime takes the children's
   * SIGSEGV and abort over, so they do not die of SIGABRT there); the normal and ASan
   * builds run all (cmake/core-tests.cmake: ASan lets kite's handler replace its own) */
  const char *inprocess = getenv("KITE_GUARDED_TEST_INPROCESS");
  if (!inprocess || strcmp(inprocess, "1") != 0) {
    RUN(use_after_free);
    RUN(overflow);
    RUN(underflow);
    RUN(freed_by_another_thread);
    RUN(forked_child);
    RUN(reused_slot);
    RUN(every_one_at_1);
  }
  RUN(off_means_none);
  RUN(sampling_rate);
  RUN(sampling_rate_lists);
  RUN(sampling_rate_generic);
  RUN(sampling_rate_collected);
  RUN(normal_operation);
  RUN(realloc_to_huge);
  RUN(freed_page_held);
  RUN(freed_page_aged);
  RUN(capture_thread_id);
  RUN(misuse);
  RUN(threads);
  RUN(thread_exit);
  RUN(stack_capture);
  RUN(stack_walk_matches_libgcc);
  RUN(stack_no_unwind_tables);
  RUN(stack_walk_garbage);
  expect_uint_eq(_kite_stack_reentered, 0);
  free(self_path);
  return test_main_end();
}
