/* src/links.h -- the link arrays of small pages: one uint16_t per block, outside the pages.
 *
 * Every small page has an array links[] with an entry per block (page.h says what an entry
 * holds: the next free block, LIVE, or a cross-thread free's claim). The arrays live in
 * mappings of their own, between PROT_NONE guard pages, never next to a block: no write
 * through a block pointer (after free, past its end, before its start) can reach them, so
 * no such write can steer malloc or hide a double free.
 *
 * An array of n entries takes 2n bytes rounded up to 64 (its bucket). Free arrays wait on
 * one list per bucket for the next page of that bucket; new ones are cut from the current
 * chunk. Arrays are handed out zero filled (0 is never LIVE).
 * Locking: links_lock, taken when a small page is made or given back (never on a fast
 * path), held while a chunk is mapped; it may take an arena lock (never the reverse); held
 * across fork and re-created in the child.
 * Layer: above os, message and arena; below page.
 */
#ifndef KITE_LINKS_H
#define KITE_LINKS_H
#include "types.h"

/* A zero-filled array of at least n (1..KITE_PAGE_MAX_BLOCKS + 1) entries; *cap = the
 * entries it holds. When no memory can be mapped, a free array of a larger bucket is used;
 * NULL with errno = ENOMEM when there is none either. */
uint16_t *_kite_links_alloc(uint32_t n, uint32_t *cap);
/* KITE_LINK_REMOTE as a word the compiler cannot see (defined in links.c): remote.c's take
 * turns each entry REMOTE|next into next with one exclusive or by it; with the constant,
 * gcc narrows that to a 16-bit operation and then zero-extends the result for the compare
 * and the next index, one more instruction per block taken. */
extern const size_t _kite_link_remote_word KITE_HIDDEN;
/* Give back an array of cap entries (as allocated). */
void _kite_links_free(uint16_t *a, uint32_t cap);
/* Decommit the whole OS pages inside free arrays (malloc_trim); bytes given back. */
size_t _kite_links_trim(void);
void _kite_links_fork_prepare(void);
void _kite_links_fork_parent(void);
void _kite_links_fork_child(void);
#endif
