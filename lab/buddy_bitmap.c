/* lab/buddy_bitmap.c -- seed 003's plain bitmap tree buddy allocator.
 *
 * One byte per node of a complete binary tree over the next power of two of `units` leaves,
 * kept as a flat array indexed from 1 (children of i are 2i and 2i + 1, parent i / 2), as the
 * seed draws it. A node's byte is 1 + the largest order free somewhere under it, 0 when
 * nothing is free there; an allocated block is a node set to 0 whose subtree keeps the bytes
 * it had (all free). Leaves beyond `units` start at 0.
 *  - alloc(order): the root says whether a block of that order is free; descend taking the
 *    left child whenever it has one, else the right, to the level of the order; set the node
 *    to 0 and recompute the ancestors (a parent of two wholly free halves is one order up,
 *    else the larger of its children).
 *  - free(index): climb from the leaf to the first node at 0: that is the allocated block
 *    (everything under an allocated block reads free). Its byte is restored, the ancestors
 *    recomputed, which merges buddies.
 * No per-order lists, no bitmaps of words, no cache-friendly layout: that is kite's
 * (include/kite/buddy.h). Here for the seed's table beside it.
 */
#include <string.h>

#include "buddy_policy.h"

static uint8_t *bb_node;    /* bb_node[1 .. 2 * leaves - 1] */
static unsigned bb_depth;   /* leaves = 2^depth */
static uint64_t bb_units, bb_free;

static size_t bb_meta_size(uint64_t units) {
  if (units == 0 || units > ((uint64_t)1 << 40)) return 0;
  unsigned d = 0;
  while (((uint64_t)1 << d) < units) d++;
  return (size_t)2 << d;
}

/* Height of node i (leaves 0). */
static inline unsigned bb_height(uint64_t i) { return bb_depth - (unsigned)(63 - __builtin_clzll(i)); }

static inline void bb_fix_up(uint64_t i) {
  for (unsigned h = bb_height(i) + 1; i > 1; h++) {
    i >>= 1;
    uint8_t l = bb_node[2 * i], r = bb_node[2 * i + 1];
    bb_node[i] = (l == h && r == h) ? (uint8_t)(h + 1) : (l > r ? l : r);
  }
}

static int bb_init(void *meta, uint64_t units) {
  size_t sz = bb_meta_size(units);
  if (!sz || !meta) return KITE_BUDDY_EINVAL;
  bb_node = meta;
  bb_depth = 0;
  while (((uint64_t)1 << bb_depth) < units) bb_depth++;
  uint64_t leaves = (uint64_t)1 << bb_depth;
  for (uint64_t k = 0; k < leaves; k++) bb_node[leaves + k] = k < units ? 1 : 0;
  for (uint64_t i = leaves - 1; i >= 1; i--) {
    unsigned h = bb_height(i);
    uint8_t l = bb_node[2 * i], r = bb_node[2 * i + 1];
    bb_node[i] = (l == h && r == h) ? (uint8_t)(h + 1) : (l > r ? l : r);
  }
  bb_units = bb_free = units;
  return 0;
}

static int bb_alloc(unsigned order, uint64_t *index) {
  if (order > 63 || ((uint64_t)1 << order) > bb_units) return KITE_BUDDY_EORDER;
  if (bb_node[1] < order + 1) return KITE_BUDDY_ENOMEM;
  uint64_t i = 1;
  for (unsigned h = bb_depth; h > order; h--) i = bb_node[2 * i] >= order + 1 ? 2 * i : 2 * i + 1;
  bb_node[i] = 0;
  bb_fix_up(i);
  *index = (i - ((uint64_t)1 << (bb_depth - order))) << order;
  bb_free -= (uint64_t)1 << order;
  return 0;
}

static int bb_free_block(uint64_t index) {
  if (index >= bb_units) return KITE_BUDDY_ERANGE;
  uint64_t i = ((uint64_t)1 << bb_depth) + index;
  unsigned h = 0;
  while (i >= 1 && bb_node[i] != 0) i >>= 1, h++;
  if (i == 0 || (index & (((uint64_t)1 << h) - 1))) return KITE_BUDDY_EFREE;
  bb_node[i] = (uint8_t)(h + 1);
  bb_fix_up(i);
  bb_free += (uint64_t)1 << h;
  return 0;
}

static uint64_t bb_free_units(void) { return bb_free; }

static void bb_fini(void) { bb_node = NULL; }

/* Free units under node i, checking every byte; -1 on a violation. */
static int64_t bb_check_sub(uint64_t i, unsigned h) {
  uint8_t v = bb_node[i];
  if (h == 0) {
    uint64_t k = i - ((uint64_t)1 << bb_depth);
    if (k >= bb_units) return v == 0 ? 0 : -1;
    return v > 1 ? -1 : v;
  }
  uint8_t l = bb_node[2 * i], r = bb_node[2 * i + 1];
  if (v == 0 && l == h && r == h) return 0; /* an allocated block */
  uint8_t want = (l == h && r == h) ? (uint8_t)(h + 1) : (l > r ? l : r);
  if (v != want) return -1;
  int64_t a = bb_check_sub(2 * i, h - 1), b = a < 0 ? -1 : bb_check_sub(2 * i + 1, h - 1);
  return b < 0 ? -1 : a + b;
}

static int bb_check(void) {
  if (!bb_node) return -1;
  int64_t n = bb_check_sub(1, bb_depth);
  return n >= 0 && (uint64_t)n == bb_free ? 0 : -1;
}

const lab_buddy_policy_t *lab_buddy_bitmap_bytes(void) {
  static const lab_buddy_policy_t p = {
      .name = "bitmap-bytes",
      .description = "Bitmap Tree, plain (seed 003: one byte per node, flat array from 1)",
      .lowest_first = true,
      .slow = false,
      .meta_size = bb_meta_size,
      .init = bb_init,
      .alloc = bb_alloc,
      .free = bb_free_block,
      .free_units = bb_free_units,
      .fini = bb_fini,
      .check = bb_check,
  };
  return &p;
}
