/* tests/api/test_api.c -- API conformance of the malloc family.
 *
 * Built twice (see api_names.h): test_api calls kite_malloc ... through kite-noover (also in
 * the ASan+UBSan build); test_api_override calls malloc ... and links libkite.so, so it
 * checks the interposition as well (every block must satisfy kite_owns()).
 *
 * What is checked, for every function of the family:
 *   - non-NULL result, usable size >= request, alignment, every byte of the usable size
 *     writable and read back (pattern per block, verified before free);
 *   - every power-of-two alignment from 1 to 1 GiB for aligned_alloc / memalign /
 *     posix_memalign, valloc / pvalloc page alignment and rounding;
 *   - realloc keeps content growing and shrinking across small / large / huge sizes;
 *   - calloc zeroes, also memory that was dirtied and freed just before;
 *   - edge cases: malloc(0) unique and freeable, free(NULL), realloc(NULL, n),
 *     realloc(p, 0) frees and returns NULL (glibc semantics), invalid alignments -> EINVAL
 *     (posix_memalign returns it and leaves errno alone), overflow in calloc/reallocarray and
 *     impossible sizes -> NULL + ENOMEM with the old block intact.
 * Leaks that the API would hide (realloc(p, 0) not freeing, aligned blocks wasting whole
 * regions) are caught by bounding the growth of the resident set over many repetitions.
 */
#define _GNU_SOURCE
#include <stdalign.h>
#include <stddef.h>
#include <pthread.h>
#include <sys/mman.h>

#include "api_names.h"
#include "test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static int global_object;

/* Largest power of two <= n, capped at 16: the alignment malloc(n) must give. */
static size_t natural_align(size_t n) {
  size_t a = 1;
  while (a < 16 && a * 2 <= n) a *= 2;
  return a;
}

/* Fill a block's first and last `edge` bytes (or all of it when small) and verify later:
 * multi-hundred-MiB blocks are checked at both ends to keep the test fast. */
static void fill_edges(unsigned char *p, size_t n, uint64_t tag, size_t edge) {
  if (n <= 2 * edge) { test_fill(p, n, tag); return; }
  test_fill(p, edge, tag);
  test_fill(p + n - edge, edge, tag + 1);
}
static int verify_edges(const unsigned char *p, size_t n, uint64_t tag, size_t edge) {
  if (n <= 2 * edge) return test_verify(p, n, tag);
  return test_verify(p, edge, tag) && test_verify(p + n - edge, edge, tag + 1);
}

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* Checks common to every fresh block: non-NULL, owned by kite, usable size, alignment,
 * the whole usable size writable. Frees the block. */
static void check_block_and_free(void *p, size_t n, size_t align, uint64_t tag) {
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  size_t us = A_usable(p);
  expect_true(us >= n);
  expect_uint_eq((uintptr_t)p % align, 0);
  size_t edge = 256 * KiB;
  fill_edges(p, us, tag, edge);
  expect_true(verify_edges(p, us, tag, edge));
  A_free(p);
}

TEST(malloc_sizes) {
  static const size_t big[] = {4095, 4096, 4097, 8191, 8192, 16383, 16385, 32768, 65535,
                               65536, 65537, 131072, 262143, 1 * MiB, 1 * MiB + 1,
                               2 * MiB - 1, 4 * MiB + 3, 8 * MiB, 33 * MiB, 130 * MiB,
                               300 * MiB + 5};
  for (size_t n = 1; n <= 2100; n++) check_block_and_free(A_malloc(n), n, natural_align(n), n);
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    check_block_and_free(A_malloc(big[i]), big[i], 16, i + 7);
}

/* Many live blocks of random sizes: no two overlap (each keeps its own pattern). */
TEST(malloc_many_live) {
  enum { N = 3000 };
  static void *ptr[N];
  static size_t len[N];
  for (int i = 0; i < N; i++) {
    uint64_t r = test_rng_below(100);
    len[i] = r < 85 ? 1 + test_rng_below(512) : r < 98 ? 1 + test_rng_below(64 * KiB)
                                                       : 1 + test_rng_below(3 * MiB);
    ptr[i] = A_malloc(len[i]);
    assert_true(ptr[i] != NULL);
    test_fill(ptr[i], len[i], (uint64_t)i);
  }
  int bad = 0;
  for (int i = 0; i < N; i++) bad += !test_verify(ptr[i], len[i], (uint64_t)i);
  expect_int_eq(bad, 0);
  /* free in a shuffled order */
  for (int i = N - 1; i > 0; i--) {
    int j = (int)test_rng_below((uint64_t)i + 1);
    void *tp = ptr[i]; ptr[i] = ptr[j]; ptr[j] = tp;
    size_t tl = len[i]; len[i] = len[j]; len[j] = tl;
  }
  long long invalid0 = test_kite_stat("invalid frees: ");
  for (int i = 0; i < N; i++) A_free(ptr[i]);
  /* every free was taken as valid (none reported), and left the structures sound */
  expect_true(invalid0 >= 0);
  expect_int_eq(test_kite_stat("invalid frees: "), invalid0);
  expect_int_eq(kite_check(), 1);
}

TEST(malloc_zero) {
  enum { N = 64 };
  void *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = A_malloc(0);
    assert_true(p[i] != NULL);
    expect_true(kite_owns(p[i]));
    for (int j = 0; j < i; j++)
      if (p[j] == p[i]) TEST_FAIL_("malloc(0) returned %p twice", p[i]);
  }
  for (int i = 0; i < N; i++) A_free(p[i]);
  /* a malloc(0) block can be grown */
  unsigned char *q = A_realloc(A_malloc(0), 100);
  assert_true(q != NULL);
  test_fill(q, 100, 5);
  expect_true(test_verify(q, 100, 5));
  A_free(q);
}

TEST(free_null) {
  A_free(NULL);
  kite_free(NULL);
  kite_free_sized(NULL, 0);
  kite_free_aligned_sized(NULL, 64, 0);
  expect_uint_eq(A_usable(NULL), 0);
  expect_true(!kite_owns(NULL));
}

TEST(free_sized) {
  for (size_t n = 1; n < 70000; n = n * 3 / 2 + 1) {
    void *p = A_malloc(n);
    assert_true(p != NULL);
    test_fill(p, n, n);
    expect_true(test_verify(p, n, n));
    kite_free_sized(p, n);
  }
  for (size_t a = 16; a <= 1 * MiB; a *= 4) {
    void *p = A_aligned_alloc(a, 3 * a);
    assert_true(p != NULL);
    expect_uint_eq((uintptr_t)p % a, 0);
    test_fill(p, 3 * a, a);
    expect_true(test_verify(p, 3 * a, a));
    kite_free_aligned_sized(p, a, 3 * a);
  }
}

TEST(owns_foreign) {
  int local = 0;
  expect_true(!kite_owns(&local));
  expect_true(!kite_owns(&global_object));
  expect_true(!kite_owns((void *)test_opaque(16)));
  void *m = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  expect_true(!kite_owns(m));
  expect_true(!kite_owns((char *)m + 4096));
  munmap(m, 1 * MiB);
  void *p = A_malloc(100);
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  A_free(p);
}

/* kite_owns from a thread that does not own the block's page (it cannot read the owner's
 * lists) and from the owner, for a live block, a block freed by the owner (local free list)
 * and one freed by a third thread (the page's remote-free list). */
static void *owns_in_thread(void *p) { return (void *)(uintptr_t)kite_owns(p); }
static void *free_in_thread(void *p) { A_free_opaque(p); return NULL; }
static int owns_from_thread(void *p) {
  pthread_t t;
  void *r = NULL;
  if (pthread_create(&t, NULL, owns_in_thread, p) != 0) return -1;
  pthread_join(t, &r);
  return (int)(uintptr_t)r;
}
TEST(owns_other_thread) {
  for (size_t n = 16; n <= 4096; n *= 4) {
    void *live = A_malloc(n), *freed = A_malloc(n), *remote = A_malloc(n);
    assert_true(live && freed && remote);
    A_free_opaque(freed);
    pthread_t t;
    assert_int_eq(pthread_create(&t, NULL, free_in_thread, remote), 0);
    pthread_join(t, NULL);
    expect_int_eq(owns_from_thread(live), 1);
    expect_int_eq(owns_from_thread(freed), 0);
    expect_int_eq(owns_from_thread(remote), 0);
    expect_int_eq(kite_owns(live), 1);
    expect_int_eq(kite_owns(freed), 0);
    expect_int_eq(kite_owns(remote), 0);
    A_free(live);
  }
}

TEST(calloc_zeroes) {
  static const size_t sz[] = {1, 8, 16, 24, 100, 512, 1000, 4096, 10000, 40000, 70000,
                              300 * KiB, 1 * MiB + 17, 5 * MiB, 40 * MiB};
  for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
    size_t n = sz[i];
    enum { K = 16 };
    unsigned char *p[K];
    int k = n >= 1 * MiB ? 2 : K;
    /* dirty blocks of this size, free them, then calloc the same size: the recycled
     * memory must come back zeroed */
    for (int round = 0; round < 3; round++) {
      for (int j = 0; j < k; j++) {
        p[j] = A_malloc(n);
        assert_true(p[j] != NULL);
        memset(p[j], 0xA5, A_usable(p[j]));
      }
      for (int j = 0; j < k; j++) A_free(p[j]);
      for (int j = 0; j < k; j++) {
        p[j] = round == 1 ? A_calloc(n, 1) : A_calloc(1, n);
        assert_true(p[j] != NULL);
        expect_true(kite_owns(p[j]));
        expect_true(A_usable(p[j]) >= n);
        if (!all_zero(p[j], n)) TEST_FAIL_("calloc(%zu) not zeroed (round %d)", n, round);
      }
      for (int j = 0; j < k; j++) A_free(p[j]);
    }
  }
  /* count * size products */
  unsigned char *q = A_calloc(1000, 33);
  assert_true(q != NULL);
  expect_true(all_zero(q, 33000));
  A_free(q);
  /* zero counts give a freeable block (or NULL): glibc gives a unique pointer */
  void *z1 = A_calloc(0, 10), *z2 = A_calloc(10, 0);
  expect_true(z1 != NULL && z2 != NULL && z1 != z2);
  A_free(z1);
  A_free(z2);
}

TEST(calloc_overflow) {
  static const size_t pairs[][2] = {
      {SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {(size_t)1 << 32, (size_t)1 << 32},
      {SIZE_MAX, SIZE_MAX}, {SIZE_MAX, 1}, {1, SIZE_MAX}, {((size_t)1 << 62) + 1, 4},
      {(size_t)PTRDIFF_MAX / 8 + 1, 8}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    errno = 0;
    void *p = A_calloc(test_opaque(pairs[i][0]), test_opaque(pairs[i][1]));
    expect_ptr_eq(p, NULL);
    expect_int_eq(errno, ENOMEM);
  }
}

TEST(too_big) {
  static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 15, (size_t)PTRDIFF_MAX + 1,
                                 (size_t)PTRDIFF_MAX, (size_t)1 << 50, (size_t)1 << 62};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = test_opaque(sizes[i]);
    errno = 0;
    expect_ptr_eq(A_malloc(n), NULL);
    expect_int_eq(errno, ENOMEM);
    errno = 0;
    expect_ptr_eq(A_aligned_alloc(64, n), NULL);
    expect_int_eq(errno, ENOMEM);
    errno = 0;
    expect_ptr_eq(A_memalign(4096, n), NULL);
    expect_int_eq(errno, ENOMEM);
    errno = 0;
    expect_ptr_eq(A_valloc(n), NULL);
    /* LLVM knows valloc as an allocator that leaves errno alone (-fno-builtin-valloc does not
     * reach it) and would fold this read to the 0 stored above: a compiler fence makes it read
     * what kite stored */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    expect_int_eq(errno, ENOMEM);
    errno = 0;
    expect_ptr_eq(A_pvalloc(n), NULL); /* rounding up to a page must not wrap */
    expect_int_eq(errno, ENOMEM);
    void *out = NULL;
    expect_int_eq(A_posix_memalign(&out, 64, n), ENOMEM);
    errno = 0;
    expect_ptr_eq(A_realloc(NULL, n), NULL);
    expect_int_eq(errno, ENOMEM);
    /* a failed realloc leaves the old block alone */
    unsigned char *p = A_malloc(1000);
    assert_true(p != NULL);
    test_fill(p, 1000, i);
    errno = 0;
    expect_ptr_eq(A_realloc_opaque(p, n), NULL);
    expect_int_eq(errno, ENOMEM);
    expect_true(test_verify(p, 1000, i));
    expect_true(kite_owns(p));
    A_free(p);
  }
}

/* One step of a realloc chain: check that the first min(old, new) bytes survived.
 * Blocks up to 2*edge bytes are filled whole with `tag`; larger ones only at the head
 * (`tag`) and the tail (`tag + 1`), see fill_edges. */
static unsigned char *realloc_step(unsigned char *p, size_t old, size_t n, uint64_t tag) {
  const size_t edge = 512 * KiB;
  unsigned char *q = A_realloc(p, n);
  if (!q) {
    TEST_FAIL_("realloc(%zu -> %zu) returned NULL", old, n);
    return p;
  }
  size_t keep = old < n ? old : n;
  int ok;
  if (old <= 2 * edge)
    ok = test_verify(q, keep, tag);
  else
    ok = test_verify(q, keep < edge ? keep : edge, tag) &&
         (keep < old || test_verify(q + old - edge, edge, tag + 1));
  if (ok) TEST_PASS_();
  else TEST_FAIL_("realloc(%zu -> %zu) lost content", old, n);
  expect_true(A_usable(q) >= n);
  expect_uint_eq((uintptr_t)q % natural_align(n), 0);
  fill_edges(q, n, tag + 2, edge);
  return q;
}

TEST(realloc_content) {
  static const size_t chain[] = {1, 7, 16, 17, 48, 100, 512, 1000, 1024, 4096, 8191, 16385,
                                 65536, 100000, 262145, 1 * MiB, 3 * MiB + 1, 17 * MiB,
                                 70 * MiB, 300 * MiB};
  size_t nc = sizeof chain / sizeof chain[0];
  uint64_t tag = 1;
  size_t old = chain[0];
  unsigned char *p = A_malloc(old);
  assert_true(p != NULL);
  test_fill(p, old, tag);
  /* grow through every boundary, then shrink back through them */
  for (size_t i = 1; i < nc; i++) {
    p = realloc_step(p, old, chain[i], tag);
    old = chain[i];
    tag += 2;
  }
  for (size_t i = nc - 1; i-- > 0;) {
    p = realloc_step(p, old, chain[i], tag);
    old = chain[i];
    tag += 2;
  }
  /* jumps across several classes at once */
  static const size_t jumps[] = {5, 2 * MiB, 20, 300 * MiB + 1, 33, 70000, 64 * MiB, 9};
  for (size_t i = 0; i < sizeof jumps / sizeof jumps[0]; i++) {
    p = realloc_step(p, old, jumps[i], tag);
    old = jumps[i];
    tag += 2;
  }
  /* a random walk, mostly small */
  for (int i = 0; i < 2000; i++) {
    uint64_t r = test_rng_below(100);
    size_t n = r < 80 ? 1 + test_rng_below(2048) : r < 97 ? 1 + test_rng_below(128 * KiB)
                                                          : 1 + test_rng_below(4 * MiB);
    p = realloc_step(p, old, n, tag);
    old = n;
    tag += 2;
  }
  /* same size: content kept */
  p = realloc_step(p, old, old, tag);
  A_free(p);
}

/* Small blocks: realloc to a size in (usable / 2, usable] keeps the block (same pointer,
 * content whole); a size past usable or at most half of it moves the block with its first
 * min(old, new) bytes; the same from a thread that does not own the block's page. */
static void realloc_small_contract(void) {
  static const size_t sizes[] = {1,    16,   17,   100,  128,  129,   1000,
                                 1024, 1025, 4000, 8192, 9000, 40000, 65536};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *p = A_malloc(n);
    assert_true(p != NULL);
    size_t u = A_usable(p);
    test_fill(p, u, 7 + k);
    expect_ptr_eq(A_realloc_opaque(p, u), p); /* opaque: gcc must not see a realloc here */
    expect_ptr_eq(A_realloc_opaque(p, u / 2 + 1), p);
    expect_true(test_verify(p, u, 7 + k));
    uintptr_t old = (uintptr_t)p;
    unsigned char *q = A_realloc(p, u + 1); /* moves */
    assert_true(q != NULL);
    expect_true((uintptr_t)q != old);
    expect_true(A_usable(q) >= u + 1);
    expect_true(test_verify(q, u, 7 + k));
    if (u >= 32) {
      unsigned char *r = A_realloc(q, u / 2); /* at most half: moves to a smaller block */
      assert_true(r != NULL);
      expect_true(A_usable(r) < u);
      expect_true(test_verify(r, u / 2, 7 + k));
      q = r;
    }
    A_free(q);
  }
}
static void *realloc_contract_in_thread(void *arg) {
  (void)arg;
  realloc_small_contract();
  return NULL;
}
/* a block allocated by another thread, grown by small steps here (a vector): content kept */
static void *malloc_in_thread(void *arg) { return A_malloc((size_t)(uintptr_t)arg); }
TEST(realloc_small_in_place) {
  realloc_small_contract();
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, realloc_contract_in_thread, NULL), 0);
  pthread_join(t, NULL);
  void *got = NULL;
  assert_int_eq(pthread_create(&t, NULL, malloc_in_thread, (void *)(uintptr_t)40), 0);
  pthread_join(t, &got);
  uint32_t *v = got;
  assert_true(v != NULL);
  size_t len = 10;
  for (size_t i = 0; i < len; i++) v[i] = (uint32_t)(i * 2654435761u);
  while (len < 20000) {
    size_t add = 1 + test_rng_below(16);
    uint32_t *w = A_realloc(v, (len + add) * sizeof *v);
    assert_true(w != NULL);
    v = w;
    for (size_t i = len; i < len + add; i++) v[i] = (uint32_t)(i * 2654435761u);
    len += add;
  }
  size_t bad = 0;
  for (size_t i = 0; i < len; i++) bad += v[i] != (uint32_t)(i * 2654435761u);
  expect_uint_eq(bad, 0);
  A_free(v);
}

TEST(realloc_null_and_zero) {
  unsigned char *p = A_realloc(NULL, 100);
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  expect_true(A_usable(p) >= 100);
  test_fill(p, 100, 3);
  expect_true(test_verify(p, 100, 3));
  expect_ptr_eq(A_realloc(p, 0), NULL); /* frees p */

  /* If realloc(p, 0) did not free, these would leak ~400 MiB. */
  size_t before = test_rss_bytes();
  for (int i = 0; i < 100000; i++) {
    void *q = A_malloc(2000 + (size_t)(i & 7) * 16);
    if (!q) { TEST_FAIL_("malloc failed at %d", i); return; }
    memset(q, 1, 64);
    if (A_realloc(q, 0) != NULL) { TEST_FAIL_("realloc(p, 0) != NULL at %d", i); return; }
  }
  for (int i = 0; i < 200; i++) {
    void *q = A_malloc(1 * MiB);
    if (!q) { TEST_FAIL_("malloc(1 MiB) failed at %d", i); return; }
    memset(q, 1, 1 * MiB);
    if (A_realloc(q, 0) != NULL) { TEST_FAIL_("realloc(p, 0) != NULL at %d", i); return; }
  }
  size_t after = test_rss_bytes();
  if (after > before + 64 * MiB)
    TEST_FAIL_("realloc(p, 0) leaks: RSS %zu -> %zu", before, after);
  else
    TEST_PASS_();
}

TEST(reallocarray) {
  unsigned char *p = A_reallocarray(NULL, 10, 10);
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  test_fill(p, 100, 9);
  p = A_reallocarray(p, 1000, 10);
  assert_true(p != NULL);
  expect_true(test_verify(p, 100, 9));
  expect_true(A_usable(p) >= 10000);
  test_fill(p, 10000, 11);
  static const size_t pairs[][2] = {{SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 33, (size_t)1 << 31},
                                    {SIZE_MAX, SIZE_MAX}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    errno = 0;
    expect_ptr_eq(A_reallocarray_opaque(p, test_opaque(pairs[i][0]), test_opaque(pairs[i][1])), NULL);
    expect_int_eq(errno, ENOMEM);
    expect_true(test_verify(p, 10000, 11)); /* untouched by the failure */
  }
  p = A_reallocarray_opaque(p, 3, 7);
  assert_true(p != NULL);
  expect_true(test_verify(p, 21, 11));
  A_free(p);
}

/* Every power-of-two alignment from 1 to 1 GiB, through each aligned entry point. */
TEST(aligned_all_powers) {
  for (int k = 0; k <= 30; k++) {
    size_t a = (size_t)1 << k;
    size_t sizes[4] = {1, 24, a, a + 1};
    int nsizes = a <= 64 * MiB ? 4 : 2; /* beyond, a block of `a` bytes is checked elsewhere */
    for (int s = 0; s < nsizes; s++) {
      size_t n = sizes[s];
      errno = 0;
      check_block_and_free(A_aligned_alloc(a, n), n, a, (uint64_t)k * 8 + s);
      check_block_and_free(A_memalign(a, n), n, a, (uint64_t)k * 8 + s + 1);
      if (a >= sizeof(void *)) {
        void *out = NULL;
        expect_int_eq(A_posix_memalign(&out, a, n), 0);
        check_block_and_free(out, n, a, (uint64_t)k * 8 + s + 2);
      }
    }
  }
  /* 1 GiB aligned, 1 GiB large: touch both ends only */
  void *out = NULL;
  expect_int_eq(A_posix_memalign(&out, 1 * GiB, 1 * GiB), 0);
  check_block_and_free(out, 1 * GiB, 1 * GiB, 99);
}

/* Several live aligned blocks at once: all aligned, none overlapping. */
TEST(aligned_many_live) {
  enum { N = 24 };
  for (size_t a = 32; a <= 4 * MiB; a *= 2) {
    unsigned char *p[N];
    size_t n[N];
    for (int i = 0; i < N; i++) {
      n[i] = 1 + test_rng_below(a < 64 * KiB ? 3 * a : a + 100);
      p[i] = i % 2 ? A_aligned_alloc(a, n[i]) : A_memalign(a, n[i]);
      assert_true(p[i] != NULL);
      expect_uint_eq((uintptr_t)p[i] % a, 0);
      test_fill(p[i], n[i], (uint64_t)i + a);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) bad += !test_verify(p[i], n[i], (uint64_t)i + a);
    expect_int_eq(bad, 0);
    for (int i = 0; i < N; i++) A_free(p[i]);
  }
}

/* Big alignments must not cost big resident memory: 16 live 1 GiB-aligned small blocks,
 * and 64 live 16 MiB-aligned ones. */
TEST(aligned_no_waste) {
  if (test_emulator_lacks("aligned_no_waste", TEST_EMU_OWN_RSS)) return;
  size_t before = test_rss_bytes();
  enum { N = 16, M = 64 };
  void *p[N], *q[M];
  for (int i = 0; i < N; i++) {
    p[i] = A_aligned_alloc(1 * GiB, 64);
    assert_true(p[i] != NULL);
    expect_uint_eq((uintptr_t)p[i] % GiB, 0);
    memset(p[i], 0x5A, 64);
  }
  for (int i = 0; i < M; i++) {
    q[i] = A_memalign(16 * MiB, 4096);
    assert_true(q[i] != NULL);
    expect_uint_eq((uintptr_t)q[i] % (16 * MiB), 0);
    memset(q[i], 0x5A, 4096);
  }
  size_t during = test_rss_bytes();
  if (during > before + 64 * MiB)
    TEST_FAIL_("aligned blocks cost RSS %zu -> %zu", before, during);
  else
    TEST_PASS_();
  for (int i = 0; i < N; i++) A_free(p[i]);
  for (int i = 0; i < M; i++) A_free(q[i]);
}

/* Enough live large and big-aligned blocks to need many arenas: all distinct, owned, intact;
 * twice, so the second round runs on recycled arenas. */
TEST(many_arenas) {
  enum { N = 600 };
  static unsigned char *p[N];
  static size_t len[N];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      len[i] = i % 50 == 7 ? 16 * MiB : i % 3 ? 1 * MiB + (size_t)i * 100 : 200000;
      p[i] = i % 50 == 7 ? A_memalign(16 * MiB, len[i]) : A_malloc(len[i]);
      assert_true(p[i] != NULL);
      expect_true(kite_owns(p[i]));
      fill_edges(p[i], len[i], (uint64_t)i + (uint64_t)round, 4096);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
      bad += !verify_edges(p[i], len[i], (uint64_t)i + (uint64_t)round, 4096);
      bad += A_usable(p[i]) < len[i];
    }
    expect_int_eq(bad, 0);
    for (int i = 0; i < N; i++) A_free(p[i]);
  }
}

/* realloc of aligned blocks (any alignment, also from huge maps) keeps the content. */
TEST(realloc_aligned) {
  static const size_t aligns[] = {64, 4096, 65536, 1 * MiB, 32 * MiB, 1 * GiB};
  static const size_t sizes[] = {100, 70000, 3 * MiB, 40 * MiB, 5000, 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    size_t old = 1000;
    unsigned char *p = A_aligned_alloc(aligns[i], old);
    assert_true(p != NULL);
    expect_uint_eq((uintptr_t)p % aligns[i], 0);
    test_fill(p, old, i);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      unsigned char *q = A_realloc(p, n);
      assert_true(q != NULL);
      size_t keep = old < n ? old : n;
      if (!test_verify(q, keep, i + k)) TEST_FAIL_("realloc of a %zu-aligned block (%zu -> %zu) lost content", aligns[i], old, n);
      else TEST_PASS_();
      size_t fill = n < 1 * MiB ? n : 1 * MiB;
      test_fill(q, fill, i + k + 1);
      p = q;
      old = fill;
    }
    A_free(p);
  }
}

TEST(aligned_invalid) {
  static const size_t bad[] = {0, 3, 5, 6, 12, 24, 48, 100, 1000, 4097, 3 * MiB,
                               SIZE_MAX, SIZE_MAX / 2, ((size_t)1 << 40) + 1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t a = test_opaque(bad[i]);
    errno = 0;
    expect_ptr_eq(A_aligned_alloc(a, 64), NULL);
    expect_int_eq(errno, EINVAL);
    errno = 0;
    expect_ptr_eq(A_memalign(a, 64), NULL);
    expect_int_eq(errno, EINVAL);
    void *out = (void *)&global_object;
    errno = 1234;
    expect_int_eq(A_posix_memalign(&out, a, 64), EINVAL);
    expect_int_eq(errno, 1234); /* posix_memalign reports through its result only */
  }
  /* powers of two below sizeof(void *) are valid for aligned_alloc/memalign only */
  for (size_t a = 1; a < sizeof(void *); a *= 2) {
    void *out = NULL;
    errno = 1234;
    expect_int_eq(A_posix_memalign(&out, test_opaque(a), 64), EINVAL);
    expect_int_eq(errno, 1234);
  }
  /* a valid alignment that cannot be satisfied is ENOMEM, not EINVAL */
  errno = 0;
  expect_ptr_eq(A_aligned_alloc(test_opaque((size_t)1 << 62), 64), NULL);
  expect_int_eq(errno, ENOMEM);
}

TEST(valloc_pvalloc) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 10000, 70000, 1 * MiB + 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    check_block_and_free(A_valloc(n), n, page, i);
    size_t rounded = (n + page - 1) / page * page;
    check_block_and_free(A_pvalloc(n), rounded, page, i + 100);
  }
  void *p = A_pvalloc(0);
  assert_true(p != NULL);
  expect_uint_eq((uintptr_t)p % page, 0);
  A_free(p);
}

TEST(usable_size) {
  for (size_t n = 1; n < 20 * MiB; n = n + n / 5 + 1) {
    unsigned char *p = A_malloc(n);
    assert_true(p != NULL);
    size_t us = A_usable(p);
    expect_true(us >= n);
    /* stable while the block lives, and the whole usable size is the caller's */
    fill_edges(p, us, n, 64 * KiB);
    expect_uint_eq(A_usable(p), us);
    expect_true(verify_edges(p, us, n, 64 * KiB));
    /* bounded waste for small and medium blocks (design: <= 12.5% above 64 bytes) */
    if (n > 64 && n <= 64 * KiB && us > n + n / 8 + 16)
      TEST_FAIL_("usable size %zu for %zu: more than 12.5%% waste", us, n);
    A_free(p);
  }
  expect_int_eq(A_trim(0) >= 0, 1);
}

/* Freed memory goes back to the OS at the latest on malloc_trim(0). */
TEST(trim_returns_memory) {
  enum { N = 160 };
  void *p[N];
  A_trim(0);
  size_t base = test_rss_bytes();
  for (int i = 0; i < N; i++) {
    p[i] = i % 2 ? A_malloc(1 * MiB) : A_malloc(1000 + (size_t)i);
    assert_true(p[i] != NULL);
    memset(p[i], 0x77, i % 2 ? 1 * MiB : 1000);
  }
  /* plus 40 MiB of small blocks, freed again */
  enum { M = 40960 };
  static void *q[M];
  for (int i = 0; i < M; i++) {
    q[i] = A_malloc(1000);
    assert_true(q[i] != NULL);
    memset(q[i], 0x66, 1000);
  }
  size_t peak = test_rss_bytes();
  for (int i = 0; i < M; i++) A_free(q[i]);
  for (int i = 0; i < N; i++) A_free(p[i]);
  A_trim(0);
  size_t after = test_rss_bytes();
  fprintf(stderr, "trim: RSS %zu -> %zu -> %zu KiB\n", base >> 10, peak >> 10, after >> 10);
  expect_true(peak >= base + 80 * MiB); /* the memory was really touched */
  if (after > base + 16 * MiB) TEST_FAIL_("malloc_trim(0) kept %zu KiB", (after - base) >> 10);
  else TEST_PASS_();
}

/* Read what fn() writes to file descriptor 2 (through a pipe; small outputs only). */
static size_t capture_fd2(void (*fn)(void), char *buf, size_t cap) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  fflush(stderr);
  int saved = dup(2);
  dup2(fds[1], 2);
  close(fds[1]);
  fn();
  dup2(saved, 2);
  close(saved);
  size_t len = 0;
  ssize_t n;
  while (len + 1 < cap && (n = read(fds[0], buf + len, cap - 1 - len)) > 0) len += (size_t)n;
  buf[len] = 0;
  close(fds[0]);
  return len;
}

/* Sum of the numbers after "<what>: " on a line of kite's statistics (-1 if absent). */
static long stats_count(const char *text, const char *what) {
  const char *at = strstr(text, what);
  if (!at) return -1;
  return strtol(at + strlen(what), NULL, 10);
}

static void print_stats_fd2(void) { kite_stats_print(2); }

TEST(stats_print) {
  char before[8192], after[8192];
  capture_fd2(print_stats_fd2, before, sizeof before);
  void *large = A_malloc(300000), *huge = A_malloc(40 * MiB);
  assert_true(large != NULL && huge != NULL);
  capture_fd2(print_stats_fd2, after, sizeof after);
  A_free(large);
  A_free(huge);
  expect_true(strstr(after, "kite statistics") != NULL);
  /* what the summary promises: allocations by size class, peak committed, remote frees */
  expect_true(strstr(after, "small allocations: ") != NULL);
  expect_true(strstr(after, "peak committed: ") != NULL);
  expect_true(strstr(after, "remote frees: ") != NULL);
  expect_true(strstr(after, "invalid frees: ") != NULL);
  long l0 = stats_count(before, "large allocations: "), l1 = stats_count(after, "large allocations: ");
  long h0 = stats_count(before, "huge allocations: "), h1 = stats_count(after, "huge allocations: ");
  if (l0 < 0 || l1 < 0 || h0 < 0 || h1 < 0) TEST_FAIL_("statistics lack the allocation counts:\n%s", after);
  else TEST_PASS_();
  expect_int_eq(l1 - l0, 1);
  expect_int_eq(h1 - h0, 1);
}

#ifdef KITE_TEST_PLAIN
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* glibc's internal names, which some programs call, are kite's too. */
TEST(libc_names) {
  unsigned char *p = __libc_malloc(100);
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  test_fill(p, 100, 4);
  p = __libc_realloc(p, 5000);
  assert_true(p != NULL);
  expect_true(kite_owns(p));
  expect_true(test_verify(p, 100, 4));
  __libc_free(p);
  unsigned char *z = __libc_calloc(10, 10);
  assert_true(z != NULL);
  expect_true(kite_owns(z) && all_zero(z, 100));
  free(z);
  void *a = __libc_memalign(4096, 10);
  assert_true(a != NULL);
  expect_true(kite_owns(a));
  expect_uint_eq((uintptr_t)a % 4096, 0);
  free(a);
}

/* C23's free_sized and free_aligned_sized (not declared by this C library's headers) are
 * kite's: a program built against a library that has them frees kite blocks with them. */
extern void free_sized(void *, size_t);
extern void free_aligned_sized(void *, size_t, size_t);
TEST(c23_sized_frees) {
  unsigned char *p = malloc(200);
  assert_true(p != NULL);
  test_fill(p, 200, 9);
  unsigned char *q = malloc(200); /* a live neighbour: must keep its bytes */
  assert_true(q != NULL);
  test_fill(q, 200, 10);
  free_sized(p, 200);
  expect_true(!kite_owns(p)); /* freed by kite: no longer a live block */
  expect_true(test_verify(q, 200, 10));
  void *a = aligned_alloc(256, 512);
  assert_true(a != NULL);
  expect_true(kite_owns(a));
  free_aligned_sized(a, 256, 512);
  expect_true(!kite_owns(a));
  free_sized(NULL, 0); /* as free(NULL) */
  void *big = malloc(3 * MiB);
  assert_true(big != NULL);
  free_sized(big, 3 * MiB);
  expect_true(!kite_owns(big));
  free(q);
}

static void call_malloc_stats(void) { malloc_stats(); }

TEST(mallinfo_and_stats) {
  void *big = malloc(8 * MiB);
  assert_true(big != NULL);
  memset(big, 1, 8 * MiB);
#ifdef __GLIBC__ /* (musl has no mallinfo2) */
  struct mallinfo2 mi = mallinfo2();
  expect_true(mi.arena >= 8 * MiB || mi.hblkhd >= 8 * MiB); /* kite's numbers, not glibc's */
  expect_true(mi.uordblks + mi.hblkhd >= 8 * MiB);
#endif
  free(big);
  char out[8192];
  capture_fd2(call_malloc_stats, out, sizeof out);
  expect_true(strstr(out, "kite statistics") != NULL);
}

/* With the override, memory that libc allocates internally is kite's too. */
TEST(libc_internal_blocks) {
  char *s = strdup("kite strdup");
  assert_true(s != NULL);
  expect_true(kite_owns(s));
  expect_str_eq(s, "kite strdup");
  free(s);
  char *a = NULL;
  expect_int_eq(asprintf(&a, "%d-%s", 42, "x"), 4);
  assert_true(a != NULL);
  expect_true(kite_owns(a));
  expect_str_eq(a, "42-x");
  free(a);
}
#endif

int main(void) {
  test_rng_init(0x6b697465ull);
  fprintf(stderr, "variant: %s\n", A_VARIANT);
  RUN_CHECKED(malloc_sizes);
  RUN_CHECKED(malloc_many_live);
  RUN_CHECKED(malloc_zero);
  RUN_CHECKED(free_null);
  RUN_CHECKED(free_sized);
  RUN_CHECKED(owns_foreign);
  RUN_CHECKED(owns_other_thread);
  RUN_CHECKED(calloc_zeroes);
  RUN_CHECKED(calloc_overflow);
  RUN_CHECKED(too_big);
  RUN_CHECKED(realloc_content);
  RUN_CHECKED(realloc_small_in_place);
  RUN_CHECKED(realloc_null_and_zero);
  RUN_CHECKED(reallocarray);
  RUN_CHECKED(aligned_all_powers);
  RUN_CHECKED(aligned_many_live);
  RUN_CHECKED(aligned_no_waste);
  RUN_CHECKED(realloc_aligned);
  RUN_CHECKED(many_arenas);
  RUN_CHECKED(aligned_invalid);
  RUN_CHECKED(valloc_pvalloc);
  RUN_CHECKED(usable_size);
  RUN_CHECKED(trim_returns_memory);
  RUN_CHECKED(stats_print);
#ifdef KITE_TEST_PLAIN
  RUN_CHECKED(libc_internal_blocks);
  RUN_CHECKED(libc_names);
  RUN_CHECKED(c23_sized_frees);
  RUN_CHECKED(mallinfo_and_stats);
#endif
  return test_main_end();
}
