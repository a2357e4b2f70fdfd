/* src/buddy.c -- kite's buddy page heap: a tree of "largest free order below" over 64-unit
 * chunks kept as bitmaps (the data structure and its invariants I1-I5: buddy_impl.h). This
 * file: set-up, allocation, free, queries and the validator; buddy_range.c: reserve,
 * unreserve and allocation at a given place.
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
#include "buddy_impl.h"

#include <string.h>

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

/* ---- setup ------------------------------------------------------------------------------ */

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
    nr[l] += (uint64_t)((int)_kite_popcount64(m[l]) - 2 * (int)_kite_popcount64(m[l + 1]));
    if (m[l] && first + (uint64_t)__builtin_ctzll(m[l]) < b->finger[l]) return CHK_FINGER;
  }
  *free_units += (uint64_t)_kite_popcount64(f);
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
