/* src/arena.h -- arenas (64 MiB aligned reservations carved by the buddy page heap), the
 * page map, runs of units, purging, and huge (direct OS) allocations.
 *
 * Locking: one global arena lock serializes the buddy heaps of all arenas, the arena list
 * and purging. Huge allocations take no lock (the page map is written with atomics).
 */
#ifndef KITE_ARENA_H
#define KITE_ARENA_H
#include "types.h"

/* Allocate a run of 2^order units (order <= KITE_LARGE_MAX_ORDER). Returns its head
 * descriptor (every unit's kind = META until the caller sets the head's, heap = NULL,
 * order set, head_off of the other units set); *zero tells whether all of it is known to
 * be zero. NULL with errno = ENOMEM when no arena can be had. Takes the arena lock. */
kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero);
/* Give a run back (head descriptor). Takes the arena lock. May purge old free runs. */
void _kite_arena_free_run(kite_page_t *head);
/* Decommit free runs; force: all of them now, else only those older than the purge delay.
 * Returns the number of bytes decommitted. */
size_t _kite_arena_purge(bool force);
/* For fork: take / release / re-create the arena lock. */
void _kite_arena_fork_prepare(void);
void _kite_arena_fork_parent(void);
void _kite_arena_fork_child(void);

/* Huge allocations: an OS mapping per object (see types.h), possibly a cached one (then
 * *zero = false). Returns NULL + ENOMEM. */
void *_kite_huge_alloc(size_t size, size_t align, bool *zero);
/* The usable size of huge block p, or 0 if p is not the start of a live huge block. */
size_t _kite_huge_usable(const void *p);
/* Free a huge block; returns false (and does nothing) if p is not one. */
bool _kite_huge_free(void *p);
/* The first-class-heap link of huge block p (NULL if p is not one). */
kite_owned_t *_kite_huge_owned(const void *p);
/* Resize in place (shrink, or grow if the address space after it is free). */
bool _kite_huge_resize(void *p, size_t new_size);
#endif
