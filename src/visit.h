/* src/visit.h -- what is live: per-page live counts for statistics, and the block walks
 * behind kite_heap_visit and kite_visit_all.
 *
 * Layer: entry, beside introspect (reads the heap, page, arena and huge layers; writes
 * nothing). Nothing here allocates: free-list membership is marked in a bitmap on the
 * stack (a small page holds at most KITE_PAGE_MAX_BLOCKS blocks).
 *
 * Live blocks of a small page, from its counters (no list walk; any thread, a snapshot):
 *   the page's count (_kite_page_used) - 1 if the page is its heap's pinned page
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
/* Walk every arena's runs (under the arena locks) and read the huge counters. The walk reads
 * descriptors and counts that their owners write at the same moment with plain stores (the
 * fast paths' counts, a run's teardown): its figures are a snapshot that may be off by what
 * changes while it runs, and it follows no pointer it reads there (arenas stay mapped under
 * the purge lock). Plain owner stores keep that cost off every malloc and free; under TSan
 * the walk's accesses are not recorded (types.h, KITE_TSAN_IGNORE_BEGIN). */
void _kite_live_collect(kite_live_t *out);

/* One heap's figures (its queues and full lists; a snapshot for another thread's heap, whose
 * owner changes them with plain stores: under TSan the walk's accesses are not recorded).
 * Holds off the unmapping of arenas while it walks (so it takes the arena's purge lock:
 * call it under _kite_heap_lock or no lock, never under an arena lock). */
typedef struct kite_heap_live_s { uint64_t live_blocks, pages, remote_frees; } kite_heap_live_t;
void _kite_heap_live(kite_heap_t *h, kite_heap_live_t *out);
#ifdef KITE_TEST_HOOKS
/* Test builds: called for each page _kite_heap_live reaches. */
extern void (*_kite_test_hook_heap_live_page)(void) KITE_HIDDEN;
#endif

/* ---- the statistics field table (visit.c): one entry per figure, behind the text and
 * JSON printers, kite_stats_get, mallinfo2, malloc_info and docs/stats.md's field table.
 * Invariant V1: every word of kite_gstats_t and every scalar of kite_live_t is the source
 * of some field (the introspect test checks it), so a counter nobody shows is a failure. */
typedef enum kite_stat_e {
  KITE_STAT_COMMITTED, KITE_STAT_PEAK_COMMITTED, KITE_STAT_PURGED, KITE_STAT_ARENAS,
  KITE_STAT_LIVE_BLOCKS, KITE_STAT_LIVE_BYTES,
  KITE_STAT_SMALL_LIVE_BLOCKS, KITE_STAT_SMALL_LIVE_BYTES, KITE_STAT_SMALL_PAGES, KITE_STAT_SMALL_ISSUED,
  KITE_STAT_LARGE_ALLOCS, KITE_STAT_LARGE_LIVE_BLOCKS, KITE_STAT_LARGE_LIVE_BYTES,
  KITE_STAT_HUGE_ALLOCS, KITE_STAT_HUGE_LIVE_BLOCKS, KITE_STAT_HUGE_LIVE_BYTES,
  KITE_STAT_REMOTE_FREES, KITE_STAT_INVALID_FREES, KITE_STAT_PAGES_ABANDONED, KITE_STAT_PAGES_ADOPTED,
  KITE_STAT_COUNT
} kite_stat_t;

/* Where a field's value comes from. */
typedef enum {
  KITE_SRC_COUNTER, /* word `at` of kite_gstats_t (the counters, merged over heaps) */
  KITE_SRC_CLASSES, /* the sum of KITE_CLASSES words of kite_gstats_t from `at` */
  KITE_SRC_LIVE,    /* word `at` of kite_live_t (walked when the statistics are taken) */
  KITE_SRC_SUM,     /* the sum of the fields sum[0..2] (each of another source) */
} kite_stat_src_t;

typedef struct kite_stat_field_s {
  const char *group, *key; /* JSON: "key" in the object "group" ("" for the top level) */
  const char *label;       /* text: "  label: value (doc)" */
  const char *doc;         /* one line: the text's and docs/stats.md's */
  kite_stat_src_t src;
  uint16_t at;
  uint8_t sum[3];
  uint16_t get;            /* offset of its kite_stats_t field */
  bool bytes;              /* a size: the text shows it as "12.3 MiB" */
  const char *mallinfo2;   /* docs: the mallinfo2 fields it goes into, or NULL */
  const char *malloc_info; /* docs: where malloc_info's XML has it, or NULL */
} kite_stat_field_t;
extern const kite_stat_field_t _kite_stat_fields[KITE_STAT_COUNT] KITE_HIDDEN;

/* Every figure at once: the counters merged (_kite_heap_lock), the live ones walked (arena lock),
 * then v[] computed from them by the table. */
typedef struct kite_snapshot_s {
  kite_gstats_t s;
  kite_live_t l;
  uint64_t v[KITE_STAT_COUNT];
} kite_snapshot_t;
void _kite_snapshot(kite_snapshot_t *sn);

/* Live blocks of small page pg from its counters (see above). */
uint32_t _kite_page_live(const kite_page_t *pg);

/* The secure build: secure.c sets this, before any block enters a thread's quarantine, to
 * its flush of the calling thread's quarantine, and the statistics and the walks above call
 * it first, so the caller's own frees never count as live. A callback rather than a call:
 * secure.c wraps the entry points that reach this file, so a call would close a circle. */
extern void (*_kite_visit_flush_hook)(void) KITE_HIDDEN;
#endif
