/* lab/policy.h -- the one interface every lab heap policy implements.
 *
 * A lab policy is a single-threaded reference allocator over one contiguous heap region the
 * caller hands it (SQLite's pattern: each policy file exports one function returning a
 * static const struct of its methods). Policies keep their state in static storage and in
 * the region itself, so one policy serves one heap at a time; init() starts it afresh.
 *
 * Contract for every policy:
 *  - init(start, size): the whole region becomes the policy's heap; returns false if the
 *    region is too small to hold even one block. Calling init again discards the old heap.
 *  - malloc(n): a block of at least n bytes aligned to `alignment`, or NULL when the region
 *    is exhausted (n == 0 gives a valid unique block, like glibc).
 *  - free(p): p is NULL or a live block of this heap. Coalesces with free neighbours (left
 *    and right, by address). Policies do not detect invalid frees; the replay tool does.
 *  - realloc(p, n): C semantics (NULL p = malloc; n == 0 frees p and returns NULL); grows in
 *    place into free neighbours when they suffice (the right one, else the left one and the
 *    right one, sliding the payload down), as the seed describes; keeps content.
 *    On failure returns NULL and p stays valid and unchanged.
 *  - validate(): checks every invariant of the policy's structures (tree colours and black
 *    height, ordering, list links, no two adjacent free blocks, block sizes adding up to the
 *    heap size ...); prints the first violation to stderr and returns false.
 *  - walk(cb, ctx): calls cb for every block in address order (payload address, payload
 *    capacity in bytes, whether it is free); returns the number of blocks. Blocks tile the
 *    heap: each starts header_size bytes before its payload and ends at payload + capacity,
 *    where the next one starts, so the sum of (capacity + header_size) over all blocks is the
 *    same after every operation and falls short of init's heap_size by less than
 *    2 * alignment (alignment slack at the two ends). cb may be NULL (just count).
 *  - validate() may call the C library's malloc (a deep splay tree is walked with a heap
 *    stack); malloc/free/realloc never do.
 *
 * The policies (lab/<name>.c, in registry order): seglist, rbtree_clrs, rbtree_unified,
 * rbtree_linked, rbtree_stack, rbtree_topdown, splay_stack, splay_topdown, hwx (the seeds'
 * designs), then seglist_exact, hwx_kr (the lab's earlier seglist and hwx), pow2 (seed
 * 002's power-of-two bins). Each file's
 * top comment documents its block layout (header size, alignment, minimum block).
 */
#ifndef KITE_LAB_POLICY_H
#define KITE_LAB_POLICY_H
#include <stdbool.h>
#include <stddef.h>

typedef void (*lab_walk_fn)(void *ctx, void *payload, size_t capacity, bool is_free);

typedef struct lab_policy_s {
  const char *name;        /* stable name used by --policy and KITE_LAB_POLICY */
  const char *description; /* one line */
  size_t alignment;        /* payload alignment in bytes (8 or 16) */
  size_t header_size;      /* bytes of per-block overhead in front of the payload */
  bool (*init)(void *heap_start, size_t heap_size);
  void *(*malloc)(size_t size);
  void (*free)(void *p);
  void *(*realloc)(void *p, size_t size);
  bool (*validate)(void);
  size_t (*walk)(lab_walk_fn cb, void *ctx);
  /* Usable capacity of a live block (>= the size asked for). */
  size_t (*usable_size)(void *p);
} lab_policy_t;

/* Each policy's method table, also reachable through the registry. */
const lab_policy_t *lab_seglist_policy(void);
const lab_policy_t *lab_rbtree_clrs_policy(void);
const lab_policy_t *lab_rbtree_unified_policy(void);
const lab_policy_t *lab_rbtree_linked_policy(void);
const lab_policy_t *lab_rbtree_stack_policy(void);
const lab_policy_t *lab_rbtree_topdown_policy(void);
const lab_policy_t *lab_splay_stack_policy(void);
const lab_policy_t *lab_splay_topdown_policy(void);
const lab_policy_t *lab_hwx_policy(void);
const lab_policy_t *lab_seglist_exact_policy(void);
const lab_policy_t *lab_hwx_kr_policy(void);
const lab_policy_t *lab_pow2_policy(void);

/* The registry (lab/registry.c): every policy, NULL-terminated, in a stable order. */
const lab_policy_t *const *lab_policies(void);
/* Look a policy up by name; NULL if there is none. */
const lab_policy_t *lab_policy_find(const char *name);

#endif
