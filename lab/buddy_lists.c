/* lab/buddy_lists.c -- seed 003's naive buddy allocator: one list of blocks per order.
 *
 * Every block, free or used, sits in the list of its order with a used flag; nothing else
 * indexes them. So every question is a linear search, as in the seed:
 *   alloc(k)   scan the lists of orders k..max for the lowest-address free block, take it
 *              out, split it down (each right half goes into the list one order below),
 *              and list the first 2^k units as a used block of order k.
 *   free(i)    search list k for block i, mark it free; search the same list for its buddy
 *              (i xor 2^k): while the buddy is free, take both out and list their union one
 *              order up.
 * The seed took the first free block of the smallest order that had one; here the lowest
 * address among orders >= k is taken instead, so that the indices match kite_buddy's and the
 * lab's cross-check can compare them. Cost: O(blocks) per call, which is the point of the
 * variant (the seed needed 2 minutes, and 25 with linked lists, for 1 GiB in 4 KiB blocks).
 *
 * Two list kinds, as in the seed:
 *   lists-vector  a growable array per order (malloc/realloc), entries {index, used};
 *                 removal swaps the last entry in.
 *   lists-dlist   an intrusive doubly linked list per order; the nodes live in the caller's
 *                 metadata, one per unit (a block uses the node of its first unit).
 * Both keep, in the metadata, one byte per unit: order+1 of the used block that starts
 * there, or 0. Free uses it to know the order (the seed passed it in) and to reject a bad
 * index; the list search still runs to find the block and its buddy.
 *
 * Invariants (lab_lists_check): the listed blocks tile [0, units) exactly, each aligned to
 * its size; a block is used iff its start byte says so; free_units is the sum of the free
 * blocks; no two free buddies of the same order are both listed (they would have merged).
 */
#include <stdlib.h>
#include <string.h>

#include "buddy_policy.h"

typedef struct {
  uint64_t index;
  uint8_t used;
} vec_entry_t;

typedef struct {
  vec_entry_t *v;
  uint64_t len, cap;
} vec_t;

typedef struct {
  uint64_t next, prev; /* LNIL when none */
  uint8_t used, listed;
} dl_node_t;
#define LNIL UINT64_MAX

typedef struct {
  int kind; /* 0 vector, 1 dlist */
  uint64_t units, free_units;
  unsigned max_order;
  uint8_t *used_order; /* per unit: order+1 of the used block starting there */
  vec_t vec[KITE_BUDDY_MAX_ORDER + 1];
  dl_node_t *node;
  uint64_t head[KITE_BUDDY_MAX_ORDER + 1];
} lists_t;

/* One state per variant (vector, dlist); L points at the variant being called. */
static lists_t lists_state[2];
static lists_t *L = &lists_state[0];

/* ---- the two list kinds behind one set of operations ----------------------------------- */

static int lst_push(unsigned o, uint64_t idx, int used) {
  if (L->kind == 0) {
    vec_t *v = &L->vec[o];
    if (v->len == v->cap) {
      uint64_t cap = v->cap ? 2 * v->cap : 16;
      vec_entry_t *n = realloc(v->v, cap * sizeof *n);
      if (!n) return -1;
      v->v = n;
      v->cap = cap;
    }
    v->v[v->len].index = idx;
    v->v[v->len++].used = (uint8_t)used;
    return 0;
  }
  dl_node_t *n = &L->node[idx];
  n->used = (uint8_t)used;
  n->listed = 1;
  n->prev = LNIL;
  n->next = L->head[o];
  if (L->head[o] != LNIL) L->node[L->head[o]].prev = idx;
  L->head[o] = idx;
  return 0;
}

/* Linear search of list o for block idx: its state (0 free, 1 used) or -1 when absent.
 * *where receives the position (vector) for lst_remove_at. */
static int lst_find(unsigned o, uint64_t idx, uint64_t *where) {
  if (L->kind == 0) {
    vec_t *v = &L->vec[o];
    for (uint64_t i = 0; i < v->len; i++)
      if (v->v[i].index == idx) { *where = i; return v->v[i].used; }
    return -1;
  }
  for (uint64_t x = L->head[o]; x != LNIL; x = L->node[x].next)
    if (x == idx) { *where = x; return L->node[x].used; }
  return -1;
}

static void lst_set_used(unsigned o, uint64_t where, int used) {
  if (L->kind == 0) L->vec[o].v[where].used = (uint8_t)used;
  else L->node[where].used = (uint8_t)used;
}

static void lst_remove_at(unsigned o, uint64_t where) {
  if (L->kind == 0) {
    vec_t *v = &L->vec[o];
    v->v[where] = v->v[--v->len];
    return;
  }
  dl_node_t *n = &L->node[where];
  if (n->prev != LNIL) L->node[n->prev].next = n->next;
  else L->head[o] = n->next;
  if (n->next != LNIL) L->node[n->next].prev = n->prev;
  n->listed = 0;
}

/* Lowest-address free block of list o: 0 and *idx / *where, or -1. */
static int lst_lowest_free(unsigned o, uint64_t *idx, uint64_t *where) {
  uint64_t best = UINT64_MAX, bw = 0;
  if (L->kind == 0) {
    vec_t *v = &L->vec[o];
    for (uint64_t i = 0; i < v->len; i++)
      if (!v->v[i].used && v->v[i].index < best) { best = v->v[i].index; bw = i; }
  } else {
    for (uint64_t x = L->head[o]; x != LNIL; x = L->node[x].next)
      if (!L->node[x].used && x < best) { best = x; bw = x; }
  }
  if (best == UINT64_MAX) return -1;
  *idx = best;
  *where = bw;
  return 0;
}

/* ---- the allocator ------------------------------------------------------------------------ */

static void lists_release(void) {
  for (unsigned o = 0; o <= KITE_BUDDY_MAX_ORDER; o++) {
    free(L->vec[o].v);
    L->vec[o].v = NULL;
    L->vec[o].len = L->vec[o].cap = 0;
  }
}

static size_t lists_meta_size(int kind, uint64_t units) {
  if (units == 0 || units > ((uint64_t)1 << 34)) return 0;
  return (size_t)(units + (kind ? units * sizeof(dl_node_t) : 0) + 16);
}
static size_t lab_lists_vector_meta_size(uint64_t units) { return lists_meta_size(0, units); }
static size_t lab_lists_dlist_meta_size(uint64_t units) { return lists_meta_size(1, units); }

static int lists_init(int kind, void *meta, uint64_t units) {
  L = &lists_state[kind];
  if (!meta || !lists_meta_size(kind, units)) return KITE_BUDDY_EINVAL;
  lists_release();
  L->kind = kind;
  L->units = units;
  L->free_units = units;
  L->max_order = 63 - (unsigned)__builtin_clzll(units);
  L->node = kind ? (dl_node_t *)meta : NULL;
  L->used_order = kind ? (uint8_t *)(L->node + units) : (uint8_t *)meta;
  memset(L->used_order, 0, units);
  for (unsigned o = 0; o <= KITE_BUDDY_MAX_ORDER; o++) L->head[o] = LNIL;
  /* the initial free blocks: the binary digits of units, largest first */
  uint64_t at = 0;
  for (int o = (int)L->max_order; o >= 0; o--) {
    if (!((units >> o) & 1)) continue;
    if (lst_push((unsigned)o, at, 0)) return KITE_BUDDY_EINVAL;
    at += (uint64_t)1 << o;
  }
  return KITE_BUDDY_OK;
}
static int lab_lists_vector_init(void *meta, uint64_t units) { return lists_init(0, meta, units); }
static int lab_lists_dlist_init(void *meta, uint64_t units) { return lists_init(1, meta, units); }

static int lists_alloc(unsigned order, uint64_t *index) {
  if (!index) return KITE_BUDDY_EINVAL;
  if (order > L->max_order) return KITE_BUDDY_EORDER;
  uint64_t best = UINT64_MAX, bw = 0, idx, w;
  unsigned bo = 0;
  for (unsigned o = order; o <= L->max_order; o++)
    if (lst_lowest_free(o, &idx, &w) == 0 && idx < best) { best = idx; bw = w; bo = o; }
  if (best == UINT64_MAX) return KITE_BUDDY_ENOMEM;
  lst_remove_at(bo, bw);
  while (bo > order) { /* split: the right half stays free one order below */
    bo--;
    if (lst_push(bo, best + ((uint64_t)1 << bo), 0)) return KITE_BUDDY_ENOMEM;
  }
  if (lst_push(order, best, 1)) return KITE_BUDDY_ENOMEM;
  L->used_order[best] = (uint8_t)(order + 1);
  L->free_units -= (uint64_t)1 << order;
  *index = best;
  return KITE_BUDDY_OK;
}

static int lists_free(uint64_t index) {
  if (index >= L->units) return KITE_BUDDY_ERANGE;
  if (!L->used_order[index]) return KITE_BUDDY_EFREE;
  unsigned o = L->used_order[index] - 1u;
  uint64_t w, bw;
  if (lst_find(o, index, &w) != 1) return KITE_BUDDY_EFREE; /* cannot happen if sound */
  L->used_order[index] = 0;
  L->free_units += (uint64_t)1 << o;
  lst_set_used(o, w, 0);
  while (o < L->max_order) {
    uint64_t buddy = index ^ ((uint64_t)1 << o);
    if (buddy + ((uint64_t)1 << o) > L->units) break;
    if (lst_find(o, buddy, &bw) != 0) break; /* absent (split) or used */
    lst_remove_at(o, bw);
    lst_find(o, index, &w); /* the vector may have moved it */
    lst_remove_at(o, w);
    index &= buddy;
    o++;
    if (lst_push(o, index, 0)) return KITE_BUDDY_ENOMEM;
  }
  return KITE_BUDDY_OK;
}

static uint64_t lists_free_units(void) { return L->free_units; }

static void lists_fini(void) {
  lists_release();
  L->node = NULL;
  L->used_order = NULL;
}

/* Every listed block, in a per-unit map: tiles the range, aligned, flags agree. O(units +
 * blocks). Returns 0 when sound. */
static int lists_check(void) {
  uint64_t free_units = 0, covered = 0;
  uint8_t *seen = calloc(L->units ? L->units : 1, 1);
  if (!seen) return -1;
  int err = 0;
  for (unsigned o = 0; o <= L->max_order && !err; o++) {
    uint64_t n = L->kind == 0 ? L->vec[o].len : 0, x = L->kind ? L->head[o] : 0;
    for (uint64_t i = 0; !err; i++) {
      uint64_t idx;
      int used;
      if (L->kind == 0) {
        if (i >= n) break;
        idx = L->vec[o].v[i].index;
        used = L->vec[o].v[i].used;
      } else {
        if (x == LNIL) break;
        idx = x;
        used = L->node[x].used;
        if (!L->node[x].listed) err = -2;
        x = L->node[x].next;
      }
      uint64_t size = (uint64_t)1 << o;
      if ((idx & (size - 1)) || idx + size > L->units) { err = -3; break; }
      for (uint64_t u = idx; u < idx + size; u++) {
        if (seen[u]) { err = -4; break; }
        seen[u] = 1;
      }
      covered += size;
      if (used != (L->used_order[idx] == o + 1)) err = -5;
      if (!used) {
        free_units += size;
        uint64_t buddy = idx ^ size, w;
        if (o < L->max_order && buddy + size <= L->units && lst_find(o, buddy, &w) == 0) err = -6;
      }
    }
  }
  free(seen);
  if (!err && covered != L->units) err = -7;
  if (!err && free_units != L->free_units) err = -8;
  return err;
}

/* Entry points: select the variant's state, then run the shared code. */
#define LISTS_ENTRY(tag, kind)                                                              \
  static int lab_lists_##tag##_alloc(unsigned o, uint64_t *i) {                            \
    L = &lists_state[kind];                                                                \
    return lists_alloc(o, i);                                                              \
  }                                                                                        \
  static int lab_lists_##tag##_free(uint64_t i) {                                          \
    L = &lists_state[kind];                                                                \
    return lists_free(i);                                                                  \
  }                                                                                        \
  static uint64_t lab_lists_##tag##_free_units(void) {                                     \
    L = &lists_state[kind];                                                                \
    return lists_free_units();                                                             \
  }                                                                                        \
  static void lab_lists_##tag##_fini(void) {                                               \
    L = &lists_state[kind];                                                                \
    lists_fini();                                                                          \
  }                                                                                        \
  static int lab_lists_##tag##_check(void) {                                               \
    L = &lists_state[kind];                                                                \
    return lists_check();                                                                  \
  }
LISTS_ENTRY(vector, 0)
LISTS_ENTRY(dlist, 1)

const lab_buddy_policy_t *lab_buddy_lists_vector(void) {
  static const lab_buddy_policy_t p = {
      .name = "lists-vector",
      .description = "Lists - Vectors (a growable array of blocks per order)",
      .lowest_first = true,
      .slow = true,
      .meta_size = lab_lists_vector_meta_size,
      .init = lab_lists_vector_init,
      .alloc = lab_lists_vector_alloc,
      .free = lab_lists_vector_free,
      .free_units = lab_lists_vector_free_units,
      .fini = lab_lists_vector_fini,
      .check = lab_lists_vector_check,
  };
  return &p;
}

const lab_buddy_policy_t *lab_buddy_lists_dlist(void) {
  static const lab_buddy_policy_t p = {
      .name = "lists-dlist",
      .description = "Lists - Doubly Linked Lists (intrusive, one per order)",
      .lowest_first = true,
      .slow = true,
      .meta_size = lab_lists_dlist_meta_size,
      .init = lab_lists_dlist_init,
      .alloc = lab_lists_dlist_alloc,
      .free = lab_lists_dlist_free,
      .free_units = lab_lists_dlist_free_units,
      .fini = lab_lists_dlist_fini,
      .check = lab_lists_dlist_check,
  };
  return &p;
}
