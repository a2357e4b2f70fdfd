/* lab/buddy_rbtree.c -- seed 003's red-black tree buddy allocator: one tree of all blocks
 * keyed by address, plus a free list per order.
 *
 * Structures (all nodes in the caller's metadata, one per unit plus a sentinel; a block
 * uses the node of its first unit, so a node's key is its own index):
 *   tree          a red-black tree (CLRS, with parent links and a black sentinel `nil`) of
 *                 every block, free or used; each node keeps its order and a used flag.
 *   free lists    per order, the free blocks of that order:
 *                   rbtree-vector  a growable array (malloc/realloc); a node remembers its
 *                                  position so that taking a buddy out is O(1)
 *                   rbtree-list    an intrusive doubly linked list
 * alloc(k): the first order j >= k with a free block gives one (the last pushed: LIFO, as
 * the seed's Vec::pop); it is split down to k, each split inserting the right half into the
 * tree and its free list (the left half keeps the node, whose key does not change).
 * free(i): a tree search finds block i; while its buddy (i xor 2^k) is in the tree, free and
 * of the same order, the buddy leaves its free list and the higher of the two leaves the
 * tree; the union is one order up. O(log units) per split or merge step.
 * Indices are 32-bit: up to 2^32 - 2 units.
 *
 * Invariants (lab_rbtree_check): binary-search order, a black root, no red node with a red
 * child, the same black height on every path; the tree's blocks tile [0, units), aligned;
 * the free lists hold exactly the free blocks, at their order; no two free buddies of the
 * same order (they would have merged); free_units is the sum of the free blocks.
 */
#include <stdlib.h>
#include <string.h>

#include "buddy_policy.h"

enum { RED = 0, BLACK = 1 };

typedef struct {
  uint32_t left, right, parent;
  uint32_t fl_prev, fl_next; /* free list links (list kind); fl_prev = array slot (vector) */
  uint8_t color, order, used, in_tree;
} rb_node_t;

typedef struct {
  int kind; /* 0 vector free lists, 1 linked free lists */
  uint64_t units, free_units;
  unsigned max_order;
  rb_node_t *n;
  uint32_t nil, root;
  uint32_t head[KITE_BUDDY_MAX_ORDER + 1]; /* list kind */
  struct {
    uint32_t *v;
    uint64_t len, cap;
  } vec[KITE_BUDDY_MAX_ORDER + 1]; /* vector kind */
} rbt_t;

/* One state per variant (vector, list); T points at the variant being called. */
static rbt_t rbt_state[2];
static rbt_t *T = &rbt_state[0];

#define N(x) (T->n[x])
#define NIL (T->nil)

/* ---- red-black tree (keys are node indices) --------------------------------------------- */

static void rot_left(uint32_t x) {
  uint32_t y = N(x).right;
  N(x).right = N(y).left;
  if (N(y).left != NIL) N(N(y).left).parent = x;
  N(y).parent = N(x).parent;
  if (N(x).parent == NIL) T->root = y;
  else if (x == N(N(x).parent).left) N(N(x).parent).left = y;
  else N(N(x).parent).right = y;
  N(y).left = x;
  N(x).parent = y;
}

static void rot_right(uint32_t x) {
  uint32_t y = N(x).left;
  N(x).left = N(y).right;
  if (N(y).right != NIL) N(N(y).right).parent = x;
  N(y).parent = N(x).parent;
  if (N(x).parent == NIL) T->root = y;
  else if (x == N(N(x).parent).right) N(N(x).parent).right = y;
  else N(N(x).parent).left = y;
  N(y).right = x;
  N(x).parent = y;
}

static void rb_insert(uint32_t z) {
  uint32_t y = NIL, x = T->root;
  while (x != NIL) {
    y = x;
    x = z < x ? N(x).left : N(x).right;
  }
  N(z).parent = y;
  if (y == NIL) T->root = z;
  else if (z < y) N(y).left = z;
  else N(y).right = z;
  N(z).left = N(z).right = NIL;
  N(z).color = RED;
  N(z).in_tree = 1;
  while (N(N(z).parent).color == RED) {
    uint32_t p = N(z).parent, g = N(p).parent;
    if (p == N(g).left) {
      uint32_t u = N(g).right;
      if (N(u).color == RED) {
        N(p).color = N(u).color = BLACK;
        N(g).color = RED;
        z = g;
      } else {
        if (z == N(p).right) {
          z = p;
          rot_left(z);
          p = N(z).parent;
          g = N(p).parent;
        }
        N(p).color = BLACK;
        N(g).color = RED;
        rot_right(g);
      }
    } else {
      uint32_t u = N(g).left;
      if (N(u).color == RED) {
        N(p).color = N(u).color = BLACK;
        N(g).color = RED;
        z = g;
      } else {
        if (z == N(p).left) {
          z = p;
          rot_right(z);
          p = N(z).parent;
          g = N(p).parent;
        }
        N(p).color = BLACK;
        N(g).color = RED;
        rot_left(g);
      }
    }
  }
  N(T->root).color = BLACK;
}

static void transplant(uint32_t u, uint32_t v) {
  if (N(u).parent == NIL) T->root = v;
  else if (u == N(N(u).parent).left) N(N(u).parent).left = v;
  else N(N(u).parent).right = v;
  N(v).parent = N(u).parent; /* may write the sentinel's parent: delete_fixup reads it */
}

static void rb_delete(uint32_t z) {
  uint32_t y = z, x;
  uint8_t y_color = N(y).color;
  if (N(z).left == NIL) {
    x = N(z).right;
    transplant(z, x);
  } else if (N(z).right == NIL) {
    x = N(z).left;
    transplant(z, x);
  } else {
    y = N(z).right;
    while (N(y).left != NIL) y = N(y).left;
    y_color = N(y).color;
    x = N(y).right;
    if (N(y).parent == z) {
      N(x).parent = y;
    } else {
      transplant(y, x);
      N(y).right = N(z).right;
      N(N(y).right).parent = y;
    }
    transplant(z, y);
    N(y).left = N(z).left;
    N(N(y).left).parent = y;
    N(y).color = N(z).color;
  }
  N(z).in_tree = 0;
  if (y_color != BLACK) return;
  while (x != T->root && N(x).color == BLACK) {
    uint32_t p = N(x).parent;
    if (x == N(p).left) {
      uint32_t w = N(p).right;
      if (N(w).color == RED) {
        N(w).color = BLACK;
        N(p).color = RED;
        rot_left(p);
        w = N(p).right;
      }
      if (N(N(w).left).color == BLACK && N(N(w).right).color == BLACK) {
        N(w).color = RED;
        x = p;
      } else {
        if (N(N(w).right).color == BLACK) {
          N(N(w).left).color = BLACK;
          N(w).color = RED;
          rot_right(w);
          w = N(p).right;
        }
        N(w).color = N(p).color;
        N(p).color = BLACK;
        N(N(w).right).color = BLACK;
        rot_left(p);
        x = T->root;
      }
    } else {
      uint32_t w = N(p).left;
      if (N(w).color == RED) {
        N(w).color = BLACK;
        N(p).color = RED;
        rot_right(p);
        w = N(p).left;
      }
      if (N(N(w).right).color == BLACK && N(N(w).left).color == BLACK) {
        N(w).color = RED;
        x = p;
      } else {
        if (N(N(w).left).color == BLACK) {
          N(N(w).right).color = BLACK;
          N(w).color = RED;
          rot_left(w);
          w = N(p).left;
        }
        N(w).color = N(p).color;
        N(p).color = BLACK;
        N(N(w).left).color = BLACK;
        rot_right(p);
        x = T->root;
      }
    }
  }
  N(x).color = BLACK;
}

static uint32_t rb_find(uint64_t key) {
  uint32_t x = T->root;
  while (x != NIL && x != key) x = key < x ? N(x).left : N(x).right;
  return x;
}

/* ---- free lists ------------------------------------------------------------------------- */

static int fl_push(unsigned o, uint32_t x) {
  if (T->kind == 0) {
    if (T->vec[o].len == T->vec[o].cap) {
      uint64_t cap = T->vec[o].cap ? 2 * T->vec[o].cap : 16;
      uint32_t *v = realloc(T->vec[o].v, cap * sizeof *v);
      if (!v) return -1;
      T->vec[o].v = v;
      T->vec[o].cap = cap;
    }
    N(x).fl_prev = (uint32_t)T->vec[o].len;
    T->vec[o].v[T->vec[o].len++] = x;
    return 0;
  }
  N(x).fl_prev = NIL;
  N(x).fl_next = T->head[o];
  if (T->head[o] != NIL) N(T->head[o]).fl_prev = x;
  T->head[o] = x;
  return 0;
}

static void fl_remove(unsigned o, uint32_t x) {
  if (T->kind == 0) {
    uint32_t slot = N(x).fl_prev, last = T->vec[o].v[--T->vec[o].len];
    T->vec[o].v[slot] = last;
    N(last).fl_prev = slot;
    return;
  }
  if (N(x).fl_prev != NIL) N(N(x).fl_prev).fl_next = N(x).fl_next;
  else T->head[o] = N(x).fl_next;
  if (N(x).fl_next != NIL) N(N(x).fl_next).fl_prev = N(x).fl_prev;
}

/* The most recently pushed free block of order o, or NIL. */
static uint32_t fl_top(unsigned o) {
  if (T->kind == 0) return T->vec[o].len ? T->vec[o].v[T->vec[o].len - 1] : NIL;
  return T->head[o];
}

/* ---- the allocator ------------------------------------------------------------------------ */

static void rbt_release(void) {
  for (unsigned o = 0; o <= KITE_BUDDY_MAX_ORDER; o++) {
    free(T->vec[o].v);
    T->vec[o].v = NULL;
    T->vec[o].len = T->vec[o].cap = 0;
  }
}

static size_t lab_rbtree_meta_size(uint64_t units) {
  if (units == 0 || units >= UINT32_MAX) return 0;
  return (size_t)((units + 1) * sizeof(rb_node_t));
}

static int rbt_init(int kind, void *meta, uint64_t units) {
  T = &rbt_state[kind];
  if (!meta || !lab_rbtree_meta_size(units)) return KITE_BUDDY_EINVAL;
  rbt_release();
  T->kind = kind;
  T->units = units;
  T->free_units = units;
  T->max_order = 63 - (unsigned)__builtin_clzll(units);
  T->n = (rb_node_t *)meta;
  T->nil = (uint32_t)units;
  memset(&N(NIL), 0, sizeof(rb_node_t));
  N(NIL).color = BLACK;
  N(NIL).left = N(NIL).right = N(NIL).parent = NIL;
  T->root = NIL;
  for (unsigned o = 0; o <= KITE_BUDDY_MAX_ORDER; o++) T->head[o] = NIL;
  uint64_t at = 0;
  for (int o = (int)T->max_order; o >= 0; o--) {
    if (!((units >> o) & 1)) continue;
    uint32_t x = (uint32_t)at;
    N(x).order = (uint8_t)o;
    N(x).used = 0;
    rb_insert(x);
    if (fl_push((unsigned)o, x)) return KITE_BUDDY_EINVAL;
    at += (uint64_t)1 << o;
  }
  return KITE_BUDDY_OK;
}
static int lab_rbtree_vector_init(void *meta, uint64_t units) { return rbt_init(0, meta, units); }
static int lab_rbtree_list_init(void *meta, uint64_t units) { return rbt_init(1, meta, units); }

static int rbt_alloc(unsigned order, uint64_t *index) {
  if (!index) return KITE_BUDDY_EINVAL;
  if (order > T->max_order) return KITE_BUDDY_EORDER;
  unsigned o = order;
  while (o <= T->max_order && fl_top(o) == NIL) o++;
  if (o > T->max_order) return KITE_BUDDY_ENOMEM;
  uint32_t x = fl_top(o);
  fl_remove(o, x);
  while (o > order) { /* split: the right half joins the tree and the free list below */
    o--;
    uint32_t r = x + ((uint32_t)1 << o);
    N(r).order = (uint8_t)o;
    N(r).used = 0;
    rb_insert(r);
    if (fl_push(o, r)) return KITE_BUDDY_ENOMEM;
  }
  N(x).order = (uint8_t)order;
  N(x).used = 1;
  T->free_units -= (uint64_t)1 << order;
  *index = x;
  return KITE_BUDDY_OK;
}

static int rbt_free(uint64_t index) {
  if (index >= T->units) return KITE_BUDDY_ERANGE;
  uint32_t x = rb_find(index);
  if (x == NIL || !N(x).used) return KITE_BUDDY_EFREE;
  unsigned o = N(x).order;
  N(x).used = 0;
  T->free_units += (uint64_t)1 << o;
  while (o < T->max_order) {
    uint64_t bi = (uint64_t)x ^ ((uint64_t)1 << o);
    if (bi + ((uint64_t)1 << o) > T->units) break;
    uint32_t b = rb_find(bi);
    if (b == NIL || N(b).used || N(b).order != o) break;
    fl_remove(o, b);
    uint32_t hi = x > b ? x : b;
    rb_delete(hi);
    x = x < b ? x : b;
    o++;
    N(x).order = (uint8_t)o;
  }
  return fl_push(o, x) ? KITE_BUDDY_ENOMEM : KITE_BUDDY_OK;
}

static uint64_t rbt_free_units(void) { return T->free_units; }

static void rbt_fini(void) {
  rbt_release();
  T->n = NULL;
}

/* ---- validation --------------------------------------------------------------------------- */

/* In-order walk without recursion (parent links): checks order, colours, black height and
 * tiling. Returns 0 when sound. */
static int rbt_check(void) {
  if (!T->n) return -1;
  if (N(T->root).color != BLACK || N(NIL).color != BLACK) return -2;
  uint64_t next = 0, free_units = 0, nfree = 0;
  int black_height = -1;
  uint32_t x = T->root, prev = NIL;
  /* leftmost */
  if (x != NIL)
    while (N(x).left != NIL) x = N(x).left;
  while (x != NIL) {
    rb_node_t *n = &N(x);
    if (!n->in_tree) return -3;
    if (prev != NIL && prev >= x) return -4;
    if (n->color == RED && (N(n->left).color == RED || N(n->right).color == RED)) return -5;
    if (n->left != NIL && N(n->left).parent != x) return -6;
    if (n->right != NIL && N(n->right).parent != x) return -6;
    uint64_t size = (uint64_t)1 << n->order;
    if (x != next || (x & (size - 1)) || x + size > T->units) return -7; /* tiling */
    next = x + size;
    if (n->left == NIL || n->right == NIL) { /* a path ends here: count its black nodes */
      int bh = 0;
      for (uint32_t y = x; y != NIL; y = N(y).parent) bh += N(y).color == BLACK;
      if (black_height < 0) black_height = bh;
      else if (bh != black_height) return -8;
    }
    if (!n->used) {
      free_units += size;
      nfree++;
      uint64_t bi = (uint64_t)x ^ size;
      if (n->order < T->max_order && bi + size <= T->units) {
        uint32_t b = rb_find(bi);
        if (b != NIL && !N(b).used && N(b).order == n->order) return -9; /* unmerged */
      }
    }
    prev = x;
    /* in-order successor */
    if (n->right != NIL) {
      x = n->right;
      while (N(x).left != NIL) x = N(x).left;
    } else {
      uint32_t y = N(x).parent;
      while (y != NIL && x == N(y).right) { x = y; y = N(y).parent; }
      x = y;
    }
  }
  if (next != T->units || free_units != T->free_units) return -10;
  /* the free lists hold exactly the free blocks */
  uint64_t listed = 0;
  for (unsigned o = 0; o <= T->max_order; o++) {
    if (T->kind == 0) {
      for (uint64_t i = 0; i < T->vec[o].len; i++) {
        uint32_t y = T->vec[o].v[i];
        if (!N(y).in_tree || N(y).used || N(y).order != o || N(y).fl_prev != i) return -11;
        listed++;
      }
    } else {
      uint32_t p = NIL;
      for (uint32_t y = T->head[o]; y != NIL; p = y, y = N(y).fl_next) {
        if (!N(y).in_tree || N(y).used || N(y).order != o || N(y).fl_prev != p) return -11;
        if (++listed > nfree) return -12;
      }
    }
  }
  return listed == nfree ? 0 : -12;
}

/* Entry points: select the variant's state, then run the shared code. */
#define RBT_ENTRY(tag, kind)                                                                \
  static int lab_rbtree_##tag##_alloc(unsigned o, uint64_t *i) {                           \
    T = &rbt_state[kind];                                                                  \
    return rbt_alloc(o, i);                                                                \
  }                                                                                        \
  static int lab_rbtree_##tag##_free(uint64_t i) {                                         \
    T = &rbt_state[kind];                                                                  \
    return rbt_free(i);                                                                    \
  }                                                                                        \
  static uint64_t lab_rbtree_##tag##_free_units(void) {                                    \
    T = &rbt_state[kind];                                                                  \
    return rbt_free_units();                                                               \
  }                                                                                        \
  static void lab_rbtree_##tag##_fini(void) {                                              \
    T = &rbt_state[kind];                                                                  \
    rbt_fini();                                                                            \
  }                                                                                        \
  static int lab_rbtree_##tag##_check(void) {                                              \
    T = &rbt_state[kind];                                                                  \
    return rbt_check();                                                                    \
  }
RBT_ENTRY(vector, 0)
RBT_ENTRY(list, 1)

const lab_buddy_policy_t *lab_buddy_rbtree_vector(void) {
  static const lab_buddy_policy_t p = {
      .name = "rbtree-vector",
      .description = "RB Trees - Vectors (free lists as growable arrays)",
      .lowest_first = false,
      .slow = false,
      .meta_size = lab_rbtree_meta_size,
      .init = lab_rbtree_vector_init,
      .alloc = lab_rbtree_vector_alloc,
      .free = lab_rbtree_vector_free,
      .free_units = lab_rbtree_vector_free_units,
      .fini = lab_rbtree_vector_fini,
      .check = lab_rbtree_vector_check,
  };
  return &p;
}

const lab_buddy_policy_t *lab_buddy_rbtree_list(void) {
  static const lab_buddy_policy_t p = {
      .name = "rbtree-list",
      .description = "RB Trees - Linked Lists (intrusive free lists)",
      .lowest_first = false,
      .slow = false,
      .meta_size = lab_rbtree_meta_size,
      .init = lab_rbtree_list_init,
      .alloc = lab_rbtree_list_alloc,
      .free = lab_rbtree_list_free,
      .free_units = lab_rbtree_list_free_units,
      .fini = lab_rbtree_list_fini,
      .check = lab_rbtree_list_check,
  };
  return &p;
}
