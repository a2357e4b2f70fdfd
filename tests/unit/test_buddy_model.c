/* tests/unit/test_buddy_model.c -- the buddy heap against a reference model.
 *
 * The model is a plain array of unit states (free, reserved, allocated + "a block of order k
 * starts here"). Long random sequences of alloc (random orders, some too large), free (live
 * blocks, and random indices to provoke every error), reserve and unreserve run on both;
 * after every step the return codes, the index returned (lowest address first), free units,
 * free blocks per order, the largest free order and kite_buddy_check() must agree. At the
 * end everything is freed and unreserved and the heap must be fully coalesced.
 * KITE_TEST_SEED=<n> replays one seed; KITE_TEST_STEPS=<n> scales the run.
 */
#include "kite/buddy.h"

#include <stdlib.h>

#include "test.h"

enum { U_FREE = 0, U_RSV = 1, U_ALLOC = 2 };

typedef struct {
  uint64_t n;
  unsigned char *st;     /* unit state */
  signed char *start;    /* order of the block starting here, or -1 */
  uint64_t *live;        /* starts of live blocks */
  uint64_t nlive;
  unsigned char *scratch; /* all-free flags of one level, for counting */
  unsigned char *scratch2;
} model_t;

static unsigned m_top(uint64_t n) { return n <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(n - 1); }

/* Expected result of alloc(order): lowest aligned run of free units. */
static int m_alloc(model_t *m, unsigned order, uint64_t *idx) {
  if (order > KITE_BUDDY_MAX_ORDER || ((uint64_t)1 << order) > m->n) return KITE_BUDDY_EORDER;
  uint64_t sz = (uint64_t)1 << order;
  for (uint64_t s = 0; s + sz <= m->n; s += sz) {
    uint64_t u = s;
    while (u < s + sz && m->st[u] == U_FREE) u++;
    if (u == s + sz) {
      memset(m->st + s, U_ALLOC, sz);
      m->start[s] = (signed char)order;
      m->live[m->nlive++] = s;
      *idx = s;
      return 0;
    }
  }
  return KITE_BUDDY_ENOMEM;
}

static int m_free(model_t *m, uint64_t i, unsigned *order) {
  if (i >= m->n) return KITE_BUDDY_ERANGE;
  if (m->st[i] == U_RSV) return KITE_BUDDY_ERESERVED;
  if (m->st[i] == U_FREE) return KITE_BUDDY_EFREE;
  if (m->start[i] < 0) return KITE_BUDDY_ENOTSTART;
  *order = (unsigned)m->start[i];
  memset(m->st + i, U_FREE, (size_t)1 << *order);
  m->start[i] = -1;
  for (uint64_t k = 0; k < m->nlive; k++)
    if (m->live[k] == i) { m->live[k] = m->live[--m->nlive]; break; }
  return 0;
}

static int m_range(model_t *m, uint64_t s, uint64_t c, int reserve) {
  if (s > m->n || c > m->n - s) return KITE_BUDDY_ERANGE;
  for (uint64_t u = s; u < s + c; u++) {
    if (reserve && m->st[u] == U_ALLOC) return KITE_BUDDY_EBUSY;
    if (!reserve && m->st[u] != U_RSV) return KITE_BUDDY_EBUSY;
  }
  memset(m->st + s, reserve ? U_RSV : U_FREE, c);
  return 0;
}

/* Compare every query of b with the model. Returns 0 when they agree. */
static int compare(model_t *m, kite_buddy_t *b) {
  unsigned long failed = test_checks_failed;
  uint64_t nr[KITE_BUDDY_MAX_ORDER + 1] = {0}, free_units = 0;
  uint64_t n = m->n, cnt = n;
  unsigned top = m_top(n);
  unsigned char *cur = m->scratch, *up = m->scratch2;
  for (uint64_t u = 0; u < n; u++) cur[u] = m->st[u] == U_FREE;
  for (unsigned h = 0; h <= top; h++) {
    /* cur[p]: node (h, p) is complete and all free; it is a maximal free block when its
     * parent is not */
    uint64_t pcnt = (cnt + 1) / 2;
    for (uint64_t p = 0; p < pcnt; p++) {
      uint64_t l = 2 * p, r = 2 * p + 1;
      up[p] = r < cnt && cur[l] && cur[r] && ((p + 1) << (h + 1)) <= n;
    }
    for (uint64_t p = 0; p < cnt; p++) {
      if (cur[p] && (h == top || !up[p / 2])) {
        nr[h]++;
        free_units += (uint64_t)1 << h;
      }
    }
    unsigned char *t = cur; cur = up; up = t;
    cnt = pcnt;
  }
  int largest = -1;
  for (unsigned k = 0; k <= KITE_BUDDY_MAX_ORDER; k++) {
    expect_uint_eq(kite_buddy_free_blocks(b, k), nr[k]);
    if (nr[k]) largest = (int)k;
  }
  expect_uint_eq(kite_buddy_free_units(b), free_units);
  expect_int_eq(kite_buddy_largest_free_order(b), largest);
  expect_int_eq(kite_buddy_check(b), 0);
  return test_checks_failed != failed;
}

/* One random run over n units. */
static void run_model(uint64_t n, unsigned steps) {
  size_t msz = kite_buddy_meta_size(n);
  void *meta = aligned_alloc(16, (msz + 15) & ~(size_t)15);
  kite_buddy_t *b = NULL;
  model_t m = {n, calloc(n, 1), malloc(n), calloc(n, sizeof(uint64_t)), 0,
               calloc(n + 1, 1), calloc(n + 1, 1)};
  assert_true(meta && m.st && m.start && m.live && m.scratch && m.scratch2);
  memset(m.start, -1, n);
  assert_int_eq(kite_buddy_init(&b, meta, msz, n), 0);
  unsigned top = m_top(n);
  for (unsigned step = 0; step < steps; step++) {
    uint64_t r = test_rng_below(100), i1 = 0, i2 = 0;
    int e1, e2;
    unsigned o1 = 99, o2 = 99;
    if (r < 45) {
      /* mostly small orders, sometimes anything up to one past the top */
      unsigned order = test_rng_below(4) ? (unsigned)test_rng_below(3)
                                         : (unsigned)test_rng_below(top + 2);
      e1 = kite_buddy_alloc(b, order, &i1);
      e2 = m_alloc(&m, order, &i2);
      expect_int_eq(e1, e2);
      if (e1 == 0 && e2 == 0) expect_uint_eq(i1, i2);
    } else if (r < 80) {
      uint64_t i;
      if (m.nlive && test_rng_below(5)) i = m.live[test_rng_below(m.nlive)];
      else i = test_rng_below(n + 2);
      int bo = kite_buddy_block_order(b, i);
      e1 = kite_buddy_free(b, i, &o1);
      e2 = m_free(&m, i, &o2);
      expect_int_eq(e1, e2);
      expect_int_eq(bo, e2 == 0 ? (int)o2 : e2);
      if (e1 == 0) expect_uint_eq(o1, o2);
    } else {
      int reserve = r < 90;
      uint64_t s = test_rng_below(n + 1);
      uint64_t c = test_rng_below(5) ? test_rng_below(9) : test_rng_below(n + 1);
      if (!reserve && test_rng_below(2)) {
        /* aim at a reserved run so that unreserve often succeeds */
        uint64_t u = 0;
        while (u < n && m.st[(s + u) % n] != U_RSV) u++;
        if (u < n) {
          s = (s + u) % n;
          c = 0;
          while (s + c < n && m.st[s + c] == U_RSV && c < 1 + test_rng_below(20)) c++;
        }
      }
      e1 = reserve ? kite_buddy_reserve(b, s, c) : kite_buddy_unreserve(b, s, c);
      e2 = m_range(&m, s, c, reserve);
      expect_int_eq(e1, e2);
    }
    if (compare(&m, b)) {
      fprintf(stderr, "  model mismatch: n=%" PRIu64 " step=%u op=%" PRIu64 "\n", n, step, r);
      break;
    }
  }
  /* tear down: free every live block, unreserve every hole, expect one block per digit */
  while (m.nlive) {
    uint64_t s = m.live[0];
    unsigned o;
    expect_int_eq(kite_buddy_free(b, s, NULL), 0);
    m_free(&m, s, &o);
  }
  for (uint64_t u = 0; u < n;) {
    if (m.st[u] != U_RSV) { u++; continue; }
    uint64_t e = u;
    while (e < n && m.st[e] == U_RSV) e++;
    expect_int_eq(kite_buddy_unreserve(b, u, e - u), 0);
    m_range(&m, u, e - u, 0);
    u = e;
  }
  compare(&m, b);
  expect_uint_eq(kite_buddy_free_units(b), n);
  for (unsigned k = 0; k <= KITE_BUDDY_MAX_ORDER; k++)
    expect_uint_eq(kite_buddy_free_blocks(b, k), (n >> k) & 1);
  free(meta); free(m.st); free(m.start); free(m.live); free(m.scratch); free(m.scratch2);
}

static unsigned steps_scale(void) {
  const char *s = getenv("KITE_TEST_STEPS");
  return s ? (unsigned)strtoul(s, NULL, 0) : 3000;
}

TEST(tiny_ranges) {
  uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9};
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) run_model(sizes[i], steps_scale() / 3);
}

TEST(odd_ranges) {
  uint64_t sizes[] = {17, 33, 64, 97, 129, 255, 256, 257};
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) run_model(sizes[i], steps_scale());
}

TEST(larger_ranges) {
  uint64_t sizes[] = {1000, 1031, 4096, 8193};
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) run_model(sizes[i], steps_scale());
}

int main(void) {
  test_rng_init(0x5eed0b0dd1);
  RUN(tiny_ranges);
  RUN(odd_ranges);
  RUN(larger_ranges);
  return test_main_end();
}
