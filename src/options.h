/* src/options.h -- run-time options: one table (options.c) declares each option once, with
 * its environment name, default, range, parser and doc line; everything else comes from it:
 * the environment reader, kite_option_get/set (introspect.c), mallopt (override.c) and the
 * docs' option tables (tools/gen_tables.py, through build/kite-tables).
 *
 * Layer: bottom. Reading uses secure_getenv (ignored in setuid/setgid programs), which
 * does not allocate; parsing is strict (options.c); a lower layer that needs an
 * option before the library constructor ran calls _kite_options_ensure() (cheap when read).
 *
 * Invariants:
 *   O1  _kite_opt_value[o] is always within [_kite_opt_desc[o].min, .max]: the reader and
 *       _kite_option_store refuse anything else and keep the old value.
 *   O2  every access to _kite_opt_value is a relaxed atomic (other threads read options
 *       while kite_option_set or mallopt change them; each option is one word, no option
 *       is read together with another as a consistent pair).
 *   O3  kite_opt_t lists the options in the order of include/kite.h's kite_option_t, so the
 *       public number is the index (introspect.c asserts it at compile time).
 */
#ifndef KITE_OPTIONS_H
#define KITE_OPTIONS_H
#include "types.h"
#include "once.h"

/* ---- build-time defaults: -DKITE_DEFAULT_<NAME>=value (checked against the range in
 * options.c at compile time) ---- */
#ifndef KITE_DEFAULT_SHOW_STATS
/* Default for KITE_SHOW_STATS: 0 none, 1 text, 2 JSON statistics at exit. */
#define KITE_DEFAULT_SHOW_STATS 0
#endif
#ifndef KITE_DEFAULT_VERBOSE
/* Default for KITE_VERBOSE: 1 reports every malloc that fails for lack of memory. */
#define KITE_DEFAULT_VERBOSE 0
#endif
#ifndef KITE_DEFAULT_ABORT_ON_ERROR
/* Default for KITE_ABORT_ON_ERROR: 1 aborts after reporting an invalid or double free. */
#define KITE_DEFAULT_ABORT_ON_ERROR 0
#endif
#ifndef KITE_DEFAULT_PURGE_DELAY_MS
/* Default for KITE_PURGE_DELAY_MS: free runs stay committed this long (0: purge at once). */
#define KITE_DEFAULT_PURGE_DELAY_MS 10
#endif
#ifndef KITE_DEFAULT_HUGEPAGES
/* Default for KITE_HUGEPAGES: 0 off, 1 whole arenas, 2 auto, 3 dense (KITE_HUGEPAGES_* below). */
#define KITE_DEFAULT_HUGEPAGES 3
#endif
#ifndef KITE_DEFAULT_BACKGROUND
/* Default for KITE_BACKGROUND: 0 off, 1 on, 2 idle (KITE_BACKGROUND_* below). */
#define KITE_DEFAULT_BACKGROUND 2
#endif
#ifndef KITE_DEFAULT_GUARDED_SAMPLE
/* Default for KITE_GUARDED_SAMPLE: one in N allocations guarded (guarded.h); 0 off. */
#define KITE_DEFAULT_GUARDED_SAMPLE 0
#endif
#ifndef KITE_DEFAULT_PROF_SAMPLE
/* Default for KITE_PROF_SAMPLE: the heap profiler's mean gap between samples, in bytes. */
#define KITE_DEFAULT_PROF_SAMPLE 524288
#endif
#ifndef KITE_DEFAULT_PROF_LEAKS
/* Default for KITE_PROF_LEAKS: 1 reports the blocks still live at exit (prof.h). */
#define KITE_DEFAULT_PROF_LEAKS 0
#endif
#ifndef KITE_DEFAULT_PROF_PEAK
/* Default for KITE_PROF_PEAK: a profile at every N MiB of new peak of the live heap; 0 off. */
#define KITE_DEFAULT_PROF_PEAK 0
#endif

/* KITE_HUGEPAGES values: transparent huge pages advised on no arena memory (large blocks of
 * 2 MiB and more are advised either way), on whole arenas, on the 2 MiB granules the
 * arena policy predicts dense (thp.c: "auto"), or made of the granules found dense, in
 * use and resident (thp.c: "dense"). */
#define KITE_HUGEPAGES_OFF 0
#define KITE_HUGEPAGES_ARENAS 1
#define KITE_HUGEPAGES_AUTO 2
#define KITE_HUGEPAGES_DENSE 3
/* KITE_BACKGROUND values (purger.c): no purging thread; one started by the first free that
 * leaves memory to purge, stepping every purge delay / 8; one started only past a bound of
 * free committed memory, stepping once the program is quiet. */
#define KITE_BACKGROUND_OFF 0
#define KITE_BACKGROUND_ON 1
#define KITE_BACKGROUND_IDLE 2

/* The options, in kite_option_t's order (O3). */
typedef enum kite_opt_e {
  KITE_OPT_SHOW_STATS,
  KITE_OPT_VERBOSE,
  KITE_OPT_ABORT_ON_ERROR,
  KITE_OPT_PURGE_DELAY_MS,
  KITE_OPT_HUGEPAGES,
  KITE_OPT_BACKGROUND,
  KITE_OPT_GUARDED_SAMPLE,
  KITE_OPT_PROF_SAMPLE,
  KITE_OPT_PROF_LEAKS,
  KITE_OPT_PROF_PEAK,
  KITE_OPT_COUNT
} kite_opt_t;

/* How the environment's text becomes a value: a whole number (optional sign and decimal
 * digits, nothing else) or one of the option's words (any case). */
typedef enum { KITE_OPT_NUMBER, KITE_OPT_WORDS } kite_opt_parser_t;

typedef struct kite_opt_word_s {
  const char *word;
  int64_t value;
} kite_opt_word_t;

typedef struct kite_opt_desc_s {
  const char *env;              /* "KITE_<NAME>" */
  int64_t dflt, min, max;       /* default (KITE_DEFAULT_<NAME>) and the range of every value */
  kite_opt_parser_t parser;
  const kite_opt_word_t *words; /* KITE_OPT_WORDS: the accepted words, ended by {NULL, 0} */
  const char *mallopt;          /* how glibc's mallopt sets it (override.c), or NULL */
  const char *doc;              /* one line (markdown: `code` spans) for the docs' tables */
} kite_opt_desc_t;

extern const kite_opt_desc_t _kite_opt_desc[KITE_OPT_COUNT] KITE_HIDDEN;
extern int64_t _kite_opt_value[KITE_OPT_COUNT] KITE_HIDDEN;

/* The current value of option o (O2). */
static inline int64_t _kite_opt(kite_opt_t o) { return __atomic_load_n(&_kite_opt_value[o], __ATOMIC_RELAXED); }
/* Set option o to v: false (nothing changed) when v is outside its range (O1). */
bool _kite_option_store(kite_opt_t o, int64_t v);
/* The value option o had once the environment was read (its default when unset or refused). */
int64_t _kite_option_initial(kite_opt_t o);

/* Environment names outside the option table that kite's own tools, tests and modules read
 * (NULL-terminated; a name ending in '_' is a prefix): the start-up check of unknown KITE_*
 * names leaves them alone. */
extern const char *const _kite_env_other[] KITE_HIDDEN;

/* The heap profiler (prof.h) samples: KITE_PROF is set (its value, up to 255 bytes, is the
 * prefix of the profile written at exit; empty: none), or KITE_PROF_LEAKS or KITE_PROF_PEAK
 * is on. Read with the other options, once (in the secure build too). */
extern int _kite_prof_enabled KITE_HIDDEN;
extern char _kite_prof_prefix[256] KITE_HIDDEN;

/* Requests below this go by malloc's slow path to the plain small path: KITE_SMALL_MAX + 1,
 * or 0 while KITE_GUARDED_SAMPLE or the heap profiler is on, and before the options are read (then every small
 * request, malloc(0) too, goes through guarded.h's sampler, which reads them first: the
 * lists the fast path is given are counted from the first one on). A compare with it costs
 * what a compare with the constant did: no instruction while off. Written with the option
 * (options.c, kite_option_set). */
extern size_t _kite_small_route KITE_HIDDEN;
static inline size_t _kite_small_route_for(int64_t guarded_sample) {
#if defined(KITE_SECURE) && KITE_SECURE
  (void)guarded_sample; /* the secure build has guard pages of its own */
  return __atomic_load_n(&_kite_prof_enabled, __ATOMIC_RELAXED) ? 0 : KITE_SMALL_MAX + 1;
#else
  return guarded_sample > 0 || __atomic_load_n(&_kite_prof_enabled, __ATOMIC_RELAXED) ? 0 : KITE_SMALL_MAX + 1;
#endif
}

/* Requests below this go by malloc's slow path straight to guarded.h's sampler, past the
 * profiler's test: KITE_GUARDED_MAX + 1 while KITE_GUARDED_SAMPLE is on and the heap
 * profiler off, else 0 (the sampler's requests then take the longer way, as before the
 * options are read). Written with _kite_small_route, from the same values. */
#define KITE_GUARDED_MAX ((size_t)16384) /* largest sampled request: a slot's four pages (guarded.h) */
extern size_t _kite_guarded_route KITE_HIDDEN;
static inline size_t _kite_guarded_route_for(int64_t guarded_sample) {
#if defined(KITE_SECURE) && KITE_SECURE
  (void)guarded_sample; /* never sampled there (_kite_small_route_for) */
  return 0;
#else
  return guarded_sample > 0 && !__atomic_load_n(&_kite_prof_enabled, __ATOMIC_RELAXED) ? KITE_GUARDED_MAX + 1 : 0;
#endif
}

/* The environment's read (once.h: DONE once read; never FAILED). It runs before kite's fork
 * handlers are registered (init.c), so a child forked while another thread reads them has
 * no handler to take the claim back: its own read takes it over (once.h O6). */
extern kite_once_t _kite_options_once KITE_HIDDEN;
void _kite_options_read(void) __attribute__((cold, noinline));
static inline void _kite_options_ensure(void) {
  if (unlikely(!_kite_once_done(&_kite_options_once))) _kite_options_read(); /* one compare */
}
#endif
