/* src/visit.h -- what is live: per-page live counts for statistics, and the block walks
 * behind kite_heap_visit and kite_visit_all.
 *
 * Layer: entry, beside introspect (reads the heap, page, arena and huge layers; writes
 * nothing). Nothing here allocates: free-list membership is marked in a bitmap on the
 * stack (a small page holds at most KITE_PAGE_MAX_BLOCKS blocks).
 *
 * Live blocks of a small page, from its counters (no list walk; any thread, a snapshot):
 *   used (without the full-list sign bit) - 1 if the page is its heap's pinned page
 *   - the count in thread_free (blocks freed by other threads, not yet collected).
 * Live blocks of a small page, exactly (owner or quiescent process): every carved block
 * that is on none of free, local_free, thread_free.
 */
#ifndef KITE_VISIT_H
#define KITE_VISIT_H
#include "types.h"
#include "sizeclass.h"
#include "heap.h"


/* Live figures of the whole process, computed when asked (never on the fast paths). */
typedef struct kite_live_s {
  uint64_t blocks[KITE_CLASSES], bytes[KITE_CLASSES], pages[KITE_CLASSES];
  uint64_t small_blocks, small_bytes, small_pages;
  uint64_t large_blocks, large_bytes; /* large runs in use: usable sizes */
  uint64_t huge_blocks, huge_bytes;   /* from huge.c's counters */
} kite_live_t;
/* Walk every arena's runs (under the arena lock) and read the huge counters. */
void _kite_live_collect(kite_live_t *out);

/* One heap's figures (its queues and full lists; a snapshot for another thread's heap).
 * Holds off the unmapping of arenas while it walks (so it takes the arena's purge lock:
 * call it under heap_lock or no lock, never under an arena lock). */
typedef struct kite_heap_live_s { uint64_t live_blocks, pages, remote_frees; } kite_heap_live_t;
void _kite_heap_live(kite_heap_t *h, kite_heap_live_t *out);
#ifdef KITE_TEST_HOOKS
/* Test builds: called for each page _kite_heap_live reaches. */
extern void (*_kite_test_hook_heap_live_page)(void);
#endif

/* Live blocks of small page pg from its counters (see above). */
uint32_t _kite_page_live(const kite_page_t *pg);

/* The secure build: secure.c sets this, before any block enters a thread's quarantine, to
 * its flush of the calling thread's quarantine, and the statistics and the walks above call
 * it first, so the caller's own frees never count as live. A callback rather than a call:
 * secure.c wraps the entry points that reach this file, so a call would close a circle. */
extern void (*_kite_visit_flush_hook)(void);
#endif
