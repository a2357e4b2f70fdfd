/* lab/seglist_exact.c -- segregated fits with exact-size lists: a table of free lists by size
 * class (the lab's earlier `seglist`; lab/seglist.c is now the seed's list_segregated).
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, 16-byte aligned payloads,
 * footer in free blocks); a free block's payload holds a lab_lnode_t {prev, next}, so the
 * smallest block is 32 bytes.
 *
 * Size classes (118 lists):
 *   class c < 64    blocks of exactly 16*c bytes (32 .. 1008): one size per list;
 *   class 64 + k    blocks of [2^(k+10), 2^(k+11)) bytes.
 * A bitmap of non-empty classes finds the next non-empty class in O(1).
 *
 * malloc: first fit within the request's class (exact classes: the head fits; range classes:
 * the first block large enough), else the head of the next non-empty class, which always
 * fits. Free blocks are pushed at the front of their list (LIFO), after coalescing.
 * Invariants (lab_idx_check): each block is on the list of its class, list links are
 * consistent, bitmap bit c is set iff list c is non-empty.
 */
#define LAB_POLICY_NAME "seglist_exact"
#define LAB_MIN_BLOCK 32
#include "ds/blocks.h"
#include "ds/list.h"

#define SEG_EXACT 64
#define SEG_CLASSES (SEG_EXACT + 54)

static lab_lnode_t *seg_list[SEG_CLASSES];
static uint64_t seg_bits[2];

static inline unsigned seg_class(size_t size) {
  if (size < 16 * SEG_EXACT) return (unsigned)(size >> 4);
  return SEG_EXACT + (unsigned)(63 - __builtin_clzll(size)) - 10;
}

static inline void seg_mark(unsigned c, bool nonempty) {
  if (nonempty) seg_bits[c >> 6] |= 1ull << (c & 63);
  else seg_bits[c >> 6] &= ~(1ull << (c & 63));
}

/* The first non-empty class strictly above c, or SEG_CLASSES. */
static inline unsigned seg_next_class(unsigned c) {
  for (unsigned w = (c + 1) >> 6; w < 2; w++) {
    uint64_t bits = seg_bits[w];
    if (w == (c + 1) >> 6) bits &= ~0ull << ((c + 1) & 63);
    if (bits) return (w << 6) + (unsigned)__builtin_ctzll(bits);
  }
  return SEG_CLASSES;
}

static void lab_idx_reset(void) {
  memset(seg_list, 0, sizeof seg_list);
  seg_bits[0] = seg_bits[1] = 0;
}

static void lab_idx_insert(void *p) {
  unsigned c = seg_class(lab_size(p));
  lab_list_push(&seg_list[c], (lab_lnode_t *)p);
  seg_mark(c, true);
}

static void lab_idx_remove(void *p) {
  unsigned c = seg_class(lab_size(p));
  lab_list_remove(&seg_list[c], (lab_lnode_t *)p);
  if (!seg_list[c]) seg_mark(c, false);
}

static void *lab_idx_take(size_t need) {
  unsigned c = seg_class(need);
  lab_lnode_t *x = seg_list[c];
  if (c >= SEG_EXACT)
    while (x && lab_size(x) < need) x = x->next;
  if (!x) {
    c = seg_next_class(c);
    if (c >= SEG_CLASSES) return NULL;
    x = seg_list[c];
  }
  lab_list_remove(&seg_list[c], x);
  if (!seg_list[c]) seg_mark(c, false);
  return x;
}

struct seg_check_ctx {
  unsigned c;
  size_t count, bytes;
};

static bool seg_visit(lab_lnode_t *x, void *vctx) {
  struct seg_check_ctx *ctx = vctx;
  if (!lab_is_free_block(x)) LAB_FAIL("class %u holds %p, not a free block", ctx->c, (void *)x);
  if (seg_class(lab_size(x)) != ctx->c)
    LAB_FAIL("block %p of size %zu is on list %u", (void *)x, lab_size(x), ctx->c);
  if ((*lab_hdr(x) & LAB_F_RED) || (*lab_footer(x, lab_size(x)) & LAB_FT_DUP))
    LAB_FAIL("block %p has tree bits", (void *)x);
  ctx->count++;
  ctx->bytes += lab_size(x);
  return true;
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  struct seg_check_ctx ctx = {0, 0, 0};
  size_t limit = (size_t)(lab_heap.end - lab_heap.lo) / LAB_MIN_BLOCK + 1;
  for (unsigned c = 0; c < SEG_CLASSES; c++) {
    ctx.c = c;
    bool bit = (seg_bits[c >> 6] >> (c & 63)) & 1;
    if (bit != (seg_list[c] != NULL)) LAB_FAIL("bitmap bit %u disagrees with list %u", c, c);
    if (!lab_list_check(LAB_POLICY_NAME, seg_list[c], limit, seg_visit, &ctx)) return false;
  }
  *count = ctx.count;
  *bytes = ctx.bytes;
  return true;
}

LAB_DEFINE_POLICY(seglist_exact, "segregated fits: 118 size-class lists (64 exact), bitmap, first fit in class, LIFO")
