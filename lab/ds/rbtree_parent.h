/* lab/ds/rbtree_parent.h -- red-black tree with parent pointers and the "unified" children
 * array: link[0] is the left child, link[1] the right, and every symmetric case of CLRS is
 * written once with a direction index `dir` and its mirror `!dir`. Include after ds/dups.h.
 *
 * Used by rbtree_unified (keys (size, address): every free block is a node) and rbtree_linked
 * (keys size: one node per size, duplicates on a list). The key order is the caller's: it
 * descends to a leaf position itself and calls lab_rbp_link; erase and the fix-ups only look
 * at the shape. Leaves are NULL; the colour is the RED bit of the block header.
 *
 * Invariants (lab_rbp_check, ds/rbtree_check.h): root black, no red node with a red child,
 * equal black height on all paths, x->link[d]->parent == x, strictly increasing in-order
 * sequence under `less`.
 */
#ifndef LAB_DS_RBTREE_PARENT_H
#define LAB_DS_RBTREE_PARENT_H
#include "ds/rbtree_check.h"

static lab_dnode_t *lab_rbp_root;

static inline bool lab_rbp_red(const lab_dnode_t *x) { return x && (*lab_hdr(x) & LAB_F_RED); }
static inline void lab_rbp_paint(lab_dnode_t *x, bool red) {
  if (red) *lab_hdr(x) |= LAB_F_RED;
  else *lab_hdr(x) &= ~LAB_F_RED;
}

/* Point whatever pointed at `old` (its parent's child link, or the root) at `x`. */
static inline void lab_rbp_reparent(lab_dnode_t *old, lab_dnode_t *parent, lab_dnode_t *x) {
  if (!parent) lab_rbp_root = x;
  else parent->link[parent->link[1] == old] = x;
  if (x) x->parent = parent;
}

/* Rotate x down towards `dir`: its child on side !dir takes its place. */
static inline void lab_rbp_rotate(lab_dnode_t *x, int dir) {
  lab_dnode_t *y = x->link[!dir];
  x->link[!dir] = y->link[dir];
  if (y->link[dir]) y->link[dir]->parent = x;
  lab_rbp_reparent(x, x->parent, y);
  y->link[dir] = x;
  x->parent = y;
}

/* Attach the new node x as child `dir` of parent (NULL: x becomes the root), rebalance. */
static void lab_rbp_link(lab_dnode_t *x, lab_dnode_t *parent, int dir) {
  x->link[0] = x->link[1] = NULL;
#ifndef LAB_DNODE_NO_DUPS
  x->dups = NULL;
#endif
  x->parent = parent;
  if (parent) parent->link[dir] = x;
  else lab_rbp_root = x;
  lab_rbp_paint(x, true);
  lab_dnode_t *p;
  while ((p = x->parent) && lab_rbp_red(p)) {
    lab_dnode_t *g = p->parent; /* p is red, so not the root */
    int d = g->link[1] == p;    /* p hangs on side d of g */
    lab_dnode_t *u = g->link[!d];
    if (lab_rbp_red(u)) {
      lab_rbp_paint(p, false);
      lab_rbp_paint(u, false);
      lab_rbp_paint(g, true);
      x = g;
      continue;
    }
    if (x == p->link[!d]) { /* inner grandchild: make it outer */
      lab_rbp_rotate(p, d);
      x = p;
      p = x->parent;
    }
    lab_rbp_paint(p, false);
    lab_rbp_paint(g, true);
    lab_rbp_rotate(g, !d);
    break;
  }
  lab_rbp_paint(lab_rbp_root, false);
}

/* Node x (possibly NULL) on side dir of parent has one black too few: restore. */
static void lab_rbp_erase_fixup(lab_dnode_t *x, lab_dnode_t *parent) {
  while (x != lab_rbp_root && !lab_rbp_red(x)) {
    int dir = parent->link[1] == x;
    lab_dnode_t *w = parent->link[!dir];
    if (lab_rbp_red(w)) {
      lab_rbp_paint(w, false);
      lab_rbp_paint(parent, true);
      lab_rbp_rotate(parent, dir);
      w = parent->link[!dir];
    }
    if (!lab_rbp_red(w->link[0]) && !lab_rbp_red(w->link[1])) {
      lab_rbp_paint(w, true);
      x = parent;
      parent = x->parent;
      continue;
    }
    if (!lab_rbp_red(w->link[!dir])) {
      lab_rbp_paint(w->link[dir], false);
      lab_rbp_paint(w, true);
      lab_rbp_rotate(w, !dir);
      w = parent->link[!dir];
    }
    lab_rbp_paint(w, lab_rbp_red(parent));
    lab_rbp_paint(parent, false);
    lab_rbp_paint(w->link[!dir], false);
    lab_rbp_rotate(parent, dir);
    x = lab_rbp_root;
    break;
  }
  if (x) lab_rbp_paint(x, false);
}

/* Remove node z from the tree. */
static void lab_rbp_erase(lab_dnode_t *z) {
  lab_dnode_t *x, *xparent;
  bool removed_red;
  if (!z->link[0] || !z->link[1]) {
    x = z->link[0] ? z->link[0] : z->link[1];
    xparent = z->parent;
    removed_red = lab_rbp_red(z);
    lab_rbp_reparent(z, z->parent, x);
  } else {
    lab_dnode_t *y = z->link[1];
    while (y->link[0]) y = y->link[0];
    removed_red = lab_rbp_red(y);
    x = y->link[1];
    if (y->parent == z) {
      xparent = y;
    } else {
      xparent = y->parent;
      lab_rbp_reparent(y, y->parent, x);
      y->link[1] = z->link[1];
      y->link[1]->parent = y;
    }
    lab_rbp_reparent(z, z->parent, y);
    y->link[0] = z->link[0];
    y->link[0]->parent = y;
    lab_rbp_paint(y, lab_rbp_red(z));
  }
  lab_rbp_paint(z, false);
  if (!removed_red) lab_rbp_erase_fixup(x, xparent);
}

/* Put node `x` (not in the tree) exactly where `old` is: same children, parent, colour. */
static inline void lab_rbp_substitute(lab_dnode_t *old, lab_dnode_t *x) {
  lab_rbp_reparent(old, old->parent, x);
  for (int d = 0; d < 2; d++)
    if (x->link[d]) x->link[d]->parent = x;
}

static bool lab_rbp_check(lab_rb_less_fn less, size_t *count, size_t *bytes) {
  return lab_rb_check(lab_rbp_root, less, true, count, bytes);
}
#endif
