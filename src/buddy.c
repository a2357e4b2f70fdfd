/* src/buddy.c -- kite's buddy page heap: a tree of "largest free order below" over 64-unit
 * chunks kept as bitmaps.
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
 * Costs. Because of I1, allocating or freeing a block writes its chunk word or tree node and
 * then the ancestors until a value stops changing: O(log units), no subtree writes. Free
 * recovers the order from the chunk's start bits, or, for blocks of order >= 6, by climbing
 * from the chunk's node to the first non-FULL node (ALLOC: the block, RSV: a hole, partial:
 * the unit is free).
 *
 * Allocation of order k starts at finger[k]: when the chunk that holds it is partial and has
 * a big enough run, the lowest such run is the answer (none lies left of the finger), found
 * with one count-trailing-zeros; sequential order-0 allocation stays in that chunk 63 times
 * out of 64 and touches the tree only when the chunk's largest free order changes. Otherwise
 * it climbs from the finger to the first accurate node with a big enough free block below,
 * and descends leftmost-first: still the lowest-address block, in O(log units). A found
 * block moves finger[k] past it; a freed block (after merging: order j at s) lowers
 * finger[0..j] to s. Keeping one finger per order matters under churn: small free holes at
 * low addresses would otherwise send every larger request on a long climb.
 */
#include "kite/buddy.h"
#include "bits.h"

#include <string.h>

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
static void coalesce_from(kite_buddy_t *b, unsigned h, uint64_t p) {
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

/* Splits and merges inside chunks change nr_free[0..5] on every allocation; rather than six
 * read-modify-writes (or a loop whose trip count the branch predictor cannot guess), the
 * changes are batched in `pend`: six signed 10-bit fields, packed two's complement, so that
 * one change is one add. They are flushed into nr_free every PEND_FLUSH changes (a field
 * then holds at most +-PEND_FLUSH < 512); readers add the pending part (pend_get). */
#define PEND_FLUSH 256u
#define PEND_BITS 10u

/* Packed delta of a split: the free run of order j loses a block of order k, which leaves one
 * free block of each order k..j-1 (j = 6, the whole chunk, is counted by the tree). A merge
 * is the negative. */
#define PEND_SPLIT(k, j)                                                                  \
  ((((uint64_t)1 << (PEND_BITS * (j))) - ((uint64_t)1 << (PEND_BITS * (k)))) /                \
       ((1u << PEND_BITS) - 1) -                                                            \
   (((uint64_t)1 << (PEND_BITS * (j))) & (((uint64_t)1 << 60) - 1)))
#define PEND_ROW(k)                                                                        \
  { PEND_SPLIT(k, 0), PEND_SPLIT(k, 1), PEND_SPLIT(k, 2), PEND_SPLIT(k, 3), PEND_SPLIT(k, 4), \
    PEND_SPLIT(k, 5), PEND_SPLIT(k, 6) }
static const uint64_t pend_split_tab[CHUNK_ORDER][CHUNK_ORDER + 1] = {
    PEND_ROW(0), PEND_ROW(1), PEND_ROW(2), PEND_ROW(3), PEND_ROW(4), PEND_ROW(5)};
static inline uint64_t pend_split(unsigned k, unsigned j) { return pend_split_tab[k][j]; }

/* The six pending deltas. */
static inline void pend_decode(uint64_t pend, int64_t d[CHUNK_ORDER]) {
  int64_t a = (int64_t)pend; /* the packed value is sum d[l] 2^(10 l), |.| < 2^60 */
  for (unsigned l = 0; l < CHUNK_ORDER; l++) {
    int64_t f = a & ((1 << PEND_BITS) - 1);
    if (f >= (1 << (PEND_BITS - 1))) f -= 1 << PEND_BITS;
    d[l] = f;
    a = (a - f) >> PEND_BITS;
  }
}

KITE_NOINLINE static void pend_flush(kite_buddy_t *b) {
  int64_t d[CHUNK_ORDER];
  pend_decode(b->pend, d);
  for (unsigned l = 0; l < CHUNK_ORDER; l++) b->nr_free[l] += (uint64_t)d[l];
  b->pend = 0;
  b->pend_ops = 0;
}

static inline void pend_add(kite_buddy_t *b, uint64_t delta) {
  b->pend += delta;
  if (unlikely(++b->pend_ops >= PEND_FLUSH)) pend_flush(b);
}

/* nr_free[order] including the pending part. */
static uint64_t pend_get(const kite_buddy_t *b, unsigned order) {
  if (order >= CHUNK_ORDER) return b->nr_free[order];
  int64_t d[CHUNK_ORDER];
  pend_decode(b->pend, d);
  return b->nr_free[order] + (uint64_t)d[order];
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

/* Add (sign +1) or remove (-1) the free blocks of a partial chunk to nr_free (I4): a maximal
 * free run of order l is a free aligned run whose parent run is not free. */
static void chunk_count(kite_buddy_t *b, uint64_t f, int sign) {
  uint64_t m[7];
  chunk_folds(f, m);
  for (unsigned l = 0; l < CHUNK_ORDER; l++) {
    uint64_t n = (uint64_t)(__builtin_popcountll(m[l]) - 2 * __builtin_popcountll(m[l + 1]));
    b->nr_free[l] += sign > 0 ? n : (uint64_t)0 - n;
  }
}

/* Order of the allocated block that starts at offset o (its start bit is set). */
static inline unsigned chunk_block_order(const kite_buddy_chunk_t *ch, unsigned o) {
  uint64_t stop = ch->start | ch->free | ch->rsv;
  uint64_t after = (stop >> o) >> 1; /* units o+1 .. 63 */
  unsigned len = 1 + (unsigned)__builtin_ctzll(after | ((uint64_t)1 << (63 - o)));
  return 31 - (unsigned)__builtin_clz(len);
}

static void chunk_blank(kite_buddy_chunk_t *ch) {
  ch->free = ALL_ONES;
  ch->rsv = 0;
  ch->start = 0;
}

/* ---- setup ------------------------------------------------------------------------------ */

static unsigned floor_log2(uint64_t n) { return 63 - (unsigned)__builtin_clzll(n); }
static unsigned top_level(uint64_t units) {
  unsigned t = _kite_ceil_log2(units);
  return t < CHUNK_ORDER ? CHUNK_ORDER : t;
}

/* Entries stored for level h: enough that both children of every real node at level h+1
 * exist (one byte each). */
static uint64_t level_entries(uint64_t units, unsigned h, unsigned top) {
  return h == top ? 1 : 2 * (((units - 1) >> (h + 1)) + 1);
}
static uint64_t level_bytes(uint64_t units, unsigned h, unsigned top) {
  return level_entries(units, h, top);
}
static uint64_t header_bytes(void) { return (sizeof(kite_buddy_t) + 15) & ~(uint64_t)15; }
static uint64_t nchunks_of(uint64_t units) { return (units + 63) >> CHUNK_ORDER; }

size_t kite_buddy_meta_size(uint64_t units) {
  if (units == 0 || units > KITE_BUDDY_MAX_UNITS) return 0;
  unsigned top = top_level(units);
  uint64_t sz = header_bytes() + nchunks_of(units) * sizeof(kite_buddy_chunk_t);
  for (unsigned h = CHUNK_ORDER; h <= top; h++) sz += level_bytes(units, h, top);
  if (sz != (size_t)sz) return 0;
  return (size_t)sz;
}

int kite_buddy_init(kite_buddy_t **out, void *meta, size_t meta_size, uint64_t units) {
  if (!out || !meta || ((uintptr_t)meta & 15)) return KITE_BUDDY_EINVAL;
  size_t need = kite_buddy_meta_size(units);
  if (need == 0 || meta_size < need) return KITE_BUDDY_EINVAL;
  kite_buddy_t *b = (kite_buddy_t *)meta;
  memset(b, 0, sizeof(*b));
  b->units = units;
  b->top = top_level(units);
  b->max_order = floor_log2(units);
  b->nchunks = nchunks_of(units);
  b->chunk = (kite_buddy_chunk_t *)((uint8_t *)meta + header_bytes());
  for (uint64_t c = 0; c < b->nchunks; c++) chunk_blank(&b->chunk[c]);
  if (units & 63) { /* the short last chunk: units past the end are reserved */
    kite_buddy_chunk_t *ch = &b->chunk[b->nchunks - 1];
    ch->free = ((uint64_t)1 << (units & 63)) - 1;
    ch->rsv = ~ch->free;
  }
  uint8_t *at = (uint8_t *)(b->chunk + b->nchunks);
  for (unsigned h = CHUNK_ORDER; h <= b->top; h++) {
    uint64_t bytes = level_bytes(units, h, b->top);
    b->level[h] = at;
    /* Nodes wholly inside the range are FULL: fill their bytes in bulk, then set the node
     * that straddles the end (its largest free block is the top bit of the remainder, at
     * its start) and the padding one entry at a time. */
    uint64_t whole = units >> h;
    memset(at, (int)FULL(h), (size_t)whole);
    memset(at + whole, NONE, (size_t)(bytes - whole));
    for (uint64_t p = whole; p < bytes; p++) {
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
  *out = b;
  return KITE_BUDDY_OK;
}

/* ---- allocation ------------------------------------------------------------------------- */

/* Finish an allocation of 2^order units at idx: counters and finger. */
static inline int alloc_done(kite_buddy_t *b, unsigned order, uint64_t idx, uint64_t *index) {
  uint64_t size = (uint64_t)1 << order;
  b->free_units -= size;
  b->finger[order] = idx + size; /* idx was the lowest run of that order */
  *index = idx;
  return KITE_BUDDY_OK;
}

/* Allocate 2^order units (order < 6) in partial chunk c whose node holds v >= FULL(order). */
static inline int chunk_alloc(kite_buddy_t *b, uint64_t c, unsigned v, unsigned order,
                              uint64_t *index) {
  kite_buddy_chunk_t *ch = &b->chunk[c];
  uint64_t f = ch->free, m[7];
  chunk_folds(f, m);
  unsigned x = (unsigned)__builtin_ctzll(m[order]); /* lowest free run of that order */
  /* it is cut from the largest free aligned run holding x (not the whole chunk: partial) */
  unsigned j = chunk_run_order(m, x);
  pend_add(b, pend_split(order, j));
  f &= ~run_bits(order, x);
  ch->free = f;
  ch->start |= (uint64_t)1 << x;
  /* the chunk's largest run can only shrink when the cut run was one of the largest */
  if (FREE_BASE + j == v) {
    unsigned nv = chunk_value(f);
    if (nv != v) {
      node_set(b, CHUNK_ORDER, c, nv);
      update_up(b, CHUNK_ORDER, c);
    }
  }
  return alloc_done(b, order, (c << CHUNK_ORDER) + x, index);
}

/* The search from the finger through the tree (every case but "the finger's chunk has
 * room"). O(log units). */
KITE_NOINLINE static int alloc_generic(kite_buddy_t *b, unsigned order, uint64_t *index) {
  const unsigned need = FULL(order), top = b->top;
  if (node_get(b, top, 0) < need) return KITE_BUDDY_ENOMEM;
  /* Climb from the finger to an accurate node known to hold a big enough free block. */
  unsigned h = order > CHUNK_ORDER ? order : CHUNK_ORDER;
  uint64_t p = b->finger[order] >> h;
  while (h < top) {
    unsigned v = node_get(b, h, p);
    if (v >= need && v != FULL(h)) break; /* partial, hence accurate (I1) */
    h++;
    p >>= 1;
  }
  /* Descend leftmost-first to a free node or a partial chunk: the lowest fit. */
  unsigned v = node_get(b, h, p);
  while (v != FULL(h) && h > CHUNK_ORDER) {
    h--;
    p <<= 1;
    v = node_get(b, h, p);
    if (v < need) {
      p |= 1;
      v = node_get(b, h, p);
    }
  }
  if (v != FULL(h)) return chunk_alloc(b, p, v, order, index);
  /* (h, p) is a free block of order h >= order: split off its first 2^order units; one
   * free block of each order order..h-1 remains. */
  b->nr_free[h]--;
  for (unsigned k = order; k < h; k++) b->nr_free[k]++;
  if (order >= CHUNK_ORDER) {
    p <<= h - order;
    node_set(b, order, p, ALLOC);
    update_up(b, order, p);
    return alloc_done(b, order, p << order, index);
  }
  uint64_t c = p << (h - CHUNK_ORDER);
  kite_buddy_chunk_t *ch = &b->chunk[c]; /* blank (I1) */
  ch->free = ~run_bits(order, 0);
  ch->start = 1;
  node_set(b, CHUNK_ORDER, c, chunk_value(ch->free));
  update_up(b, CHUNK_ORDER, c);
  return alloc_done(b, order, c << CHUNK_ORDER, index);
}

int kite_buddy_alloc(kite_buddy_t *b, unsigned order, uint64_t *index) {
  if (unlikely(!b || !index)) return KITE_BUDDY_EINVAL;
  if (unlikely(order > b->max_order)) return KITE_BUDDY_EORDER;
  if (order < CHUNK_ORDER) {
    uint64_t c = b->finger[order] >> CHUNK_ORDER;
    if (likely(c < b->nchunks)) {
      unsigned v = node_get(b, CHUNK_ORDER, c);
      /* partial (below FULL) with a run of that order: the lowest one is in this chunk */
      if (likely(v >= FULL(order) && v < FULL(CHUNK_ORDER))) return chunk_alloc(b, c, v, order, index);
    }
  }
  return alloc_generic(b, order, index);
}

/* ---- free ------------------------------------------------------------------------------- */

/* Find the allocated block that starts at index. Returns its order (>= 0) with *pos its
 * node index (order >= 6), or KITE_BUDDY_EFREE / ERESERVED / ENOTSTART. */
static inline int locate(const kite_buddy_t *b, uint64_t index, uint64_t *pos) {
  uint64_t c = index >> CHUNK_ORDER;
  unsigned o = (unsigned)index & 63, v = node_get(b, CHUNK_ORDER, c);
  if (is_partial(v, CHUNK_ORDER)) {
    const kite_buddy_chunk_t *ch = &b->chunk[c];
    uint64_t bit = (uint64_t)1 << o;
    if (ch->free & bit) return KITE_BUDDY_EFREE;
    if (ch->rsv & bit) return KITE_BUDDY_ERESERVED;
    if (!(ch->start & bit)) return KITE_BUDDY_ENOTSTART;
    *pos = index;
    return (int)chunk_block_order(ch, o);
  }
  unsigned h = CHUNK_ORDER, top = b->top;
  uint64_t p = c;
  while (v == FULL(h)) {
    if (h == top) return KITE_BUDDY_EFREE;
    h++;
    p >>= 1;
    v = node_get(b, h, p);
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
  int k = locate(b, index, &p);
  if (unlikely(k < 0)) return k;
  b->free_units += (uint64_t)1 << k;
  if (k >= (int)CHUNK_ORDER) {
    coalesce_from(b, (unsigned)k, p);
  } else {
    uint64_t c = index >> CHUNK_ORDER;
    unsigned o = (unsigned)index & 63;
    kite_buddy_chunk_t *ch = &b->chunk[c];
    uint64_t f = ch->free | run_bits((unsigned)k, o), m[7];
    ch->free = f;
    ch->start &= ~((uint64_t)1 << o);
    chunk_folds(f, m);
    /* merge with the free buddies inside the chunk: j is the order of the merged run */
    unsigned j = chunk_run_order(m, o);
    pend_add(b, (uint64_t)0 - pend_split((unsigned)k, j));
    if (j == CHUNK_ORDER) {
      coalesce_from(b, CHUNK_ORDER, c); /* the chunk is free: it is a tree block now */
    } else {
      /* the other runs are untouched: the largest is the old one or the merged run */
      finger_lower(b, j, (c << CHUNK_ORDER) + (o & (~0u << j)));
      unsigned v = node_get(b, CHUNK_ORDER, c), nv = FREE_BASE + j;
      if (nv > v) {
        node_set(b, CHUNK_ORDER, c, nv);
        update_up(b, CHUNK_ORDER, c);
      }
    }
  }
  if (order) *order = (unsigned)k;
  return KITE_BUDDY_OK;
}

int kite_buddy_block_order(const kite_buddy_t *b, uint64_t index) {
  if (!b) return KITE_BUDDY_EINVAL;
  if (index >= b->units) return KITE_BUDDY_ERANGE;
  uint64_t p;
  return locate(b, index, &p);
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
          b->free_units -= (uint64_t)__builtin_popcountll(ch->free);
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
      b->free_units -= (uint64_t)__builtin_popcountll(ch->free & bits);
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

/* ---- queries ---------------------------------------------------------------------------- */

uint64_t kite_buddy_units(const kite_buddy_t *b) { return b ? b->units : 0; }
uint64_t kite_buddy_free_units(const kite_buddy_t *b) { return b ? b->free_units : 0; }

uint64_t kite_buddy_free_blocks(const kite_buddy_t *b, unsigned order) {
  return b && order <= KITE_BUDDY_MAX_ORDER ? pend_get(b, order) : 0;
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
  CHK_STALE = -4,   /* a FULL/ALLOC/RSV node with a non-FULL child or a non-blank chunk (I1) */
  CHK_COMBINE = -5, /* a partial node that is not combine(children) / chunk_value (I2) */
  CHK_CHUNK = -6,   /* a partial chunk with overlapping or malformed bits (I3) */
  CHK_COUNT = -7,   /* nr_free or free_units disagree with the tree (I4) */
  CHK_FINGER = -8,  /* a free run below its order's finger (I5) */
};

/* Partial chunk c: bits consistent, value matches; adds its free blocks to nr/free_units. */
static int check_chunk(const kite_buddy_t *b, uint64_t c, unsigned v, uint64_t nr[LEVELS],
                       uint64_t *free_units) {
  const kite_buddy_chunk_t *ch = &b->chunk[c];
  uint64_t f = ch->free, r = ch->rsv, s = ch->start, m[7];
  uint64_t first = c << CHUNK_ORDER, in = ALL_ONES;
  if (b->units - first < 64) in = ((uint64_t)1 << (b->units - first)) - 1;
  if (f == ALL_ONES || (f & r) || (s & (f | r)) || (~in & (f | ~r))) return CHK_CHUNK;
  if (v != chunk_value(f)) return CHK_COMBINE;
  uint64_t alloc = ~(f | r), covered = 0;
  for (uint64_t t = s; t; t &= t - 1) {
    unsigned o = (unsigned)__builtin_ctzll(t), k = chunk_block_order(ch, o);
    uint64_t bits = run_bits(k, o);
    if ((o & ((1u << k) - 1)) || (bits & ~alloc) || (bits & covered) ||
        ((s & bits) != ((uint64_t)1 << o)))
      return CHK_CHUNK;
    covered |= bits;
  }
  if (covered != alloc) return CHK_CHUNK;
  chunk_folds(f, m);
  for (unsigned l = 0; l < CHUNK_ORDER; l++) {
    nr[l] += (uint64_t)(__builtin_popcountll(m[l]) - 2 * __builtin_popcountll(m[l + 1]));
    if (m[l] && first + (uint64_t)__builtin_ctzll(m[l]) < b->finger[l]) return CHK_FINGER;
  }
  *free_units += (uint64_t)__builtin_popcountll(f);
  return 0;
}

int kite_buddy_check(const kite_buddy_t *b) {
  if (!b || b->units == 0 || b->top > KITE_BUDDY_MAX_ORDER) return CHK_ARG;
  uint64_t nr[LEVELS] = {0}, free_units = 0;
  for (unsigned h = CHUNK_ORDER; h <= b->top; h++) {
    uint64_t entries = level_entries(b->units, h, b->top);
    for (uint64_t p = 0; p < entries; p++) {
      unsigned v = node_get(b, h, p);
      uint64_t first = p << h, end = first + ((uint64_t)1 << h);
      if (v > FULL(h)) return CHK_RANGE;
      if ((h == b->top && p > 0) || first >= b->units) {
        if (v != NONE) return CHK_PAD;
        continue;
      }
      if (!is_partial(v, h)) { /* FULL, ALLOC or RSV: a whole block, stale below */
        if (end > b->units) return CHK_PAD;
        if (h > CHUNK_ORDER && (node_get(b, h - 1, 2 * p) != FULL(h - 1) ||
                                node_get(b, h - 1, 2 * p + 1) != FULL(h - 1)))
          return CHK_STALE;
        if (h == CHUNK_ORDER) {
          const kite_buddy_chunk_t *ch = &b->chunk[p];
          if (ch->free != ALL_ONES || ch->rsv || ch->start) return CHK_STALE;
        }
      } else if (h == CHUNK_ORDER) {
        int err = check_chunk(b, p, v, nr, &free_units);
        if (err) return err;
      } else if (v != combine(node_get(b, h - 1, 2 * p), node_get(b, h - 1, 2 * p + 1), h)) {
        return CHK_COMBINE;
      }
      if (v == FULL(h) && (h == b->top || is_partial(node_get(b, h + 1, p >> 1), h + 1))) {
        nr[h]++;
        free_units += (uint64_t)1 << h;
        for (unsigned k = 0; k <= h; k++)
          if (first < b->finger[k]) return CHK_FINGER;
      }
    }
  }
  if (free_units != b->free_units) return CHK_COUNT;
  for (unsigned k = 0; k < LEVELS; k++)
    if (nr[k] != pend_get(b, k)) return CHK_COUNT;
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
