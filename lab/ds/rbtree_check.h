/* lab/ds/rbtree_check.h -- the validator shared by every red-black policy that uses the node
 * of ds/dups.h (rbtree_unified, rbtree_linked, rbtree_stack, rbtree_topdown).
 *
 * Checks: the root is black; no red node has a red child; every root-to-leaf path has the
 * same number of black nodes; the in-order sequence is strictly increasing under `less`;
 * with `parents`, x->link[d]->parent == x and the root's parent is NULL; every node (and
 * every duplicate on its list) is a free block of the heap (lab_dnode_check). Recursion depth
 * is the tree height, at most 2 log2(n + 1) for a valid tree; a malformed deeper tree is
 * reported once it passes 128 levels.
 */
#ifndef LAB_DS_RBTREE_CHECK_H
#define LAB_DS_RBTREE_CHECK_H

typedef bool (*lab_rb_less_fn)(lab_dnode_t *a, lab_dnode_t *b);

static inline bool lab_rb_red(const lab_dnode_t *x) { return x && (*lab_hdr(x) & LAB_F_RED); }

struct lab_rb_check_ctx {
  lab_rb_less_fn less;
  bool parents;
  lab_dnode_t *prev;
  size_t count, bytes, limit;
};

/* Black height of x's subtree (NULL = 1) or -1 after printing a violation. */
static long lab_rb_check_sub(struct lab_rb_check_ctx *c, lab_dnode_t *x, lab_dnode_t *parent,
                             int depth) {
  if (!x) return 1;
  if (depth > 128) {
    fprintf(stderr, "lab %s: invalid heap: tree deeper than 128\n", LAB_POLICY_NAME);
    return -1;
  }
  if (!lab_dnode_check(x, &c->count, &c->bytes, c->limit)) return -1;
#ifdef LAB_DNODE_PARENT
  if (c->parents && x->parent != parent) {
    fprintf(stderr, "lab %s: invalid heap: node %p has parent %p, expected %p\n", LAB_POLICY_NAME,
            (void *)x, (void *)x->parent, (void *)parent);
    return -1;
  }
#else
  (void)parent;
#endif
  if (lab_rb_red(x) && (lab_rb_red(x->link[0]) || lab_rb_red(x->link[1]))) {
    fprintf(stderr, "lab %s: invalid heap: red node %p has a red child\n", LAB_POLICY_NAME,
            (void *)x);
    return -1;
  }
  long l = lab_rb_check_sub(c, x->link[0], x, depth + 1);
  if (l < 0) return -1;
  if (c->prev && !c->less(c->prev, x)) {
    fprintf(stderr, "lab %s: invalid heap: node %p (size %zu) out of order\n", LAB_POLICY_NAME,
            (void *)x, lab_size(x));
    return -1;
  }
  c->prev = x;
  long r = lab_rb_check_sub(c, x->link[1], x, depth + 1);
  if (r < 0) return -1;
  if (l != r) {
    fprintf(stderr, "lab %s: invalid heap: black heights %ld != %ld under %p\n", LAB_POLICY_NAME,
            l, r, (void *)x);
    return -1;
  }
  return l + !lab_rb_red(x);
}

static bool lab_rb_check(lab_dnode_t *root, lab_rb_less_fn less, bool parents, size_t *count,
                         size_t *bytes) {
  if (lab_rb_red(root)) LAB_FAIL("root is red");
  struct lab_rb_check_ctx c = {less, parents, NULL, 0, 0,
                               (size_t)(lab_heap.end - lab_heap.lo) / LAB_MIN_BLOCK + 1};
  if (lab_rb_check_sub(&c, root, NULL, 0) < 0) return false;
  *count = c.count;
  *bytes = c.bytes;
  return true;
}
#endif
