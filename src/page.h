/* src/page.h -- the small-page life cycle: initialize, carve, pop, collect frees, and
 * the remote-free push. A small page is a run of 2^k units holding blocks of one class.
 *
 * Invariants of a small page (owner = the heap in page->heap; only the owner touches
 * free/local_free/used/capacity and the queue links):
 *   - blocks = capacity carved so far (capacity <= reserved); uncarved memory is untouched,
 *     so a fresh page costs RSS only for what is used. carved_end = capacity * block_size
 *     (bytes): the free fast path accepts only offsets below it (an uncarved "block" pushed
 *     on local_free would be carved again later and handed out twice).
 *   - every carved block is in exactly one of: handed out, free, local_free, thread_free;
 *     the free ones carry key == (uintptr_t)page (double-free detection).
 *   - used (low 31 bits) = carved - |free| - |local_free|, i.e. the number of blocks handed
 *     out plus those sitting in thread_free (plus 1 while the page is its heap's pinned one).
 *   - the sign bit of used (KITE_PAGE_IN_FULL) is set while the page sits on the heap's
 *     full list: any local free then takes the generic path, which moves it back.
 *   - thread_free is pushed by other threads (one CAS each, list head + count in one word)
 *     and swapped out whole by the owner (or by whoever holds an abandoned page).
 *   - heap == NULL: the page has no owner (abandoned, large run, free unit, metadata):
 *     every free to it is generic.
 * Layer: above arena; below heap. Owner-only functions say so.
 */
#ifndef KITE_PAGE_H
#define KITE_PAGE_H
#include "types.h"
#include "sizeclass.h"
#include "tool.h"

#define KITE_PAGE_IN_FULL ((int32_t)0x80000000u)
#define KITE_EXTEND_BYTES 4096 /* bytes carved per page_extend */

void _kite_block_check_fresh(const kite_page_t *pg, void *b); /* KITE_DEBUG >= 3; below */

/* Pop a block of the allocation list (non-empty). Owner only. */
static inline void *_kite_page_pop(kite_page_t *pg) {
  kite_block_t *b = pg->free;
  pg->free = b->next;
  b->key = 0;
  pg->used++;
  KITE_TOOL_BLOCK_LIVE(b, pg->block_size); /* before the check reads the block */
  if (KITE_DEBUG >= 3) _kite_block_check_fresh(pg, b);
  return b;
}

/* Is offset off (from the page start, < 2^32) the start of a block carved so far in small
 * page pg? off / size == high half of off * ceil(2^64 / size). Any thread. */
static inline bool _kite_page_block_at(const kite_page_t *pg, uint64_t off) {
  return _kite_is_block_offset(pg, off) &&
         (uint64_t)(((unsigned __int128)off * pg->div_magic) >> 64) <
             __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
}

/* Make run pg (head, from the arena) an empty small page of class cls owned by h. */
void _kite_page_init_small(kite_page_t *pg, struct kite_heap_s *h, unsigned cls);
/* Carve up to KITE_EXTEND_BYTES of fresh blocks onto the (empty) allocation list; returns
 * how many. Owner only. */
uint32_t _kite_page_extend(kite_page_t *pg);
/* Move thread_free and local_free into the allocation list. Without `all`, only while the
 * allocation list is empty (then no list is walked except local_free, which this thread
 * wrote and has in cache). Returns the blocks that count as newly issued for statistics
 * (remote frees always; local frees only when count_local). Owner only. */
uint32_t _kite_page_collect(kite_page_t *pg, bool all, bool count_local);
/* Push block b on pg's thread_free list (a free from a thread that does not own pg). */
void _kite_page_free_remote(kite_page_t *pg, kite_block_t *b);
/* Is b on one of pg's owner-side free lists (free, local_free)? Owner only. */
bool _kite_page_has_free_local(const kite_page_t *pg, const void *b);
/* Is b on pg's thread_free list right now? Any thread (nodes are immutable until the
 * owner collects them). */
bool _kite_page_has_free_remote(const kite_page_t *pg, const void *b);
#endif

/* ---- validators (KITE_DEBUG >= 2 after slow-path operations; kite_check) ----
 * Check small page pg: geometry (kind, class, block size, div_magic, reserved, capacity,
 * carved_end). With lists (the caller owns pg, or pg is abandoned and heap_lock is held):
 * every node of free, local_free and thread_free is a carved block start of pg carrying
 * key == pg, the lists are disjoint and acyclic, thread_free's count matches its list, and
 * used (less its full bit) == capacity - |free| - |local_free| + bias, bias the pinned
 * page's +1 (0 or 1; -1 when the caller does not know: either). */
bool _kite_page_check(const kite_page_t *pg, bool lists, int bias);
/* KITE_DEBUG >= 3 fill patterns: carved and freed blocks hold 0x55 beyond their free-list
 * words (bytes 16..block_size); a block handed out is checked (a changed byte is a write
 * after free: reported, then abort) and filled with 0xAA. */
#define KITE_FILL_FREE 0x55
#define KITE_FILL_FRESH 0xAA
void _kite_block_fill_free(const kite_page_t *pg, void *b);
