/* tests/unit/test_buddy.c -- unit tests of the buddy page heap: every operation and every
 * error code of include/kite/buddy.h, odd range sizes, reserved holes, coalescing.
 * The randomized comparison against a reference model lives in test_buddy_model.c. */
#include "kite/buddy.h"

#include <stdbool.h>
#include <stdlib.h>

#include "test.h"
#include "bits.h" /* src/: _kite_popcount64, which the heap's counters (I4) rest on */

/* A heap over `units` units in freshly allocated, 16-byte aligned metadata. */
typedef struct {
  void *meta;
  kite_buddy_t *b;
} heap_t;

static heap_t heap_new(uint64_t units) {
  heap_t h = {0};
  size_t sz = kite_buddy_meta_size(units);
  if (sz == 0) return h;
  h.meta = aligned_alloc(16, (sz + 15) & ~(size_t)15);
  if (h.meta && kite_buddy_init(&h.b, h.meta, sz, units) != 0) h.b = NULL;
  return h;
}
static void heap_del(heap_t *h) { free(h->meta); h->meta = NULL; h->b = NULL; }

/* nr_free of a completely free heap: one block per binary digit of units. */
static void expect_all_free(kite_buddy_t *b) {
  uint64_t n = kite_buddy_units(b);
  expect_uint_eq(kite_buddy_free_units(b), n);
  for (unsigned k = 0; k <= KITE_BUDDY_MAX_ORDER; k++)
    expect_uint_eq(kite_buddy_free_blocks(b, k), (n >> k) & 1);
  expect_int_eq(kite_buddy_largest_free_order(b), 63 - __builtin_clzll(n));
  expect_int_eq(kite_buddy_check(b), 0);
}

TEST(meta_size) {
  expect_uint_eq(kite_buddy_meta_size(0), 0);
  expect_uint_eq(kite_buddy_meta_size(KITE_BUDDY_MAX_UNITS + 1), 0);
  expect_true(kite_buddy_meta_size(1) > 0);
  expect_true(kite_buddy_meta_size(KITE_BUDDY_MAX_UNITS) > 0);
  /* at most one byte per unit (plus the fixed header), also just past a power of two */
  size_t hdr = kite_buddy_meta_size(1);
  uint64_t sizes[] = {2, 3, 64, 1000, 4097, (1u << 20) + 1, (uint64_t)1 << 30,
                      ((uint64_t)1 << 33) + 1};
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t m = kite_buddy_meta_size(sizes[i]);
    expect_true(m <= hdr + sizes[i]);
    expect_true(m >= kite_buddy_meta_size(sizes[i] - 1));
  }
  /* 1 GiB of 4 KiB pages: about 3/4 byte per unit */
  expect_true(kite_buddy_meta_size(1u << 18) <= hdr + (3u << 18) / 4 + 64);
}

TEST(init_errors) {
  static _Alignas(16) unsigned char meta[8192];
  kite_buddy_t *b = NULL;
  size_t sz = kite_buddy_meta_size(100);
  assert_true(sz <= sizeof meta);
  expect_int_eq(kite_buddy_init(NULL, meta, sz, 100), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_init(&b, NULL, sz, 100), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_init(&b, meta + 8, sz, 100), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_init(&b, meta, sz - 1, 100), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_init(&b, meta, sz, 0), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_init(&b, meta, sizeof meta, KITE_BUDDY_MAX_UNITS + 1),
                KITE_BUDDY_EINVAL);
  expect_ptr_eq(b, NULL);
  expect_int_eq(kite_buddy_init(&b, meta, sz, 100), 0);
  assert_true(b != NULL);
  expect_true((unsigned char *)b >= meta && (unsigned char *)b < meta + sz);
  expect_uint_eq(kite_buddy_units(b), 100);
  expect_all_free(b);
}

TEST(null_args) {
  uint64_t idx;
  expect_int_eq(kite_buddy_alloc(NULL, 0, &idx), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_free(NULL, 0, NULL), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_block_order(NULL, 0), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_reserve(NULL, 0, 1), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_unreserve(NULL, 0, 1), KITE_BUDDY_EINVAL);
  expect_uint_eq(kite_buddy_units(NULL), 0);
  expect_uint_eq(kite_buddy_free_units(NULL), 0);
  expect_uint_eq(kite_buddy_free_blocks(NULL, 0), 0);
  expect_int_eq(kite_buddy_largest_free_order(NULL), -1);
  expect_true(kite_buddy_check(NULL) < 0);
  heap_t h = heap_new(8);
  assert_true(h.b != NULL);
  expect_int_eq(kite_buddy_alloc(h.b, 0, NULL), KITE_BUDDY_EINVAL);
  expect_uint_eq(kite_buddy_free_units(h.b), 8);
  heap_del(&h);
}

TEST(sequential_order0) {
  /* 1000 units: every unit handed out in order, then ENOMEM; freeing all coalesces fully */
  heap_t h = heap_new(1000);
  assert_true(h.b != NULL);
  uint64_t idx = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    assert_int_eq(kite_buddy_alloc(h.b, 0, &idx), 0);
    assert_uint_eq(idx, i);
  }
  expect_uint_eq(kite_buddy_free_units(h.b), 0);
  expect_int_eq(kite_buddy_largest_free_order(h.b), -1);
  expect_int_eq(kite_buddy_alloc(h.b, 0, &idx), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* free in an interleaved order: odd indices first, then even */
  for (uint64_t i = 1; i < 1000; i += 2) {
    unsigned o = 99;
    assert_int_eq(kite_buddy_free(h.b, i, &o), 0);
    assert_uint_eq(o, 0);
  }
  expect_uint_eq(kite_buddy_free_blocks(h.b, 0), 500);
  expect_int_eq(kite_buddy_check(h.b), 0);
  for (uint64_t i = 0; i < 1000; i += 2) assert_int_eq(kite_buddy_free(h.b, i, NULL), 0);
  expect_all_free(h.b);
  heap_del(&h);
}

TEST(lowest_address_mixed_orders) {
  heap_t h = heap_new(16);
  assert_true(h.b != NULL);
  kite_buddy_t *b = h.b;
  uint64_t i;
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 0);
  expect_int_eq(kite_buddy_alloc(b, 1, &i), 0); expect_uint_eq(i, 2);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 1);
  expect_int_eq(kite_buddy_alloc(b, 3, &i), 0); expect_uint_eq(i, 8);
  expect_int_eq(kite_buddy_alloc(b, 2, &i), 0); expect_uint_eq(i, 4);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_check(b), 0);
  /* free the order-1 block at 2: the hole is reused at once, lowest first */
  expect_int_eq(kite_buddy_block_order(b, 2), 1);
  expect_int_eq(kite_buddy_block_order(b, 8), 3);
  expect_int_eq(kite_buddy_block_order(b, 4), 2);
  unsigned o;
  expect_int_eq(kite_buddy_free(b, 2, &o), 0); expect_uint_eq(o, 1);
  expect_uint_eq(kite_buddy_free_blocks(b, 1), 1);
  expect_int_eq(kite_buddy_largest_free_order(b), 1);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 2);
  expect_uint_eq(kite_buddy_free_blocks(b, 0), 1);
  expect_uint_eq(kite_buddy_free_blocks(b, 1), 0);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 3);
  expect_int_eq(kite_buddy_check(b), 0);
  for (uint64_t s = 0; s < 4; s++) expect_int_eq(kite_buddy_free(b, s, NULL), 0);
  expect_int_eq(kite_buddy_free(b, 4, &o), 0); expect_uint_eq(o, 2);
  expect_int_eq(kite_buddy_free(b, 8, &o), 0); expect_uint_eq(o, 3);
  expect_all_free(b);
  heap_del(&h);
}

TEST(split_counts) {
  /* one order-0 allocation from a free block of order 10 leaves one block of each order 0..9 */
  heap_t h = heap_new(1024);
  assert_true(h.b != NULL);
  uint64_t i;
  expect_int_eq(kite_buddy_alloc(h.b, 0, &i), 0);
  expect_uint_eq(i, 0);
  for (unsigned k = 0; k < 10; k++) expect_uint_eq(kite_buddy_free_blocks(h.b, k), 1);
  expect_uint_eq(kite_buddy_free_blocks(h.b, 10), 0);
  expect_uint_eq(kite_buddy_free_units(h.b), 1023);
  expect_int_eq(kite_buddy_largest_free_order(h.b), 9);
  expect_int_eq(kite_buddy_check(h.b), 0);
  expect_int_eq(kite_buddy_free(h.b, 0, NULL), 0);
  expect_all_free(h.b);
  heap_del(&h);
}

TEST(order_errors) {
  heap_t h = heap_new(5); /* max order 2 */
  assert_true(h.b != NULL);
  uint64_t i = 77;
  expect_int_eq(kite_buddy_alloc(h.b, 3, &i), KITE_BUDDY_EORDER);
  expect_int_eq(kite_buddy_alloc(h.b, KITE_BUDDY_MAX_ORDER + 1, &i), KITE_BUDDY_EORDER);
  expect_int_eq(kite_buddy_alloc(h.b, 1000, &i), KITE_BUDDY_EORDER);
  expect_uint_eq(i, 77);
  expect_int_eq(kite_buddy_alloc(h.b, 2, &i), 0); expect_uint_eq(i, 0);
  /* only unit 4 is left: order 1 has no room although 1 unit is free */
  expect_int_eq(kite_buddy_alloc(h.b, 1, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_alloc(h.b, 2, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_alloc(h.b, 0, &i), 0); expect_uint_eq(i, 4);
  expect_int_eq(kite_buddy_alloc(h.b, 0, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_check(h.b), 0);
  heap_del(&h);
}

TEST(free_errors) {
  heap_t h = heap_new(64);
  assert_true(h.b != NULL);
  kite_buddy_t *b = h.b;
  uint64_t i;
  assert_int_eq(kite_buddy_alloc(b, 3, &i), 0); /* [0, 8) */
  assert_uint_eq(i, 0);
  assert_int_eq(kite_buddy_reserve(b, 32, 5), 0); /* hole [32, 37) */
  uint64_t free_before = kite_buddy_free_units(b);
  expect_uint_eq(free_before, 64 - 8 - 5);
  unsigned o = 123;
  expect_int_eq(kite_buddy_free(b, 64, &o), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_free(b, UINT64_MAX, &o), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_free(b, 3, &o), KITE_BUDDY_ENOTSTART);
  expect_int_eq(kite_buddy_free(b, 7, &o), KITE_BUDDY_ENOTSTART);
  expect_int_eq(kite_buddy_free(b, 8, &o), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_free(b, 63, &o), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_free(b, 32, &o), KITE_BUDDY_ERESERVED);
  expect_int_eq(kite_buddy_free(b, 36, &o), KITE_BUDDY_ERESERVED);
  expect_int_eq(kite_buddy_free(b, 37, &o), KITE_BUDDY_EFREE);
  expect_uint_eq(o, 123);
  expect_int_eq(kite_buddy_block_order(b, 3), KITE_BUDDY_ENOTSTART);
  expect_int_eq(kite_buddy_block_order(b, 8), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_block_order(b, 33), KITE_BUDDY_ERESERVED);
  expect_int_eq(kite_buddy_block_order(b, 64), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_block_order(b, 0), 3);
  /* nothing changed */
  expect_uint_eq(kite_buddy_free_units(b), free_before);
  expect_int_eq(kite_buddy_check(b), 0);
  expect_int_eq(kite_buddy_free(b, 0, &o), 0);
  expect_uint_eq(o, 3);
  /* double free */
  expect_int_eq(kite_buddy_free(b, 0, &o), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_block_order(b, 0), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_unreserve(b, 32, 5), 0);
  expect_all_free(b);
  heap_del(&h);
}

TEST(reserve_holes) {
  heap_t h = heap_new(32);
  assert_true(h.b != NULL);
  kite_buddy_t *b = h.b;
  uint64_t i;
  /* a memory map: [0,3) and [9,17) are holes */
  expect_int_eq(kite_buddy_reserve(b, 0, 3), 0);
  expect_int_eq(kite_buddy_reserve(b, 9, 8), 0);
  expect_uint_eq(kite_buddy_free_units(b), 32 - 11);
  expect_int_eq(kite_buddy_check(b), 0);
  /* free blocks: [3,4) o0, [4,8) o2, [8,9) o0, [17,18) o0, [18,20) o1, [20,24) o2,
   * [24,32) o3 */
  expect_uint_eq(kite_buddy_free_blocks(b, 0), 3);
  expect_uint_eq(kite_buddy_free_blocks(b, 1), 1);
  expect_uint_eq(kite_buddy_free_blocks(b, 2), 2);
  expect_uint_eq(kite_buddy_free_blocks(b, 3), 1);
  expect_uint_eq(kite_buddy_free_blocks(b, 4), 0);
  expect_int_eq(kite_buddy_largest_free_order(b), 3);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 3);
  expect_int_eq(kite_buddy_alloc(b, 3, &i), 0); expect_uint_eq(i, 24);
  expect_int_eq(kite_buddy_alloc(b, 3, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_alloc(b, 2, &i), 0); expect_uint_eq(i, 4);
  expect_int_eq(kite_buddy_alloc(b, 1, &i), 0); expect_uint_eq(i, 18);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 8);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 17);
  expect_int_eq(kite_buddy_check(b), 0);
  /* reserve: overlaps an allocation -> EBUSY, unchanged */
  uint64_t fu = kite_buddy_free_units(b);
  expect_int_eq(kite_buddy_reserve(b, 20, 6), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_reserve(b, 8, 1), KITE_BUDDY_EBUSY);
  expect_uint_eq(kite_buddy_free_units(b), fu);
  /* reserve over free + already reserved parts is fine */
  expect_int_eq(kite_buddy_free(b, 17, NULL), 0);
  expect_int_eq(kite_buddy_free(b, 18, NULL), 0);
  expect_uint_eq(kite_buddy_free_units(b), 7); /* [17, 24) */
  expect_int_eq(kite_buddy_reserve(b, 12, 10), 0); /* [12,17) reserved, [17,22) free */
  expect_uint_eq(kite_buddy_free_units(b), 2);
  expect_int_eq(kite_buddy_reserve(b, 12, 10), 0); /* twice: no change */
  expect_uint_eq(kite_buddy_free_units(b), 2);
  expect_uint_eq(kite_buddy_free_blocks(b, 1), 1);
  expect_int_eq(kite_buddy_check(b), 0);
  expect_int_eq(kite_buddy_alloc(b, 1, &i), 0); expect_uint_eq(i, 22);
  /* range errors */
  expect_int_eq(kite_buddy_reserve(b, 33, 0), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_reserve(b, 30, 3), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_reserve(b, 1, UINT64_MAX), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_unreserve(b, 31, 2), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_reserve(b, 32, 0), 0);
  expect_int_eq(kite_buddy_unreserve(b, 5, 0), 0);
  /* unreserve: every unit must be reserved */
  expect_int_eq(kite_buddy_unreserve(b, 0, 4), KITE_BUDDY_EBUSY);  /* 3 is allocated */
  expect_int_eq(kite_buddy_unreserve(b, 9, 14), KITE_BUDDY_EBUSY); /* 22 is allocated */
  expect_int_eq(kite_buddy_unreserve(b, 21, 2), KITE_BUDDY_EBUSY); /* 22 is allocated */
  expect_int_eq(kite_buddy_unreserve(b, 7, 3), KITE_BUDDY_EBUSY);  /* 7, 8 allocated */
  expect_int_eq(kite_buddy_check(b), 0);
  /* partial unreserve of a reserved block splits it */
  expect_int_eq(kite_buddy_unreserve(b, 1, 1), 0);
  expect_int_eq(kite_buddy_free(b, 1, NULL), KITE_BUDDY_EFREE);
  expect_int_eq(kite_buddy_free(b, 0, NULL), KITE_BUDDY_ERESERVED);
  expect_int_eq(kite_buddy_free(b, 2, NULL), KITE_BUDDY_ERESERVED);
  expect_int_eq(kite_buddy_alloc(b, 0, &i), 0); expect_uint_eq(i, 1);
  expect_int_eq(kite_buddy_check(b), 0);
  /* free everything, unreserve every hole: full coalescing */
  uint64_t live[] = {1, 3, 24, 4, 8, 22};
  for (unsigned k = 0; k < 6; k++) expect_int_eq(kite_buddy_free(b, live[k], NULL), 0);
  expect_int_eq(kite_buddy_unreserve(b, 0, 1), 0);
  expect_int_eq(kite_buddy_unreserve(b, 2, 1), 0);
  expect_int_eq(kite_buddy_unreserve(b, 9, 13), 0);
  expect_all_free(b);
  heap_del(&h);
}

TEST(reserve_everything) {
  heap_t h = heap_new(97);
  assert_true(h.b != NULL);
  uint64_t i;
  expect_int_eq(kite_buddy_reserve(h.b, 0, 97), 0);
  expect_uint_eq(kite_buddy_free_units(h.b), 0);
  expect_int_eq(kite_buddy_largest_free_order(h.b), -1);
  expect_int_eq(kite_buddy_alloc(h.b, 0, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* punch holes one unit at a time, then give back the rest */
  for (uint64_t u = 10; u < 90; u += 7) expect_int_eq(kite_buddy_unreserve(h.b, u, 1), 0);
  expect_uint_eq(kite_buddy_free_units(h.b), 12);
  expect_uint_eq(kite_buddy_free_blocks(h.b, 0), 12);
  expect_int_eq(kite_buddy_check(h.b), 0);
  expect_int_eq(kite_buddy_unreserve(h.b, 0, 97), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_reserve(h.b, 0, 97), 0);
  expect_uint_eq(kite_buddy_free_units(h.b), 0);
  expect_int_eq(kite_buddy_check(h.b), 0);
  expect_int_eq(kite_buddy_unreserve(h.b, 0, 97), 0);
  expect_all_free(h.b);
  heap_del(&h);
}

TEST(odd_sizes) {
  uint64_t sizes[] = {1, 2, 3, 5, 7, 17, 31, 33, 97, 129, 1021, 4099, 65537};
  for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    uint64_t n = sizes[s];
    heap_t h = heap_new(n);
    assert_true(h.b != NULL);
    expect_all_free(h.b);
    /* the largest orders first: blocks follow the binary digits of n */
    uint64_t i, at = 0;
    for (int k = 63 - __builtin_clzll(n); k >= 0; k--) {
      if (!((n >> k) & 1)) continue;
      expect_int_eq(kite_buddy_alloc(h.b, (unsigned)k, &i), 0);
      expect_uint_eq(i, at);
      at += (uint64_t)1 << k;
    }
    expect_uint_eq(kite_buddy_free_units(h.b), 0);
    expect_int_eq(kite_buddy_check(h.b), 0);
    for (uint64_t u = 0; u < n; u++) {
      int r = kite_buddy_block_order(h.b, u);
      expect_true(r >= 0 || r == KITE_BUDDY_ENOTSTART);
    }
    at = 0;
    for (int k = 63 - __builtin_clzll(n); k >= 0; k--) {
      if (!((n >> k) & 1)) continue;
      expect_int_eq(kite_buddy_free(h.b, at, NULL), 0);
      at += (uint64_t)1 << k;
    }
    expect_all_free(h.b);
    /* and unit by unit */
    for (uint64_t u = 0; u < n; u++) {
      assert_int_eq(kite_buddy_alloc(h.b, 0, &i), 0);
      assert_uint_eq(i, u);
    }
    expect_int_eq(kite_buddy_alloc(h.b, 0, &i), KITE_BUDDY_ENOMEM);
    expect_int_eq(kite_buddy_check(h.b), 0);
    for (uint64_t u = n; u-- > 0;) assert_int_eq(kite_buddy_free(h.b, u, NULL), 0);
    expect_all_free(h.b);
    heap_del(&h);
  }
}

TEST(large_range) {
  /* 16 GiB of 4 KiB pages plus 3: fill with order-0, free in reverse, check coalescing */
  uint64_t n = ((uint64_t)1 << 22) + 3;
  heap_t h = heap_new(n);
  assert_true(h.b != NULL);
  uint64_t i;
  for (uint64_t u = 0; u < n; u++) {
    if (kite_buddy_alloc(h.b, 0, &i) != 0 || i != u) {
      expect_uint_eq(i, u);
      break;
    }
  }
  expect_uint_eq(kite_buddy_free_units(h.b), 0);
  expect_int_eq(kite_buddy_check(h.b), 0);
  for (uint64_t u = n; u-- > 0;)
    if (kite_buddy_free(h.b, u, NULL) != 0) { expect_true(0); break; }
  expect_all_free(h.b);
  /* the whole power-of-two part as one block */
  expect_int_eq(kite_buddy_alloc(h.b, 22, &i), 0);
  expect_uint_eq(i, 0);
  expect_int_eq(kite_buddy_alloc(h.b, 22, &i), KITE_BUDDY_ENOMEM);
  expect_int_eq(kite_buddy_alloc(h.b, 23, &i), KITE_BUDDY_EORDER);
  expect_int_eq(kite_buddy_block_order(h.b, 0), 22);
  expect_int_eq(kite_buddy_block_order(h.b, 12345), KITE_BUDDY_ENOTSTART);
  expect_int_eq(kite_buddy_free(h.b, 0, NULL), 0);
  expect_all_free(h.b);
  heap_del(&h);
}

TEST(check_detects_corruption) {
  /* The root node is the last metadata byte (levels are laid out bottom-up): values out of
   * range, or a node that contradicts its children, must be reported. */
  uint64_t n = 1000;
  heap_t h = heap_new(n);
  assert_true(h.b != NULL);
  unsigned char *root = (unsigned char *)h.meta + kite_buddy_meta_size(n) - 1;
  unsigned char saved = *root;
  expect_int_eq(kite_buddy_check(h.b), 0);
  *root = 0xEE;
  expect_true(kite_buddy_check(h.b) < 0);
  *root = 1; /* "allocated as one block" over a range that is partly free */
  expect_true(kite_buddy_check(h.b) < 0);
  *root = saved;
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* a chunk word: the first chunk follows the header; find it as the word that changes when
   * unit 0 is allocated, then make it claim a unit that is also free */
  uint64_t *w = (uint64_t *)h.meta, before[256];
  size_t words = kite_buddy_meta_size(n) / 8 < 256 ? kite_buddy_meta_size(n) / 8 : 256;
  memcpy(before, w, words * 8);
  uint64_t i;
  assert_int_eq(kite_buddy_alloc(h.b, 0, &i), 0);
  size_t changed = words;
  for (size_t k = 0; k < words; k++)
    if (w[k] == ~(uint64_t)1 && before[k] == ~(uint64_t)0) { changed = k; break; }
  assert_true(changed < words);
  expect_int_eq(kite_buddy_check(h.b), 0);
  w[changed] |= 1; /* unit 0 both free and the start of an allocated block */
  expect_true(kite_buddy_check(h.b) < 0);
  w[changed] &= ~(uint64_t)1;
  expect_int_eq(kite_buddy_check(h.b), 0);
  heap_del(&h);
}

/* alloc_at: the exact aligned block, only when all of it is free; grow and shrink in place
 * (free, then alloc_at the same index with another order) keep the neighbours intact. */
TEST(alloc_at_basic) {
  heap_t h = heap_new(300); /* odd size: a short last chunk and a partial top */
  assert_true(h.b != NULL);
  uint64_t idx = 0;
  expect_int_eq(kite_buddy_alloc_at(NULL, 0, 0), KITE_BUDDY_EINVAL);
  expect_int_eq(kite_buddy_alloc_at(h.b, 3, 1), KITE_BUDDY_ERANGE);   /* not aligned */
  expect_int_eq(kite_buddy_alloc_at(h.b, 256, 6), KITE_BUDDY_ERANGE); /* past the end */
  expect_int_eq(kite_buddy_alloc_at(h.b, 300, 0), KITE_BUDDY_ERANGE);
  expect_int_eq(kite_buddy_alloc_at(h.b, 0, 9), KITE_BUDDY_EORDER);
  /* a block of order 7 in the middle of the free heap, then one of order 2 inside a chunk */
  assert_int_eq(kite_buddy_alloc_at(h.b, 128, 7), 0);
  expect_int_eq(kite_buddy_block_order(h.b, 128), 7);
  expect_uint_eq(kite_buddy_free_units(h.b), 300 - 128);
  expect_int_eq(kite_buddy_check(h.b), 0);
  assert_int_eq(kite_buddy_alloc_at(h.b, 36, 2), 0);
  expect_int_eq(kite_buddy_block_order(h.b, 36), 2);
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* taken or partly taken blocks are refused, and nothing changes */
  expect_int_eq(kite_buddy_alloc_at(h.b, 128, 7), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_alloc_at(h.b, 192, 3), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_alloc_at(h.b, 32, 3), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_alloc_at(h.b, 0, 8), KITE_BUDDY_EBUSY);
  expect_uint_eq(kite_buddy_free_units(h.b), 300 - 128 - 4);
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* grow 36 (order 2) into its free buddy 32..35: not aligned for order 3 at 36 */
  expect_int_eq(kite_buddy_alloc_at(h.b, 36, 3), KITE_BUDDY_ERANGE);
  /* grow 128 from order 7 to 8: 0..127 holds 36, so it cannot; shrink it to order 5 */
  assert_int_eq(kite_buddy_free(h.b, 128, NULL), 0);
  assert_int_eq(kite_buddy_alloc_at(h.b, 128, 5), 0);
  expect_uint_eq(kite_buddy_free_units(h.b), 300 - 32 - 4);
  expect_int_eq(kite_buddy_check(h.b), 0);
  /* the freed tail is handed out again by a plain alloc (lowest first) */
  assert_int_eq(kite_buddy_alloc(h.b, 5, &idx), 0);
  expect_uint_eq(idx, 0);
  assert_int_eq(kite_buddy_free(h.b, 0, NULL), 0);
  /* grow 128 back to order 6 and 7: its buddies are free */
  assert_int_eq(kite_buddy_free(h.b, 128, NULL), 0);
  assert_int_eq(kite_buddy_alloc_at(h.b, 128, 7), 0);
  expect_int_eq(kite_buddy_check(h.b), 0);
  assert_int_eq(kite_buddy_free(h.b, 36, NULL), 0);
  assert_int_eq(kite_buddy_free(h.b, 128, NULL), 0);
  expect_all_free(h.b);
  /* inside a reserved hole: refused */
  assert_int_eq(kite_buddy_reserve(h.b, 64, 10), 0);
  expect_int_eq(kite_buddy_alloc_at(h.b, 64, 0), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_alloc_at(h.b, 72, 3), KITE_BUDDY_EBUSY);
  expect_int_eq(kite_buddy_alloc_at(h.b, 76, 2), 0);
  expect_int_eq(kite_buddy_check(h.b), 0);
  heap_del(&h);
}

/* alloc_at against a model (one flag per unit) under random alloc / alloc_at / free. */
TEST(alloc_at_model) {
  enum { N = 700, OPS = 20000, MAXB = 256 };
  heap_t h = heap_new(N);
  assert_true(h.b != NULL);
  static unsigned char used[N];
  static uint64_t at[MAXB];
  static unsigned ord[MAXB];
  unsigned nb = 0;
  memset(used, 0, sizeof used);
  for (int op = 0; op < OPS; op++) {
    unsigned k = (unsigned)test_rng_below(9);
    uint64_t r = test_rng_below(3), idx = 0;
    if (nb && (r == 0 || nb == MAXB)) {
      unsigned i = (unsigned)test_rng_below(nb);
      assert_int_eq(kite_buddy_free(h.b, at[i], NULL), 0);
      memset(used + at[i], 0, (size_t)1 << ord[i]);
      at[i] = at[--nb];
      ord[i] = ord[nb];
    } else if (r == 1) {
      uint64_t size = (uint64_t)1 << k;
      idx = test_rng_below(N) & ~(size - 1);
      int rc = kite_buddy_alloc_at(h.b, idx, k);
      bool fits = idx + size <= N, all_free = fits;
      for (uint64_t u = idx; all_free && u < idx + size; u++) all_free = !used[u];
      if (!fits) { expect_int_eq(rc, KITE_BUDDY_ERANGE); }
      else if (!all_free) { expect_int_eq(rc, KITE_BUDDY_EBUSY); }
      else {
        assert_int_eq(rc, 0);
        memset(used + idx, 1, size);
        at[nb] = idx; ord[nb++] = k;
      }
    } else if (kite_buddy_alloc(h.b, k, &idx) == 0) {
      for (uint64_t u = idx; u < idx + ((uint64_t)1 << k); u++) assert_true(!used[u]);
      memset(used + idx, 1, (size_t)1 << k);
      at[nb] = idx; ord[nb++] = k;
    }
    uint64_t nfree = 0;
    for (unsigned u = 0; u < N; u++) nfree += !used[u];
    assert_uint_eq(kite_buddy_free_units(h.b), nfree);
    if (op % 16 == 0) assert_int_eq(kite_buddy_check(h.b), 0);
  }
  while (nb) { nb--; assert_int_eq(kite_buddy_free(h.b, at[nb], NULL), 0); }
  expect_all_free(h.b);
  heap_del(&h);
}

TEST(strerror_all) {
  int codes[] = {KITE_BUDDY_OK, KITE_BUDDY_ENOMEM, KITE_BUDDY_EORDER, KITE_BUDDY_ERANGE,
                 KITE_BUDDY_ENOTSTART, KITE_BUDDY_EFREE, KITE_BUDDY_ERESERVED,
                 KITE_BUDDY_EBUSY, KITE_BUDDY_EINVAL};
  unsigned n = sizeof codes / sizeof *codes;
  for (unsigned a = 0; a < n; a++) {
    const char *s = kite_buddy_strerror(codes[a]);
    expect_true(s != NULL && s[0] != 0);
    for (unsigned c = 0; c < a; c++) expect_true(strcmp(s, kite_buddy_strerror(codes[c])) != 0);
  }
  expect_str_eq(kite_buddy_strerror(KITE_BUDDY_EFREE), "double free or block never allocated");
  expect_str_eq(kite_buddy_strerror(-100), "unknown buddy error");
}

/* _kite_popcount64 (in-place sum on baseline x86-64, the instruction elsewhere) against a
 * bit-by-bit count: the edge words, every single bit and its complement, and random words. */
static unsigned popcount_slow(uint64_t x) {
  unsigned n = 0;
  for (; x; x >>= 1) n += (unsigned)(x & 1);
  return n;
}
TEST(popcount) {
  expect_uint_eq(_kite_popcount64(0), 0);
  expect_uint_eq(_kite_popcount64(~(uint64_t)0), 64);
  expect_uint_eq(_kite_popcount64(0x8000000000000001ull), 2);
  expect_uint_eq(_kite_popcount64(0xff00ff00ff00ff00ull), 32);
  for (unsigned i = 0; i < 64; i++) {
    expect_uint_eq(_kite_popcount64((uint64_t)1 << i), 1);
    expect_uint_eq(_kite_popcount64(~((uint64_t)1 << i)), 63);
    expect_uint_eq(_kite_popcount64(((uint64_t)1 << i) - 1), i); /* the low i bits */
  }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    uint64_t w = i & 1 ? x : x & (x >> 3); /* sparser words too */
    expect_uint_eq(_kite_popcount64(w), popcount_slow(w));
  }
}

int main(void) {
  test_rng_init(1);
  RUN(popcount);
  RUN(meta_size);
  RUN(init_errors);
  RUN(null_args);
  RUN(sequential_order0);
  RUN(lowest_address_mixed_orders);
  RUN(split_counts);
  RUN(order_errors);
  RUN(free_errors);
  RUN(reserve_holes);
  RUN(reserve_everything);
  RUN(odd_sizes);
  RUN(large_range);
  RUN(check_detects_corruption);
  RUN(alloc_at_basic);
  RUN(alloc_at_model);
  RUN(strerror_all);
  return test_main_end();
}
