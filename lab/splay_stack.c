/* lab/splay_stack.c -- best fit over a bottom-up splay tree: the search records its path on
 * an explicit stack, then the found node is splayed to the root with zig, zig-zig and zig-zag
 * steps read off that stack (no parent pointers).
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, 40-byte minimum block: header, the 24-byte node
 * {link[2], dups}, footer). A free block's payload holds the node of
 * ds/dups.h; this policy uses {link[2], dups}.
 *
 * One node per distinct size, equal sizes on duplicate lists. insert: descend, then add a
 * duplicate or attach a leaf, and splay that node. malloc: descend remembering the best fit
 * (smallest size >= need) and its depth; splay it to the root and take it (or a duplicate of
 * it); when nothing fits, splay the last node reached. Removal of a coalesced neighbour:
 * descend to it, splay it, then promote its first duplicate or join its subtrees (the
 * maximum of the left subtree is splayed up the same way and adopts the right subtree).
 *
 * A splay tree can be O(n) deep. The stack holds SP_CAP nodes; a search that would go deeper
 * is redone with one top-down splay (ds/splay.h) instead, which restructures the same path
 * with the same zig-zig rotations and needs no stack, so any depth works.
 * Invariants: ds/splay.h (BST order) and ds/dups.h.
 */
#define LAB_POLICY_NAME "splay_stack"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/splay.h"

#ifndef SP_CAP
#define SP_CAP 1024
#endif

static lab_dnode_t *sp_root;
static lab_dnode_t *sp_path[SP_CAP];

/* Splay path[k-1] to the top of the path; *slot held path[0] and now holds the node. */
static void sp_splay(int k, lab_dnode_t **slot) {
  lab_dnode_t *x = sp_path[k - 1];
  while (k > 1) {
    lab_dnode_t *p = sp_path[k - 2];
    int dp = p->link[1] == x;
    if (k == 2) { /* zig */
      p->link[dp] = x->link[!dp];
      x->link[!dp] = p;
      break;
    }
    lab_dnode_t *g = sp_path[k - 3];
    int dg = g->link[1] == p;
    if (dp == dg) { /* zig-zig: rotate p over g, then x over p */
      g->link[dg] = p->link[!dg];
      p->link[!dg] = g;
      p->link[dp] = x->link[!dp];
      x->link[!dp] = p;
    } else { /* zig-zag: x rises over p, then over g */
      p->link[dp] = x->link[!dp];
      x->link[!dp] = p;
      g->link[dg] = x->link[!dg];
      x->link[!dg] = g;
    }
    if (k >= 4) {
      lab_dnode_t *gg = sp_path[k - 4];
      gg->link[gg->link[1] == g] = x;
    }
    k -= 2;
    sp_path[k - 1] = x;
  }
  *slot = x;
}

static void lab_idx_reset(void) { sp_root = NULL; }

static void lab_idx_insert(void *ptr) {
  lab_dnode_t *x = ptr;
  size_t size = lab_size(x);
  int k = 0;
  for (lab_dnode_t *y = sp_root; y;) {
    if (k == SP_CAP - 1) {
      lab_splay_td_insert(&sp_root, x); /* too deep for the stack */
      return;
    }
    sp_path[k++] = y;
    size_t ys = lab_size(y);
    if (ys == size) {
      sp_splay(k, &sp_root);
      lab_dup_push(y, x);
      return;
    }
    y = y->link[ys < size];
  }
  x->link[0] = x->link[1] = NULL;
  x->dups = NULL;
  if (k) sp_path[k - 1]->link[lab_size(sp_path[k - 1]) < size] = x;
  sp_path[k++] = x;
  sp_splay(k, &sp_root);
}

/* Root r leaves the tree (no duplicates): splay the maximum of its left subtree to the top of
 * that subtree and hang the right subtree under it. */
static void sp_remove_root(lab_dnode_t *r) {
  lab_dnode_t *l = r->link[0];
  if (!l) {
    sp_root = r->link[1];
    return;
  }
  int k = 0;
  for (lab_dnode_t *y = l; y; y = y->link[1]) {
    if (k == SP_CAP) {
      sp_root = lab_splay_td_join(r);
      return;
    }
    sp_path[k++] = y;
  }
  sp_splay(k, &l);
  l->link[1] = r->link[1];
  sp_root = l;
}

static void lab_idx_remove(void *ptr) {
  lab_dnode_t *z = ptr;
  if (lab_is_dup(z)) {
    lab_dup_remove(z);
    return;
  }
  size_t size = lab_size(z);
  int k = 0;
  for (lab_dnode_t *y = sp_root;; y = y->link[lab_size(y) < size]) {
    if (k == SP_CAP) {
      lab_splay_td_remove(&sp_root, z);
      return;
    }
    sp_path[k++] = y;
    if (y == z) break;
  }
  sp_splay(k, &sp_root);
  if (z->dups) sp_root = lab_dup_promote(z);
  else sp_remove_root(z);
}

static void *lab_idx_take(size_t need) {
  lab_dnode_t *best = NULL;
  int k = 0, best_k = 0;
  for (lab_dnode_t *y = sp_root; y;) {
    if (k == SP_CAP) return lab_splay_td_take(&sp_root, need);
    sp_path[k++] = y;
    size_t s = lab_size(y);
    if (s >= need) {
      best = y;
      best_k = k;
      if (s == need) break;
    }
    y = y->link[s < need];
  }
  if (!best) {
    if (k) sp_splay(k, &sp_root); /* splay the last node reached, as any access does */
    return NULL;
  }
  sp_splay(best_k, &sp_root);
  if (best->dups) return lab_dup_pop(best);
  sp_remove_root(best);
  return best;
}

static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_splay_check(sp_root, count, bytes);
}

LAB_DEFINE_POLICY(splay_stack, "best fit, bottom-up splay tree with an explicit path stack, duplicate lists")
