/* lab/rbtree_unified.c -- best fit over a red-black tree whose children are an array.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, the seed's 40-byte minimum block: header, the
 * 24-byte node, footer, as rbtree_clrs). A free block's payload holds the node of ds/dups.h
 * built without its duplicate list (LAB_DNODE_NO_DUPS): {link[2], parent}, the same three
 * words as CLRS's {parent, left, right}; the colour is the header's RED bit.
 *
 * This is the seed's "unified left/right" variant of CLRS: the children are link[0] and
 * link[1], and each pair of mirror-image cases (insert fix-up, delete fix-up, rotations) is
 * written once with a direction index (ds/rbtree_parent.h), which removes half the code and
 * every left/right typo it invites. Like rbtree_clrs it keys the tree by (size, address), so
 * every free block is a node and equal sizes need no special case.
 *
 * malloc: descend to the smallest (size, address) with size >= need, erase it: O(log n).
 * Invariants: those of ds/rbtree_parent.h.
 */
#define LAB_POLICY_NAME "rbtree_unified"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#define LAB_DNODE_PARENT
#define LAB_DNODE_NO_DUPS
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/rbtree_parent.h"

static inline bool uni_less(lab_dnode_t *a, lab_dnode_t *b) {
  size_t sa = lab_size(a), sb = lab_size(b);
  return sa < sb || (sa == sb && a < b);
}

static void lab_idx_reset(void) { lab_rbp_root = NULL; }

static void lab_idx_insert(void *p) {
  lab_dnode_t *x = p, *parent = NULL;
  int dir = 0;
  for (lab_dnode_t *y = lab_rbp_root; y; y = y->link[dir]) {
    parent = y;
    dir = uni_less(y, x);
  }
  lab_rbp_link(x, parent, dir);
}

static void lab_idx_remove(void *p) { lab_rbp_erase(p); }

static void *lab_idx_take(size_t need) {
  lab_dnode_t *best = NULL;
  for (lab_dnode_t *x = lab_rbp_root; x;) {
    bool fits = lab_size(x) >= need;
    if (fits) best = x;
    x = x->link[!fits];
  }
  if (best) lab_rbp_erase(best);
  return best;
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_rbp_check(uni_less, count, bytes);
}

LAB_DEFINE_POLICY(rbtree_unified, "best fit, red-black tree with link[2] children (mirror cases merged)")
