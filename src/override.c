/* src/override.c -- glibc's introspection names served by kite (KITE_OVERRIDE builds):
 * mallinfo2, mallinfo, malloc_info, mallopt, malloc_stats (with musl: malloc_info and
 * malloc_stats, the others have no declaration in its malloc.h). What each field and parameter
 * means for kite is in docs/stats.md.
 * The malloc family itself is aliased where it is defined (alloc.c, free.c: an alias must
 * live in its target's file); C++ operators are in override_cxx.cpp.
 */
#define _GNU_SOURCE
#include <kite.h>
#include "heap.h"
#include "stats.h"
#include "options.h"
#include "visit.h"
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#if KITE_OVERRIDE && defined(__GLIBC__) /* musl has no struct mallinfo nor mallopt */
/* glibc's fields, kite's figures (the mallinfo2 column of visit.c's field table):
 *   arena    committed bytes;  usmblks peak committed bytes
 *   ordblks  small pages + large runs in use;  smblks, fsmblks: 0 (no fastbins)
 *   hblks    huge blocks live;  hblkhd: their bytes
 *   uordblks live bytes (blocks handed out, at their usable sizes)
 *   fordblks committed bytes not live (free blocks, cached pages, unpurged runs)
 *   keepcost 0 (kite has no top chunk; free runs go back by age, see KITE_PURGE_DELAY_MS) */
KITE_API struct mallinfo2 mallinfo2(void) {
  struct mallinfo2 m;
  memset(&m, 0, sizeof m);
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  const uint64_t *v = sn.v;
  m.arena = v[KITE_STAT_COMMITTED];
  m.ordblks = v[KITE_STAT_SMALL_PAGES] + v[KITE_STAT_LARGE_LIVE_BLOCKS];
  m.hblks = v[KITE_STAT_HUGE_LIVE_BLOCKS];
  m.hblkhd = v[KITE_STAT_HUGE_LIVE_BYTES];
  m.usmblks = v[KITE_STAT_PEAK_COMMITTED];
  m.uordblks = v[KITE_STAT_LIVE_BYTES];
  m.fordblks = v[KITE_STAT_COMMITTED] > v[KITE_STAT_LIVE_BYTES] ? v[KITE_STAT_COMMITTED] - v[KITE_STAT_LIVE_BYTES] : 0;
  m.keepcost = 0;
  return m;
}

static int sat_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The old interface: the same figures, saturated at INT_MAX (glibc wraps them). */
KITE_API struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m;
  m.arena = sat_int(m2.arena);
  m.ordblks = sat_int(m2.ordblks);
  m.smblks = sat_int(m2.smblks);
  m.hblks = sat_int(m2.hblks);
  m.hblkhd = sat_int(m2.hblkhd);
  m.usmblks = sat_int(m2.usmblks);
  m.fsmblks = sat_int(m2.fsmblks);
  m.uordblks = sat_int(m2.uordblks);
  m.fordblks = sat_int(m2.fordblks);
  m.keepcost = sat_int(m2.keepcost);
  return m;
}
#endif

#if KITE_OVERRIDE
/* kite's XML (schema in docs/stats.md). The caller gave a FILE, so stdio it is; the figures
 * are taken before the first fprintf, so stdio's own allocations do not enter them and no
 * kite lock is held while it allocates. options must be 0 (EINVAL otherwise, as glibc). */
KITE_API int malloc_info(int options, FILE *fp) {
  if (options != 0 || fp == NULL) { errno = EINVAL; return -1; }
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  const uint64_t *v = sn.v;
  fprintf(fp, "<malloc version=\"kite-1\" kite=\"%s\">\n<sizes>\n", kite_version());
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!sn.s.issued[c] && !sn.l.pages[c]) continue;
    fprintf(fp, "  <size class=\"%u\" size=\"%u\" live_blocks=\"%llu\" live_bytes=\"%llu\" pages=\"%llu\" issued=\"%llu\"/>\n",
            c, (unsigned)_kite_class_size_[c], (unsigned long long)sn.l.blocks[c], (unsigned long long)sn.l.bytes[c],
            (unsigned long long)sn.l.pages[c], (unsigned long long)sn.s.issued[c]);
  }
  fprintf(fp, "</sizes>\n");
  fprintf(fp, "<total type=\"small\" count=\"%llu\" size=\"%llu\" pages=\"%llu\" issued=\"%llu\"/>\n",
          (unsigned long long)v[KITE_STAT_SMALL_LIVE_BLOCKS], (unsigned long long)v[KITE_STAT_SMALL_LIVE_BYTES],
          (unsigned long long)v[KITE_STAT_SMALL_PAGES], (unsigned long long)v[KITE_STAT_SMALL_ISSUED]);
  fprintf(fp, "<total type=\"large\" count=\"%llu\" size=\"%llu\" allocs=\"%llu\"/>\n",
          (unsigned long long)v[KITE_STAT_LARGE_LIVE_BLOCKS], (unsigned long long)v[KITE_STAT_LARGE_LIVE_BYTES],
          (unsigned long long)v[KITE_STAT_LARGE_ALLOCS]);
  fprintf(fp, "<total type=\"huge\" count=\"%llu\" size=\"%llu\" allocs=\"%llu\"/>\n",
          (unsigned long long)v[KITE_STAT_HUGE_LIVE_BLOCKS], (unsigned long long)v[KITE_STAT_HUGE_LIVE_BYTES],
          (unsigned long long)v[KITE_STAT_HUGE_ALLOCS]);
  fprintf(fp, "<total type=\"live\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_LIVE_BLOCKS],
          (unsigned long long)v[KITE_STAT_LIVE_BYTES]);
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_COMMITTED]);
  fprintf(fp, "<system type=\"max\" size=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_PEAK_COMMITTED]);
  fprintf(fp, "<system type=\"purged\" size=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_PURGED]);
  fprintf(fp, "<aspace type=\"arenas\" count=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_ARENAS]);
  fprintf(fp, "<frees remote=\"%llu\" invalid=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_REMOTE_FREES],
          (unsigned long long)v[KITE_STAT_INVALID_FREES]);
  fprintf(fp, "<pages abandoned=\"%llu\" adopted=\"%llu\"/>\n", (unsigned long long)v[KITE_STAT_PAGES_ABANDONED],
          (unsigned long long)v[KITE_STAT_PAGES_ADOPTED]);
  fprintf(fp, "</malloc>\n");
  return ferror(fp) ? -1 : 0;
}

KITE_API void malloc_stats(void) { kite_stats_print(2); }
#endif

#if KITE_OVERRIDE && defined(__GLIBC__)
/* glibc's parameter numbers (malloc.h) that kite accepts; every other one returns 0, as
 * glibc does for a parameter it does not know. Documented in docs/stats.md. */
KITE_API int mallopt(int param, int value) {
  _kite_options_ensure();
  switch (param) {
  case M_TRIM_THRESHOLD:
    /* kite returns free memory by age, not by amount (options.c, KITE_PURGE_DELAY_MS's
     * mallopt column): 0 means "at once" (purge delay 0), a negative value "never" (delay
     * -1: glibc's "no trimming"), a positive threshold gives back kite's own decay, the
     * delay read at start-up (the environment's, or the build's default). */
    kite_option_set(KITE_OPTION_PURGE_DELAY_MS,
                    value == 0 ? 0 : value < 0 ? -1 : (long)_kite_option_initial(KITE_OPT_PURGE_DELAY_MS));
    return 1;
  case M_ARENA_MAX:
  case M_ARENA_TEST:
    /* accepted, nothing to do: kite's heaps are per thread, and pages of exited threads
     * are adopted by others, so the number of heaps does not multiply memory as glibc's
     * arenas do. */
    return value >= 0 ? 1 : 0;
  case M_MMAP_THRESHOLD:
    /* kite's threshold for a block of its own mapping is fixed by its layout (16 MiB, the
     * largest buddy run): only that value is accepted. */
    return (size_t)value == KITE_LARGE_MAX ? 1 : 0;
  default:
    return 0;
  }
}
#endif
