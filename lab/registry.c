/* lab/registry.c -- every lab policy, in a stable order (the replay tool's --list and the
 * preload library's KITE_LAB_POLICY names). Adding a policy: declare its accessor below and
 * append it to the table; never reorder, scripts and plots rely on the order. */
#include <string.h>

#include "policy.h"

const lab_policy_t *lab_seglist_policy(void);
const lab_policy_t *lab_rbtree_clrs_policy(void);
const lab_policy_t *lab_rbtree_unified_policy(void);
const lab_policy_t *lab_rbtree_linked_policy(void);
const lab_policy_t *lab_rbtree_stack_policy(void);
const lab_policy_t *lab_rbtree_topdown_policy(void);
const lab_policy_t *lab_splay_stack_policy(void);
const lab_policy_t *lab_splay_topdown_policy(void);
const lab_policy_t *lab_hwx_policy(void);

const lab_policy_t *const *lab_policies(void) {
  static const lab_policy_t *table[16];
  if (!table[0]) {
    size_t n = 0;
    table[n++] = lab_seglist_policy();
    table[n++] = lab_rbtree_clrs_policy();
    table[n++] = lab_rbtree_unified_policy();
    table[n++] = lab_rbtree_linked_policy();
    table[n++] = lab_rbtree_stack_policy();
    table[n++] = lab_rbtree_topdown_policy();
    table[n++] = lab_splay_stack_policy();
    table[n++] = lab_splay_topdown_policy();
    table[n++] = lab_hwx_policy();
    table[n] = NULL;
  }
  return table;
}

const lab_policy_t *lab_policy_find(const char *name) {
  if (!name) return NULL;
  for (const lab_policy_t *const *p = lab_policies(); *p; p++)
    if (strcmp((*p)->name, name) == 0) return *p;
  return NULL;
}
