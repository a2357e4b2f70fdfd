/* tests/lab/test_policy.c -- the conformance and randomized suite every lab policy passes.
 *
 *   test_policy          registry checks (stable names and order, lookup, method table)
 *   test_policy NAME     the whole suite against policy NAME (one CTest entry per policy)
 *
 * Every check runs the policy's validate() after each operation, fills every live block with
 * a pattern derived from its id and verifies it before the block is freed or resized, and
 * compares walk() with the test's own model (live blocks, sizes adding up to the heap).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "test.h"

static const lab_policy_t *P;

static const char *const expected_names[] = {
    "seglist", "rbtree_clrs", "rbtree_unified", "rbtree_linked", "rbtree_stack",
    "rbtree_topdown", "splay_stack", "splay_topdown", "hwx", "seglist_exact", "hwx_kr", "pow2", NULL};

/* The policies that map 4 KiB pages as the seeds' allocators do (lab/ds/pages.h). */
static bool maps_pages(void) { return strcmp(P->name, "hwx") == 0 || strcmp(P->name, "pow2") == 0; }

/* ---- walk model ---------------------------------------------------------------------------- */
struct walk_sum {
  size_t blocks, nfree, nalloc, bytes, largest_free;
  char *last_end;
  bool ordered;
};

static void walk_cb(void *vctx, void *payload, size_t cap, bool is_free) {
  struct walk_sum *w = vctx;
  w->blocks++;
  if (is_free) {
    w->nfree++;
    if (cap > w->largest_free) w->largest_free = cap;
  } else {
    w->nalloc++;
  }
  w->bytes += cap + P->header_size;
  char *start = (char *)payload - P->header_size;
  if (w->last_end && start != w->last_end) w->ordered = false;
  w->last_end = (char *)payload + cap;
}

static struct walk_sum walk_now(void) {
  struct walk_sum w = {0, 0, 0, 0, 0, NULL, true};
  size_t n = P->walk(walk_cb, &w);
  if (n != w.blocks) w.ordered = false;
  return w;
}

/* One region with guard bytes around it, so a policy writing outside its heap is caught. */
#define GUARD 64
static unsigned char *region_alloc(size_t size) {
  unsigned char *r = aligned_alloc(64, size + 2 * GUARD + 64);
  memset(r, 0xEE, size + 2 * GUARD + 64);
  return r;
}
static bool guards_ok(unsigned char *r, size_t off, size_t size) {
  for (size_t i = 0; i < GUARD + off; i++)
    if (r[i] != 0xEE) return false;
  for (size_t i = GUARD + off + size; i < size + 2 * GUARD + 64; i++)
    if (r[i] != 0xEE) return false;
  return true;
}

/* ---- registry ------------------------------------------------------------------------------- */
TEST(registry_order_and_lookup) {
  const lab_policy_t *const *all = lab_policies();
  size_t n = 0, e = 0;
  for (; all[n]; n++, e++) {
    while (expected_names[e] && strcmp(expected_names[e], all[n]->name) != 0) e++;
    assert_true(expected_names[e] != NULL); /* known name, in the stable order */
    expect_str_eq(all[n]->name, expected_names[e]);
    expect_ptr_eq(lab_policy_find(expected_names[e]), all[n]);
    expect_true(all[n]->alignment == 8 || all[n]->alignment == 16);
    expect_true(all[n]->header_size >= 8 && all[n]->header_size <= 32);
    expect_true(all[n]->description && all[n]->description[0]);
    expect_true(all[n]->init && all[n]->malloc && all[n]->free && all[n]->realloc &&
                all[n]->validate && all[n]->walk && all[n]->usable_size);
  }
  expect_uint_eq(n, sizeof expected_names / sizeof expected_names[0] - 1);
  /* the per-policy accessors return the registry's tables */
  const lab_policy_t *(*const accessors[])(void) = {
      lab_seglist_policy,       lab_rbtree_clrs_policy,  lab_rbtree_unified_policy,
      lab_rbtree_linked_policy, lab_rbtree_stack_policy, lab_rbtree_topdown_policy,
      lab_splay_stack_policy,   lab_splay_topdown_policy, lab_hwx_policy,
      lab_seglist_exact_policy, lab_hwx_kr_policy,        lab_pow2_policy};
  for (size_t i = 0; i < sizeof accessors / sizeof accessors[0] && i < n; i++)
    expect_ptr_eq(accessors[i](), all[i]);
  expect_true(lab_policy_find("no-such-policy") == NULL);
  expect_true(lab_policy_find(NULL) == NULL);
  expect_true(lab_policy_find("") == NULL);
}

/* The seed's minimum blocks (seed 000): list_segregated 32 B, the CLRS, unified, stack and
 * top-down red-black trees and both splay trees 40 B, rbtree_linked 48 B (its fourth node
 * word). A malloc(1) gets exactly one minimum block (header + capacity), and that block, freed
 * between two live neighbours, holds the policy's free node: the heap stays valid and the same
 * block comes back. */
TEST(minimum_blocks_are_the_seeds) {
  static const struct { const char *name; size_t min_block; } seed[] = {
      {"seglist", 32},        {"rbtree_clrs", 40},    {"rbtree_unified", 40},
      {"rbtree_linked", 48},  {"rbtree_stack", 40},   {"rbtree_topdown", 40},
      {"splay_stack", 40},    {"splay_topdown", 40}};
  size_t size = 1 << 16;
  unsigned char *r = region_alloc(size);
  for (size_t i = 0; i < sizeof seed / sizeof seed[0]; i++) {
    const lab_policy_t *q = lab_policy_find(seed[i].name);
    assert_true(q != NULL);
    assert_true(q->init(r + GUARD, size));
    void *a = q->malloc(1), *b = q->malloc(1), *c = q->malloc(1);
    assert_true(a && b && c);
    if (q->header_size + q->usable_size(b) != seed[i].min_block)
      fprintf(stderr, "%s: minimum block %zu, the seed's %zu\n", q->name,
              q->header_size + q->usable_size(b), seed[i].min_block);
    expect_uint_eq(q->header_size + q->usable_size(b), seed[i].min_block);
    expect_uint_eq((uintptr_t)b - (uintptr_t)a, seed[i].min_block);
    q->free(b);
    expect_true(q->validate());
    expect_ptr_eq(q->malloc(1), b);
    expect_true(q->validate());
  }
  expect_true(guards_ok(r, 0, size));
  free(r);
}

/* ---- conformance ------------------------------------------------------------------------------ */
TEST(init_and_single_block) {
  size_t size = 1 << 20;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  assert_true(P->validate());
  struct walk_sum w = walk_now();
  expect_uint_eq(w.blocks, 1);
  expect_uint_eq(w.nfree, 1);
  expect_true(w.ordered);
  expect_true(w.bytes <= size && size - w.bytes < 2 * P->alignment);
  /* init again discards the old heap */
  void *a = P->malloc(100);
  assert_true(a != NULL);
  assert_true(P->init(r + GUARD, size));
  w = walk_now();
  expect_uint_eq(w.blocks, 1);
  expect_true(P->validate());
  expect_true(guards_ok(r, 0, size));
  free(r);
}

TEST(malloc_alignment_capacity_and_free) {
  size_t size = 1 << 20;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  static const size_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 63, 64,
                                 100, 127, 128, 255, 256, 1000, 1024, 4095, 4096, 10000};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  for (size_t i = 0; i < N; i++) {
    p[i] = P->malloc(sizes[i]);
    assert_true(p[i] != NULL);
    expect_uint_eq((uintptr_t)p[i] % P->alignment, 0);
    expect_true(P->usable_size(p[i]) >= sizes[i]);
    expect_true((unsigned char *)p[i] >= r + GUARD &&
                (unsigned char *)p[i] + sizes[i] <= r + GUARD + size);
    test_fill(p[i], P->usable_size(p[i]), i);
    for (size_t j = 0; j < i; j++) expect_true(p[j] != p[i]);
    assert_true(P->validate());
  }
  struct walk_sum w = walk_now();
  expect_uint_eq(w.nalloc, N);
  for (size_t i = 0; i < N; i++) expect_true(test_verify(p[i], P->usable_size(p[i]), i));
  /* free in an interleaved order: evens, then odds */
  for (size_t k = 0; k < 2; k++)
    for (size_t i = k; i < N; i += 2) {
      expect_true(test_verify(p[i], P->usable_size(p[i]), i));
      P->free(p[i]);
      assert_true(P->validate());
    }
  P->free(NULL);
  w = walk_now();
  expect_uint_eq(w.blocks, 1);
  expect_uint_eq(w.nfree, 1);
  expect_true(guards_ok(r, 0, size));
  free(r);
}

TEST(coalesce_left_right_and_both) {
  size_t size = 1 << 16;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  void *b[6];
  for (int i = 0; i < 6; i++) assert_true((b[i] = P->malloc(200)) != NULL);
  size_t base_blocks = walk_now().blocks; /* 6 allocated + the free tail */
  expect_uint_eq(base_blocks, 7);
  P->free(b[1]);
  P->free(b[3]);
  assert_true(P->validate());
  expect_uint_eq(walk_now().nfree, 3);
  P->free(b[2]); /* joins b1 and b3: left and right at once */
  assert_true(P->validate());
  struct walk_sum w = walk_now();
  expect_uint_eq(w.nfree, 2);
  expect_uint_eq(w.blocks, 5);
  P->free(b[5]); /* joins the free tail: right */
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 4);
  P->free(b[4]); /* joins the tail (right) and b1..b3 (left) */
  assert_true(P->validate());
  w = walk_now();
  expect_uint_eq(w.blocks, 2);
  expect_uint_eq(w.nfree, 1);
  P->free(b[0]);
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

TEST(realloc_semantics) {
  size_t size = 1 << 18;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  bool kr = strncmp(P->name, "hwx", 3) == 0 || maps_pages(); /* these never grow in place */
  void *a = P->realloc(NULL, 100); /* = malloc */
  assert_true(a != NULL);
  test_fill(a, 100, 1);
  void *b = P->malloc(300);
  void *c = P->malloc(100); /* keeps b's right side allocated */
  assert_true(b && c);
  test_fill(c, 100, 3);
  P->free(b);
  assert_true(P->validate());
  void *a2 = P->realloc(a, 350); /* grows into the free right neighbour */
  assert_true(a2 != NULL);
  if (!kr) expect_ptr_eq(a2, a);
  expect_true(P->usable_size(a2) >= 350);
  expect_true(test_verify(a2, 100, 1));
  assert_true(P->validate());
  test_fill(a2, 350, 2);
  void *a3 = P->realloc(a2, 40); /* shrinks in place */
  expect_ptr_eq(a3, a2);
  expect_true(test_verify(a3, 40, 2));
  assert_true(P->validate());
  void *a4 = P->realloc(a3, 5000); /* no room on the right: moves, keeps content */
  assert_true(a4 != NULL);
  expect_true(test_verify(a4, 40, 2));
  expect_true(test_verify(c, 100, 3));
  assert_true(P->validate());
  /* failure leaves the block intact */
  test_fill(a4, 5000, 4);
  expect_true(P->realloc(a4, size * 2) == NULL);
  expect_true(P->realloc(a4, SIZE_MAX) == NULL);
  expect_true(test_verify(a4, 5000, 4));
  assert_true(P->validate());
  /* n == 0 frees */
  expect_true(P->realloc(a4, 0) == NULL);
  assert_true(P->validate());
  P->free(c);
  assert_true(P->validate());
  struct walk_sum w = walk_now();
  expect_uint_eq(w.blocks, 1);
  expect_uint_eq(w.nalloc, 0);
  free(r);
}

/* realloc that the right neighbour alone cannot satisfy coalesces with the free left one (and
 * the free right one), sliding the payload down: the block starts where the left one did. */
TEST(realloc_coalesces_left) {
  size_t size = 1 << 18;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  bool kr = strncmp(P->name, "hwx", 3) == 0 || maps_pages(); /* these always move */
  void *x = P->malloc(200), *a = P->malloc(100), *g = P->malloc(100);
  assert_true(x && a && g);
  test_fill(a, 100, 5);
  test_fill(g, 100, 6);
  P->free(x);
  assert_true(P->validate());
  void *a2 = P->realloc(a, 250); /* right neighbour allocated; left free: 208 + 112 >= 264 */
  assert_true(a2 != NULL);
  if (!kr) expect_ptr_eq(a2, x);
  expect_true(P->usable_size(a2) >= 250);
  expect_true(test_verify(a2, 100, 5));
  expect_true(test_verify(g, 100, 6));
  assert_true(P->validate());
  P->free(a2);
  P->free(g);
  assert_true(P->validate());
  /* left and right together */
  x = P->malloc(200);
  a = P->malloc(100);
  void *y = P->malloc(200);
  g = P->malloc(100);
  assert_true(x && a && y && g);
  test_fill(a, 100, 7);
  test_fill(g, 100, 8);
  P->free(x);
  P->free(y);
  assert_true(P->validate());
  a2 = P->realloc(a, 500); /* neither side alone suffices; both together do */
  assert_true(a2 != NULL);
  if (!kr) expect_ptr_eq(a2, x);
  expect_true(P->usable_size(a2) >= 500);
  expect_true(test_verify(a2, 100, 7));
  expect_true(test_verify(g, 100, 8));
  assert_true(P->validate());
  P->free(a2);
  P->free(g);
  assert_true(P->validate());
  struct walk_sum w = walk_now();
  expect_uint_eq(w.blocks, 1);
  free(r);
}

TEST(exhaustion_returns_null_and_heap_stays_valid) {
  size_t size = 1 << 16;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  expect_true(P->malloc(SIZE_MAX) == NULL);
  expect_true(P->malloc(SIZE_MAX / 2) == NULL);
  expect_true(P->malloc(size) == NULL);
  assert_true(P->validate());
  void *blocks[2048];
  size_t n = 0, cap = 0;
  while (n < 2048) {
    void *p = P->malloc(100);
    if (!p) break;
    test_fill(p, 100, n);
    cap += P->usable_size(p);
    blocks[n++] = p;
  }
  assert_true(n < 2048);
  assert_true(P->validate());
  expect_true(cap >= size / 2); /* the heap really filled up */
  /* the tail left over is smaller than one more block */
  struct walk_sum w = walk_now();
  expect_true(w.largest_free < 100);
  expect_true(P->malloc(100) == NULL);
  expect_true(P->validate());
  for (size_t i = 0; i < n; i++) {
    expect_true(test_verify(blocks[i], 100, i));
    P->free(blocks[i]);
  }
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  /* hwx and pow2 never unmap their small pages: a mapping of half the heap no longer fits */
  if (maps_pages()) expect_true(P->malloc(4000) != NULL);
  else expect_true(P->malloc(size / 2) != NULL);
  expect_true(guards_ok(r, 0, size));
  free(r);
}

TEST(odd_regions) {
  unsigned char *r = region_alloc(1 << 16);
  for (size_t off = 0; off < 16; off++) {
    size_t size = 4001 + off * 37;
    memset(r, 0xEE, (1 << 16) + 2 * GUARD + 64);
    assert_true(P->init(r + GUARD + off, size));
    assert_true(P->validate());
    struct walk_sum w = walk_now();
    expect_uint_eq(w.blocks, 1);
    expect_true(w.bytes <= size && size - w.bytes < 2 * P->alignment);
    void *p[64];
    size_t n = 0;
    while (n < 64 && (p[n] = P->malloc(13 * n + 1)) != NULL) {
      expect_uint_eq((uintptr_t)p[n] % P->alignment, 0);
      memset(p[n], 0x11, P->usable_size(p[n])); /* the whole capacity is ours */
      n++;
    }
    assert_true(P->validate());
    expect_true(guards_ok(r, off, size));
    for (size_t i = 0; i < n; i += 2) P->free(p[i]);
    for (size_t i = 1; i < n; i += 2) P->free(p[i]);
    assert_true(P->validate());
    expect_uint_eq(walk_now().blocks, 1);
  }
  /* too small for one block */
  expect_true(!P->init(r + GUARD + 3, 16));
  expect_true(!P->init(r + GUARD, 0));
  free(r);
}

/* ---- randomized ------------------------------------------------------------------------------- */
#define SLOTS 192
struct live {
  void *p;
  size_t n;
  uint64_t tag;
};

struct match_ctx {
  struct live *slots;
  size_t matched, bad;
};
static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const struct live *)a)->p, y = (uintptr_t)((const struct live *)b)->p;
  return x < y ? -1 : x > y;
}
static struct live sorted_live[SLOTS];
static size_t sorted_n, sorted_i;
static void match_cb(void *vctx, void *payload, size_t cap, bool is_free) {
  struct match_ctx *m = vctx;
  if (is_free) return;
  if (sorted_i < sorted_n && sorted_live[sorted_i].p == payload && cap >= sorted_live[sorted_i].n)
    m->matched++;
  else
    m->bad++;
  sorted_i++;
}

/* walk() sees exactly the live blocks (in address order) with enough capacity. */
static bool walk_matches(struct live *slots) {
  sorted_n = 0;
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].p) sorted_live[sorted_n++] = slots[i];
  qsort(sorted_live, sorted_n, sizeof sorted_live[0], cmp_ptr);
  sorted_i = 0;
  struct match_ctx m = {slots, 0, 0};
  P->walk(match_cb, &m);
  return m.bad == 0 && m.matched == sorted_n;
}

static size_t rand_size(void) {
  uint64_t k = test_rng_below(100);
  if (k < 2) return 20000 + test_rng_below(100000); /* occasional large ones */
  if (k < 40) return test_rng_below(64);
  return test_rng_below(5001);
}

static void random_ops(size_t heap, unsigned ops, uint64_t seed) {
  test_rng_init(seed);
  unsigned char *r = region_alloc(heap);
  if (!P->init(r + GUARD, heap)) {
    TEST_FAIL_("init %zu", heap);
    free(r);
    return;
  }
  size_t span = walk_now().bytes;
  struct live slots[SLOTS];
  memset(slots, 0, sizeof slots);
  uint64_t tag = 1;
  size_t nulls = 0;
  for (unsigned op = 0; op < ops; op++) {
    int i = (int)test_rng_below(SLOTS);
    struct live *s = &slots[i];
    uint64_t kind = test_rng_below(10);
    if (!s->p) {
      size_t n = rand_size();
      void *p = kind < 2 ? P->realloc(NULL, n) : P->malloc(n);
      if (!p) {
        nulls++;
      } else {
        if ((uintptr_t)p % P->alignment || P->usable_size(p) < n) {
          TEST_FAIL_("op %u: malloc(%zu) = %p, capacity %zu", op, n, p, P->usable_size(p));
          break;
        }
        s->p = p, s->n = n, s->tag = tag++;
        test_fill(p, n, s->tag);
      }
    } else if (kind < 5) {
      if (!test_verify(s->p, s->n, s->tag)) {
        TEST_FAIL_("op %u: block %p (%zu bytes) corrupted before free", op, s->p, s->n);
        break;
      }
      P->free(s->p);
      s->p = NULL;
    } else {
      if (!test_verify(s->p, s->n, s->tag)) {
        TEST_FAIL_("op %u: block %p (%zu bytes) corrupted before realloc", op, s->p, s->n);
        break;
      }
      size_t n = kind < 7 ? s->n + test_rng_below(2000) : rand_size();
      void *q = P->realloc(s->p, n);
      if (!q && n) {
        nulls++;
        if (!test_verify(s->p, s->n, s->tag)) {
          TEST_FAIL_("op %u: failed realloc changed the block", op);
          break;
        }
      } else if (!q) {
        s->p = NULL;
      } else {
        size_t keep = s->n < n ? s->n : n;
        if (!test_verify(q, keep, s->tag)) {
          TEST_FAIL_("op %u: realloc %zu -> %zu lost content", op, s->n, n);
          break;
        }
        s->p = q, s->n = n, s->tag = tag++;
        test_fill(q, n, s->tag);
      }
    }
    if (!P->validate()) {
      TEST_FAIL_("op %u: validate failed", op);
      break;
    }
    struct walk_sum w = walk_now();
    if (w.bytes != span || !w.ordered) {
      TEST_FAIL_("op %u: walk sums to %zu, heap span %zu", op, w.bytes, span);
      break;
    }
    if (!walk_matches(slots)) {
      TEST_FAIL_("op %u: walk disagrees with the live blocks", op);
      break;
    }
  }
  for (int i = 0; i < SLOTS; i++) {
    if (!slots[i].p) continue;
    if (!test_verify(slots[i].p, slots[i].n, slots[i].tag)) TEST_FAIL_("slot %d corrupted", i);
    P->free(slots[i].p);
  }
  expect_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  expect_true(guards_ok(r, 0, heap));
  (void)nulls;
  free(r);
  TEST_PASS_();
}

TEST(random_ops_roomy_heap) { random_ops(8 << 20, 6000, 12345); }
TEST(random_ops_tight_heap) { random_ops(256 << 10, 6000, 777); } /* hits exhaustion often */

/* The seed's insert/delete scenario: 2N blocks of few distinct sizes, every other one freed
 * (N free blocks that cannot coalesce: many duplicates), then N mallocs take them back. */
TEST(insert_delete_duplicates) {
  enum { N = 3000 };
  size_t heap = 8 << 20;
  unsigned char *r = region_alloc(heap);
  assert_true(P->init(r + GUARD, heap));
  test_rng_init(99);
  static void *b[2 * N];
  static size_t sz[2 * N];
  for (int i = 0; i < 2 * N; i++) {
    sz[i] = 16 + 16 * test_rng_below(12);
    assert_true((b[i] = P->malloc(sz[i])) != NULL);
    test_fill(b[i], sz[i], (uint64_t)i);
  }
  for (int i = 0; i < 2 * N; i += 2) {
    P->free(b[i]);
    b[i] = NULL;
    if (i % 64 == 0) assert_true(P->validate());
  }
  assert_true(P->validate());
  if (strcmp(P->name, "pow2") != 0) /* pow2 splits pages its own way */
    expect_true(walk_now().nfree >= N);
  for (int i = 0; i < 2 * N; i += 2) {
    sz[i] = 16 + 16 * test_rng_below(12);
    assert_true((b[i] = P->malloc(sz[i])) != NULL);
    test_fill(b[i], sz[i], (uint64_t)i);
    if (i % 64 == 0) assert_true(P->validate());
  }
  assert_true(P->validate());
  /* realloc every other block: coalescing with tree nodes and duplicates */
  for (int i = 1; i < 2 * N; i += 2) {
    size_t n = 8 + test_rng_below(260);
    void *q = P->realloc(b[i], n);
    assert_true(q != NULL);
    size_t keep = n < sz[i] ? n : sz[i];
    expect_true(test_verify(q, keep, (uint64_t)i));
    b[i] = q, sz[i] = n;
    test_fill(q, n, (uint64_t)i);
    if (i % 64 == 1) assert_true(P->validate());
  }
  assert_true(P->validate());
  for (int i = 0; i < 2 * N; i++) expect_true(test_verify(b[i], sz[i], (uint64_t)i));
  for (int i = 0; i < 2 * N; i++) {
    P->free(b[(i * 7919) % (2 * N)]); /* 7919 is prime: a permutation */
    if (i % 64 == 0) assert_true(P->validate());
  }
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

/* Many distinct sizes: a deep tree (N nodes), every operation validated. Frees every other
 * block (no coalescing), takes them back with fresh sizes in random order, then frees
 * everything in a scattered order (all coalescing cases on a big tree). */
TEST(distinct_sizes_deep_tree) {
  enum { N = 1500 };
  size_t heap = 64 << 20;
  unsigned char *r = region_alloc(heap);
  assert_true(P->init(r + GUARD, heap));
  test_rng_init(4242);
  static void *b[2 * N];
  static size_t sz[2 * N];
  for (int i = 0; i < 2 * N; i++) {
    sz[i] = 24 + 16 * test_rng_below(2000);
    assert_true((b[i] = P->malloc(sz[i])) != NULL);
    test_fill(b[i], sz[i], (uint64_t)i);
  }
  for (int i = 0; i < 2 * N; i += 2) {
    int j = (int)((i * 2654435761u) % (2 * N)) & ~1; /* scattered even index */
    if (!b[j]) j = i;
    if (!b[j]) continue;
    expect_true(test_verify(b[j], sz[j], (uint64_t)j));
    P->free(b[j]);
    b[j] = NULL;
    assert_true(P->validate());
  }
  for (int i = 0; i < 2 * N; i += 2) {
    if (b[i]) continue;
    sz[i] = 8 + test_rng_below(10000);
    b[i] = P->malloc(sz[i]);
    assert_true(b[i] != NULL);
    test_fill(b[i], sz[i], (uint64_t)i);
    assert_true(P->validate());
  }
  for (int i = 0; i < 2 * N; i++) {
    int j = (int)(((uint64_t)i * 7919) % (2 * N));
    expect_true(test_verify(b[j], sz[j], (uint64_t)j));
    P->free(b[j]);
    assert_true(P->validate());
  }
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

/* Sizes freed in increasing order: a splay tree degenerates into a chain deeper than any
 * fixed path stack; best-fit searches then walk it (and the splay policies reshape it). */
TEST(sorted_sizes_long_chain) {
  enum { N = 1300 };
  size_t heap = 40 << 20;
  unsigned char *r = region_alloc(heap);
  assert_true(P->init(r + GUARD, heap));
  static void *b[2 * N];
  for (int i = 0; i < 2 * N; i++) {
    size_t n = (i & 1) ? 8 : 40 + 16 * (size_t)i / 2;
    assert_true((b[i] = P->malloc(n)) != NULL);
    test_fill(b[i], n, (uint64_t)i);
  }
  for (int i = 0; i < 2 * N; i += 2) {
    P->free(b[i]);
    b[i] = NULL;
    if (i % 16 == 0) assert_true(P->validate());
  }
  assert_true(P->validate());
  /* smallest first: each is a best fit at the far end of the chain */
  for (int i = 0; i < 2 * N; i += 2) {
    size_t n = 40 + 16 * (size_t)i / 2;
    assert_true((b[i] = P->malloc(n)) != NULL);
    test_fill(b[i], n, (uint64_t)i);
    if (i % 16 == 0) assert_true(P->validate());
  }
  assert_true(P->validate());
  bool best_fit = strncmp(P->name, "seglist", 7) != 0 && strncmp(P->name, "hwx", 3) != 0 && !maps_pages();
  if (best_fit) expect_uint_eq(walk_now().nfree, 1); /* each hole refilled exactly */
  for (int i = 2 * N - 1; i >= 0; i--) {
    size_t n = (i & 1) ? 8 : 40 + 16 * (size_t)i / 2;
    expect_true(test_verify(b[i], n, (uint64_t)i));
    P->free(b[i]);
    if (i % 16 == 0) assert_true(P->validate());
  }
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

/* The same chain, then frees that coalesce with its deepest nodes (removals and an insert at
 * the far end of the chain), then everything in address order. */
TEST(sorted_sizes_chain_coalesce) {
  enum { N = 1300 };
  size_t heap = 40 << 20;
  unsigned char *r = region_alloc(heap);
  assert_true(P->init(r + GUARD, heap));
  static void *b[2 * N];
  for (int i = 0; i < 2 * N; i++) {
    size_t n = (i & 1) ? 8 : 40 + 16 * (size_t)i / 2;
    assert_true((b[i] = P->malloc(n)) != NULL);
    test_fill(b[i], 8, (uint64_t)i);
  }
  for (int i = 0; i < 2 * N; i += 2) P->free(b[i]);
  assert_true(P->validate());
  size_t nfree = walk_now().nfree;
  for (int i = 1; i < 12; i += 2) { /* each joins two chain nodes, the first the deepest */
    expect_true(test_verify(b[i], 8, (uint64_t)i));
    P->free(b[i]);
    assert_true(P->validate());
  }
  if (strcmp(P->name, "pow2") != 0) /* pow2 splits pages its own way */
    expect_uint_eq(walk_now().nfree, nfree - 6);
  for (int i = 13; i < 2 * N; i += 2) {
    expect_true(test_verify(b[i], 8, (uint64_t)i));
    P->free(b[i]);
    if (i % 16 == 1) assert_true(P->validate());
  }
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

/* Eight free blocks of one size (a tree node and its duplicates), separated by small
 * allocated ones; freeing the separators coalesces the tree node itself and duplicates at the
 * head, middle and tail of the list. */
TEST(duplicate_node_coalesce) {
  size_t size = 1 << 16;
  unsigned char *r = region_alloc(size);
  assert_true(P->init(r + GUARD, size));
  void *a[8], *s[8];
  for (int k = 0; k < 8; k++) {
    assert_true((a[k] = P->malloc(100)) != NULL);
    assert_true((s[k] = P->malloc(8)) != NULL);
    test_fill(s[k], 8, (uint64_t)k);
  }
  for (int k = 0; k < 8; k++) P->free(a[k]);
  assert_true(P->validate());
  if (strcmp(P->name, "pow2") != 0) /* pow2 splits pages its own way */
    expect_uint_eq(walk_now().nfree, 9); /* eight holes and the tail */
  static const int order[] = {0, 7, 3, 5, 1, 6, 2};
  for (int i = 0; i < 7; i++) {
    expect_true(test_verify(s[order[i]], 8, (uint64_t)order[i]));
    P->free(s[order[i]]);
    assert_true(P->validate());
    void *t = P->malloc(100); /* takes one of the remaining equal-size holes, if any */
    if (t) {
      test_fill(t, 100, 99);
      P->free(t);
      assert_true(P->validate());
    }
  }
  P->free(s[4]);
  assert_true(P->validate());
  expect_uint_eq(walk_now().blocks, 1);
  free(r);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    RUN(registry_order_and_lookup);
    RUN(minimum_blocks_are_the_seeds);
    return test_main_end();
  }
  P = lab_policy_find(argv[1]);
  if (!P) {
    fprintf(stderr, "no policy %s\n", argv[1]);
    return 2;
  }
  fprintf(stderr, "policy %s\n", P->name);
  RUN(init_and_single_block);
  RUN(malloc_alignment_capacity_and_free);
  RUN(coalesce_left_right_and_both);
  RUN(realloc_semantics);
  RUN(realloc_coalesces_left);
  RUN(exhaustion_returns_null_and_heap_stays_valid);
  RUN(odd_regions);
  RUN(random_ops_roomy_heap);
  RUN(random_ops_tight_heap);
  RUN(insert_delete_duplicates);
  RUN(distinct_sizes_deep_tree);
  RUN(sorted_sizes_long_chain);
  RUN(sorted_sizes_chain_coalesce);
  RUN(duplicate_node_coalesce);
  return test_main_end();
}
