/* src/huge.h -- huge blocks: one OS mapping per block (above KITE_LARGE_MAX, or with an
 * alignment no buddy run can give), and a small cache of freed maps.
 *
 * Layer: above os, pagemap and arena; below page, heap and alloc/free.
 * Locking: huge_lock guards the cache; the page map is written with atomics, always
 * cleared before the memory it covers goes back to the OS.
 */
#ifndef KITE_HUGE_H
#define KITE_HUGE_H
#include "types.h"

/* An OS mapping for size bytes aligned to align, possibly a cached one (then *zero =
 * false). NULL + ENOMEM. */
void *_kite_huge_alloc(size_t size, size_t align, bool *zero);
/* The usable size of huge block p, or 0 if p is not the start of a live huge block. */
size_t _kite_huge_usable(const void *p);
/* Free a huge block; returns false (and does nothing) if p is not one -- or no longer one:
 * of two racing frees exactly one returns true. The winner calls disown (if not NULL) with
 * the block's first-class-heap link right after its claim, before the header goes away. */
bool _kite_huge_free(void *p, void (*disown)(kite_owned_t *o));
/* The first-class-heap link of huge block p (NULL if p is not one). */
kite_owned_t *_kite_huge_owned(const void *p);
/* Resize huge block p to new_size bytes: shrink in place, grow in place when the address
 * space after it is free, else (may_move, a block without an alignment gap that belongs to
 * no first-class heap) move its pages to a new place without copying them. Returns the
 * block (p or its new address), or NULL with p unchanged. */
void *_kite_huge_resize(void *p, size_t new_size, bool may_move);
/* Unmap cached maps: all of them (force) or those older than the purge delay. Bytes. */
size_t _kite_huge_cache_release(bool force);
/* Bytes of cached maps (a sequentially consistent load). */
size_t _kite_huge_cache_bytes(void);
/* A run from the arenas; when the OS refuses a new arena, the huge cache is given back and
 * the run tried once more. NULL + ENOMEM. Wakes the collapse thread when a claim marked a
 * dense granule (arena.h), so the caller holds no lock of kite's. */
kite_page_t *_kite_run_alloc(unsigned order, bool *zero);
/* Call fn(p, usable size) for every live huge block until fn returns false (kite_visit_all).
 * Walks the page map without a lock: other threads must not allocate or free huge blocks
 * meanwhile. */
void _kite_huge_foreach(bool (*fn)(void *p, size_t len, void *arg), void *arg);
void _kite_huge_fork_prepare(void);
void _kite_huge_fork_parent(void);
void _kite_huge_fork_child(void);

/* ---- validators ----
 * The huge cache (takes huge_lock): each cached map once, without an alignment gap, header
 * magic cleared, layout sound and its page-map slots HUGE; the bytes total matches and stays
 * within its bound. (KITE_DEBUG >= 2 also checks each block it hands out.) */
bool _kite_huge_check(void);
#ifdef KITE_TEST_HOOKS
/* Test builds: called by huge_trim right after it unmapped the tail [gone, gone+len). */
extern void (*_kite_test_hook_huge_trimmed)(void *gone, size_t len) KITE_HIDDEN;
/* Test builds: expire the huge cache (not forced) as if the clock read `now`. */
size_t _kite_test_huge_cache_expire_at(uint64_t now);
#endif
#endif
