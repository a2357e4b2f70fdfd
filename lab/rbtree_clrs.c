/* lab/rbtree_clrs.c -- best fit over a red-black tree, exactly as CLRS writes it.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h with the seed's granule (8-byte header,
 * 8-byte aligned payloads, sizes in 8-byte steps, footer in free blocks, 40-byte minimum
 * block: header + the 24-byte node + footer). A free block's payload holds the node
 * {parent, left, right}; its colour is the RED bit of the block header.
 *
 * The tree is keyed by (size, address), so equal sizes are distinct keys and every free block
 * is a tree node: no duplicate lists, the textbook algorithms unchanged. Leaves and the root's
 * parent are the sentinel `nil` (black; its parent field is scratch for delete-fixup, as in
 * CLRS). Left and right cases are written out separately.
 *
 * malloc: descend for the smallest key with size >= need (best fit, lowest address among
 * equals), delete it: O(log n). free: delete the coalesced neighbours, insert the result.
 * Invariants (check): BST order on (size, address), root and nil black, no red node with a red
 * child, equal black height on every path, parent links consistent, every node a free block.
 */
#define LAB_POLICY_NAME "rbtree_clrs"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#include "ds/blocks.h"

typedef struct clrs_node_s {
  struct clrs_node_s *parent, *left, *right;
} clrs_node_t;

static struct {
  size_t hdr; /* colour word: black */
  clrs_node_t n;
} clrs_nil_block;
#define NIL (&clrs_nil_block.n)

static clrs_node_t *clrs_root = NIL;

static inline bool clrs_red(clrs_node_t *x) { return (*lab_hdr(x) & LAB_F_RED) != 0; }
static inline void clrs_set_red(clrs_node_t *x) { *lab_hdr(x) |= LAB_F_RED; }
static inline void clrs_set_black(clrs_node_t *x) { *lab_hdr(x) &= ~LAB_F_RED; }

/* Strict order on (size, address). */
static inline bool clrs_less(clrs_node_t *a, clrs_node_t *b) {
  size_t sa = lab_size(a), sb = lab_size(b);
  return sa < sb || (sa == sb && a < b);
}

static void clrs_left_rotate(clrs_node_t *x) {
  clrs_node_t *y = x->right;
  x->right = y->left;
  if (y->left != NIL) y->left->parent = x;
  y->parent = x->parent;
  if (x->parent == NIL) clrs_root = y;
  else if (x == x->parent->left) x->parent->left = y;
  else x->parent->right = y;
  y->left = x;
  x->parent = y;
}

static void clrs_right_rotate(clrs_node_t *x) {
  clrs_node_t *y = x->left;
  x->left = y->right;
  if (y->right != NIL) y->right->parent = x;
  y->parent = x->parent;
  if (x->parent == NIL) clrs_root = y;
  else if (x == x->parent->right) x->parent->right = y;
  else x->parent->left = y;
  y->right = x;
  x->parent = y;
}

static void clrs_insert_fixup(clrs_node_t *z) {
  while (clrs_red(z->parent)) {
    clrs_node_t *g = z->parent->parent;
    if (z->parent == g->left) {
      clrs_node_t *y = g->right;
      if (clrs_red(y)) {
        clrs_set_black(z->parent);
        clrs_set_black(y);
        clrs_set_red(g);
        z = g;
      } else {
        if (z == z->parent->right) {
          z = z->parent;
          clrs_left_rotate(z);
        }
        clrs_set_black(z->parent);
        clrs_set_red(z->parent->parent);
        clrs_right_rotate(z->parent->parent);
      }
    } else {
      clrs_node_t *y = g->left;
      if (clrs_red(y)) {
        clrs_set_black(z->parent);
        clrs_set_black(y);
        clrs_set_red(g);
        z = g;
      } else {
        if (z == z->parent->left) {
          z = z->parent;
          clrs_right_rotate(z);
        }
        clrs_set_black(z->parent);
        clrs_set_red(z->parent->parent);
        clrs_left_rotate(z->parent->parent);
      }
    }
  }
  clrs_set_black(clrs_root);
}

static void lab_idx_insert(void *p) {
  clrs_node_t *z = p, *y = NIL, *x = clrs_root;
  while (x != NIL) {
    y = x;
    x = clrs_less(z, x) ? x->left : x->right;
  }
  z->parent = y;
  if (y == NIL) clrs_root = z;
  else if (clrs_less(z, y)) y->left = z;
  else y->right = z;
  z->left = z->right = NIL;
  clrs_set_red(z);
  clrs_insert_fixup(z);
}

static void clrs_transplant(clrs_node_t *u, clrs_node_t *v) {
  if (u->parent == NIL) clrs_root = v;
  else if (u == u->parent->left) u->parent->left = v;
  else u->parent->right = v;
  v->parent = u->parent; /* may write nil's parent: delete-fixup relies on it */
}

static void clrs_delete_fixup(clrs_node_t *x) {
  while (x != clrs_root && !clrs_red(x)) {
    if (x == x->parent->left) {
      clrs_node_t *w = x->parent->right;
      if (clrs_red(w)) {
        clrs_set_black(w);
        clrs_set_red(x->parent);
        clrs_left_rotate(x->parent);
        w = x->parent->right;
      }
      if (!clrs_red(w->left) && !clrs_red(w->right)) {
        clrs_set_red(w);
        x = x->parent;
      } else {
        if (!clrs_red(w->right)) {
          clrs_set_black(w->left);
          clrs_set_red(w);
          clrs_right_rotate(w);
          w = x->parent->right;
        }
        if (clrs_red(x->parent)) clrs_set_red(w);
        else clrs_set_black(w);
        clrs_set_black(x->parent);
        clrs_set_black(w->right);
        clrs_left_rotate(x->parent);
        x = clrs_root;
      }
    } else {
      clrs_node_t *w = x->parent->left;
      if (clrs_red(w)) {
        clrs_set_black(w);
        clrs_set_red(x->parent);
        clrs_right_rotate(x->parent);
        w = x->parent->left;
      }
      if (!clrs_red(w->right) && !clrs_red(w->left)) {
        clrs_set_red(w);
        x = x->parent;
      } else {
        if (!clrs_red(w->left)) {
          clrs_set_black(w->right);
          clrs_set_red(w);
          clrs_left_rotate(w);
          w = x->parent->left;
        }
        if (clrs_red(x->parent)) clrs_set_red(w);
        else clrs_set_black(w);
        clrs_set_black(x->parent);
        clrs_set_black(w->left);
        clrs_right_rotate(x->parent);
        x = clrs_root;
      }
    }
  }
  clrs_set_black(x);
}

static void lab_idx_remove(void *p) {
  clrs_node_t *z = p, *y = z, *x;
  bool y_was_red = clrs_red(y);
  if (z->left == NIL) {
    x = z->right;
    clrs_transplant(z, z->right);
  } else if (z->right == NIL) {
    x = z->left;
    clrs_transplant(z, z->left);
  } else {
    y = z->right;
    while (y->left != NIL) y = y->left;
    y_was_red = clrs_red(y);
    x = y->right;
    if (y->parent == z) {
      x->parent = y;
    } else {
      clrs_transplant(y, y->right);
      y->right = z->right;
      y->right->parent = y;
    }
    clrs_transplant(z, y);
    y->left = z->left;
    y->left->parent = y;
    if (clrs_red(z)) clrs_set_red(y);
    else clrs_set_black(y);
  }
  if (!y_was_red) clrs_delete_fixup(x);
  clrs_set_black(NIL);
  clrs_set_black(z);
}

static void *lab_idx_take(size_t need) {
  clrs_node_t *best = NIL;
  for (clrs_node_t *x = clrs_root; x != NIL;) {
    if (lab_size(x) >= need) {
      best = x;
      x = x->left;
    } else {
      x = x->right;
    }
  }
  if (best == NIL) return NULL;
  lab_idx_remove(best);
  return best;
}

static void lab_idx_reset(void) {
  clrs_root = NIL;
  clrs_nil_block.hdr = 0;
}

/* Black height of the subtree at x (nil counts 1), or -1 after reporting a violation. */
static long clrs_check_sub(clrs_node_t *x, clrs_node_t *parent, size_t *count, size_t *bytes,
                           size_t limit) {
  if (x == NIL) return 1;
  if (++*count > limit || !lab_is_free_block(x)) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: tree holds %p, not a free block\n", (void *)x);
    return -1;
  }
  *bytes += lab_size(x);
  if (*lab_footer(x, lab_size(x)) & LAB_FT_DUP) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: node %p has the DUP bit\n", (void *)x);
    return -1;
  }
  if (x->parent != parent) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: node %p: bad parent link\n", (void *)x);
    return -1;
  }
  if ((x->left != NIL && !clrs_less(x->left, x)) || (x->right != NIL && !clrs_less(x, x->right))) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: node %p out of order\n", (void *)x);
    return -1;
  }
  if (clrs_red(x) && (clrs_red(x->left) || clrs_red(x->right))) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: red node %p has a red child\n", (void *)x);
    return -1;
  }
  long l = clrs_check_sub(x->left, x, count, bytes, limit);
  if (l < 0) return -1;
  long r = clrs_check_sub(x->right, x, count, bytes, limit);
  if (r < 0) return -1;
  if (l != r) {
    fprintf(stderr, "lab rbtree_clrs: invalid heap: black heights %ld != %ld under %p\n", l, r,
            (void *)x);
    return -1;
  }
  return l + !clrs_red(x);
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  if (clrs_red(NIL)) LAB_FAIL("nil is red");
  if (clrs_red(clrs_root)) LAB_FAIL("root is red");
  size_t limit = (size_t)(lab_heap.end - lab_heap.lo) / LAB_MIN_BLOCK + 1;
  *count = *bytes = 0;
  /* parent/child order is checked per edge above; the in-order pass checks it globally */
  if (clrs_check_sub(clrs_root, NIL, count, bytes, limit) < 0) return false;
  clrs_node_t *prev = NULL;
  clrs_node_t *stack[128];
  int sp = 0;
  clrs_node_t *x = clrs_root;
  while (x != NIL || sp) {
    while (x != NIL) {
      if (sp == 128) LAB_FAIL("tree deeper than 128");
      stack[sp++] = x;
      x = x->left;
    }
    x = stack[--sp];
    if (prev && !clrs_less(prev, x)) LAB_FAIL("in-order sequence not increasing at %p", (void *)x);
    prev = x;
    x = x->right;
  }
  return true;
}

LAB_DEFINE_POLICY(rbtree_clrs, "best fit, CLRS red-black tree keyed by (size, address), parent pointers")
