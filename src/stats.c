/* src/stats.c -- process-wide counters (contract in stats.h). */
#include "stats.h"

kite_gstats_t _kite_stats;

void _kite_stat_commit(int64_t delta) {
  uint64_t now = __atomic_add_fetch(&_kite_stats.committed, (uint64_t)delta, __ATOMIC_RELAXED);
  uint64_t peak = __atomic_load_n(&_kite_stats.peak_committed, __ATOMIC_RELAXED);
  while (delta > 0 && now > peak &&
         !__atomic_compare_exchange_n(&_kite_stats.peak_committed, &peak, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
