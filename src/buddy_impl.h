/* src/buddy_impl.h -- the buddy page heap's data structure, shared by the two files that
 * implement it (buddy.c: set-up, allocation, free, queries, validator; buddy_range.c:
 * reserve, unreserve, allocation at a given place). Nothing else includes it: the heap's
 * contract is include/kite/buddy.h.
 *
 * Data structure
 * --------------
 * The range [0, units) is cut into chunks of 64 units (the last one may be short). Inside a
 * chunk, three 64-bit words say everything about blocks of order 0..5:
 *     free   bit u set: unit u is free
 *     rsv    bit u set: unit u is reserved (a hole); units past `units` are reserved too
 *     start  bit u set: an allocated block starts at u
 * A unit that is neither free nor reserved is allocated. A block's order is recovered from
 * `start`: it runs up to the next start, free or reserved unit, and is a power of two long.
 * The largest free aligned block of a chunk comes from word-level folds of `free` (m1 = pairs
 * of free units, m2 = quads ... m5 = 32-unit runs): a few shifts and ands, no loop.
 *
 * Above the chunks sits a binary tree, level 6 (one node per chunk) up to the root at level
 * `top` = max(6, ceil(log2 units)); level h has one node per aligned run of 2^h units. Only
 * nodes that cover real units are stored (plus a padding entry or two per level), so a range
 * of 2^k+1 units costs no more than its own units. Each node holds one small value:
 *     RSV  (0)        reserved as one whole block here (a hole)
 *     ALLOC(1)        allocated as one whole block of order h here
 *     NONE (2)        partly used, nothing free below
 *     k+3 (k <= h-1)  partly used, the largest free block below has order k
 *     FULL(h) = h+3   the whole node is free
 * The "free" values compare above the specials, so the search is a plain ">= need" test.
 * One byte per node (nibbles would halve the tree but cost a shift and a branch per level;
 * the tree is only 1/32 byte per unit). Metadata: 24 bytes per chunk plus the tree: about
 * 0.41 byte per unit.
 *
 * Invariants (kite_buddy_check() verifies every one):
 *  I1 every tree descendant of a FULL, ALLOC or RSV node holds FULL, and every chunk under
 *     (or at) such a node is blank: free all ones, rsv and start zero. Those descendants are
 *     "stale": their value says nothing about their state. A node is accurate when no strict
 *     ancestor is FULL, ALLOC or RSV; partial values only appear on accurate nodes.
 *  I2 an accurate partial node holds combine(left, right) = max(left, right, NONE), which is
 *     never FULL(h): two FULL children always merge into a FULL parent (coalescing). A
 *     partial level-6 node holds chunk_value(free) of its chunk, and that chunk is not
 *     entirely free (a free chunk is a FULL node).
 *  I3 a node that reaches past `units` is never FULL, ALLOC or RSV; nodes wholly past
 *     `units` hold NONE. In a partial chunk, free & rsv == 0 and start marks exactly the
 *     starts of aligned power-of-two runs that cover the allocated units.
 *  I4 the free blocks are the accurate FULL nodes (the root, or a child of a partial node)
 *     and the maximal aligned free runs inside partial chunks; nr_free[k] counts those of
 *     order k and free_units their units.
 *  I5 finger[k] is a lower bound for order k: no free aligned run of 2^k units starts
 *     below it.
 *
 * The helpers below are what both files use. They were file-local to one buddy.c: each stays
 * static (coalesce_from, not inline, is marked unused for the file that does not call it), so
 * every file compiles them as the single file did.
 */
#ifndef KITE_BUDDY_IMPL_H
#define KITE_BUDDY_IMPL_H
#include "kite/buddy.h"
#include "bits.h"

#define LEVELS (KITE_BUDDY_MAX_ORDER + 1)
#define CHUNK_ORDER 6u /* a chunk is 64 units: one bit per unit in a uint64_t */
#define ALL_ONES (~(uint64_t)0)

enum { RSV = 0, ALLOC = 1, NONE = 2, FREE_BASE = 3 };
#define FULL(h) ((unsigned)(h) + FREE_BASE)

#if defined(__GNUC__)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define KITE_NOINLINE __attribute__((noinline, cold))
#else
#define likely(x) (x)
#define unlikely(x) (x)
#define KITE_NOINLINE
#endif

typedef struct {
  uint64_t free, rsv, start;
} kite_buddy_chunk_t;

struct kite_buddy_s {
  uint64_t units;       /* size of the range */
  uint64_t free_units;  /* units in free blocks (I4) */
  uint64_t nchunks;     /* ceil(units / 64) */
  unsigned top;         /* level of the root: max(6, ceil(log2 units)) */
  unsigned max_order;   /* largest order that fits: floor(log2 units) */
  kite_buddy_chunk_t *chunk;    /* nchunks chunks */
  uint64_t finger[LEVELS];      /* search start per order (I5) */
  uint64_t nr_free[LEVELS];     /* free blocks per order (I4), plus pend for orders < 6 */
  uint64_t pend;                /* batched changes of nr_free[0..5] (see pend_add) */
  unsigned pend_ops;            /* changes in pend */
  uint8_t *level[LEVELS];       /* node array of levels 6..top */
};

/* ---- tree nodes (levels >= 6) ------------------------------------------------------------ */

static inline unsigned node_get(const kite_buddy_t *b, unsigned h, uint64_t p) {
  return b->level[h][p];
}

static inline void node_set(kite_buddy_t *b, unsigned h, uint64_t p, unsigned v) {
  b->level[h][p] = (uint8_t)v;
}

/* Both children of node (h, q), h >= 7 (adjacent bytes). */
static inline void children_get(const kite_buddy_t *b, unsigned h, uint64_t q, unsigned *l,
                                unsigned *r) {
  const uint8_t *a = b->level[h - 1] + 2 * q;
  *l = a[0];
  *r = a[1];
}

/* Value of a partial-or-free parent at level h from its children's values (I2). */
static inline unsigned combine(unsigned l, unsigned r, unsigned h) {
  if (l == FULL(h - 1) && r == FULL(h - 1)) return FULL(h);
  unsigned m = l > r ? l : r;
  return m > NONE ? m : NONE;
}

static inline int is_partial(unsigned v, unsigned h) { return v >= NONE && v != FULL(h); }

/* Node (h, p) changed: recompute its ancestors until one keeps its value. Value only: the
 * callers that merge blocks do their own counting (coalesce_from). */
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

/* A free block of order j now starts at s: no finger stays above it (I5). Orders < 6 with
 * conditional moves, the rest (rare: a freed chunk or more) in a loop. */
static inline void finger_lower(kite_buddy_t *b, unsigned j, uint64_t s) {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 6
#endif
  for (unsigned l = 0; l < CHUNK_ORDER; l++) {
    uint64_t f = b->finger[l];
    b->finger[l] = (l <= j && s < f) ? s : f;
  }
  for (unsigned l = CHUNK_ORDER; l <= j; l++)
    if (s < b->finger[l]) b->finger[l] = s;
}

/* Node (h, p), h >= 6, accurate, becomes free (its units were counted by the caller):
 * merge with free buddies as far as they go, count the merged block, fix the ancestors and
 * the fingers. */
__attribute__((unused)) static void coalesce_from(kite_buddy_t *b, unsigned h, uint64_t p) {
  node_set(b, h, p, FULL(h));
  while (h < b->top && node_get(b, h, p ^ 1) == FULL(h)) {
    b->nr_free[h]--; /* the buddy joins the merged block */
    h++;
    p >>= 1;
    node_set(b, h, p, FULL(h));
  }
  b->nr_free[h]++;
  finger_lower(b, h, p << h);
  update_up(b, h, p);
}

/* ---- chunks (orders 0..5) ---------------------------------------------------------------- */

/* m[l] bit i set: units [i, i + 2^l) are all free (i a multiple of 2^l), l = 0..6. */
static inline void chunk_folds(uint64_t f, uint64_t m[7]) {
  m[0] = f;
  m[1] = m[0] & (m[0] >> 1) & 0x5555555555555555ull;
  m[2] = m[1] & (m[1] >> 2) & 0x1111111111111111ull;
  m[3] = m[2] & (m[2] >> 4) & 0x0101010101010101ull;
  m[4] = m[3] & (m[3] >> 8) & 0x0001000100010001ull;
  m[5] = m[4] & (m[4] >> 16) & 0x0000000100000001ull;
  m[6] = m[5] & (m[5] >> 32) & 1u;
}

/* Order of the largest free aligned run that holds unit x (x itself free): the number of
 * levels 1..6 whose run around x is free (they are nested, so they form a prefix). */
static inline unsigned chunk_run_order(const uint64_t m[7], unsigned x) {
  return (unsigned)(((m[1] >> (x & ~1u)) & 1) + ((m[2] >> (x & ~3u)) & 1) +
                    ((m[3] >> (x & ~7u)) & 1) + ((m[4] >> (x & ~15u)) & 1) +
                    ((m[5] >> (x & ~31u)) & 1) + (m[6] & 1));
}

/* Level-6 node value of a chunk whose free word is f. */
static inline unsigned chunk_value(uint64_t f) {
  if (f == ALL_ONES) return FULL(CHUNK_ORDER);
  if (f == 0) return NONE;
  uint64_t m[7];
  chunk_folds(f, m);
  return FREE_BASE + (m[1] != 0) + (m[2] != 0) + (m[3] != 0) + (m[4] != 0) + (m[5] != 0);
}

/* Bits of a run of 2^k units (k <= 6) at offset o. */
static inline uint64_t run_bits(unsigned k, unsigned o) {
  return k >= CHUNK_ORDER ? ALL_ONES : (((uint64_t)2 << ((1u << k) - 1)) - 1) << o;
}

/* Order of the allocated block that starts at offset o (its start bit is set). */
static inline unsigned chunk_block_order(const kite_buddy_chunk_t *ch, unsigned o) {
  uint64_t stop = ch->start | ch->free | ch->rsv;
  uint64_t after = (stop >> o) >> 1; /* units o+1 .. 63 */
  unsigned len = 1 + (unsigned)__builtin_ctzll(after | ((uint64_t)1 << (63 - o)));
  return 31 - (unsigned)__builtin_clz(len);
}

static inline void chunk_blank(kite_buddy_chunk_t *ch) {
  ch->free = ALL_ONES;
  ch->rsv = 0;
  ch->start = 0;
}

static inline unsigned floor_log2(uint64_t n) { return 63 - (unsigned)__builtin_clzll(n); }

#endif
