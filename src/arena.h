/* src/arena.h -- arenas (64 MiB aligned reservations carved by the buddy page heap into
 * runs of 2^k units), purging of free runs (decay) and unmapping of empty arenas.
 *
 * Layer: above os, buddy and pagemap; below huge, page and heap. The arena writes only the
 * arena-level fields of a run's descriptors (kind, head_off, order, heap = NULL); what a run
 * is used for (small page, large block) is filled in by the layer that asked for it.
 *
 * Locking: one lock per arena (in a static slot table) guards its buddy heap and per-unit
 * state, held only for the buddy operation; the table lock guards slot assignment; the
 * purge lock serializes purge steps and unmapping. No OS call is made under the arena or
 * table locks. Finding an arena with a free block of order k reads a per-order bit set of
 * arena slots (arena.c), starting at the calling thread's last arena.
 */
#ifndef KITE_ARENA_H
#define KITE_ARENA_H
#include "types.h"

/* Allocate a run of 2^order units (order <= KITE_LARGE_MAX_ORDER). Returns its head
 * descriptor (every unit's kind = HELD until the caller sets the head's, heap = NULL,
 * order set, head_off of the other units set); *zero tells whether all of it is known to
 * be zero. NULL with errno = ENOMEM when no arena can be had. */
kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero);
/* The run a guarded chunk takes in an arena: one unit, or four where OS pages are 32 KiB or
 * more (two guard pages would fill a unit); KITE_ARENA_GUARDED_CHUNK bytes between them. */
#define KITE_ARENA_GUARDED_ORDER (KITE_OS_PAGE >= KITE_UNIT_SIZE / 2 ? 2u : 0u)
#define KITE_ARENA_GUARDED_CHUNK (((size_t)KITE_UNIT_SIZE << KITE_ARENA_GUARDED_ORDER) - 2 * KITE_OS_PAGE)
/* Metadata that kite follows pointers from (heap structs) in a place of its own: `size`
 * bytes (a multiple of KITE_OS_PAGE, at most KITE_ARENA_GUARDED_CHUNK) mapped between two
 * PROT_NONE guard pages, or, when the OS refuses a mapping (RLIMIT_AS), a run of order
 * KITE_ARENA_GUARDED_ORDER of an arena with its first and last page PROT_NONE (kind META for
 * good; *in_arena then says the arena already counts it committed). Zero filled. NULL with
 * errno = ENOMEM. Never given back. */
void *_kite_arena_guarded_chunk(size_t size, bool *in_arena);
/* Give a run back (head descriptor). It stays committed for reuse until the decay purges
 * it (KITE_PURGE_DELAY_MS); may run a purge step. */
void _kite_arena_free_run(kite_page_t *head);
/* _kite_arena_free_run in two steps, for a caller holding a lock that the fork handlers take
 * before the arena's and under which no OS call is made (heap_abandon.c's settle): the run
 * must be the arena's before that lock is let go, or a fork in between leaves it nobody's in
 * the child. _held gives it back committed (the slot lock only; now: _kite_os_now_ms(), read
 * before the caller's lock); _done, after the caller's unlock, does the rest: the purge step
 * a free may run (with KITE_PURGE_DELAY_MS=0, a forced purge, which decommits the run). */
void _kite_arena_free_run_held(kite_page_t *head, uint64_t now);
void _kite_arena_free_run_done(uint64_t now);
/* The run at head (the caller's) is to hold `bytes` bytes: advise transparent huge pages
 * over the whole 2 MiB pieces of them (once per unit), once the process has 16 MiB
 * committed (thp.c). The advice stays after the run is freed, until a run smaller than 2
 * MiB is claimed in such a piece, or a run of 2 MiB or more that asks for less than the
 * piece: then it is taken back (MADV_NOHUGEPAGE), unless KITE_HUGEPAGES=1 advises whole
 * arenas. */
void _kite_arena_advise_run(kite_page_t *head, size_t bytes);
/* Live heaps, thread and first-class (atomic; heap_pool.c keeps it): KITE_HUGEPAGES=dense
 * advises granules at their first claim as auto does while it is 1 (thp.c). */
extern uint32_t _kite_thp_heaps KITE_HIDDEN;
/* Resize the run at head in place to 2^new_order units (realloc of a large block): grow when
 * the run starts at a multiple of the new size and the units that join it are free (then
 * *tail_zero, if not NULL, tells whether they are all known to be zero), or shrink, the tail
 * going back as a free committed run. The caller owns the run. false (nothing changed) when
 * it cannot grow. */
bool _kite_arena_resize_run(kite_page_t *head, unsigned new_order, bool *tail_zero);
/* force: decommit every free run and unmap every empty arena (waits for a purge in
 * progress); else one decay step (skipped if another thread is purging). Returns the
 * number of bytes decommitted plus those of the arenas unmapped. */
size_t _kite_arena_purge(bool force);
/* Bytes in free runs that are still committed (a sequentially consistent load). */
size_t _kite_arena_dirty_bytes(void);
/* Bytes committed by the process (the stats' total; a relaxed load). */
size_t _kite_arena_committed_bytes(void);
/* The idle background purger's look (purger.c): a reading that changes with every claim
 * and every decay step (a free of a run steps), and with nothing else. */
uint64_t _kite_arena_activity(void);
/* Arenas mapped now. */
size_t _kite_arena_count(void);
/* When set, called (with no lock held) after a free left committed free memory behind;
 * the background purger (purger.c, a layer above) installs it. */
extern void (*_kite_arena_dirty_hook)(void) KITE_HIDDEN;
/* KITE_HUGEPAGES=dense (thp.c): whether granules wait for a collapse pass; the pass itself
 * (collapses each granule still dense; takes purge_lock, then slot locks; the caller holds
 * no arena lock), returning the granules looked at. The background thread runs it. */
bool _kite_arena_collapse_pending(void);
size_t _kite_arena_collapse_run(void);
/* When set, called (with no lock held) after a claim marked a granule for the collapse
 * pass; purger.c installs it. */
extern void (*_kite_arena_collapse_hook)(void) KITE_HIDDEN;
/* Call fn for the head descriptor of every run in use as a small page or a large block
 * (introspection: statistics, kite_visit_all). Holds purge_lock throughout (no arena is
 * unmapped) and each arena's slot lock while its runs are visited, so fn must not allocate
 * or free runs; what fn reads of a page (lists, counts) may be changing under it unless
 * the page's owner is quiescent. */
void _kite_arena_foreach_run(void (*fn)(kite_page_t *head, void *arg), void *arg);
/* hold: no arena is unmapped (and no purge step runs) until the same thread calls it with
 * false (waits for a purge in progress). For walks that follow pointers into descriptors
 * of runs they do not own (another thread's page lists). Takes the purge lock: the caller
 * holds no arena lock; _kite_heap_lock may be held (it comes first). */
void _kite_arena_hold_unmap(bool hold);
/* For fork: take / release / re-create the arena locks. */
void _kite_arena_fork_prepare(void);
void _kite_arena_fork_parent(void);
void _kite_arena_fork_child(void);

/* ---- validators ----
 * Every arena (takes the arena lock): magic, the buddy heap's metadata, meta units, is_free
 * and dirty against the buddy heap and the descriptors; and the page map: every live
 * arena's slot says ARENA and there are no other ARENA slots. (KITE_DEBUG >= 2 checks the
 * run after each alloc/free, >= 3 its whole arena.) */
bool _kite_arena_check(void);

#ifdef KITE_TEST_HOOKS
/* Test builds (arena.c): a decay step at a given clock reading; a run freed with a given
 * stamp; whether a unit is free and committed. */
size_t _kite_test_arena_decay_at(uint64_t now);
void _kite_test_arena_free_run_at(kite_page_t *head, uint64_t now);
bool _kite_test_arena_unit_dirty(kite_page_t *d);
/* Called by arena_grow while it maps more of an arena (`growing` set, no lock held); and
 * whether any arena is marked growing. */
extern void (*_kite_test_hook_arena_growing)(void) KITE_HIDDEN;
/* Called by arena_new once the new arena is in the table, before its maker claims there. */
extern void (*_kite_test_hook_arena_new)(void) KITE_HIDDEN;
bool _kite_test_arena_any_growing(void);
/* Whether some thread holds the arenas mapped (_kite_arena_hold_unmap). */
bool _kite_test_arena_unmap_held(void);
/* thp.c's floor of committed bytes below which nothing is advised (THP_MIN_COMMITTED). */
extern uint64_t _kite_test_thp_min_committed KITE_HIDDEN;
/* Whether arena.c's record says huge-page advice is in force on unit d. */
bool _kite_test_arena_unit_huge(kite_page_t *d);
/* Called by the dense mode's claim (thp.c) once it has marked a granule THP_LOOKING, before
 * its residency check (no lock held), with the granule's first byte; and whether any
 * granule is marked THP_LOOKING. */
extern void (*_kite_test_hook_thp_looking)(void *granule) KITE_HIDDEN;
bool _kite_test_thp_any_looking(void);
/* Called by the collapse pass once it has taken the count of marked granules to 0, before
 * it looks for them (no lock held); and whether any granule is marked THP_PENDING. */
extern void (*_kite_test_hook_collapse_taken)(void) KITE_HIDDEN;
bool _kite_test_thp_any_pending(void);
#endif
#endif
