/* src/override.c -- glibc's introspection names served by kite (KITE_OVERRIDE builds).
 * The malloc family itself is aliased where it is defined (alloc.c, free.c: an alias must
 * live in its target's file); C++ operators are in override_cxx.cpp.
 */
#define _GNU_SOURCE
#include <kite.h>
#include "heap.h"
#include "stats.h"
#include <malloc.h>
#include <string.h>

#if KITE_OVERRIDE
KITE_API struct mallinfo2 mallinfo2(void) {
  struct mallinfo2 m;
  memset(&m, 0, sizeof m);
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  m.arena = s.committed;
  m.hblkhd = 0;
  m.usmblks = s.peak_committed;
  m.uordblks = s.committed;
  m.keepcost = 0;
  return m;
}
KITE_API void malloc_stats(void) { kite_stats_print(2); }
#endif
