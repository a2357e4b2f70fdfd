/* lab/seglist.c -- the seed's list_segregated: segregated fits over 17 unsorted lists.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h with the seed's granule: 8-byte header,
 * 8-byte aligned payloads, sizes in 8-byte steps, footer on free blocks; a free block's
 * payload holds a lab_lnode_t {prev, next}, so the smallest block is 32 bytes.
 *
 * Buckets (by payload capacity = block size - 8, as the seed labels them; 17 in all):
 *   0..6    exactly 24, 32, 40, 48, 56, 64, 72 bytes (blocks of 32 .. 80 bytes)
 *   7       128: every capacity from 80 up to 255
 *   8..15   256, 512, ..., 32768: capacities in [2^k, 2^(k+1))
 *   16      65535 and up: the seed's bucket sizes are 16-bit, so its last bucket collects
 *           every capacity of 65535 or more (32768 .. 65534 stay in bucket 15)
 * Each bucket is an unsorted doubly linked list; a freed (coalesced) block is pushed at the
 * front. malloc searches first fit from the request's bucket upward, walking each list from
 * the front: no bitmap, no size order, as in the seed. That walk is what makes the seed's
 * list_segregated the slowest policy on its insert-delete script: the blocks freed there all
 * land in one bucket, and a request that none of them fits walks all of them.
 * Invariants (lab_idx_check): each free block is on the list of its bucket, links consistent.
 */
#define LAB_POLICY_NAME "seglist"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 32
#include "ds/blocks.h"
#include "ds/list.h"

#define SEG_BUCKETS 17
#define SEG_EXACT 7

static lab_lnode_t *seg_list[SEG_BUCKETS];

/* Bucket of a block of `size` bytes (capacity size - 8). */
static inline unsigned seg_bucket(size_t size) {
  size_t cap = size - LAB_HDR;
  if (cap <= 72) return (unsigned)((cap - 24) / 8);
  if (cap >= 65535) return SEG_BUCKETS - 1;
  unsigned lg = (unsigned)(63 - __builtin_clzll(cap)); /* 6 .. 15 */
  return lg <= 7 ? SEG_EXACT : SEG_EXACT + lg - 7;
}

static void lab_idx_reset(void) { memset(seg_list, 0, sizeof seg_list); }

static void lab_idx_insert(void *p) { lab_list_push(&seg_list[seg_bucket(lab_size(p))], (lab_lnode_t *)p); }

static void lab_idx_remove(void *p) { lab_list_remove(&seg_list[seg_bucket(lab_size(p))], (lab_lnode_t *)p); }

static void *lab_idx_take(size_t need) {
  for (unsigned b = seg_bucket(need); b < SEG_BUCKETS; b++)
    for (lab_lnode_t *x = seg_list[b]; x; x = x->next)
      if (lab_size(x) >= need) {
        lab_list_remove(&seg_list[b], x);
        return x;
      }
  return NULL;
}

struct seg_check_ctx {
  unsigned b;
  size_t count, bytes;
};

static bool seg_visit(lab_lnode_t *x, void *vctx) {
  struct seg_check_ctx *ctx = vctx;
  if (!lab_is_free_block(x)) LAB_FAIL("bucket %u holds %p, not a free block", ctx->b, (void *)x);
  if (seg_bucket(lab_size(x)) != ctx->b)
    LAB_FAIL("block %p of size %zu is in bucket %u", (void *)x, lab_size(x), ctx->b);
  if ((*lab_hdr(x) & LAB_F_RED) || (*lab_footer(x, lab_size(x)) & LAB_FT_DUP))
    LAB_FAIL("block %p has tree bits", (void *)x);
  ctx->count++;
  ctx->bytes += lab_size(x);
  return true;
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  struct seg_check_ctx ctx = {0, 0, 0};
  size_t limit = (size_t)(lab_heap.end - lab_heap.lo) / LAB_MIN_BLOCK + 1;
  for (unsigned b = 0; b < SEG_BUCKETS; b++) {
    ctx.b = b;
    if (!lab_list_check(LAB_POLICY_NAME, seg_list[b], limit, seg_visit, &ctx)) return false;
  }
  *count = ctx.count;
  *bytes = ctx.bytes;
  return true;
}

LAB_DEFINE_POLICY(seglist, "the seed's list_segregated: 17 unsorted lists (7 exact, 10 power-of-two), first fit upward")
