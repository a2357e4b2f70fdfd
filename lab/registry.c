/* lab/registry.c -- every lab policy, in a stable order (the replay tool's --list and the
 * preload library's KITE_LAB_POLICY names). The table is a constant: no initialisation, safe
 * from any thread. Adding a policy: declare its lab_<name>_policy_def (LAB_DEFINE_POLICY
 * defines it) and append it; never reorder, scripts and plots rely on the order. */
#include <string.h>

#include "policy.h"

extern const lab_policy_t lab_seglist_policy_def, lab_rbtree_clrs_policy_def,
    lab_rbtree_unified_policy_def, lab_rbtree_linked_policy_def, lab_rbtree_stack_policy_def,
    lab_rbtree_topdown_policy_def, lab_splay_stack_policy_def, lab_splay_topdown_policy_def,
    lab_hwx_policy_def, lab_seglist_exact_policy_def, lab_hwx_kr_policy_def,
    lab_pow2_policy_def;

static const lab_policy_t *const lab_registry[] = {
    &lab_seglist_policy_def,       &lab_rbtree_clrs_policy_def,   &lab_rbtree_unified_policy_def,
    &lab_rbtree_linked_policy_def, &lab_rbtree_stack_policy_def,  &lab_rbtree_topdown_policy_def,
    &lab_splay_stack_policy_def,   &lab_splay_topdown_policy_def, &lab_hwx_policy_def,
    &lab_seglist_exact_policy_def, &lab_hwx_kr_policy_def,        &lab_pow2_policy_def,
    NULL};

const lab_policy_t *const *lab_policies(void) { return lab_registry; }

const lab_policy_t *lab_policy_find(const char *name) {
  if (!name) return NULL;
  for (const lab_policy_t *const *p = lab_registry; *p; p++)
    if (strcmp((*p)->name, name) == 0) return *p;
  return NULL;
}
