/* src/arena.h -- arenas (64 MiB aligned reservations carved by the buddy page heap into
 * runs of 2^k units), and purging of free runs.
 *
 * Layer: above os, buddy and pagemap; below huge, page and heap. The arena writes only the
 * arena-level fields of a run's descriptors (kind, head_off, order, heap = NULL); what a run
 * is used for (small page, large block) is filled in by the layer that asked for it.
 *
 * Locking: one global arena lock serializes the buddy heaps of all arenas, the arena list
 * and purging.
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
/* Call fn for the head descriptor of every run in use as a small page or a large block
 * (introspection: statistics, kite_visit_all). Holds the arena lock throughout, so fn must
 * not allocate runs or free them; what fn reads of the page (lists, counts) may be changing
 * under it unless the owners are quiescent. */
void _kite_arena_foreach_run(void (*fn)(kite_page_t *head, void *arg), void *arg);
/* For fork: take / release / re-create the arena lock. */
void _kite_arena_fork_prepare(void);
void _kite_arena_fork_parent(void);
void _kite_arena_fork_child(void);
#endif
