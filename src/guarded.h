/* src/guarded.h -- sampled guarded allocations (KITE_GUARDED_SAMPLE=N): about one in N
 * allocations of at most KITE_GUARDED_MAX bytes gets a slot of its own in the guarded
 * region, placed so that its end touches an inaccessible page; freed, the slot stays
 * inaccessible while later frees queue behind it. A fault there is reported with the
 * block, the kind of error and the stacks that allocated and freed it, then the process
 * aborts. A cheap always-on detector of overflows and uses after free in production.
 *
 * Hooks (each one call, marked "guarded.h" where it stands):
 *   alloc.c  malloc_generic: small requests of at most KITE_GUARDED_MAX bytes go through
 *            _kite_guarded_malloc while sampling is on (options.h's _kite_small_route:
 *            the fast path is never consulted, the slow path's compare is the one it had;
 *            _kite_guarded_route: the sampler's requests skip the profiler's test);
 *            realloc_generic: a guarded block goes to realloc_guarded (new block, copy,
 *            free), its old size from _kite_guarded_usable.
 *   heap_reclaim.c   heap_reclaim leaves the current pages alone while sampling is on.
 *   free.c   free_generic: a pointer the page map marks GUARDED goes to _kite_guarded_free;
 *            _kite_lookup (usable size, kite_owns): _kite_guarded_usable.
 *   init.c   the fork hooks; introspect.c kite_check: _kite_guarded_check; alloc.c
 *            kite_malloc_trim: _kite_guarded_trim.
 * Layer: above heap (it refills and cuts the heap's allocation lists), below alloc/free.
 */
#ifndef KITE_GUARDED_H
#define KITE_GUARDED_H
#include "types.h"
#include "options.h"

/* KITE_GUARDED_MAX, the largest sampled request, is options.h's (malloc's route reads it) */

struct kite_heap_s;
/* malloc(n) for 0 <= n <= KITE_GUARDED_MAX from the slow path of thread heap h, while
 * KITE_GUARDED_SAMPLE is on: a guarded block when this allocation is the sampled one, else
 * what _kite_malloc_small_generic returns. NULL + ENOMEM only when both fail. (n first:
 * malloc's slow path has the two in that order.) */
void *_kite_guarded_malloc(size_t n, struct kite_heap_s *h) KITE_NOINLINE;
/* free(p) of a pointer in the guarded region: a live guarded block is freed, anything else
 * (a second free, an address inside a block) is reported as misuse. */
void _kite_guarded_free(void *p) KITE_NOINLINE;
/* Usable size of live guarded block p (the request rounded up to 16 bytes), 0 if p is not
 * one (freed, or not a block start). */
size_t _kite_guarded_usable(const void *p);
/* malloc_trim: the freed slots give back the last page they keep (guarded.c G6); bytes
 * given back (pages that may have been committed). */
size_t _kite_guarded_trim(void);
/* Blocks handed out and freed so far (for tests and statistics). */
void _kite_guarded_counts(uint64_t *allocs, uint64_t *frees);
/* Slot table, free-slot queue and the page map entry agree (kite_check). */
bool _kite_guarded_check(void);
void _kite_guarded_fork_prepare(void);
void _kite_guarded_fork_parent(void);
void _kite_guarded_fork_child(void);
#ifdef KITE_TEST_HOOKS
/* Called by the region's making once its mappings are made, before they are published
 * (make_lock held, guarded.c G5). */
extern void (*_kite_test_hook_region_mapped)(void);
#endif
#endif
