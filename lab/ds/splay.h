/* lab/ds/splay.h -- top-down splay tree of free blocks keyed by size (Sleator and Tarjan,
 * 1985), for best fit. Include after ds/dups.h.
 *
 * Node: ds/dups.h's {link[2], dups}: one node per distinct size, equal sizes on the node's
 * duplicate list. No colour, no parent. A tree is a root pointer owned by the caller.
 *
 * lab_splay_td(t, key) splays the subtree t for key in one pass down: nodes passed on the way
 * are hung off two side trees (L: keys < key, R: keys > key), with a rotation whenever the
 * path goes twice the same way (zig-zig); at the end the last node reached becomes the root
 * with L and R as its subtrees. The new root is `key` itself if present, otherwise its
 * predecessor or successor, and then every key < root is < key and every key > root is > key.
 *
 * Best fit on a structure made for exact match (the seed notes this complication): splay for
 * `need`; if the root is >= need it is the best fit; otherwise the best fit is the minimum of
 * the right subtree, which a second splay for `need` inside that subtree brings to its top
 * (with no left child). Removal of a root joins its subtrees by splaying the left one for the
 * root's key (its maximum rises, with no right child) and hanging the right one below it.
 *
 * Invariants (lab_splay_check): strictly increasing in-order sizes, no colour bits, every node
 * and duplicate a free block of the heap. A splay tree may be O(n) deep, so the check walks
 * it with an explicit heap-allocated stack, never recursion.
 */
#ifndef LAB_DS_SPLAY_H
#define LAB_DS_SPLAY_H
#include <stdlib.h>

static lab_dnode_t *lab_splay_td(lab_dnode_t *t, size_t key) {
  lab_dnode_t N = {{NULL, NULL}, NULL};
  lab_dnode_t *side[2] = {&N, &N}; /* side[0]: max of L, side[1]: min of R */
  for (;;) {
    size_t ts = lab_size(t);
    if (key == ts) break;
    int d = key > ts;
    lab_dnode_t *c = t->link[d];
    if (!c) break;
    size_t cs = lab_size(c);
    if (key != cs && (key > cs) == d) { /* zig-zig: rotate c above t */
      t->link[d] = c->link[!d];
      c->link[!d] = t;
      t = c;
      if (!t->link[d]) break;
    }
    side[!d]->link[d] = t; /* t and its !d subtree go to the other side's tree */
    side[!d] = t;
    t = t->link[d];
  }
  side[0]->link[1] = t->link[0];
  side[1]->link[0] = t->link[1];
  t->link[0] = N.link[1];
  t->link[1] = N.link[0];
  return t;
}

/* Root of the tree after removing root r (no duplicates): join its two subtrees. */
static inline lab_dnode_t *lab_splay_td_join(lab_dnode_t *r) {
  lab_dnode_t *l = r->link[0];
  if (!l) return r->link[1];
  l = lab_splay_td(l, lab_size(r)); /* all of l is smaller: its maximum rises */
  l->link[1] = r->link[1];
  return l;
}

/* Take root r out of the tree: a duplicate of it if it has any, else r itself. */
static inline lab_dnode_t *lab_splay_take_root(lab_dnode_t **root) {
  lab_dnode_t *r = *root;
  if (r->dups) return lab_dup_pop(r);
  *root = lab_splay_td_join(r);
  return r;
}

static void lab_splay_td_insert(lab_dnode_t **root, lab_dnode_t *x) {
  x->link[0] = x->link[1] = NULL;
  x->dups = NULL;
  if (!*root) {
    *root = x;
    return;
  }
  size_t size = lab_size(x);
  lab_dnode_t *t = lab_splay_td(*root, size);
  size_t ts = lab_size(t);
  if (ts == size) {
    lab_dup_push(t, x);
    *root = t;
    return;
  }
  int d = size > ts; /* x becomes the root, t goes below it on side !d */
  x->link[d] = t->link[d];
  x->link[!d] = t;
  t->link[d] = NULL;
  *root = x;
}

/* Remove and return a block of the smallest size >= need, or NULL. */
static void *lab_splay_td_take(lab_dnode_t **root, size_t need) {
  if (!*root) return NULL;
  lab_dnode_t *t = lab_splay_td(*root, need);
  *root = t;
  if (lab_size(t) >= need) return lab_splay_take_root(root);
  if (!t->link[1]) return NULL;
  lab_dnode_t *b = lab_splay_td(t->link[1], need); /* the minimum of t's right subtree */
  t->link[1] = b;
  if (b->dups) return lab_dup_pop(b);
  t->link[1] = b->link[1]; /* b has no left child */
  return b;
}

/* Remove free block z (a tree node or a duplicate). */
static void lab_splay_td_remove(lab_dnode_t **root, lab_dnode_t *z) {
  if (lab_is_dup(z)) {
    lab_dup_remove(z);
    return;
  }
  *root = lab_splay_td(*root, lab_size(z)); /* z is the root now */
  if (z->dups) *root = lab_dup_promote(z);
  else *root = lab_splay_td_join(z);
}

static bool lab_splay_check(lab_dnode_t *root, size_t *count, size_t *bytes) {
  size_t limit = (size_t)(lab_heap.end - lab_heap.lo) / LAB_MIN_BLOCK + 1;
  size_t cap = 64, sp = 0;
  lab_dnode_t **stack = malloc(cap * sizeof *stack), *prev = NULL, *x = root;
  bool ok = stack != NULL;
  *count = *bytes = 0;
  while (ok && (x || sp)) {
    while (x) {
      if (sp == cap) {
        lab_dnode_t **bigger = realloc(stack, 2 * cap * sizeof *stack);
        if (!bigger) {
          ok = false;
          break;
        }
        stack = bigger;
        cap *= 2;
      }
      if (!lab_dnode_check(x, count, bytes, limit) || (*lab_hdr(x) & LAB_F_RED)) {
        fprintf(stderr, "lab %s: invalid heap: bad splay node %p\n", LAB_POLICY_NAME, (void *)x);
        ok = false;
        break;
      }
      stack[sp++] = x;
      x = x->link[0];
    }
    if (!ok) break;
    x = stack[--sp];
    if (prev && lab_size(prev) >= lab_size(x)) {
      fprintf(stderr, "lab %s: invalid heap: splay node %p (size %zu) out of order\n",
              LAB_POLICY_NAME, (void *)x, lab_size(x));
      ok = false;
      break;
    }
    prev = x;
    x = x->link[1];
  }
  free(stack);
  return ok;
}
#endif
