/* src/page.h -- the small-page life cycle: initialize, carve, pop, collect frees (the
 * cross-thread ones through remote.c, which has their protocol). A small page is a run of
 * 2^k units holding blocks of one class.
 *
 * Block i of a page starts at start + i * block_size; its state and list link are
 * links[i] (types.h: a free block's entry names the next block on its list, LIVE marks a
 * block handed out, REMOTE|next one freed by another thread). kite never reads or writes
 * a block's memory, so no write after free or overflow can steer malloc, and a double free
 * is found by the entry, whatever the block holds.
 *
 * Invariants of a small page (numbered for the code that keeps them; PG: page.h, page.c):
 *   PG1 owner = the heap in page->heap: only the owner touches free, local_free, used,
 *       capacity, the queue links, and entries that are not LIVE or REMOTE. heap is
 *       stored last, with release, once the page's fields are set (_kite_page_init_small,
 *       heap.h's page_own): a thread that reads it with acquire sees them (remote.c).
 *   PG2 blocks [0, capacity) are carved (capacity <= reserved, and it only grows while
 *       the page is a small page: relaxed atomic stores, lookups in other threads read it);
 *       uncarved blocks are untouched (a fresh page costs RSS only for what is used) and
 *       their entries read 0.
 *   PG3 zero_tail: every uncarved block's bytes are zero. Set only by the heap layer for a
 *       page made from a run the arena gave as known zero (never touched, or given back to
 *       the kernel, MADV_DONTNEED, since: arena.h's *zero), 0 for every other page (a cached
 *       page holds its last blocks' bytes); it holds for the page's life, as nothing writes
 *       uncarved blocks (the secure build's carve skips its zeroing there: secure_layout.h).
 *   PG4 every carved block is in exactly one of: handed out (LIVE), on free, on local_free,
 *       on thread_free (REMOTE), or claimed by a thread that is pushing it (REMOTE, not yet
 *       on thread_free);
 *   PG5 the count of a page, _kite_page_used = carved - |free| - |local_free|, i.e. the
 *       number of blocks handed out plus those freed by other threads and not yet collected
 *       (plus 1 while the page is its heap's pinned one), is the field used, except while
 *       the page sits on its heap's full list (in_full): then the count is capacity (every
 *       carved block out, nothing collected until it leaves the list) and used reads 1, so
 *       that the free fast path's decrement reaches 0 on a full page as on an emptied one
 *       (one test): the generic path moves it back.
 *   PG6 thread_free holds the blocks other threads freed (head, count, and the ABANDONED
 *       bit): remote.c's protocol (R1-R7) pushes them, with the claim that detects a double
 *       free; the owner takes them back in _kite_page_collect.
 *   PG7 heap == NULL: the page has no owner (abandoned, large run, free unit, metadata):
 *       every free to it is generic.
 * Layer: above links and arena; below heap. Owner-only functions say so.
 */
#ifndef KITE_PAGE_H
#define KITE_PAGE_H
#include "types.h"
#include "sizeclass.h"
#include "tool.h"
#include "message.h"

#define KITE_EXTEND_BYTES 4096 /* bytes carved per page_extend */

void _kite_block_check_fresh(const kite_page_t *pg, void *b); /* KITE_DEBUG >= 3; below */
void _kite_block_fill_free(const kite_page_t *pg, void *b);     /* below */

/* Block i of small page pg: its page's start from pg's own address (types.h), its offset
 * kept below the largest page's size, so that no single value written into a descriptor
 * makes this more than KITE_SMALL_PAGE_MAX past the page's start (a block_size written
 * over would otherwise reach 4 GiB on). */
static inline uint8_t *_kite_page_block(const kite_page_t *pg, uint32_t i) {
  return _kite_page_start(pg) + ((i * pg->block_size) & (uint32_t)(KITE_SMALL_PAGE_MAX - 1));
}

/* Pop a block of the allocation list (non-empty). Owner only. A head index past the carved
 * blocks is no block of the page (a descriptor written by someone else): reported, and
 * the process stops. */
static inline void *_kite_page_pop(kite_page_t *pg) {
  uint32_t i = pg->free;
  if (unlikely(i >= pg->capacity)) _kite_report_corruption("a page's free list names no carved block", pg);
  pg->free = pg->links[i];
  pg->links[i] = KITE_LINK_LIVE;
  pg->used++;
  void *b = _kite_page_block(pg, i);
  KITE_TOOL_BLOCK_LIVE(b, pg->block_size); /* before the check reads the block */
  if (KITE_DEBUG >= 3) _kite_block_check_fresh(pg, b);
  return b;
}

/* The page's count (above), also of a page on the full list. Any thread (relaxed reads:
 * another thread's page is read for introspection only). */
static inline int32_t _kite_page_used(const kite_page_t *pg) {
  int32_t u = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
  if (__atomic_load_n(&pg->in_full, __ATOMIC_RELAXED)) u += (int32_t)__atomic_load_n(&pg->capacity, __ATOMIC_RELAXED) - 1;
  return u;
}
/* pg (its count capacity: every carved block out) goes on its heap's full list, or leaves
 * it (a local free may have taken used to 0: the count is then capacity - 1). Owner only. */
static inline void _kite_page_to_full(kite_page_t *pg) {
  pg->used -= (int32_t)pg->capacity - 1;
  __atomic_store_n(&pg->in_full, (uint8_t)1, __ATOMIC_RELAXED);
}
static inline void _kite_page_from_full(kite_page_t *pg) {
  if (!pg->in_full) return;
  __atomic_store_n(&pg->in_full, (uint8_t)0, __ATOMIC_RELAXED);
  pg->used += (int32_t)pg->capacity - 1;
}

/* Is block i (carved) handed out? Any thread (a relaxed read of its entry). */
static inline bool _kite_page_block_live(const kite_page_t *pg, uint32_t i) {
  return __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED) == KITE_LINK_LIVE;
}

/* Make run pg (head, from the arena) an empty small page of class cls owned by h; false
 * (errno = ENOMEM) when its link array cannot be had. */
bool _kite_page_init_small(kite_page_t *pg, struct kite_heap_s *h, unsigned cls);
/* The page's run is about to go back to the arena: give its link array back. */
void _kite_page_fini(kite_page_t *pg);
/* Carve up to KITE_EXTEND_BYTES of fresh blocks onto the (empty) allocation list; returns
 * how many. Owner only. */
uint32_t _kite_page_extend(kite_page_t *pg);
/* Move thread_free and local_free into the allocation list. Without `all`, only while the
 * allocation list is empty. Returns the blocks that count as newly issued for statistics
 * (remote frees always; local frees only when count_local); *remote = the blocks taken from
 * thread_free (the remote-free statistic counts them here, not in the remote free's path).
 * Owner only. */
uint32_t _kite_page_collect(kite_page_t *pg, bool all, bool count_local, uint32_t *remote);

/* ---- validators (KITE_DEBUG >= 2 after slow-path operations; kite_check) ----
 * Check small page pg: geometry (kind, class, block size, div_magic, reserved, capacity,
 * link array). With lists (the caller owns pg, or pg is abandoned and _kite_heap_lock is held):
 * the link array holds capacity + 1 entries at least; free and local_free are disjoint,
 * acyclic lists of carved blocks; every carved block is LIVE, on one of them, or REMOTE
 * (thread_free's count matches its list, walked through REMOTE entries, plus blocks being
 * pushed); uncarved entries are 0; used (less its full bit) == capacity - |free| -
 * |local_free| + bias, bias the pinned page's +1 (0 or 1; -1 when the caller does not know:
 * either). */
bool _kite_page_check(const kite_page_t *pg, bool lists, int bias);
/* KITE_DEBUG >= 3 fill patterns: carved and freed blocks hold 0x55 in every byte; a block
 * handed out is checked (a changed byte is a write
 * after free: reported, then abort) and filled with 0xAA. */
#define KITE_FILL_FREE 0x55
#define KITE_FILL_FRESH 0xAA
/* (declared above with _kite_block_check_fresh: the inline pop and free use them) */
#endif
