/* lab/rbtree_stack.c -- best fit over a red-black tree without parent pointers: the path
 * from the root is recorded on an explicit stack during descent.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, 40-byte minimum block: header, the 24-byte node
 * {link[2], dups}, footer). A free block's payload holds the node of
 * ds/dups.h; this policy uses {link[2], dups} and leaves `parent` unused (the seed's point:
 * the parent field is traded for the duplicate list). The colour is the header's RED bit.
 *
 * One node per distinct size; equal sizes go on the node's duplicate list (ds/dups.h).
 * The insert and delete fix-ups are CLRS's, with "x's parent" read from path[k-1] and
 * "grandparent" from path[k-2]; a rotation that lifts a node above the current parent also
 * inserts it into the path. Depth of a red-black tree is at most 2 log2(n + 1) < 128.
 *
 * Costs: malloc of a size with duplicates, and removal of a duplicate, O(1); removal of a
 * tree node that has duplicates is one O(log n) search for its parent, then an O(1) swap;
 * removal of a unique node is a search that builds the path, then CLRS delete: O(log n).
 * Invariants: ds/rbtree_check.h (without parents) and ds/dups.h.
 */
#define LAB_POLICY_NAME "rbtree_stack"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/rbtree_check.h"

#define STK_MAX 128

static lab_dnode_t *stk_root;

static inline void stk_paint(lab_dnode_t *x, bool red) {
  if (red) *lab_hdr(x) |= LAB_F_RED;
  else *lab_hdr(x) &= ~LAB_F_RED;
}

/* Rotate x down towards dir; returns the child that took its place. */
static inline lab_dnode_t *stk_rot(lab_dnode_t *x, int dir) {
  lab_dnode_t *y = x->link[!dir];
  x->link[!dir] = y->link[dir];
  y->link[dir] = x;
  return y;
}

/* Make parent's link that points at old point at x (parent NULL: the root). */
static inline void stk_relink(lab_dnode_t *parent, lab_dnode_t *old, lab_dnode_t *x) {
  if (!parent) stk_root = x;
  else parent->link[parent->link[1] == old] = x;
}

static void lab_idx_reset(void) { stk_root = NULL; }

static void lab_idx_insert(void *ptr) {
  lab_dnode_t *x = ptr, *path[STK_MAX];
  size_t size = lab_size(x);
  int k = 0;
  for (lab_dnode_t *y = stk_root; y;) {
    size_t ys = lab_size(y);
    if (ys == size) {
      lab_dup_push(y, x);
      return;
    }
    path[k++] = y;
    y = y->link[ys < size];
  }
  x->link[0] = x->link[1] = NULL;
  x->dups = NULL;
  stk_paint(x, true);
  if (!k) {
    stk_root = x;
    stk_paint(x, false);
    return;
  }
  path[k - 1]->link[lab_size(path[k - 1]) < size] = x;
  while (k >= 1 && lab_rb_red(path[k - 1])) {
    lab_dnode_t *p = path[k - 1], *g = path[k - 2]; /* p is red: not the root, k >= 2 */
    int d = g->link[1] == p;
    lab_dnode_t *u = g->link[!d];
    if (lab_rb_red(u)) {
      stk_paint(p, false);
      stk_paint(u, false);
      stk_paint(g, true);
      x = g;
      k -= 2;
      continue;
    }
    if (x == p->link[!d]) { /* inner grandchild: lift it over p */
      g->link[d] = stk_rot(p, d);
      p = x;
    }
    stk_paint(p, false);
    stk_paint(g, true);
    stk_relink(k >= 3 ? path[k - 3] : NULL, g, stk_rot(g, !d));
    break;
  }
  stk_paint(stk_root, false);
}

/* Delete-fixup: x (maybe NULL) hangs on side dir of path[k-1] and is one black short. */
static void stk_erase_fixup(lab_dnode_t *x, lab_dnode_t **path, int k, int dir) {
  while (k > 0 && !lab_rb_red(x)) {
    lab_dnode_t *p = path[k - 1], *w = p->link[!dir];
    if (lab_rb_red(w)) {
      stk_paint(w, false);
      stk_paint(p, true);
      stk_relink(k >= 2 ? path[k - 2] : NULL, p, stk_rot(p, dir));
      path[k - 1] = w; /* w is now p's parent */
      path[k++] = p;
      w = p->link[!dir];
    }
    if (!lab_rb_red(w->link[0]) && !lab_rb_red(w->link[1])) {
      stk_paint(w, true);
      x = p;
      k--;
      if (k > 0) dir = path[k - 1]->link[1] == x;
      continue;
    }
    if (!lab_rb_red(w->link[!dir])) {
      stk_paint(w->link[dir], false);
      stk_paint(w, true);
      p->link[!dir] = stk_rot(w, !dir);
      w = p->link[!dir];
    }
    stk_paint(w, lab_rb_red(p));
    stk_paint(p, false);
    stk_paint(w->link[!dir], false);
    stk_relink(k >= 2 ? path[k - 2] : NULL, p, stk_rot(p, dir));
    x = stk_root;
    break;
  }
  if (x) stk_paint(x, false);
}

/* Remove tree node z; path[0..k-1] are its ancestors (path has room for STK_MAX). */
static void stk_erase(lab_dnode_t *z, lab_dnode_t **path, int k) {
  lab_dnode_t *x;
  int dir;
  bool removed_red;
  if (!z->link[0] || !z->link[1]) {
    x = z->link[0] ? z->link[0] : z->link[1];
    removed_red = lab_rb_red(z);
    if (k) {
      dir = path[k - 1]->link[1] == z;
      path[k - 1]->link[dir] = x;
    } else {
      dir = 0;
      stk_root = x;
    }
  } else {
    int zi = k;
    path[k++] = z; /* becomes the successor below */
    lab_dnode_t *y = z->link[1];
    while (y->link[0]) {
      path[k++] = y;
      y = y->link[0];
    }
    removed_red = lab_rb_red(y);
    x = y->link[1];
    if (path[k - 1] == z) {
      dir = 1; /* y was z's right child: x stays y's right child */
    } else {
      path[k - 1]->link[0] = x;
      dir = 0;
      y->link[1] = z->link[1];
    }
    y->link[0] = z->link[0];
    stk_paint(y, lab_rb_red(z));
    stk_relink(zi ? path[zi - 1] : NULL, z, y);
    path[zi] = y;
  }
  stk_paint(z, false);
  if (!removed_red) stk_erase_fixup(x, path, k, dir);
}

/* Ancestors of tree node z into path; returns their number. */
static int stk_path_to(lab_dnode_t *z, lab_dnode_t **path) {
  size_t size = lab_size(z);
  int k = 0;
  for (lab_dnode_t *y = stk_root; y != z; y = y->link[lab_size(y) < size]) path[k++] = y;
  return k;
}

static void lab_idx_remove(void *ptr) {
  lab_dnode_t *z = ptr, *path[STK_MAX];
  if (lab_is_dup(z)) {
    lab_dup_remove(z);
    return;
  }
  int k = stk_path_to(z, path);
  if (z->dups) stk_relink(k ? path[k - 1] : NULL, z, lab_dup_promote(z));
  else stk_erase(z, path, k);
}

static void *lab_idx_take(size_t need) {
  lab_dnode_t *path[STK_MAX], *best = NULL;
  int k = 0, best_k = 0;
  for (lab_dnode_t *x = stk_root; x;) {
    size_t s = lab_size(x);
    if (s >= need) {
      best = x;
      best_k = k;
      if (s == need) break;
    }
    path[k++] = x;
    x = x->link[s < need];
  }
  if (!best) return NULL;
  if (best->dups) return lab_dup_pop(best);
  stk_erase(best, path, best_k);
  return best;
}

static bool stk_less(lab_dnode_t *a, lab_dnode_t *b) { return lab_size(a) < lab_size(b); }

static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_rb_check(stk_root, stk_less, false, count, bytes);
}

LAB_DEFINE_POLICY(rbtree_stack, "best fit, red-black tree without parent pointers (path stack), duplicate lists")
