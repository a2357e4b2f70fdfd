/* lab/rbtree_linked.c -- best fit over a red-black tree with parent pointers and a linked
 * list of duplicate sizes.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, 48-byte minimum block: header, the 32-byte node
 * with its parent field, footer). A free block's payload holds the node of
 * ds/dups.h {link[2], dups, parent}; the colour is the header's RED bit.
 *
 * The tree (ds/rbtree_parent.h) holds one node per distinct size; further free blocks of that
 * size go on the node's duplicate list. The seed's point: with both a parent pointer and the
 * list, every operation on a duplicate is O(1) -- malloc of a size that has duplicates pops
 * one, and coalescing away a tree node that has duplicates promotes the first duplicate into
 * its place (the parent pointer says where) with no search, rotation or recolouring. Only
 * unique sizes pay the O(log n) erase and fix-up.
 *
 * Invariants: those of ds/rbtree_parent.h with strictly increasing sizes, and of ds/dups.h.
 */
#define LAB_POLICY_NAME "rbtree_linked"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 48
#define LAB_DNODE_PARENT
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/rbtree_parent.h"

static inline bool linked_less(lab_dnode_t *a, lab_dnode_t *b) { return lab_size(a) < lab_size(b); }

static void lab_idx_reset(void) { lab_rbp_root = NULL; }

static void lab_idx_insert(void *p) {
  lab_dnode_t *x = p, *parent = NULL;
  size_t size = lab_size(x);
  int dir = 0;
  for (lab_dnode_t *y = lab_rbp_root; y; y = y->link[dir]) {
    size_t ys = lab_size(y);
    if (ys == size) {
      lab_dup_push(y, x);
      return;
    }
    parent = y;
    dir = ys < size;
  }
  lab_rbp_link(x, parent, dir);
}

static void lab_idx_remove(void *p) {
  lab_dnode_t *x = p;
  if (lab_is_dup(x)) {
    lab_dup_remove(x);
  } else if (x->dups) {
    lab_rbp_substitute(x, lab_dup_promote(x));
  } else {
    lab_rbp_erase(x);
  }
}

static void *lab_idx_take(size_t need) {
  lab_dnode_t *best = NULL;
  for (lab_dnode_t *x = lab_rbp_root; x;) {
    size_t s = lab_size(x);
    if (s == need) {
      best = x;
      break;
    }
    bool fits = s > need;
    if (fits) best = x;
    x = x->link[!fits];
  }
  if (!best) return NULL;
  if (best->dups) return lab_dup_pop(best);
  lab_rbp_erase(best);
  return best;
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_rbp_check(linked_less, count, bytes);
}

LAB_DEFINE_POLICY(rbtree_linked, "best fit, red-black tree with parent pointers and duplicate-size lists")
