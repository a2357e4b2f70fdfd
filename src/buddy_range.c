/* src/buddy_range.c -- the buddy page heap's range operations: reserve and unreserve a
 * range of units (holes), and allocate a block at a given place (the data structure and its
 * invariants I1-I5: buddy_impl.h).
 *
 * Data structure: none of its own; block_class_t below is a block's classification, computed
 * and used within one call.
 *
 * Invariants: every operation keeps I1-I5 (kite_buddy_check); a failed call changes nothing
 * (every block is checked before any is changed, range_op's two passes).
 */
#include "buddy_impl.h"

/* Add (sign +1) or remove (-1) the free blocks of a partial chunk to nr_free (I4): a maximal
 * free run of order l is a free aligned run whose parent run is not free. */
static void chunk_count(kite_buddy_t *b, uint64_t f, int sign) {
  uint64_t m[7];
  chunk_folds(f, m);
  for (unsigned l = 0; l < CHUNK_ORDER; l++) {
    uint64_t n = (uint64_t)((int)_kite_popcount64(m[l]) - 2 * (int)_kite_popcount64(m[l + 1]));
    b->nr_free[l] += sign > 0 ? n : (uint64_t)0 - n;
  }
}

/* ---- reserve / unreserve ---------------------------------------------------------------- */
/* A range is cut into maximal aligned blocks (at most 2 per order). Each block of order >= 6
 * is classified by climbing to its first non-FULL node (itself included):
 *   FREE_IN   it lies in the free block F (a FULL node under a partial one, or the root)
 *   RSV_IN    it lies in (or is) a reserved block A
 *   ALLOC     it lies in (or is) an allocated block
 *   MIXED     it is itself a partial node: its subtree is walked (stackless, pruned at
 *             non-partial nodes and at chunks), which costs the blocks already inside it.
 * A block of order < 6 is classified by its chunk's node the same way; in a partial chunk
 * its bits are read directly. Every block is checked before any is changed, so a failed call
 * changes nothing. */

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

/* Walk the subtree of the partial node (h0, p0), h0 >= 6. Checking (apply == 0): returns
 * KITE_BUDDY_EBUSY at the first allocated unit, or free unit when unreserving. Applying:
 * every node becomes FULL and every chunk blank (I1 under the value the caller writes at
 * (h0, p0)); free blocks met are taken out of the counters. */
static int walk_mixed(kite_buddy_t *b, unsigned h0, uint64_t p0, int reserve, int apply) {
  unsigned h = h0;
  uint64_t p = p0;
  for (;;) {
    unsigned v = node_get(b, h, p);
    if (apply) node_set(b, h, p, FULL(h));
    if (is_partial(v, h) && h > CHUNK_ORDER) {
      h--;
      p <<= 1;
      continue;
    }
    if (is_partial(v, h)) { /* a partial chunk */
      kite_buddy_chunk_t *ch = &b->chunk[p];
      if (!apply) {
        if (reserve ? ~(ch->free | ch->rsv) != 0 : ch->rsv != ALL_ONES) return KITE_BUDDY_EBUSY;
      } else {
        if (reserve) {
          chunk_count(b, ch->free, -1);
          b->free_units -= (uint64_t)_kite_popcount64(ch->free);
        }
        chunk_blank(ch);
      }
    } else if (v == ALLOC) {
      return KITE_BUDDY_EBUSY; /* only reachable when checking */
    } else if (v == FULL(h)) {
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

/* Block of order h at node p (h >= 6) or at unit p (h < 6). */
static int range_block_check(kite_buddy_t *b, unsigned h, uint64_t p, int reserve) {
  int small = h < CHUNK_ORDER;
  uint64_t c = small ? p >> CHUNK_ORDER : p;
  block_class_t cl = classify(b, small ? CHUNK_ORDER : h, c);
  switch (cl.kind) {
    case K_ALLOC: return KITE_BUDDY_EBUSY;
    case K_FREE_IN: return reserve ? KITE_BUDDY_OK : KITE_BUDDY_EBUSY;
    case K_RSV_IN: return KITE_BUDDY_OK;
    default: break;
  }
  if (!small) return walk_mixed(b, h, p, reserve, 0);
  const kite_buddy_chunk_t *ch = &b->chunk[c];
  uint64_t bits = run_bits(h, (unsigned)p & 63);
  if (reserve) return (~(ch->free | ch->rsv) & bits) ? KITE_BUDDY_EBUSY : KITE_BUDDY_OK;
  return (ch->rsv & bits) != bits ? KITE_BUDDY_EBUSY : KITE_BUDDY_OK;
}

/* Chunk c's free word changed from a partial state: set its node, fix the ancestors. */
static void chunk_settle(kite_buddy_t *b, uint64_t c) {
  unsigned v = node_get(b, CHUNK_ORDER, c), nv = chunk_value(b->chunk[c].free);
  if (nv != v) {
    node_set(b, CHUNK_ORDER, c, nv);
    update_up(b, CHUNK_ORDER, c);
  }
}

static void range_small_apply(kite_buddy_t *b, unsigned k, uint64_t unit, int reserve) {
  uint64_t c = unit >> CHUNK_ORDER;
  kite_buddy_chunk_t *ch = &b->chunk[c];
  uint64_t bits = run_bits(k, (unsigned)unit & 63);
  block_class_t cl = classify(b, CHUNK_ORDER, c);
  if (cl.kind == K_MIXED) { /* partial chunk: recount it around the change */
    if (reserve && (ch->rsv & bits) == bits) return;
    chunk_count(b, ch->free, -1);
    if (reserve) {
      b->free_units -= (uint64_t)_kite_popcount64(ch->free & bits);
      ch->free &= ~bits;
      ch->rsv |= bits;
    } else {
      b->free_units += (uint64_t)1 << k;
      ch->rsv &= ~bits;
      ch->free |= bits;
      if (ch->free == ALL_ONES) { /* the whole chunk is free now */
        coalesce_from(b, CHUNK_ORDER, c);
        return;
      }
    }
    chunk_count(b, ch->free, +1);
    chunk_settle(b, c);
    return;
  }
  if (reserve) {
    if (cl.kind == K_RSV_IN) return;
    /* FREE_IN: split F down to the chunk; the buddies on the way stay free */
    b->nr_free[cl.ah]--;
    for (unsigned l = CHUNK_ORDER; l < cl.ah; l++) b->nr_free[l]++;
    ch->free = ~bits;
    ch->rsv = bits;
    b->free_units -= (uint64_t)1 << k;
  } else {
    /* RSV_IN: split A down to the chunk; the buddies on the way stay reserved */
    for (unsigned l = CHUNK_ORDER; l < cl.ah; l++) node_set(b, l, (c >> (l - CHUNK_ORDER)) ^ 1, RSV);
    ch->free = bits;
    ch->rsv = ~bits;
    b->free_units += (uint64_t)1 << k;
  }
  ch->start = 0;
  chunk_count(b, ch->free, +1);
  node_set(b, CHUNK_ORDER, c, FULL(CHUNK_ORDER)); /* stale value: chunk_settle rewrites it */
  chunk_settle(b, c);
}

static void range_block_apply(kite_buddy_t *b, unsigned h, uint64_t p, int reserve) {
  if (h < CHUNK_ORDER) {
    range_small_apply(b, h, p, reserve);
    return;
  }
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
  b->free_units += (uint64_t)1 << h;
  coalesce_from(b, h, p);
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
      uint64_t p = h < CHUNK_ORDER ? s : s >> h;
      if (!apply) {
        int err = range_block_check(b, h, p, reserve);
        if (err) return err;
      } else {
        range_block_apply(b, h, p, reserve);
      }
      s += (uint64_t)1 << h;
    }
  }
  if (!reserve) /* a run made free overlaps the range: it starts at or after start rounded down */
    for (unsigned k = 0; k < LEVELS; k++) {
      uint64_t s = start & ~(((uint64_t)1 << k) - 1);
      if (s < b->finger[k]) b->finger[k] = s;
    }
  return KITE_BUDDY_OK;
}

int kite_buddy_reserve(kite_buddy_t *b, uint64_t start, uint64_t count) {
  return range_op(b, start, count, 1);
}

int kite_buddy_unreserve(kite_buddy_t *b, uint64_t start, uint64_t count) {
  return range_op(b, start, count, 0);
}

/* ---- allocation at a given place ---------------------------------------------------------- */
/* The aligned block [index, index + 2^order) becomes one allocated block if every unit of it
 * is free: the reserve code splits the free block(s) around it exactly as it would for a
 * hole, and the hole, being one aligned block, is then relabelled ALLOC (tree node) or given
 * its start bit (chunk). Neither relabelling changes a free word or a node's value as its
 * parent sees it (ALLOC and RSV both read "nothing free here"), so the counters the reserve
 * kept are the allocation's. Fingers need no change: taking free units never breaks I5. */
int kite_buddy_alloc_at(kite_buddy_t *b, uint64_t index, unsigned order) {
  if (unlikely(!b)) return KITE_BUDDY_EINVAL;
  if (order > b->max_order) return KITE_BUDDY_EORDER;
  uint64_t size = (uint64_t)1 << order;
  if (index >= b->units || size > b->units - index || (index & (size - 1))) return KITE_BUDDY_ERANGE;
  int small = order < CHUNK_ORDER;
  uint64_t c = index >> CHUNK_ORDER, p = small ? index : index >> order;
  block_class_t cl = classify(b, small ? CHUNK_ORDER : order, small ? c : p);
  if (cl.kind == K_MIXED) {
    if (!small) return KITE_BUDDY_EBUSY; /* a partial node: something inside is not free */
    uint64_t bits = run_bits(order, (unsigned)index & 63);
    if ((b->chunk[c].free & bits) != bits) return KITE_BUDDY_EBUSY;
  } else if (cl.kind != K_FREE_IN) {
    return KITE_BUDDY_EBUSY;
  }
  range_block_apply(b, order, p, 1);
  if (small) {
    kite_buddy_chunk_t *ch = &b->chunk[c];
    ch->rsv &= ~run_bits(order, (unsigned)index & 63);
    ch->start |= (uint64_t)1 << (index & 63);
  } else {
    node_set(b, order, p, ALLOC);
  }
  return KITE_BUDDY_OK;
}

