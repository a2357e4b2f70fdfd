/* lab/buddy_policy.h -- the interface every buddy allocator variant of the lab implements.
 *
 * The buddy variants of seed 003 (per-order lists kept as growable arrays or as doubly
 * linked lists, a red-black tree of blocks with per-order free lists, the plain one-byte-per-
 * node bitmap tree) beside kite's bitmap tree (include/kite/buddy.h), so one benchmark and one cross-check test drive them all.
 *
 * A variant manages an abstract range of `units` units, like kite_buddy. It keeps a pointer
 * to the metadata it was given in static storage: one heap per variant at a time; init()
 * starts afresh (and drops whatever the previous heap held). Not thread-safe. Lab variants
 * may also allocate with malloc (the seed's growable arrays); fini() releases that.
 *
 * Errors use the kite_buddy_err codes of include/kite/buddy.h:
 *  - init: KITE_BUDDY_EINVAL when units is 0, too large for the variant, or meta is NULL.
 *  - alloc: KITE_BUDDY_EORDER when 2^order > units, KITE_BUDDY_ENOMEM when no block fits.
 *  - free: KITE_BUDDY_ERANGE outside [0, units); KITE_BUDDY_EFREE when index is not the start
 *    of an allocated block (the list and tree variants do not tell "inside a block" apart).
 * Every variant coalesces freed buddies, so freeing everything gives back the blocks of the
 * binary digits of units, and free_units() is exact.
 */
#ifndef KITE_LAB_BUDDY_POLICY_H
#define KITE_LAB_BUDDY_POLICY_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite/buddy.h"

typedef struct lab_buddy_policy_s {
  const char *name;        /* stable name used by kite-buddy-bench --variant */
  const char *description; /* one line, as in the seed's table */
  /* true when alloc returns the lowest-address free block (same indices as kite_buddy) */
  bool lowest_first;
  /* true when alloc cost grows with the number of blocks (the seed's naive lists): the
   * benchmark runs them on a smaller range */
  bool slow;
  size_t (*meta_size)(uint64_t units); /* bytes of metadata (0: units unsupported) */
  int (*init)(void *meta, uint64_t units);
  int (*alloc)(unsigned order, uint64_t *index);
  int (*free)(uint64_t index);
  uint64_t (*free_units)(void);
  void (*fini)(void); /* release memory the variant allocated itself */
  /* Validate every invariant of the variant's structures; 0 when sound, else negative.
   * O(units) or worse: for tests. */
  int (*check)(void);
} lab_buddy_policy_t;

/* Each variant file exports one of these. */
const lab_buddy_policy_t *lab_buddy_bitmap_tree(void);  /* lab/buddy_kite.c */
const lab_buddy_policy_t *lab_buddy_lists_vector(void); /* lab/buddy_lists.c */
const lab_buddy_policy_t *lab_buddy_lists_dlist(void);  /* lab/buddy_lists.c */
const lab_buddy_policy_t *lab_buddy_rbtree_vector(void); /* lab/buddy_rbtree.c */
const lab_buddy_policy_t *lab_buddy_rbtree_list(void);  /* lab/buddy_rbtree.c */
const lab_buddy_policy_t *lab_buddy_bitmap_bytes(void); /* lab/buddy_bitmap.c: seed 003's plain tree */

/* Every variant, NULL-terminated, in the seed's table order (lab/buddy_kite.c). */
const lab_buddy_policy_t *const *lab_buddy_policies(void);
/* Look a variant up by name; NULL if there is none. */
const lab_buddy_policy_t *lab_buddy_policy_find(const char *name);

#endif
