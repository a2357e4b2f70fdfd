/* src/buddy.c -- kite's buddy page heap: a bitmap tree of "largest free order below".
 *
 * Data structure
 * --------------
 * The range [0, units) is the leaf level (level 0) of a binary tree padded to the next power
 * of two; level h has one node per aligned run of 2^h units, and the root sits at level
 * `top` = ceil(log2 units). Only the nodes that cover at least one real unit are stored,
 * plus at most a few padding entries per level, so a range of 2^k+1 units costs no more than
 * its own units (no power-of-two blow-up).
 *
 * Each node holds one small value:
 *     RSV  (0)        reserved as one whole block here (a hole), or an absent node
 *     ALLOC(1)        allocated as one whole block of order h here
 *     NONE (2)        partly used, nothing free below
 *     k+3 (k <= h-1)  partly used, the largest free block below has order k
 *     FULL(h) = h+3   the whole node is free
 * The values that mean "free" compare above the specials, so the allocator's descent is a
 * plain ">= need" test. Level 0 needs 2 bits per node (values 0..3), levels 1..12 a nibble
 * (FULL(12) = 15), the few levels above a byte: 0.25 + 0.5 + ... ~ 0.75 byte per unit.
 *
 * Invariants (kite_buddy_check() verifies every one):
 *  I1 every descendant of a FULL, ALLOC or RSV node holds FULL. Those descendants are
 *     "stale": their value says nothing about their state. A node is accurate when no strict
 *     ancestor is FULL, ALLOC or RSV. Partial values (NONE, k+3 < FULL) only appear on
 *     accurate nodes, and so do ALLOC and RSV.
 *  I2 an accurate partial node holds combine(left, right) = max(left, right, NONE); that is
 *     never FULL(h), because two FULL children always merge into a FULL parent (coalescing).
 *  I3 a node that reaches past `units` is never FULL, ALLOC or RSV; nodes wholly past
 *     `units` (padding) hold NONE.
 *  I4 the free blocks are the accurate FULL nodes (the root, or a child of a partial node);
 *     nr_free[k] counts those at level k and free_units their units.
 *  I5 `low` is a finger: no free unit has an index below it.
 *
 * Because of I1, allocating or freeing a block of order k writes one node and its ancestors
 * (until a value stops changing): O(log units), no subtree walk. Free recovers the order by
 * walking up from the leaf to the first non-FULL node: ALLOC there is the block (its start
 * must be the index), RSV is a hole, a partial node means the unit is free.
 *
 * Allocation searches from the finger instead of the root: it climbs from the level-k node
 * that holds `low` to the first accurate partial node with a big enough free block below,
 * then descends leftmost-first. Nothing free lies left of `low`, so the block found is still
 * the lowest-address one; sequential allocation climbs and descends a couple of levels on
 * average instead of the whole height.
 */
#include "kite/buddy.h"

#include <string.h>

#ifndef KITE_BUDDY_NIBBLE_TOP
/* highest level stored as nibbles (FULL(12) = 15 is the largest value a nibble holds) */
#define KITE_BUDDY_NIBBLE_TOP 12
#endif

#define LEVELS (KITE_BUDDY_MAX_ORDER + 1)

enum { RSV = 0, ALLOC = 1, NONE = 2, FREE_BASE = 3 };
#define FULL(h) ((unsigned)(h) + FREE_BASE)

#if defined(__GNUC__)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#else
#define likely(x) (x)
#define unlikely(x) (x)
#endif

struct kite_buddy_s {
  uint64_t units;       /* size of the range */
  uint64_t free_units;  /* units in free blocks (I4) */
  uint64_t low;         /* finger (I5) */
  unsigned top;         /* level of the root: ceil(log2 units) */
  unsigned max_order;   /* largest order that fits: floor(log2 units) */
  uint64_t nr_free[LEVELS];     /* free blocks per order (I4) */
  uint8_t *level[LEVELS];       /* node array of each level */
  uint64_t level_cap[LEVELS];   /* entries the array of each level holds (incl. padding) */
  uint8_t lw[LEVELS];           /* log2 of the bits per entry: 1, 2 or 3 */
};

/* ---- node access --------------------------------------------------------------------- */

static inline unsigned level_lw(unsigned h) {
  return h == 0 ? 1u : (h <= KITE_BUDDY_NIBBLE_TOP ? 2u : 3u);
}

/* The three storage classes are spelled out (rather than shifts by lw[h]): the branches
 * on h are well predicted and each access is a load, a shift and a mask. */
static inline unsigned node_get(const kite_buddy_t *b, unsigned h, uint64_t p) {
  const uint8_t *a = b->level[h];
  if (h > KITE_BUDDY_NIBBLE_TOP) return a[p];
  if (h > 0) return (a[p >> 1] >> ((p & 1) << 2)) & 15u;
  return (a[p >> 2] >> ((p & 3) << 1)) & 3u;
}

static inline void node_set(kite_buddy_t *b, unsigned h, uint64_t p, unsigned v) {
  uint8_t *a = b->level[h];
  if (h > KITE_BUDDY_NIBBLE_TOP) {
    a[p] = (uint8_t)v;
  } else if (h > 0) {
    unsigned sh = (unsigned)(p & 1) << 2;
    a[p >> 1] = (uint8_t)((a[p >> 1] & ~(15u << sh)) | (v << sh));
  } else {
    unsigned sh = (unsigned)(p & 3) << 1;
    a[p >> 2] = (uint8_t)((a[p >> 2] & ~(3u << sh)) | (v << sh));
  }
}

/* Both children of node (h, q), h >= 1: one load below level 13 (they share a byte). */
static inline void children_get(const kite_buddy_t *b, unsigned h, uint64_t q, unsigned *l,
                                unsigned *r) {
  const uint8_t *a = b->level[h - 1];
  if (h - 1 > KITE_BUDDY_NIBBLE_TOP) {
    *l = a[2 * q];
    *r = a[2 * q + 1];
  } else if (h > 1) {
    unsigned x = a[q];
    *l = x & 15u;
    *r = x >> 4;
  } else {
    unsigned x = a[q >> 1] >> ((q & 1) << 2);
    *l = x & 3u;
    *r = (x >> 2) & 3u;
  }
}

/* Value of a partial-or-free parent at level h from its children's values (I2). */
static inline unsigned combine(unsigned l, unsigned r, unsigned h) {
  if (l == FULL(h - 1) && r == FULL(h - 1)) return FULL(h);
  unsigned m = l > r ? l : r;
  return m > NONE ? m : NONE;
}

static inline int is_partial(unsigned v, unsigned h) {
  return v >= NONE && v != FULL(h);
}

/* Node (h, p) changed: recompute its ancestors until one keeps its value. Never merges
 * counters: callers that coalesce do their own accounting (see free_block). */
static inline void update_up(kite_buddy_t *b, unsigned h, uint64_t p) {
  unsigned top = b->top;
  while (h < top) {
    unsigned l, r;
    h++;
    p >>= 1;
    children_get(b, h, p, &l, &r);
    unsigned v = combine(l, r, h);
    if (node_get(b, h, p) == v) break;
    node_set(b, h, p, v);
  }
}

/* Block (h, p), accurate and not free, becomes free: merge with free buddies as far as they
 * go, keep nr_free / free_units, fix the ancestors. */
static void free_block(kite_buddy_t *b, unsigned h, uint64_t p) {
  b->free_units += (uint64_t)1 << h;
  node_set(b, h, p, FULL(h));
  while (h < b->top && node_get(b, h, p ^ 1) == FULL(h)) {
    b->nr_free[h]--; /* the buddy joins the merged block */
    h++;
    p >>= 1;
    node_set(b, h, p, FULL(h));
  }
  b->nr_free[h]++;
  update_up(b, h, p);
}

/* ---- setup ------------------------------------------------------------------------------ */

static unsigned ceil_log2(uint64_t n) { return n <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(n - 1); }
static unsigned floor_log2(uint64_t n) { return 63 - (unsigned)__builtin_clzll(n); }

/* Entries stored for level h: enough that both children of every real node at level h+1
 * exist, rounded up to whole bytes. */
static uint64_t level_entries(uint64_t units, unsigned h, unsigned top) {
  uint64_t e = h == top ? 1 : 2 * (((units - 1) >> (h + 1)) + 1);
  unsigned per_byte = 8u >> level_lw(h);
  return (e + per_byte - 1) / per_byte * per_byte;
}
static uint64_t level_bytes(uint64_t units, unsigned h, unsigned top) {
  return level_entries(units, h, top) >> (3 - level_lw(h));
}

size_t kite_buddy_meta_size(uint64_t units) {
  if (units == 0 || units > KITE_BUDDY_MAX_UNITS) return 0;
  unsigned top = ceil_log2(units);
  uint64_t sz = (sizeof(kite_buddy_t) + 15) & ~(uint64_t)15;
  for (unsigned h = 0; h <= top; h++) sz += level_bytes(units, h, top);
  if (sz != (size_t)sz) return 0;
  return (size_t)sz;
}

/* A byte whose every entry of level h holds v. */
static uint8_t fill_byte(unsigned h, unsigned v) {
  switch (level_lw(h)) {
    case 1: return (uint8_t)(v * 0x55u);
    case 2: return (uint8_t)(v * 0x11u);
    default: return (uint8_t)v;
  }
}

int kite_buddy_init(kite_buddy_t **out, void *meta, size_t meta_size, uint64_t units) {
  if (!out || !meta || ((uintptr_t)meta & 15)) return KITE_BUDDY_EINVAL;
  size_t need = kite_buddy_meta_size(units);
  if (need == 0 || meta_size < need) return KITE_BUDDY_EINVAL;
  kite_buddy_t *b = (kite_buddy_t *)meta;
  memset(b, 0, sizeof(*b));
  b->units = units;
  b->top = ceil_log2(units);
  b->max_order = floor_log2(units);
  uint8_t *at = (uint8_t *)meta + ((sizeof(kite_buddy_t) + 15) & ~(size_t)15);
  for (unsigned h = 0; h <= b->top; h++) {
    uint64_t bytes = level_bytes(units, h, b->top);
    b->level[h] = at;
    b->lw[h] = (uint8_t)level_lw(h);
    b->level_cap[h] = level_entries(units, h, b->top);
    /* Nodes wholly inside the range are FULL: fill their bytes in bulk, then set the node
     * that straddles the end (its largest free block is the top bit of the remainder, at
     * its start) and the padding one entry at a time. */
    uint64_t whole = units >> h;
    uint64_t whole_bytes = whole >> (3 - b->lw[h]);
    memset(at, fill_byte(h, FULL(h)), (size_t)whole_bytes);
    memset(at + whole_bytes, fill_byte(h, NONE), (size_t)(bytes - whole_bytes));
    for (uint64_t p = whole_bytes << (3 - b->lw[h]); p < b->level_cap[h]; p++) {
      uint64_t first = p << h;
      unsigned v = NONE;
      if (p < whole) v = FULL(h);
      else if (first < units) v = FREE_BASE + floor_log2(units - first);
      node_set(b, h, p, v);
    }
    at += bytes;
  }
  /* The free blocks are the binary digits of units, largest first. */
  for (unsigned k = 0; k <= b->max_order; k++) b->nr_free[k] = (units >> k) & 1;
  b->free_units = units;
  b->low = 0;
  *out = b;
  return KITE_BUDDY_OK;
}

/* ---- allocation ------------------------------------------------------------------------- */

int kite_buddy_alloc(kite_buddy_t *b, unsigned order, uint64_t *index) {
  if (unlikely(!b || !index)) return KITE_BUDDY_EINVAL;
  if (unlikely(order > b->max_order)) return KITE_BUDDY_EORDER;
  const unsigned need = FULL(order), top = b->top;
  if (unlikely(node_get(b, top, 0) < need)) return KITE_BUDDY_ENOMEM;

  /* Climb from the finger to an accurate node known to hold a big enough free block. */
  unsigned h = order;
  uint64_t p = b->low >> order;
  while (h < top) {
    unsigned v = node_get(b, h, p);
    if (v >= need && v != FULL(h)) break; /* partial, hence accurate (I1) */
    h++;
    p >>= 1;
  }
  /* Descend leftmost-first until a free block: it is the lowest one of order >= need. */
  unsigned v = node_get(b, h, p);
  while (v != FULL(h)) {
    h--;
    p <<= 1;
    v = node_get(b, h, p);
    if (v < need) {
      p |= 1;
      v = node_get(b, h, p);
    }
  }
  /* (h, p) is a free block of order h >= order: split off its first 2^order units; one
   * free block of each order order..h-1 remains. */
  b->nr_free[h]--;
  for (unsigned k = order; k < h; k++) b->nr_free[k]++;
  p <<= h - order;
  node_set(b, order, p, ALLOC);
  update_up(b, order, p);
  uint64_t idx = p << order, size = (uint64_t)1 << order;
  b->free_units -= size;
  if (order == 0 || (b->low >= idx && b->low < idx + size)) b->low = idx + size;
  *index = idx;
  return KITE_BUDDY_OK;
}

/* Find the block that holds unit `index` by climbing to the first non-FULL node.
 * Returns its order (>= 0) with *pos its node index, or KITE_BUDDY_EFREE /
 * KITE_BUDDY_ERESERVED / KITE_BUDDY_ENOTSTART. */
static inline int find_block(const kite_buddy_t *b, uint64_t index, uint64_t *pos) {
  unsigned h = 0, top = b->top;
  uint64_t p = index;
  unsigned v;
  while ((v = node_get(b, h, p)) == FULL(h)) {
    if (h == top) return KITE_BUDDY_EFREE;
    h++;
    p >>= 1;
  }
  if (v == ALLOC) {
    if (index & (((uint64_t)1 << h) - 1)) return KITE_BUDDY_ENOTSTART;
    *pos = p;
    return (int)h;
  }
  return v == RSV ? KITE_BUDDY_ERESERVED : KITE_BUDDY_EFREE;
}

int kite_buddy_free(kite_buddy_t *b, uint64_t index, unsigned *order) {
  if (unlikely(!b)) return KITE_BUDDY_EINVAL;
  if (unlikely(index >= b->units)) return KITE_BUDDY_ERANGE;
  uint64_t p;
  int h = find_block(b, index, &p);
  if (unlikely(h < 0)) return h;
  free_block(b, (unsigned)h, p);
  if (index < b->low) b->low = index;
  if (order) *order = (unsigned)h;
  return KITE_BUDDY_OK;
}

int kite_buddy_block_order(const kite_buddy_t *b, uint64_t index) {
  if (!b) return KITE_BUDDY_EINVAL;
  if (index >= b->units) return KITE_BUDDY_ERANGE;
  uint64_t p;
  return find_block(b, index, &p);
}

/* ---- reserve / unreserve ---------------------------------------------------------------- */
/* A range is cut into maximal aligned blocks (at most 2 per level). Each block is classified
 * by climbing to its first non-FULL node (itself included):
 *   FREE_IN   it lies in the free block F (a FULL node under a partial one, or the root)
 *   RSV_IN    it lies in (or is) a reserved block A
 *   ALLOC     it lies in (or is) an allocated block
 *   MIXED     it is itself a partial node: its subtree is walked (stackless, pruned at
 *             non-partial nodes), which costs the number of blocks already inside it.
 * Every block is checked before any is changed, so a failed call changes nothing. */

enum { K_FREE_IN, K_RSV_IN, K_ALLOC, K_MIXED };

typedef struct {
  int kind;
  unsigned ah; /* FREE_IN: level of F; RSV_IN: level of A */
} block_class_t;

static block_class_t classify(const kite_buddy_t *b, unsigned h, uint64_t p) {
  block_class_t c;
  unsigned l = h, v;
  uint64_t q = p;
  while ((v = node_get(b, l, q)) == FULL(l)) {
    if (l == b->top) { c.kind = K_FREE_IN; c.ah = l; return c; }
    l++;
    q >>= 1;
  }
  if (v == ALLOC) c.kind = K_ALLOC;
  else if (v == RSV) c.kind = K_RSV_IN;
  else c.kind = l == h ? K_MIXED : K_FREE_IN;
  c.ah = c.kind == K_FREE_IN ? l - 1 : l;
  return c;
}

/* Walk the subtree of the partial node (h0, p0). Checking (apply == 0): returns
 * KITE_BUDDY_EBUSY at the first block that is ALLOC, or FULL when `reserve` is 0 (unreserve
 * needs every unit reserved). Applying: every node becomes FULL (I1 under the new value the
 * caller writes at (h0, p0)); free blocks met are taken out of the counters. */
static int walk_mixed(kite_buddy_t *b, unsigned h0, uint64_t p0, int reserve, int apply) {
  unsigned h = h0;
  uint64_t p = p0;
  for (;;) {
    unsigned v = node_get(b, h, p);
    if (apply) node_set(b, h, p, FULL(h));
    if (is_partial(v, h)) { /* partial nodes are never leaves of the range */
      h--;
      p <<= 1;
      continue;
    }
    if (v == ALLOC) return KITE_BUDDY_EBUSY; /* only reachable when checking */
    if (v == FULL(h)) {
      if (!reserve) return KITE_BUDDY_EBUSY;
      if (apply) {
        b->nr_free[h]--;
        b->free_units -= (uint64_t)1 << h;
      }
    }
    for (;;) { /* next node in pre-order */
      if (h == h0) return KITE_BUDDY_OK;
      if (!(p & 1)) { p |= 1; break; }
      p >>= 1;
      h++;
    }
  }
}

static int range_block_check(kite_buddy_t *b, unsigned h, uint64_t p, int reserve) {
  block_class_t c = classify(b, h, p);
  switch (c.kind) {
    case K_ALLOC: return KITE_BUDDY_EBUSY;
    case K_FREE_IN: return reserve ? KITE_BUDDY_OK : KITE_BUDDY_EBUSY;
    case K_RSV_IN: return KITE_BUDDY_OK;
    default: return walk_mixed(b, h, p, reserve, 0);
  }
}

static void range_block_apply(kite_buddy_t *b, unsigned h, uint64_t p, int reserve) {
  block_class_t c = classify(b, h, p);
  if (reserve) {
    if (c.kind == K_RSV_IN) return;
    if (c.kind == K_MIXED) {
      walk_mixed(b, h, p, 1, 1);
    } else { /* FREE_IN: split F down to (h, p); the buddies on the way stay free */
      b->nr_free[c.ah]--;
      for (unsigned k = h; k < c.ah; k++) b->nr_free[k]++;
      b->free_units -= (uint64_t)1 << h;
    }
    node_set(b, h, p, RSV);
    update_up(b, h, p);
    return;
  }
  if (c.kind == K_MIXED) {
    walk_mixed(b, h, p, 0, 1);
  } else { /* RSV_IN: split A down to (h, p); the buddies on the way stay reserved */
    for (unsigned l = h; l < c.ah; l++) node_set(b, l, (p >> (l - h)) ^ 1, RSV);
  }
  free_block(b, h, p);
}

static int range_op(kite_buddy_t *b, uint64_t start, uint64_t count, int reserve) {
  if (!b) return KITE_BUDDY_EINVAL;
  if (start > b->units || count > b->units - start) return KITE_BUDDY_ERANGE;
  for (int apply = 0; apply <= 1; apply++) {
    uint64_t s = start, e = start + count;
    while (s < e) {
      unsigned h = floor_log2(e - s);
      if (s) {
        unsigned a = (unsigned)__builtin_ctzll(s);
        if (a < h) h = a;
      }
      if (!apply) {
        int err = range_block_check(b, h, s >> h, reserve);
        if (err) return err;
      } else {
        range_block_apply(b, h, s >> h, reserve);
      }
      s += (uint64_t)1 << h;
    }
  }
  if (!reserve && start < b->low) b->low = start;
  return KITE_BUDDY_OK;
}

int kite_buddy_reserve(kite_buddy_t *b, uint64_t start, uint64_t count) {
  return range_op(b, start, count, 1);
}

int kite_buddy_unreserve(kite_buddy_t *b, uint64_t start, uint64_t count) {
  return range_op(b, start, count, 0);
}

/* ---- queries ---------------------------------------------------------------------------- */

uint64_t kite_buddy_units(const kite_buddy_t *b) { return b ? b->units : 0; }
uint64_t kite_buddy_free_units(const kite_buddy_t *b) { return b ? b->free_units : 0; }

uint64_t kite_buddy_free_blocks(const kite_buddy_t *b, unsigned order) {
  return b && order <= KITE_BUDDY_MAX_ORDER ? b->nr_free[order] : 0;
}

int kite_buddy_largest_free_order(const kite_buddy_t *b) {
  if (!b) return -1;
  unsigned v = node_get(b, b->top, 0);
  return v >= FREE_BASE ? (int)(v - FREE_BASE) : -1;
}

/* Codes returned by kite_buddy_check (all negative). */
enum {
  CHK_ARG = -1,     /* NULL or not initialized */
  CHK_RANGE = -2,   /* a value too large for its level */
  CHK_PAD = -3,     /* padding not NONE, or a block reaching past units (I3) */
  CHK_STALE = -4,   /* a FULL/ALLOC/RSV node with a non-FULL child (I1) */
  CHK_COMBINE = -5, /* a partial node that is not combine(children) (I2) */
  CHK_LEAF = -6,    /* a leaf in the range that is partial */
  CHK_COUNT = -7,   /* nr_free or free_units disagree with the tree (I4) */
  CHK_FINGER = -8,  /* a free unit below the finger (I5) */
};

int kite_buddy_check(const kite_buddy_t *b) {
  if (!b || b->units == 0 || b->top > KITE_BUDDY_MAX_ORDER) return CHK_ARG;
  uint64_t nr[LEVELS] = {0}, free_units = 0;
  for (unsigned h = 0; h <= b->top; h++) {
    for (uint64_t p = 0; p < b->level_cap[h]; p++) {
      unsigned v = node_get(b, h, p);
      uint64_t first = p << h, end = first + ((uint64_t)1 << h);
      if (v > FULL(h)) return CHK_RANGE;
      if (h == b->top && p > 0) {
        if (v != NONE) return CHK_PAD;
        continue;
      }
      if (first >= b->units) {
        if (v != NONE) return CHK_PAD;
        continue;
      }
      int whole = v == FULL(h) || v == ALLOC || v == RSV;
      if (whole) {
        if (end > b->units) return CHK_PAD;
        if (h > 0 && (node_get(b, h - 1, 2 * p) != FULL(h - 1) ||
                      node_get(b, h - 1, 2 * p + 1) != FULL(h - 1)))
          return CHK_STALE;
      } else {
        if (h == 0) return CHK_LEAF;
        if (v != combine(node_get(b, h - 1, 2 * p), node_get(b, h - 1, 2 * p + 1), h))
          return CHK_COMBINE;
      }
      if (v == FULL(h) && (h == b->top || is_partial(node_get(b, h + 1, p >> 1), h + 1))) {
        nr[h]++;
        free_units += (uint64_t)1 << h;
        if (first < b->low) return CHK_FINGER;
      }
    }
  }
  if (free_units != b->free_units) return CHK_COUNT;
  for (unsigned k = 0; k < LEVELS; k++)
    if (nr[k] != b->nr_free[k]) return CHK_COUNT;
  return 0;
}

const char *kite_buddy_strerror(int err) {
  switch (err) {
    case KITE_BUDDY_OK: return "success";
    case KITE_BUDDY_ENOMEM: return "no free block of that order";
    case KITE_BUDDY_EORDER: return "order too large for the range";
    case KITE_BUDDY_ERANGE: return "index or range outside the buddy heap";
    case KITE_BUDDY_ENOTSTART: return "index is inside an allocated block but not its start";
    case KITE_BUDDY_EFREE: return "double free or block never allocated";
    case KITE_BUDDY_ERESERVED: return "index is in a reserved hole";
    case KITE_BUDDY_EBUSY: return "range is not entirely in the required state";
    case KITE_BUDDY_EINVAL: return "invalid argument";
    default: return "unknown buddy error";
  }
}
