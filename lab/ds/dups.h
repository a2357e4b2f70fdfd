/* lab/ds/dups.h -- the tree node shared by the duplicate-list policies, and its duplicate list.
 * Include after ds/blocks.h.
 *
 * Node (the payload of a free block: 24 bytes, so a 40-byte block holds it with header and
 * footer; 32 bytes and 48-byte blocks where the policy defines LAB_DNODE_PARENT alone, as
 * rbtree_linked does; 24 bytes again with LAB_DNODE_PARENT and LAB_DNODE_NO_DUPS, rbtree_unified):
 *
 *     tree node:  link[0], link[1]  children (left, right)
 *                 dups              first block of the same size, or NULL (absent where the
 *                                   policy defines LAB_DNODE_NO_DUPS: rbtree_unified, whose
 *                                   node is then {link[2], parent}, 24 bytes, as the seed's)
 *                 parent            parent node (only with LAB_DNODE_PARENT: rbtree_linked,
 *                                   rbtree_unified)
 *     duplicate:  link[0]           the previous duplicate, or the tree node for the first
 *                 link[1]           the next duplicate, or NULL
 *
 * Policies using it (rbtree_linked, rbtree_stack, rbtree_topdown, splay_stack, splay_topdown)
 * keep one tree node per distinct size; further free blocks of that size hang off the node's
 * `dups` list and carry the DUP footer bit. Taking or removing a duplicate is O(1) and never
 * touches the tree; the seed's observation that allocators see many equal sizes is what makes
 * this pay off.
 *
 * Invariants (lab_dup_check): every block on a list has the DUP bit and its tree node's size,
 * link[0] points back correctly, the list ends.
 */
#ifndef LAB_DS_DUPS_H
#define LAB_DS_DUPS_H

typedef struct lab_dnode_s {
  struct lab_dnode_s *link[2];
#ifndef LAB_DNODE_NO_DUPS
  struct lab_dnode_s *dups;
#endif
#ifdef LAB_DNODE_PARENT
  struct lab_dnode_s *parent;
#endif
} lab_dnode_t;

#ifndef LAB_DNODE_NO_DUPS
static inline size_t *lab_dup_word(const lab_dnode_t *x) { return lab_footer((void *)x, lab_size(x)); }
static inline bool lab_is_dup(const lab_dnode_t *x) { return (*lab_dup_word(x) & LAB_FT_DUP) != 0; }

/* Push x (a free block of node's size) on node's duplicate list. */
static inline void lab_dup_push(lab_dnode_t *node, lab_dnode_t *x) {
  *lab_dup_word(x) |= LAB_FT_DUP;
  x->link[0] = node;
  x->link[1] = node->dups;
  if (node->dups) node->dups->link[0] = x;
  node->dups = x;
}

/* Unlink duplicate d from its list, O(1). */
static inline void lab_dup_remove(lab_dnode_t *d) {
  lab_dnode_t *prev = d->link[0], *next = d->link[1];
  if (lab_is_dup(prev)) prev->link[1] = next;
  else prev->dups = next;
  if (next) next->link[0] = prev;
  *lab_dup_word(d) &= ~LAB_FT_DUP;
}

/* Take the first duplicate of node (node->dups != NULL). */
static inline lab_dnode_t *lab_dup_pop(lab_dnode_t *node) {
  lab_dnode_t *d = node->dups;
  lab_dup_remove(d);
  return d;
}

/* Replace tree node `node` (which has duplicates) by its first duplicate: the duplicate takes
 * node's children, colour, parent field and the rest of the list. The caller re-points the
 * parent's child link (or the root). Returns the new tree node. */
static inline lab_dnode_t *lab_dup_promote(lab_dnode_t *node) {
  lab_dnode_t *d = node->dups, *rest = d->link[1];
  d->link[0] = node->link[0];
  d->link[1] = node->link[1];
#ifdef LAB_DNODE_PARENT
  d->parent = node->parent;
#endif
  d->dups = rest; /* rest->link[0] already points at d */
  *lab_dup_word(d) &= ~LAB_FT_DUP;
  *lab_hdr(d) = (*lab_hdr(d) & ~LAB_F_RED) | (*lab_hdr(node) & LAB_F_RED);
  *lab_hdr(node) &= ~LAB_F_RED;
  return d;
}

/* Check node's duplicate list; adds its blocks to *count and *bytes. */
static bool lab_dup_check(lab_dnode_t *node, size_t *count, size_t *bytes, size_t limit) {
  lab_dnode_t *prev = node;
  for (lab_dnode_t *d = node->dups; d; prev = d, d = d->link[1]) {
    if (++*count > limit) LAB_FAIL("duplicate list of %p does not end", (void *)node);
    if (!lab_is_free_block(d)) LAB_FAIL("duplicate list of %p holds %p, not a free block", (void *)node, (void *)d);
    if (!lab_is_dup(d)) LAB_FAIL("duplicate %p lacks the DUP bit", (void *)d);
    if (lab_size(d) != lab_size(node))
      LAB_FAIL("duplicate %p has size %zu, its node %zu", (void *)d, lab_size(d), lab_size(node));
    if (d->link[0] != prev) LAB_FAIL("duplicate %p: back link %p, expected %p", (void *)d, (void *)d->link[0], (void *)prev);
    *bytes += lab_size(d);
  }
  return true;
}

#endif

/* Check the node itself: a free block, not marked DUP; counts it and its duplicates. */
static bool lab_dnode_check(lab_dnode_t *x, size_t *count, size_t *bytes, size_t limit) {
  if (++*count > limit) LAB_FAIL("tree has more nodes than the heap has blocks");
  if (!lab_is_free_block(x)) LAB_FAIL("tree holds %p, not a free block", (void *)x);
  if (*lab_footer(x, lab_size(x)) & LAB_FT_DUP) LAB_FAIL("tree node %p has the DUP bit", (void *)x);
  *bytes += lab_size(x);
#ifdef LAB_DNODE_NO_DUPS
  (void)limit;
  return true;
#else
  return lab_dup_check(x, count, bytes, limit);
#endif
}
#endif
