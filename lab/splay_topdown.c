/* lab/splay_topdown.c -- best fit over a top-down splay tree (Sleator-Tarjan), one pass per
 * splay, no parent pointers and no stack.
 *
 * Blocks: the boundary-tag layout of ds/blocks.h (8-byte header, the seed's 8-byte granule:
 * 8-aligned payloads, footer in free blocks, 40-byte minimum block: header, the 24-byte node
 * {link[2], dups}, footer). A free block's payload holds the node of
 * ds/dups.h; this policy uses {link[2], dups}.
 *
 * The tree and its operations are ds/splay.h: one node per distinct size, equal sizes on
 * duplicate lists; insert splays the size and puts the new node at the root (or on the
 * root's duplicate list); malloc splays for the request and takes the root or, when the root
 * is smaller, the minimum of its right subtree (a second splay); removal of a coalesced
 * neighbour splays it to the root and joins its subtrees, or promotes its first duplicate.
 * Frequently used sizes stay near the root, which is the seed's hope for real traces.
 * Costs: amortized O(log n) per operation; duplicates O(1) once their node is reached.
 * Invariants: ds/splay.h (BST order) and ds/dups.h.
 */
#define LAB_POLICY_NAME "splay_topdown"
#define LAB_ALIGN 8
#define LAB_MIN_BLOCK 40
#include "ds/blocks.h"
#include "ds/dups.h"
#include "ds/splay.h"

static lab_dnode_t *sptd_root;

static void lab_idx_reset(void) { sptd_root = NULL; }
static void lab_idx_insert(void *p) { lab_splay_td_insert(&sptd_root, p); }
static void lab_idx_remove(void *p) { lab_splay_td_remove(&sptd_root, p); }
static void *lab_idx_take(size_t need) { return lab_splay_td_take(&sptd_root, need); }
static bool lab_idx_check(size_t *count, size_t *bytes) {
  return lab_splay_check(sptd_root, count, bytes);
}

LAB_DEFINE_POLICY(splay_topdown, "best fit, top-down splay tree (Sleator-Tarjan), duplicate lists")
