/* tests/unit/test_core_smoke.c -- the core author's quick smoke test (kite-noover-debug):
 * every size range, alignment, realloc, calloc, cross-thread frees and thread exit, with
 * kite_check() after each test; and what needs the test build's internals: the huge-trim
 * ordering (a test hook between unmap and return), the KITE_DEBUG=3 fill patterns.
 *   test_core_smoke                 the tests
 *   test_core_smoke option-value N  exit 0 iff kite_option_get(PURGE_DELAY_MS) == N (run
 *                                   with KITE_PURGE_DELAY_MS set by CTest)
 *   test_core_smoke huge-header-child  frees a huge block whose header length was changed
 *                                   (huge_header_checksum runs it and reads its stderr)
 * The full conformance and stress suites live in tests/api and tests/stress. */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#ifdef KITE_TEST_HOOKS
#include "huge.h"
#include "pagemap.h"
#include "types.h"
#include "os.h"
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

TEST(sizes) {
  static const size_t sizes[] = {0, 1, 8, 16, 17, 100, 128, 129, 1000, 1024, 1025, 5000, 8192, 9000,
                                 65536, 65537, 200000, 1 << 20, (16 << 20) + 1, 40 << 20};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *p = kite_malloc(n);
    assert_true(p != NULL);
    expect_true(((uintptr_t)p & 15) == 0);
    expect_true(kite_malloc_usable_size(p) >= n);
    expect_true(kite_owns(p));
    test_fill(p, n, i);
    expect_true(test_verify(p, n, i));
    kite_free(p);
  }
}

TEST(many_small) {
  enum { N = 20000 };
  static void *ptrs[N];
  test_rng_init(42);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      size_t n = test_rng_below(600);
      ptrs[i] = kite_malloc(n);
      test_fill(ptrs[i], n < 8 ? n : 8, (uint64_t)i);
    }
    for (int i = 0; i < N; i += 2) kite_free(ptrs[i]);
    for (int i = 0; i < N; i += 2) ptrs[i] = kite_malloc(32);
    int bad = 0;
    for (int i = 1; i < N; i += 2) {
      size_t n = kite_malloc_usable_size(ptrs[i]);
      if (!test_verify(ptrs[i], n < 8 ? 0 : 0, (uint64_t)i)) bad++;
    }
    expect_int_eq(bad, 0);
    for (int i = 0; i < N; i++) kite_free(ptrs[i]);
  }
}

TEST(aligned) {
  for (size_t a = 1; a <= ((size_t)1 << 30); a <<= 1) {
    size_t sizes[] = {1, 100, 70000};
    for (int k = 0; k < 3; k++) {
      void *p = kite_aligned_alloc(a, sizes[k]);
      assert_true(p != NULL);
      expect_true(((uintptr_t)p & (a - 1)) == 0);
      expect_true(kite_malloc_usable_size(p) >= sizes[k]);
      memset(p, 0x5a, sizes[k]);
      kite_free(p);
    }
  }
  void *p = (void *)1;
  expect_int_eq(kite_posix_memalign(&p, 3, 10), EINVAL);
  errno = 0;
  expect_true(kite_aligned_alloc(0, 10) == NULL);
  expect_int_eq(errno, EINVAL);
}

TEST(realloc_calloc) {
  unsigned char *p = kite_malloc(10);
  test_fill(p, 10, 7);
  size_t steps[] = {100, 3000, 70000, 2 << 20, 20 << 20, 50 << 20, 1000, 5};
  size_t cur = 10;
  for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    p = kite_realloc(p, steps[i]);
    assert_true(p != NULL);
    size_t keep = cur < steps[i] ? cur : steps[i];
    expect_true(test_verify(p, keep, 7));
    test_fill(p, steps[i], 7);
    cur = steps[i];
  }
  expect_true(kite_realloc(p, 0) == NULL);
  for (int r = 0; r < 3; r++) {
    size_t n = r == 0 ? 100 : r == 1 ? 100000 : (20 << 20);
    unsigned char *d = kite_malloc(n);
    memset(d, 0xff, n);
    kite_free(d);
    unsigned char *z = kite_calloc(1, n);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += z[i] != 0;
    expect_uint_eq(nz, 0);
    kite_free(z);
  }
  errno = 0;
  expect_true(kite_calloc(SIZE_MAX / 2, 3) == NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_true(kite_malloc(SIZE_MAX) == NULL);
  expect_int_eq(errno, ENOMEM);
}

/* Threads hand blocks to each other through a shared array and exit with blocks alive. */
#define SLOTS 4096
static void *slot[SLOTS];
static size_t slot_len[SLOTS];
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static int bad_blocks;

#ifdef __SANITIZE_THREAD__
#define WORKER_OPS 2000 /* TSan is ~20x slower */
#else
#define WORKER_OPS 20000
#endif
static void *worker(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 2654435761u + 1;
  for (int i = 0; i < WORKER_OPS; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    unsigned k = (unsigned)(s % SLOTS);
    size_t n = (s >> 20) % 64 == 0 ? (s >> 24) % 100000 : (s >> 24) % 512;
    void *p = kite_malloc(n);
    test_fill(p, n, k);
    pthread_mutex_lock(&slot_lock);
    void *old = slot[k];
    size_t oldn = slot_len[k];
    slot[k] = p;
    slot_len[k] = n;
    pthread_mutex_unlock(&slot_lock);
    if (old) {
      if (!test_verify(old, oldn, k)) __atomic_fetch_add(&bad_blocks, 1, __ATOMIC_RELAXED);
      kite_free(old);
    }
  }
  return NULL;
}

TEST(threads) {
  for (int round = 0; round < 3; round++) {
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + round * 8 + 1));
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  }
  expect_int_eq(bad_blocks, 0);
  for (int k = 0; k < SLOTS; k++) {
    if (slot[k]) {
      expect_true(test_verify(slot[k], slot_len[k], (uint64_t)k));
      kite_free(slot[k]);
      slot[k] = NULL;
    }
  }
}

/* malloc_trim gives back the calling thread's empty pages: the same blocks come back
 * (reused: the arena hands out the lowest free units again) and nothing breaks; a page still
 * holding a live block is kept. */
static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}
TEST(trim) {
  void *keep = kite_malloc(48);
  void *blocks[3000];
  static uintptr_t first[3000];
  kite_stats_t s0, s1;
  kite_malloc_trim(0); /* release empty pages that earlier tests' threads abandoned */
  for (int i = 0; i < 3000; i++) blocks[i] = kite_malloc(200);
  for (int i = 0; i < 3000; i++) first[i] = (uintptr_t)blocks[i];
  qsort(first, 3000, sizeof first[0], cmp_ptr);
  for (int i = 0; i < 3000; i++) kite_free(blocks[i]);
  expect_int_eq(kite_malloc_trim(0), 1);
  expect_true(kite_owns(keep));
  test_fill(keep, 48, 3);
  kite_stats_get(&s0);
  for (int i = 0; i < 3000; i++) blocks[i] = kite_malloc(200);
  kite_stats_get(&s1);
  int reused = 0;
  for (int i = 0; i < 3000; i++)
    reused += bsearch(&blocks[i], first, 3000, sizeof first[0], cmp_ptr) != NULL;
  expect_int_eq(reused, 3000);                       /* the very same blocks */
  expect_uint_eq(s1.arenas, s0.arenas);              /* no new arena */
  for (int i = 0; i < 3000; i++) { test_fill(blocks[i], 200, (uint64_t)i); }
  int bad = 0;
  for (int i = 0; i < 3000; i++) bad += !test_verify(blocks[i], 200, (uint64_t)i);
  expect_int_eq(bad, 0);
  for (int i = 0; i < 3000; i++) kite_free(blocks[i]);
  expect_true(test_verify(keep, 48, 3));
  kite_free(keep);
}

TEST(stats_options) {
  kite_stats_t before, after;
  kite_stats_get(&before);
  void *big = kite_malloc(20u << 20);  /* huge */
  void *large = kite_malloc(300000);   /* large */
  kite_stats_get(&after);
  expect_uint_eq(after.huge_allocs, before.huge_allocs + 1);
  expect_uint_eq(after.large_allocs, before.large_allocs + 1);
  expect_true(after.committed >= before.committed + (20u << 20));
  expect_true(after.peak_committed >= after.committed);
  kite_free(big);
  kite_free(large);
  long d = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 0);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), 0);
  kite_stats_get(&before);
  kite_free(kite_malloc(300000)); /* purged at once */
  kite_stats_get(&after);
  expect_true(after.purged > before.purged);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, d);
}

/* First-class heaps: blocks of every size range, some freed one by one (from this thread
 * and from another), the rest at once by kite_heap_destroy; the memory is reused. */
static void *free_in_thread(void *p) { kite_free(p); return NULL; }
TEST(heaps) {
  kite_stats_t s0, s1;
  kite_malloc_trim(0);
  for (int round = 0; round < 3; round++) {
    kite_stats_get(&s0);
    kite_heap_t *h = kite_heap_new();
    assert_true(h != NULL);
    void *blocks[2000];
    for (int i = 0; i < 2000; i++) {
      size_t n = i % 500 == 0 ? (size_t)(i % 1000 == 0 ? 17 << 20 : 200000) : (size_t)(i % 300) + 1;
      blocks[i] = kite_heap_malloc(h, n);
      assert_true(blocks[i] != NULL);
      expect_true(kite_owns(blocks[i]));
      test_fill(blocks[i], n < 64 ? n : 64, (uint64_t)i);
    }
    for (int i = 0; i < 2000; i += 3) kite_free(blocks[i]);
    pthread_t t;
    pthread_create(&t, NULL, free_in_thread, blocks[1]);
    pthread_join(t, NULL);
    int bad = 0;
    for (int i = 2; i < 2000; i += 3) {
      size_t n = i % 500 == 0 ? 64 : (size_t)(i % 300) + 1;
      bad += !test_verify(blocks[i], n < 64 ? n : 64, (uint64_t)i);
    }
    expect_int_eq(bad, 0);
    void *z = kite_heap_calloc(h, 100, 10);
    expect_true(z != NULL && ((unsigned char *)z)[999] == 0);
    kite_heap_destroy(h);
    kite_malloc_trim(0); /* freed runs are decommitted after a delay, or now */
    kite_stats_get(&s1);
    expect_true(s1.committed <= s0.committed + (1u << 20));
  }
}

#define MiB ((size_t)1 << 20)

#ifdef KITE_TEST_HOOKS
/* huge_trim (realloc shrinking a huge block) must clear the page-map slots of the tail
 * before unmapping it: once the tail is unmapped, another thread may map an arena or a huge
 * block there and mark its slot. The hook runs right after the unmap and plays that thread:
 * it maps a whole 64 MiB slot of the hole and marks it, as arena_new does. The mark must
 * survive the trim. */
static void *hole_map;
static void trim_hook(void *gone, size_t len) {
  uintptr_t slot = ((uintptr_t)gone + KITE_ARENA_SIZE - 1) & ~(uintptr_t)KITE_ARENA_MASK;
  if (slot + KITE_ARENA_SIZE > (uintptr_t)gone + len) return;
  void *m = mmap((void *)slot, KITE_ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (m == MAP_FAILED) return;
  if (m != (void *)slot) { munmap(m, KITE_ARENA_SIZE); return; }
  hole_map = m;
  _kite_pagemap_set(slot, KITE_ARENA_SIZE, KITE_PM_HUGE);
}
TEST(huge_trim_order) {
  unsigned char *p = kite_malloc(200 * MiB);
  assert_true(p != NULL);
  p[0] = 1;
  _kite_test_hook_huge_trimmed = trim_hook;
  unsigned char *q = kite_realloc(p, 110 * MiB); /* shrinks in place: huge_trim */
  _kite_test_hook_huge_trimmed = NULL;
  expect_ptr_eq(q, p);
  assert_true(hole_map != NULL); /* the hook found the hole and mapped into it */
  expect_int_eq(_kite_pagemap_kind((uintptr_t)hole_map), KITE_PM_HUGE);
  _kite_pagemap_set((uintptr_t)hole_map, KITE_ARENA_SIZE, KITE_PM_NONE);
  munmap(hole_map, KITE_ARENA_SIZE);
  hole_map = NULL;
  expect_int_eq(q[0], 1);
  kite_free(q);
}
#endif

#ifdef KITE_TEST_HOOKS
/* A free reading a cached map's header (counted in huge_free_readers: a double free of the
 * block the map held) while another thread's allocation takes the map and, the address
 * space after it being taken, moves it (huge_grow: mremap elsewhere). The old place must
 * stay mapped until the reader is out, as huge_unmap waits for it (huge.c U4); it was
 * given up at once, under the reader's feet. */
void _kite_test_huge_readers(int delta);
static int grow_done;
static void *grow_thread(void *arg) {
  *(void **)arg = kite_malloc(40 * MiB); /* takes the 20 MiB map, grows it by moving it */
  __atomic_store_n(&grow_done, 1, __ATOMIC_RELEASE);
  return NULL;
}
static bool page_mapped(uintptr_t a) {
  unsigned char v;
  return mincore((void *)a, 4096, &v) == 0;
}
TEST(huge_grow_waits_for_readers) {
  long delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  assert_int_eq(kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 600000), 0); /* cached, kept */
  kite_malloc_trim(0); /* the huge cache empty: the map below is the one taken */
  unsigned char *p = kite_malloc(20 * MiB);
  assert_true(p != NULL);
  uintptr_t base = ((uintptr_t)p - 1) & ~(uintptr_t)KITE_ARENA_MASK, end = (uintptr_t)p + 20 * MiB;
  void *wall = mmap((void *)end, 4096, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  assert_true(wall == (void *)end); /* no growth in place */
  kite_free(p); /* to the huge cache */
  _kite_test_huge_readers(+1);
  void *q = NULL;
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, grow_thread, &q), 0);
  while (_kite_pagemap_kind(base) == KITE_PM_HUGE && !__atomic_load_n(&grow_done, __ATOMIC_ACQUIRE))
    sched_yield(); /* the move has begun: the old place's page-map slot reads NONE */
  for (int i = 0; i < 300 && !__atomic_load_n(&grow_done, __ATOMIC_ACQUIRE); i++) usleep(1000);
  expect_true(page_mapped(base)); /* the header a reader may be reading is still there */
  _kite_test_huge_readers(-1);
  pthread_join(t, NULL);
  expect_true(q != NULL && q != (void *)p);
  expect_true(!page_mapped(base)); /* given up once the reader was out */
  kite_free(q);
  munmap(wall, 4096);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, delay);
  kite_malloc_trim(0);
}
#endif

#if defined(KITE_TEST_DEBUG) && KITE_TEST_DEBUG >= 3
/* KITE_DEBUG=3: blocks handed out are filled with 0xAA; a byte written into a free block is
 * found when the block is handed out again: reported, and the process aborts. */
TEST(fill_patterns) {
  for (size_t n = 16; n <= 4096; n *= 2) {
    unsigned char *p = kite_malloc(n);
    assert_true(p != NULL);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += p[i] != 0xAA;
    expect_uint_eq(bad, 0);
    kite_free(p);
  }
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    volatile unsigned char *p = kite_malloc(100);
    kite_free((void *)p);
    p[50] = 1;                  /* write after free */
    /* allocate until the block comes back (it is checked when handed out) */
    for (int i = 0; i < 100000; i++)
      if (kite_malloc(100) == (void *)p) _exit(0); /* not reached when the write is found */
    _exit(3);
  }
  int st = 0;
  waitpid(pid, &st, 0);
#if defined(__SANITIZE_ADDRESS__)
  /* the ASan build poisons freed blocks: ASan itself stops the write (its report, exit 1) */
  expect_true((WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || (WIFEXITED(st) && WEXITSTATUS(st) == 1));
#else
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
#endif
}
#endif

#ifdef KITE_TEST_HOOKS
/* The validators find what they are for: a free block whose link entry was overwritten (it
 * says LIVE while the block is on a free list), and a page whose used count is off by one,
 * make kite_check() report 0 (and 1 again once repaired). */
TEST(check_finds_corruption) {
  void *keep = kite_malloc(64), *p = kite_malloc(64);
  assert_true(keep && p);
  kite_free(p);
  kite_page_t *pg = _kite_unit_of((uintptr_t)p);
  uint32_t i = (uint32_t)(((uintptr_t)p - (uintptr_t)_kite_page_start(pg)) / pg->block_size);
  uint16_t link = pg->links[i];
  expect_true(link != KITE_LINK_LIVE);
  fprintf(stderr, "(two check failures expected)\n");
  pg->links[i] = KITE_LINK_LIVE;
  expect_int_eq(kite_check(), 0);
  pg->links[i] = link;
  expect_int_eq(kite_check(), 1);
  pg->used++;
  expect_int_eq(kite_check(), 0);
  pg->used--;
  expect_int_eq(kite_check(), 1);
  kite_free(keep);
}
#endif

/* The huge blocks' live counters (kite_stats_get's huge_live_blocks and huge_live_bytes,
 * mallinfo2's hblks and hblkhd) follow every huge block out and back: one the huge cache
 * keeps (20 MiB), one too big for it (200 MiB, unmapped at once), and a resize in place
 * (the bytes follow the new length, the count stays). */
TEST(huge_live_counters) {
  kite_stats_t a, b, c;
  kite_stats_get(&a);
  void *cached = kite_malloc(20 * MiB), *big = kite_malloc(200 * MiB);
  assert_true(cached && big);
  size_t n1 = kite_malloc_usable_size(cached), n2 = kite_malloc_usable_size(big);
  kite_stats_get(&b);
  expect_uint_eq(b.huge_live_blocks, a.huge_live_blocks + 2);
  expect_uint_eq(b.huge_live_bytes, a.huge_live_bytes + n1 + n2);
  void *q = kite_realloc(big, 110 * MiB); /* shrinks in place */
  assert_true(q == big);
  size_t n3 = kite_malloc_usable_size(q);
  expect_true(n3 < n2);
  kite_stats_get(&c);
  expect_uint_eq(c.huge_live_blocks, b.huge_live_blocks);
  expect_uint_eq(c.huge_live_bytes, a.huge_live_bytes + n1 + n3);
  kite_free(cached);
  kite_stats_get(&c);
  expect_uint_eq(c.huge_live_blocks, a.huge_live_blocks + 1);
  expect_uint_eq(c.huge_live_bytes, a.huge_live_bytes + n3);
  kite_free(q);
  kite_stats_get(&c);
  expect_uint_eq(c.huge_live_blocks, a.huge_live_blocks);
  expect_uint_eq(c.huge_live_bytes, a.huge_live_bytes);
}

/* A huge block's header is authenticated (huge.c): a length changed in it, as an underflow
 * from the memory below would change it, makes free report heap corruption and abort before
 * it unmaps anything. The child (this program re-executed, so that kite's messages go to
 * the pipe it starts with) changes the length in the header, which lies at the start of
 * the block's first 64 MiB slot (huge.c's layout: magic, user, user_len, ...). */
static int huge_header_child(void) {
  unsigned char *p = kite_malloc(40 * MiB);
  if (!p) return 3;
  size_t *hdr = (size_t *)(((uintptr_t)p - 1) & ~(uintptr_t)((64 * MiB) - 1));
  if (hdr[1] != (size_t)(uintptr_t)p || hdr[2] < 40 * MiB) return 4; /* not the layout above */
  hdr[2] *= 3;
  kite_free(p);
  return 0; /* the free took the changed header */
}
TEST(huge_header_checksum) {
  int fds[2];
  assert_int_eq(pipe(fds), 0);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    test_execl_self("test_core_smoke", "huge-header-child", (char *)NULL); /* through the emulator under make test-cross */
    _exit(127);
  }
  close(fds[1]);
  char out[1024];
  size_t len = 0;
  ssize_t n;
  while (len + 1 < sizeof out && (n = read(fds[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)n;
  out[len] = 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  expect_true(strstr(out, "kite: heap corruption: huge block header does not match its checksum: ") != NULL);
  if (!strstr(out, "huge block header")) fprintf(stderr, "  child status 0x%x, stderr: %s\n", st, out);
}

#define RUN_CHECKED(name) do { RUN(name); expect_int_eq(kite_check(), 1); } while (0)

#if defined(KITE_TEST_HOOKS) && defined(__SANITIZE_ADDRESS__)
/* os/linux.c: a range kite unmaps leaves no poisoned shadow behind. ASan keeps the shadow
 * of a range after munmap; kite poisons freed blocks (tool.h), so an arena unmapped with
 * freed blocks in it left poison where the kernel later put something else (a new
 * thread's stack: a use-after-poison report on its TLS, in glibc's own code). */
TEST(unmap_leaves_no_poison) {
  const size_t n = 1 << 20;
  uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(p != MAP_FAILED);
  ASAN_POISON_MEMORY_REGION(p + 8192, 256);
  expect_true(__asan_region_is_poisoned(p, n) == p + 8192);
  _kite_os_unmap(p, n);
  /* the same range mapped anew, as the kernel may for a thread stack */
  uint8_t *q = mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  assert_true(q == p);
  expect_true(__asan_region_is_poisoned(q, n) == NULL);
  q[8192 + 10] = 1; /* an ASan report (exit 1) while the old poison stays */
  expect_int_eq(q[8192 + 10], 1);
  munmap(q, n);
}
#endif

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "option-value") == 0) {
    long want = strtol(argv[2], NULL, 0), got = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
    fprintf(stderr, "KITE_PURGE_DELAY_MS=%s: option %ld, expected %ld\n", getenv("KITE_PURGE_DELAY_MS"), got, want);
    return got == want ? 0 : 1;
  }
  if (argc == 2 && strcmp(argv[1], "huge-header-child") == 0) return huge_header_child();
  test_rng_init(1);
  expect_int_eq(kite_check(), 1);
  RUN_CHECKED(sizes);
  RUN_CHECKED(many_small);
  RUN_CHECKED(aligned);
  RUN_CHECKED(realloc_calloc);
  RUN_CHECKED(threads);
  RUN_CHECKED(trim);
  RUN_CHECKED(stats_options);
  RUN_CHECKED(heaps);
  RUN_CHECKED(huge_live_counters);
#ifdef KITE_TEST_HOOKS
  RUN_CHECKED(huge_trim_order);
  RUN_CHECKED(huge_grow_waits_for_readers);
#endif
  RUN_CHECKED(huge_header_checksum);
#ifdef KITE_TEST_HOOKS
  RUN_CHECKED(check_finds_corruption);
#endif
#if defined(KITE_TEST_HOOKS) && defined(__SANITIZE_ADDRESS__)
  RUN_CHECKED(unmap_leaves_no_poison);
#endif
#if defined(KITE_TEST_DEBUG) && KITE_TEST_DEBUG >= 3
  RUN_CHECKED(fill_patterns);
#endif
  return test_main_end();
}
