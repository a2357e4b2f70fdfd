/* lab/buddy_kite.c -- kite's bitmap-tree buddy heap behind the lab's buddy interface, and
 * the registry of every buddy variant.
 *
 * The adapter is a thin shell: the heap lives in the caller's metadata, a static pointer
 * names the current one (one heap at a time, as lab/buddy_policy.h says).
 */
#include <string.h>

#include "buddy_policy.h"

static kite_buddy_t *lab_kite_heap;

static size_t lab_kite_meta_size(uint64_t units) { return kite_buddy_meta_size(units); }

static int lab_kite_init(void *meta, uint64_t units) {
  size_t sz = kite_buddy_meta_size(units);
  if (!sz) return KITE_BUDDY_EINVAL;
  return kite_buddy_init(&lab_kite_heap, meta, sz, units);
}

static int lab_kite_alloc(unsigned order, uint64_t *index) {
  return kite_buddy_alloc(lab_kite_heap, order, index);
}

static int lab_kite_free(uint64_t index) {
  int err = kite_buddy_free(lab_kite_heap, index, NULL);
  /* the interface folds "inside a block" and "in a hole" into EFREE */
  return err == KITE_BUDDY_ENOTSTART || err == KITE_BUDDY_ERESERVED ? KITE_BUDDY_EFREE : err;
}

static uint64_t lab_kite_free_units(void) { return kite_buddy_free_units(lab_kite_heap); }

static void lab_kite_fini(void) { lab_kite_heap = NULL; }

static int lab_kite_check(void) { return kite_buddy_check(lab_kite_heap); }

const lab_buddy_policy_t *lab_buddy_bitmap_tree(void) {
  static const lab_buddy_policy_t p = {
      .name = "bitmap-tree",
      .description = "Bitmap Tree (kite_buddy: largest free order per node)",
      .lowest_first = true,
      .slow = false,
      .meta_size = lab_kite_meta_size,
      .init = lab_kite_init,
      .alloc = lab_kite_alloc,
      .free = lab_kite_free,
      .free_units = lab_kite_free_units,
      .fini = lab_kite_fini,
      .check = lab_kite_check,
  };
  return &p;
}

const lab_buddy_policy_t *const *lab_buddy_policies(void) {
  static const lab_buddy_policy_t *list[7];
  if (!list[0]) {
    list[0] = lab_buddy_lists_vector();
    list[1] = lab_buddy_lists_dlist();
    list[2] = lab_buddy_rbtree_vector();
    list[3] = lab_buddy_rbtree_list();
    list[4] = lab_buddy_bitmap_bytes();
    list[5] = lab_buddy_bitmap_tree();
    list[6] = NULL;
  }
  return list;
}

const lab_buddy_policy_t *lab_buddy_policy_find(const char *name) {
  for (const lab_buddy_policy_t *const *p = lab_buddy_policies(); *p; p++)
    if (strcmp((*p)->name, name) == 0) return *p;
  return NULL;
}
