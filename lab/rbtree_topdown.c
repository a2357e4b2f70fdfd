/* lab/rbtree_topdown.c -- best fit over a red-black tree fixed top-down: insert and delete
 * rebalance on the way down, in a single pass, with no parent pointers and no stack.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, 40-byte minimum block: header, the 24-byte node
 * {link[2], dups}, footer). A free block's payload holds the node of
 * ds/dups.h; this policy uses {link[2], dups}; the colour is the header's RED bit.
 *
 * One node per distinct size; equal sizes go on the node's duplicate list (ds/dups.h).
 * Insert (Guibas-Sedgewick): on the way down, a black node with two red children is flipped
 * (red, children black); a red-red violation that creates is repaired at once by a single or
 * double rotation at the grandparent, using the great-grandparent link. The new node is
 * attached red at the bottom and nothing needs fixing afterwards.
 * Delete: on the way down, push a red node down ahead of the search (rotate a red sibling
 * up, or flip colours with a black sibling, or rotate at the parent when the sibling has a
 * red child) so that the node finally unlinked is red or has a red child. The target is
 * found on the way; the node physically unlinked is its in-order predecessor (or itself),
 * which is then moved into the target's place (intrusive nodes cannot swap contents).
 * A static dummy `head` above the root makes the root an ordinary child.
 *
 * Costs: as rbtree_stack (duplicates O(1); a tree node with duplicates is replaced by its
 * first duplicate after an O(log n) search for its parent), with one pass per update.
 * Invariants: ds/rbtree_check.h (without parents) and ds/dups.h.
 */
#define LAB_POLICY_NAME "rbtree_topdown"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/rbtree_check.h"

static lab_dnode_t *td_root;
static struct {
  size_t hdr; /* colour word of the dummy: black */
  lab_dnode_t n;
} td_head_block;

static inline void td_paint(lab_dnode_t *x, bool red) {
  if (red) *lab_hdr(x) |= LAB_F_RED;
  else *lab_hdr(x) &= ~LAB_F_RED;
}

/* Rotate root down towards dir; the old root turns red, the new one black. */
static inline lab_dnode_t *td_single(lab_dnode_t *root, int dir) {
  lab_dnode_t *save = root->link[!dir];
  root->link[!dir] = save->link[dir];
  save->link[dir] = root;
  td_paint(root, true);
  td_paint(save, false);
  return save;
}

static inline lab_dnode_t *td_double(lab_dnode_t *root, int dir) {
  root->link[!dir] = td_single(root->link[!dir], !dir);
  return td_single(root, dir);
}

static void lab_idx_reset(void) { td_root = NULL; }

static void lab_idx_insert(void *ptr) {
  lab_dnode_t *x = ptr;
  size_t size = lab_size(x);
  x->link[0] = x->link[1] = NULL;
  x->dups = NULL;
  if (!td_root) {
    td_root = x;
    td_paint(x, false);
    return;
  }
  lab_dnode_t *head = &td_head_block.n;
  td_head_block.hdr = 0;
  head->link[0] = NULL;
  head->link[1] = td_root;
  lab_dnode_t *t = head, *g = NULL, *p = NULL, *q = td_root;
  int dir = 0, last = 0;
  for (;;) {
    bool added = false;
    if (!q) {
      p->link[dir] = q = x;
      td_paint(x, true);
      added = true;
    } else if (lab_rb_red(q->link[0]) && lab_rb_red(q->link[1])) {
      td_paint(q, true); /* colour flip */
      td_paint(q->link[0], false);
      td_paint(q->link[1], false);
    }
    if (lab_rb_red(q) && lab_rb_red(p)) { /* red-red: rotate at the grandparent */
      int dir2 = t->link[1] == g;
      if (q == p->link[last]) t->link[dir2] = td_single(g, !last);
      else t->link[dir2] = td_double(g, !last);
    }
    if (added) break;
    size_t qs = lab_size(q);
    if (qs == size) {
      lab_dup_push(q, x);
      break;
    }
    last = dir;
    dir = qs < size;
    if (g) t = g;
    g = p;
    p = q;
    q = q->link[dir];
  }
  td_root = head->link[1];
  td_paint(td_root, false);
}

/* Remove the tree node of size `key` (it exists and has no duplicates). */
static void td_erase(size_t key) {
  lab_dnode_t *head = &td_head_block.n;
  td_head_block.hdr = 0;
  head->link[0] = NULL;
  head->link[1] = td_root;
  lab_dnode_t *q = head, *p = NULL, *g = NULL, *f = NULL, *fp = NULL;
  int dir = 1;
  while (q->link[dir]) {
    int last = dir;
    g = p;
    p = q;
    q = q->link[dir];
    size_t qs = lab_size(q);
    dir = qs < key; /* on a match go left: the predecessor replaces it */
    if (qs == key) {
      f = q;
      fp = p;
    }
    if (lab_rb_red(q) || lab_rb_red(q->link[dir])) continue;
    if (lab_rb_red(q->link[!dir])) { /* red child on the other side: rotate it above q */
      lab_dnode_t *r = td_single(q, dir);
      p->link[last] = r;
      if (q == f) fp = r;
      p = r;
      continue;
    }
    lab_dnode_t *s = p->link[!last];
    if (!s) continue;
    if (!lab_rb_red(s->link[!last]) && !lab_rb_red(s->link[last])) { /* colour flip */
      td_paint(p, false);
      td_paint(s, true);
      td_paint(q, true);
      continue;
    }
    int dir2 = g->link[1] == p;
    lab_dnode_t *r = lab_rb_red(s->link[last]) ? td_double(p, last) : td_single(p, last);
    g->link[dir2] = r;
    if (p == f) fp = r;
    td_paint(q, true);
    td_paint(r, true);
    td_paint(r->link[0], false);
    td_paint(r->link[1], false);
  }
  /* q is f or f's in-order predecessor, with at most one child: unlink it */
  p->link[p->link[1] == q] = q->link[q->link[0] == NULL];
  if (q != f) { /* move q into f's place */
    q->link[0] = f->link[0];
    q->link[1] = f->link[1];
    td_paint(q, lab_rb_red(f));
    fp->link[fp->link[1] == f] = q;
  }
  td_paint(f, false);
  td_root = head->link[1];
  if (td_root) td_paint(td_root, false);
}

static void lab_idx_remove(void *ptr) {
  lab_dnode_t *z = ptr;
  if (lab_is_dup(z)) {
    lab_dup_remove(z);
  } else if (z->dups) {
    size_t size = lab_size(z);
    lab_dnode_t *parent = NULL;
    for (lab_dnode_t *y = td_root; y != z; y = y->link[lab_size(y) < size]) parent = y;
    lab_dnode_t *d = lab_dup_promote(z);
    if (parent) parent->link[parent->link[1] == z] = d;
    else td_root = d;
  } else {
    td_erase(lab_size(z));
  }
}

static void *lab_idx_take(size_t need) {
  lab_dnode_t *best = NULL;
  for (lab_dnode_t *x = td_root; x;) {
    size_t s = lab_size(x);
    if (s >= need) {
      best = x;
      if (s == need) break;
    }
    x = x->link[s < need];
  }
  if (!best) return NULL;
  if (best->dups) return lab_dup_pop(best);
  td_erase(lab_size(best));
  return best;
}

static bool td_less(lab_dnode_t *a, lab_dnode_t *b) { return lab_size(a) < lab_size(b); }

static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_rb_check(td_root, td_less, false, count, bytes);
}

LAB_DEFINE_POLICY(rbtree_topdown, "best fit, red-black tree fixed top-down in one pass, duplicate lists")
