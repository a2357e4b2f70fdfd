/* tests/lab/test_buddy_variants.c -- the lab's buddy variants against each other.
 *
 * Every variant (lab/buddy_policy.h) runs the same random sequence of operations: alloc of a
 * random order (as operation number i), and free of a random live allocation (named by its
 * operation number, so the sequence does not depend on the indices a variant returns).
 * After every step all variants must report the same free-unit count, every variant's
 * check() must pass, blocks must lie in range and never overlap within a variant, and the
 * variants that share kite's lowest-address policy must return the same indices as
 * bitmap-tree. When a variant without that policy cannot place a block that others could
 * (fragmentation differs), the allocation is undone everywhere to keep the runs in step.
 * At the end everything is freed: each variant must have coalesced back to the blocks of
 * the binary digits of the range, checked by allocating exactly those blocks again.
 * Also: error codes (EORDER, ENOMEM, ERANGE, EFREE and double free) for every variant.
 */
#include <stdlib.h>

#include "../../lab/buddy_policy.h"
#include "test.h"

#define MAXV 8

typedef struct {
  const lab_buddy_policy_t *p;
  void *meta;
  uint64_t *idx;   /* per operation: index of the block, or UINT64_MAX */
  uint8_t *owner;  /* per unit: 1 while inside a live block (overlap check) */
} var_t;

static unsigned nvars;
static var_t vars[MAXV];
static unsigned *order_of; /* per operation */
static uint64_t *live_ops; /* operation numbers of live allocations */
static uint64_t nlive;

/* Switch the "current heap" of variant v: each variant keeps one heap in static storage,
 * so every variant has its own and they never need re-initializing mid-run. */
static int open_all(uint64_t units, uint64_t ops) {
  nvars = 0;
  for (const lab_buddy_policy_t *const *p = lab_buddy_policies(); *p && nvars < MAXV; p++) {
    var_t *v = &vars[nvars++];
    v->p = *p;
    size_t sz = v->p->meta_size(units);
    v->meta = aligned_alloc(16, (sz + 15) & ~(size_t)15);
    v->idx = malloc(ops * sizeof(uint64_t));
    v->owner = calloc(units, 1);
    if (!v->meta || !v->idx || !v->owner) return -1;
    if (v->p->init(v->meta, units) != 0) return -1;
  }
  return 0;
}

static void close_all(void) {
  for (unsigned i = 0; i < nvars; i++) {
    vars[i].p->fini();
    free(vars[i].meta);
    free(vars[i].idx);
    free(vars[i].owner);
  }
  nvars = 0;
}

static const var_t *reference(void) {
  for (unsigned i = 0; i < nvars; i++)
    if (vars[i].p->lowest_first && !vars[i].p->slow) return &vars[i];
  return &vars[0];
}

static void mark(var_t *v, uint64_t idx, unsigned order, int on) {
  for (uint64_t u = idx; u < idx + ((uint64_t)1 << order); u++) {
    if (on) expect_true(v->owner[u] == 0);
    v->owner[u] = (uint8_t)on;
  }
}

static void run_cross(uint64_t units, uint64_t ops, unsigned max_order) {
  assert_int_eq(open_all(units, ops), 0);
  order_of = malloc(ops * sizeof *order_of);
  live_ops = malloc(ops * sizeof *live_ops);
  assert_true(order_of && live_ops);
  nlive = 0;
  uint64_t used = 0, undone = 0;
  const var_t *ref = reference();
  for (uint64_t op = 0; op < ops; op++) {
    int do_alloc = nlive == 0 || (used < units * 7 / 10 ? test_rng_below(3) != 0 : test_rng_below(3) == 0);
    if (do_alloc) {
      unsigned k = (unsigned)test_rng_below(max_order + 1);
      order_of[op] = k;
      int ok_all = 1, ok_ref = 0;
      for (unsigned i = 0; i < nvars; i++) {
        var_t *v = &vars[i];
        int err = v->p->alloc(k, &v->idx[op]);
        if (err) {
          expect_int_eq(err, KITE_BUDDY_ENOMEM);
          v->idx[op] = UINT64_MAX;
          ok_all = 0;
        } else {
          expect_true(v->idx[op] + ((uint64_t)1 << k) <= units);
          expect_uint_eq(v->idx[op] & (((uint64_t)1 << k) - 1), 0);
          mark(v, v->idx[op], k, 1);
        }
        if (v == ref) ok_ref = !err;
      }
      /* lowest-first variants agree with the reference exactly, failures included */
      for (unsigned i = 0; i < nvars; i++)
        if (vars[i].p->lowest_first) expect_uint_eq(vars[i].idx[op], ref->idx[op]);
      if (!ok_all) { /* keep the runs in step: undo where it worked */
        undone += ok_ref;
        for (unsigned i = 0; i < nvars; i++) {
          var_t *v = &vars[i];
          if (v->idx[op] == UINT64_MAX) continue;
          expect_int_eq(v->p->free(v->idx[op]), 0);
          mark(v, v->idx[op], k, 0);
        }
      } else {
        live_ops[nlive++] = op;
        used += (uint64_t)1 << k;
      }
    } else {
      uint64_t j = test_rng_below(nlive), lop = live_ops[j];
      for (unsigned i = 0; i < nvars; i++) {
        var_t *v = &vars[i];
        expect_int_eq(v->p->free(v->idx[lop]), 0);
        mark(v, v->idx[lop], order_of[lop], 0);
      }
      used -= (uint64_t)1 << order_of[lop];
      live_ops[j] = live_ops[--nlive];
    }
    unsigned long before = test_checks_failed;
    for (unsigned i = 0; i < nvars; i++) {
      expect_uint_eq(vars[i].p->free_units(), units - used);
      expect_int_eq(vars[i].p->check(), 0);
    }
    if (test_checks_failed != before) {
      fprintf(stderr, "  variants disagree: units=%" PRIu64 " op=%" PRIu64 "\n", units, op);
      break;
    }
  }
  /* a few undone allocations are expected from the LIFO variants, not a majority */
  expect_true(undone * 4 <= ops);
  fprintf(stderr, "  units %" PRIu64 ": %" PRIu64 " ops, %" PRIu64 " live at the end, %" PRIu64
          " undone, %u variants\n", units, ops, nlive, undone, nvars);
  /* free everything; full coalescing gives back the binary digits of units */
  for (uint64_t j = 0; j < nlive; j++)
    for (unsigned i = 0; i < nvars; i++)
      expect_int_eq(vars[i].p->free(vars[i].idx[live_ops[j]]), 0);
  for (unsigned i = 0; i < nvars; i++) {
    var_t *v = &vars[i];
    expect_uint_eq(v->p->free_units(), units);
    expect_int_eq(v->p->check(), 0);
    for (int k = 63 - __builtin_clzll(units); k >= 0; k--) {
      if (!((units >> k) & 1)) continue;
      uint64_t idx;
      expect_int_eq(v->p->alloc((unsigned)k, &idx), 0);
    }
    expect_uint_eq(v->p->free_units(), 0);
    uint64_t idx;
    expect_int_eq(v->p->alloc(0, &idx), KITE_BUDDY_ENOMEM);
  }
  free(order_of);
  free(live_ops);
  close_all();
}

TEST(registry) {
  const lab_buddy_policy_t *const *p = lab_buddy_policies();
  const char *names[] = {"lists-vector", "lists-dlist", "rbtree-vector", "rbtree-list",
                         "bitmap-bytes", "bitmap-tree"};
  unsigned n = 0;
  for (; p[n]; n++) {
    expect_str_eq(p[n]->name, names[n]);
    expect_ptr_eq(lab_buddy_policy_find(names[n]), p[n]);
    expect_true(p[n]->description && p[n]->check && p[n]->fini);
  }
  expect_uint_eq(n, 6);
  expect_ptr_eq(lab_buddy_policy_find("no-such-variant"), NULL);
}

TEST(errors) {
  for (const lab_buddy_policy_t *const *pp = lab_buddy_policies(); *pp; pp++) {
    const lab_buddy_policy_t *p = *pp;
    uint64_t units = 12; /* blocks 8 + 4 */
    void *meta = aligned_alloc(16, (p->meta_size(units) + 15) & ~(size_t)15);
    assert_true(meta != NULL);
    expect_uint_eq(p->meta_size(0), 0);
    expect_int_eq(p->init(meta, 0), KITE_BUDDY_EINVAL);
    assert_int_eq(p->init(meta, units), 0);
    uint64_t a, b2, c;
    expect_int_eq(p->alloc(4, &a), KITE_BUDDY_EORDER);
    expect_int_eq(p->alloc(3, &a), 0);
    expect_uint_eq(a, 0);
    expect_int_eq(p->alloc(3, &b2), KITE_BUDDY_ENOMEM);
    expect_int_eq(p->alloc(2, &b2), 0);
    expect_uint_eq(b2, 8);
    expect_int_eq(p->alloc(0, &c), KITE_BUDDY_ENOMEM);
    expect_int_eq(p->free(12), KITE_BUDDY_ERANGE);
    expect_int_eq(p->free(1), KITE_BUDDY_EFREE); /* inside a block, not its start */
    expect_int_eq(p->free(0), 0);
    expect_int_eq(p->free(0), KITE_BUDDY_EFREE); /* double free */
    expect_int_eq(p->free(4), KITE_BUDDY_EFREE); /* never allocated */
    expect_uint_eq(p->free_units(), 8);
    expect_int_eq(p->check(), 0);
    expect_int_eq(p->free(8), 0);
    expect_uint_eq(p->free_units(), 12);
    expect_int_eq(p->check(), 0);
    p->fini();
    free(meta);
  }
}

TEST(cross_small) {
  run_cross(37, 3000, 3);
  run_cross(64, 3000, 4);
}

TEST(cross_odd) {
  run_cross(1000, 20000, 5);
  run_cross(1031, 20000, 3);
}

TEST(cross_larger) { run_cross(4096, 20000, 7); }

int main(void) {
  test_rng_init(0xb0dd1e5);
  RUN(registry);
  RUN(errors);
  RUN(cross_small);
  RUN(cross_odd);
  RUN(cross_larger);
  return test_main_end();
}
