/* src/stats.h -- process-wide counters (atomics). Per-heap counters live in the heaps and
 * are merged in by heap_pool.c (_kite_heap_collect_stats); the field table that says how each
 * is shown is in visit.c, the printers in introspect.c and override.c.
 * Layer: bottom.
 */
#ifndef KITE_STATS_H
#define KITE_STATS_H
#include "types.h"
#include "sizeclass.h"

/* Every word is a counter that some path writes and the statistics field table (visit.c)
 * shows: visit.c asserts the size, and the introspect test that each word is in the table. */
typedef struct kite_gstats_s {
  uint64_t issued[KITE_CLASSES]; /* small blocks handed to allocation lists */
  uint64_t large_allocs, huge_allocs, remote_frees, invalid_frees;
  uint64_t committed, peak_committed, purged;
  uint64_t arenas, pages_abandoned, pages_adopted;
  uint64_t huge_live_blocks, huge_live_bytes; /* huge blocks in use now (huge.c) */
} kite_gstats_t;
extern kite_gstats_t _kite_stats KITE_HIDDEN;

/* Committed bytes changed by delta (peak_committed follows). */
void _kite_stat_commit(int64_t delta);
static inline void _kite_stat_add(uint64_t *counter, uint64_t n) {
  __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}
#endif
