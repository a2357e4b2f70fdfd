/* src/introspect.c -- the statistics and options API (kite_stats_*, kite_option_*), and
 * kite_check (every validator).
 * Layer: top (beside alloc/free). Nothing here allocates: text goes through message.h's
 * formatter.
 */
#include <kite.h>
#include "heap.h"
#include "huge.h"
#include "arena.h"
#include "options.h"
#include "purger.h"
#include "stats.h"
#include "message.h"

KITE_API void kite_stats_print(int fd) {
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  kite_out_t o = {.len = 0, .fd = fd};
  uint64_t total = 0;
  for (unsigned c = 0; c < KITE_CLASSES; c++) total += s.issued[c];
  _kite_out_str(&o, "kite statistics\n");
  _kite_out_str(&o, "  small allocations: "); _kite_out_u64(&o, total);
  _kite_out_str(&o, " (counted per block handed to an allocation list)\n");
  _kite_out_str(&o, "  class      size   allocations\n");
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!s.issued[c]) continue;
    _kite_out_str(&o, "  ");
    _kite_out_u64w(&o, c, 5);
    _kite_out_u64w(&o, _kite_class_size_[c], 10);
    _kite_out_str(&o, "   "); _kite_out_u64(&o, s.issued[c]); _kite_out_str(&o, "\n");
  }
  _kite_out_str(&o, "  large allocations: "); _kite_out_u64(&o, s.large_allocs); _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  huge allocations: "); _kite_out_u64(&o, s.huge_allocs); _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  remote frees: "); _kite_out_u64(&o, s.remote_frees); _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  invalid frees: "); _kite_out_u64(&o, s.invalid_frees); _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  committed: "); _kite_out_bytes(&o, s.committed);
  _kite_out_str(&o, ", peak committed: "); _kite_out_bytes(&o, s.peak_committed);
  _kite_out_str(&o, ", purged: "); _kite_out_bytes(&o, s.purged); _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  arenas: "); _kite_out_u64(&o, s.arenas);
  _kite_out_str(&o, ", pages abandoned: "); _kite_out_u64(&o, s.pages_abandoned);
  _kite_out_str(&o, ", adopted: "); _kite_out_u64(&o, s.pages_adopted); _kite_out_str(&o, "\n");
  _kite_out_flush(&o);
}

KITE_API void kite_stats_get(kite_stats_t *out) {
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  uint64_t small = 0;
  for (unsigned c = 0; c < KITE_CLASSES; c++) small += s.issued[c];
  out->small_allocs = small;
  out->large_allocs = s.large_allocs;
  out->huge_allocs = s.huge_allocs;
  out->remote_frees = s.remote_frees;
  out->invalid_frees = s.invalid_frees;
  out->committed = s.committed;
  out->peak_committed = s.peak_committed;
  out->purged = s.purged;
  out->arenas = s.arenas;
}

KITE_API long kite_option_get(kite_option_t option) {
  _kite_options_ensure();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: return _kite_options.show_stats;
  case KITE_OPTION_VERBOSE: return _kite_options.verbose;
  case KITE_OPTION_ABORT_ON_ERROR: return _kite_options.abort_on_error;
  case KITE_OPTION_PURGE_DELAY_MS: return (long)_kite_options.purge_delay_ms;
  case KITE_OPTION_HUGEPAGES: return _kite_options.hugepages;
  case KITE_OPTION_BACKGROUND: return _kite_options.background;
  }
  return -1;
}

KITE_API void kite_option_set(kite_option_t option, long value) {
  _kite_options_ensure();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: _kite_options.show_stats = value != 0; break;
  case KITE_OPTION_VERBOSE: _kite_options.verbose = value != 0; break;
  case KITE_OPTION_ABORT_ON_ERROR: _kite_options.abort_on_error = value != 0; break;
  case KITE_OPTION_PURGE_DELAY_MS: _kite_options.purge_delay_ms = value; break;
  case KITE_OPTION_HUGEPAGES: _kite_options.hugepages = value != 0; break;
  case KITE_OPTION_BACKGROUND:
    _kite_options.background = value != 0;
    _kite_purger_enable(value != 0);
    break;
  }
}

/* Every validator, each under the lock that guards its structure (heap_lock, the huge cache
 * lock, the arena lock, one at a time): the size-class tables, the calling thread's heap and
 * every page in it (with their free lists), the abandoned pages, the huge cache, every arena
 * (buddy heap, units, descriptors of free units) and the page map. Other threads' heaps
 * and pages are not read beyond what the arena lock guards. (The name in parentheses: the
 * message.h assertion macro kite_check(e) must not expand here.) */
KITE_API int (kite_check)(void) {
  bool ok = _kite_sizeclass_check();
  ok = _kite_heap_check_all() && ok;
  ok = _kite_huge_check() && ok;
  ok = _kite_arena_check() && ok;
  return ok;
}
