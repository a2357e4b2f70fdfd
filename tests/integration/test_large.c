/* tests/integration/test_large.c -- large runs and huge blocks: realloc in place, reuse of
 * freed runs, and memory coming back.
 *
 *   run_grow_in_place    a run whose buddies are free grows by realloc without moving, from
 *                        1 MiB to 4 MiB, its content intact and its usable size the new one
 *   run_shrink_in_place  realloc to a smaller order keeps the address, and the tail it gave
 *                        back is the next run of that size handed out
 *   run_grow_moves       with the neighbour taken, realloc moves the block, content intact
 *   run_reuse            a freed 8 MiB run is where the next 6 MiB request lands
 *   huge_resize          a huge block grows (in place or moved without a copy) and shrinks
 *                        in place, content intact at every step
 *   impossible           realloc to sizes no machine has: NULL, ENOMEM, the block intact
 *   memory_back          64 MiB of large runs and 5..25 MiB blocks freed: after the purge
 *                        delay one more free purges most of it; kite_malloc_trim the rest
 *                        (RSS and kite's committed bytes)
 */
#define _GNU_SOURCE
#include <kite.h>
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t committed(void) {
  kite_stats_t s;
  kite_stats_get(&s);
  return s.committed;
}
static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A fresh 4 MiB-aligned place with its buddies free: a 4 MiB run freed at once is the first
 * place a request of 256 KiB or more is carved from (the arena's recently freed runs). */
static unsigned char *fresh_place(void) {
  unsigned char *p = kite_malloc(4 * MiB);
  if (!p) return NULL;
  kite_free(p);
  return p;
}

TEST(run_grow_in_place) {
  unsigned char *at = fresh_place();
  assert_true(at != NULL);
  unsigned char *p = kite_malloc(MiB);
  assert_ptr_eq(p, at);
  test_fill(p, MiB, 1);
  size_t sizes[] = {MiB + 1, 2 * MiB, 3 * MiB, 4 * MiB};
  size_t old = MiB;
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    unsigned char *q = kite_realloc(p, sizes[i]);
    assert_ptr_eq(q, at);
    expect_true(test_verify(q, old, 1));
    expect_uint_eq(kite_malloc_usable_size(q), sizes[i] + (test_os_page() - sizes[i] % test_os_page()) % test_os_page());
    test_fill(q, sizes[i], 1);
    p = q;
    old = sizes[i];
  }
  expect_true(kite_check());
  kite_free(p);
}

TEST(run_shrink_in_place) {
  unsigned char *at = fresh_place();
  assert_true(at != NULL);
  unsigned char *p = kite_malloc(4 * MiB);
  assert_ptr_eq(p, at);
  test_fill(p, 4 * MiB, 2);
  unsigned char *q = kite_realloc(p, 300 * KiB);
  assert_ptr_eq(q, at);
  expect_true(test_verify(q, 300 * KiB, 2));
  expect_uint_eq(kite_malloc_usable_size(q), (300 * KiB + test_os_page() - 1) / test_os_page() * test_os_page());
  /* the upper half went back first: a 2 MiB request gets it */
  unsigned char *r = kite_malloc(2 * MiB);
  expect_ptr_eq(r, at + 2 * MiB);
  expect_true(kite_check());
  kite_free(r);
  expect_true(test_verify(q, 300 * KiB, 2));
  kite_free(q);
}

TEST(run_grow_moves) {
  unsigned char *at = fresh_place();
  assert_true(at != NULL);
  /* 4 MiB shrunk to 1 MiB gives back 1..2 MiB and 2..4 MiB; a 2 MiB request takes the latter */
  unsigned char *p = kite_malloc(4 * MiB);
  assert_ptr_eq(p, at);
  p = kite_realloc(p, MiB);
  assert_ptr_eq(p, at);
  unsigned char *next = kite_malloc(2 * MiB);
  assert_ptr_eq(next, at + 2 * MiB);
  test_fill(p, MiB, 3);
  test_fill(next, 2 * MiB, 4);
  /* 2 MiB: its buddy 1..2 MiB is free, it stays; 3 MiB needs 0..4 MiB: it moves */
  unsigned char *q = kite_realloc(p, 2 * MiB);
  assert_ptr_eq(q, at);
  expect_true(test_verify(q, MiB, 3));
  test_fill(q, 2 * MiB, 3);
  unsigned char *m = kite_realloc(q, 3 * MiB);
  assert_true(m != NULL);
  expect_true(m != at);
  expect_true(test_verify(m, 2 * MiB, 3));
  expect_true(test_verify(next, 2 * MiB, 4));
  expect_true(kite_check());
  kite_free(m);
  kite_free(next);
}

TEST(run_reuse) {
  unsigned char *p = kite_malloc(8 * MiB);
  assert_true(p != NULL);
  memset(p, 1, 8 * MiB);
  kite_free(p);
  unsigned char *q = kite_malloc(6 * MiB);
  expect_ptr_eq(q, p);
  unsigned char *r = kite_malloc(300 * KiB); /* from elsewhere: the freed run is taken */
  expect_true(r != NULL && (r < q || r >= q + 8 * MiB));
  kite_free(r);
  kite_free(q);
}

TEST(huge_resize) {
  size_t steps[] = {20 * MiB, 40 * MiB + 123, 100 * MiB, 17 * MiB + 5, 33 * MiB, 18 * MiB};
  unsigned char *p = kite_malloc(steps[0]);
  assert_true(p != NULL);
  test_fill(p, steps[0], 5);
  size_t old = steps[0];
  for (unsigned i = 1; i < sizeof steps / sizeof *steps; i++) {
    size_t n = steps[i];
    unsigned char *q = kite_realloc(p, n);
    assert_true(q != NULL);
    size_t keep = old < n ? old : n;
    if (!test_verify(q, keep, 5)) TEST_FAIL_("huge realloc %zu -> %zu lost content", old, n);
    if (n < old) expect_ptr_eq(q, p); /* shrinking never moves */
    expect_true(kite_malloc_usable_size(q) >= n);
    test_fill(q, n, 5);
    p = q;
    old = n;
  }
  expect_true(kite_check());
  kite_free(p);
}

TEST(impossible) {
  size_t sizes[3] = {64 * KiB + 1, 4 * MiB, 32 * MiB};
  size_t bad[] = {SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1, (size_t)1 << 62};
  for (int i = 0; i < 3; i++) {
    unsigned char *p = kite_malloc(sizes[i]);
    assert_true(p != NULL);
    test_fill(p, sizes[i], 6);
    for (unsigned j = 0; j < sizeof bad / sizeof *bad; j++) {
      errno = 0;
      expect_ptr_eq(kite_realloc(p, bad[j]), NULL);
      expect_int_eq(errno, ENOMEM);
    }
    expect_true(test_verify(p, sizes[i], 6));
    expect_uint_eq(kite_malloc_usable_size(p), sizes[i] + (test_os_page() - sizes[i] % test_os_page()) % test_os_page());
    kite_free(p);
  }
  expect_true(kite_check());
}

TEST(memory_back) {
  kite_malloc_trim(0);
  size_t rss0 = test_statm_bytes(1), c0 = committed();
  enum { N = 24 };
  void *p[N];
  size_t total = 0;
  uint64_t r = 7;
  for (int i = 0; i < N; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = i < 12 ? (size_t)(256 * KiB + (r >> 33) % (5 * MiB)) : (size_t)(5 * MiB + (r >> 33) % (20 * MiB));
    p[i] = kite_malloc(n);
    assert_true(p[i] != NULL);
    memset(p[i], 0x77, n);
    total += n;
  }
  size_t rss1 = test_statm_bytes(1);
  expect_true(rss1 >= rss0 + total / 2);
  for (int i = 0; i < N; i++) kite_free(p[i]);
  /* past the purge delay, one more free runs a decay step; the huge cache expires too */
  sleep_ms(200);
  void *q = kite_malloc(1 * MiB);
  kite_free(q);
  sleep_ms(50);
  q = kite_malloc(20 * MiB);
  kite_free(q);
  size_t rss2 = test_statm_bytes(1), c2 = committed();
  if (rss2 > rss0 + total / 3 || c2 > c0 + total / 3)
    TEST_FAIL_("after the delay: RSS %zu -> %zu -> %zu, committed %zu -> %zu (of %zu)", rss0, rss1, rss2, c0, c2, total);
  else
    TEST_PASS_();
  kite_malloc_trim(0);
  size_t rss3 = test_statm_bytes(1), c3 = committed();
  if (rss3 > rss0 + 8 * MiB || c3 > c0 + 4 * MiB)
    TEST_FAIL_("after kite_malloc_trim: RSS %zu -> %zu, committed %zu -> %zu", rss0, rss3, c0, c3);
  else
    TEST_PASS_();
}

int main(void) {
  test_rng_init(1);
  /* The placement tests ask where a freed run's units go next: the recently freed runs are
   * reused first only while they are still committed, and a decay step purges them after
   * the purge delay (10 ms by default), which a loaded machine or an emulator can let pass
   * between a free and the next request. They run with purging off; memory_back tests it. */
  long delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, -1);
  RUN(run_grow_in_place);
  RUN(run_shrink_in_place);
  RUN(run_grow_moves);
  RUN(run_reuse);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, delay);
  RUN(huge_resize);
  RUN(impossible);
  RUN(memory_back);
  return test_main_end();
}
