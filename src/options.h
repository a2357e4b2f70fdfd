/* src/options.h -- run-time options, read once from KITE_<NAME> environment variables.
 *
 * Layer: bottom. Reading uses secure_getenv (ignored in setuid/setgid programs), which
 * does not allocate; parsing is strict (options.c); a lower layer that needs an
 * option before the library constructor ran calls _kite_options_ensure() (cheap when read).
 * Build-time defaults: -DKITE_DEFAULT_<NAME>=value.
 */
#ifndef KITE_OPTIONS_H
#define KITE_OPTIONS_H
#include "types.h"

#ifndef KITE_DEFAULT_PURGE_DELAY_MS
/* Default for KITE_PURGE_DELAY_MS: free runs stay committed this long (0: purge at once). */
#define KITE_DEFAULT_PURGE_DELAY_MS 10
#endif

#ifndef KITE_DEFAULT_HUGEPAGES
/* Default for KITE_HUGEPAGES: 0 off, 1 whole arenas, 2 auto, 3 dense (KITE_HUGEPAGES_* below). */
#define KITE_DEFAULT_HUGEPAGES 0
#endif
/* KITE_HUGEPAGES values: transparent huge pages advised on no arena memory (large blocks of
 * 2 MiB and more are advised either way), on whole arenas, on the 2 MiB granules the
 * arena policy predicts dense (arena.c: "auto"), or made of the granules found dense, in
 * use and resident (arena.c: "dense"). */
#define KITE_HUGEPAGES_OFF 0
#define KITE_HUGEPAGES_ARENAS 1
#define KITE_HUGEPAGES_AUTO 2
#define KITE_HUGEPAGES_DENSE 3

#ifndef KITE_DEFAULT_GUARDED_SAMPLE
/* Default for KITE_GUARDED_SAMPLE: one in N allocations guarded (guarded.h); 0 off. */
#define KITE_DEFAULT_GUARDED_SAMPLE 0
#endif

typedef struct kite_options_s {
  uint8_t show_stats;     /* KITE_SHOW_STATS (0): statistics to stderr at exit: 1 text, 2 json */
  bool verbose;           /* KITE_VERBOSE (0): report requests that fail for lack of memory */
  bool abort_on_error;    /* KITE_ABORT_ON_ERROR (0): abort after reporting an invalid free */
  uint8_t hugepages;      /* KITE_HUGEPAGES (0): KITE_HUGEPAGES_OFF, _ARENAS (1), _AUTO (auto) or _DENSE (dense) */
  int64_t purge_delay_ms; /* KITE_PURGE_DELAY_MS (10): decay time of freed runs and huge maps */
  bool background;        /* KITE_BACKGROUND (0): a purger thread returns memory of idle processes */
  int64_t guarded_sample; /* KITE_GUARDED_SAMPLE (0): one in N allocations guarded (guarded.h); 0 off */
} kite_options_t;
extern kite_options_t _kite_options;
/* Requests below this go by malloc's slow path to the plain small path: KITE_SMALL_MAX + 1,
 * or 0 while KITE_GUARDED_SAMPLE is on, and before the options are read (then every small
 * request, malloc(0) too, goes through guarded.h's sampler, which reads them first: the
 * lists the fast path is given are counted from the first one on). A compare with it costs
 * what a compare with the constant did: no instruction while off. Written with the option
 * (options.c, kite_option_set). */
extern size_t _kite_small_route KITE_HIDDEN;
static inline size_t _kite_small_route_for(int64_t guarded_sample) {
#if defined(KITE_SECURE) && KITE_SECURE
  (void)guarded_sample;
  return KITE_SMALL_MAX + 1; /* the secure build has guard pages of its own */
#else
  return guarded_sample > 0 ? 0 : KITE_SMALL_MAX + 1;
#endif
}

/* 0: not read yet, 1: being read by one thread, 2: read. */
extern int _kite_options_state;
void _kite_options_read(void) __attribute__((cold, noinline));
static inline void _kite_options_ensure(void) {
  if (unlikely(__atomic_load_n(&_kite_options_state, __ATOMIC_ACQUIRE) != 2)) _kite_options_read();
}
#endif
