/* src/options.c -- the option table and the reading of KITE_* variables (contract and
 * invariants O1-O3 in options.h).
 *
 * Values are read with secure_getenv: a setuid or setgid program (the loader sets
 * AT_SECURE) ignores every KITE_* variable, as glibc ignores MALLOC_* there. Parsing is
 * strict: a number is an optional sign and decimal digits within the option's range, nothing
 * else; a word is one of the option's words in any case. A refused value is reported once
 * on stderr, naming the variable and what it accepts, and the default is kept. A KITE_*
 * name that is neither an option nor one of _kite_env_other gets one warning naming the
 * closest option. Nothing here allocates (start-up never re-enters malloc).
 */
#define _GNU_SOURCE
#include "options.h"
#include "message.h"
#include "os.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>

/* 0/1 and their words: every boolean option, and the first words of the enumerated ones. */
#define KITE_BOOL_WORDS {"0", 0}, {"1", 1}, {"off", 0}, {"on", 1}, {"no", 0}, {"yes", 1}, {"false", 0}, {"true", 1}
static const kite_opt_word_t bool_words[] = {KITE_BOOL_WORDS, {NULL, 0}};
static const kite_opt_word_t show_stats_words[] = {KITE_BOOL_WORDS, {"json", 2}, {NULL, 0}};
static const kite_opt_word_t hugepages_words[] = {KITE_BOOL_WORDS, {"auto", KITE_HUGEPAGES_AUTO},
                                                  {"dense", KITE_HUGEPAGES_DENSE}, {NULL, 0}};
static const kite_opt_word_t background_words[] = {KITE_BOOL_WORDS, {"idle", KITE_BACKGROUND_IDLE}, {NULL, 0}};

/* The longest decay kite computes with (a day): its arithmetic in milliseconds times a
 * unit count stays far inside 64 bits. Negative: purge only on malloc_trim. */
#define KITE_PURGE_DELAY_MAX 86400000

#define KITE_OPT_BOOL(env_, dflt_, doc_) {env_, dflt_, 0, 1, KITE_OPT_WORDS, bool_words, NULL, doc_}

const kite_opt_desc_t _kite_opt_desc[KITE_OPT_COUNT] = {
  [KITE_OPT_SHOW_STATS] = {"KITE_SHOW_STATS", KITE_DEFAULT_SHOW_STATS, 0, 2, KITE_OPT_WORDS, show_stats_words, NULL,
    "statistics to stderr at exit (to a copy of fd 2 taken at start-up, as programs often close stderr): `1` text, "
    "`json` one JSON object (2 for `kite_option_set`; schema in docs/stats.md): committed, peak, "
    "purged; live blocks and bytes per size class, large, huge and per heap; remote and invalid frees. Also makes "
    "the per-class count of small allocations exact (recycled local frees are counted)"},
  [KITE_OPT_VERBOSE] = KITE_OPT_BOOL("KITE_VERBOSE", KITE_DEFAULT_VERBOSE,
    "report on stderr every request that fails for lack of memory (the malloc family, the aligned family, kite_heap_malloc and kite_heap_calloc), once per request (`kite: out of memory: ...`)"),
  [KITE_OPT_ABORT_ON_ERROR] = KITE_OPT_BOOL("KITE_ABORT_ON_ERROR", KITE_DEFAULT_ABORT_ON_ERROR,
    "abort (SIGABRT) after reporting an invalid or double free"),
  [KITE_OPT_PURGE_DELAY_MS] = {"KITE_PURGE_DELAY_MS", KITE_DEFAULT_PURGE_DELAY_MS, INT32_MIN, KITE_PURGE_DELAY_MAX,
    KITE_OPT_NUMBER, NULL, "`M_TRIM_THRESHOLD`: 0 sets 0, a negative value -1, a positive one the start-up value",
    "decay time of freed runs in milliseconds: memory free for age *a* stays committed with weight 1 - *a*/delay, "
    "oldest decommitted (`madvise(MADV_DONTNEED)`) first, all of it after the delay (up to 8 delays while the "
    "program keeps asking for as much as it frees and that stays within its recent peak in use; the delay doubles, "
    "up to 1 s, while half of what the purges gave back is faulted in again within 1 s); arenas left empty "
    "and purged are unmapped (all but one); freed huge maps are cached this long; 0: decommit at once; negative: "
    "only on `malloc_trim`"},
  [KITE_OPT_HUGEPAGES] = {"KITE_HUGEPAGES", KITE_DEFAULT_HUGEPAGES, 0, 3, KITE_OPT_WORDS, hugepages_words, NULL,
    "transparent huge pages: `1` `madvise(MADV_HUGEPAGE)` on whole arenas; `auto` (2) on a 2 MiB granule of an "
    "arena at its first claim, once the process has 16 MiB committed and the granule below is in use (no huge "
    "page for a small program), and back to 4 KiB pages for good when the decay purges it; `dense` (3) a granule "
    "is rebuilt on a huge page (`MADV_COLLAPSE`, by a background thread: no request waits for it) once the "
    "process has 16 MiB committed and all of the granule is in use and resident (no memory the program had not "
    "touched), split again by a purge of any part, off with `KITE_PURGE_DELAY_MS=0`; while the process has one "
    "heap (one thread, no first-class heap), `dense` advises granules at their first claim as "
    "`auto` does (faulted huge, no collapse); in every mode but `1`, "
    "large (>= 2 MiB) and huge blocks are advised over the whole 2 MiB pieces they were asked for once the "
    "process has 16 MiB committed (a program under 16 MiB gets no huge page)"},
  [KITE_OPT_BACKGROUND] = {"KITE_BACKGROUND", KITE_DEFAULT_BACKGROUND, 0, 2, KITE_OPT_WORDS, background_words, NULL,
    "a background thread runs the purge while something freed is still committed, so an idle process gives "
    "memory back; `1` started by the first free that leaves memory to purge, purging every purge delay / 8, exits a "
    "second after nothing is left (never in a "
    "program that never frees), started again in a forked child when needed; `idle` (2) the same thread, started only "
    "by a free that leaves 4 MiB or more free and committed in a process with 16 MiB or more committed (never in a "
    "small program), and purging only once the program has neither freed runs nor claimed memory for 8 purge "
    "delays (at least 80 ms), so a program stopped after a burst gives it back; `0` no thread purges, but the "
    "`dense` huge-page mode (`KITE_HUGEPAGES`) still starts one while granules wait for their collapse (set "
    "`KITE_HUGEPAGES=0` for a process with no thread of kite's)"},
  [KITE_OPT_GUARDED_SAMPLE] = {"KITE_GUARDED_SAMPLE", KITE_DEFAULT_GUARDED_SAMPLE, 0, INT32_MAX, KITE_OPT_NUMBER, NULL, NULL,
    "one in N allocations of up to 16 KiB (on average: a random countdown per thread) goes to a slot of its own "
    "with a guard page right after its end, kept inaccessible for a while once freed; a fault there prints the "
    "kind (use after free, overflow, underflow), the block and the stacks that allocated and freed it, then "
    "aborts (docs/security.md); 0: off"},
  [KITE_OPT_PROF_SAMPLE] = {"KITE_PROF_SAMPLE", KITE_DEFAULT_PROF_SAMPLE, 1, (int64_t)1 << 40, KITE_OPT_NUMBER, NULL, NULL,
    "heap profiler (`KITE_PROF`): the mean gap in bytes between sampled allocations (each thread counts bytes "
    "down from a random exponential gap); each sample stands for its share of the bytes (docs/profiling.md)"},
  [KITE_OPT_PROF_LEAKS] = KITE_OPT_BOOL("KITE_PROF_LEAKS", KITE_DEFAULT_PROF_LEAKS,
    "heap profiler on; at exit one line on stderr estimates the blocks and bytes still live (leaked) and their call "
    "sites, whose stacks the exit profile holds (`KITE_PROF=PREFIX`)"),
  [KITE_OPT_PROF_PEAK] = {"KITE_PROF_PEAK", KITE_DEFAULT_PROF_PEAK, 0, 1 << 30, KITE_OPT_NUMBER, NULL, NULL,
    "heap profiler on; a profile `PREFIX.<pid>.peak.<k>.pb` (`KITE_PROF=PREFIX`, else `kite-prof`) each time the "
    "sampled live heap passes its previous peak by N MiB; 0: off"},
};

/* A build-time default outside its range is a build error (O1). */
_Static_assert(KITE_DEFAULT_SHOW_STATS >= 0 && KITE_DEFAULT_SHOW_STATS <= 2, "KITE_DEFAULT_SHOW_STATS: 0..2");
_Static_assert(KITE_DEFAULT_VERBOSE >= 0 && KITE_DEFAULT_VERBOSE <= 1, "KITE_DEFAULT_VERBOSE: 0..1");
_Static_assert(KITE_DEFAULT_ABORT_ON_ERROR >= 0 && KITE_DEFAULT_ABORT_ON_ERROR <= 1, "KITE_DEFAULT_ABORT_ON_ERROR: 0..1");
_Static_assert(KITE_DEFAULT_PURGE_DELAY_MS >= INT32_MIN && KITE_DEFAULT_PURGE_DELAY_MS <= KITE_PURGE_DELAY_MAX,
               "KITE_DEFAULT_PURGE_DELAY_MS: -2147483648..86400000");
_Static_assert(KITE_DEFAULT_HUGEPAGES >= 0 && KITE_DEFAULT_HUGEPAGES <= 3, "KITE_DEFAULT_HUGEPAGES: 0..3");
_Static_assert(KITE_DEFAULT_BACKGROUND >= 0 && KITE_DEFAULT_BACKGROUND <= 2, "KITE_DEFAULT_BACKGROUND: 0..2");
_Static_assert(KITE_DEFAULT_PROF_SAMPLE >= 1 && KITE_DEFAULT_PROF_SAMPLE <= ((int64_t)1 << 40), "KITE_DEFAULT_PROF_SAMPLE: 1..2^40");
_Static_assert(KITE_DEFAULT_PROF_LEAKS >= 0 && KITE_DEFAULT_PROF_LEAKS <= 1, "KITE_DEFAULT_PROF_LEAKS: 0..1");
_Static_assert(KITE_DEFAULT_PROF_PEAK >= 0 && KITE_DEFAULT_PROF_PEAK <= (1 << 30), "KITE_DEFAULT_PROF_PEAK: 0..2^30");
_Static_assert(KITE_DEFAULT_GUARDED_SAMPLE >= 0 && KITE_DEFAULT_GUARDED_SAMPLE <= INT32_MAX, "KITE_DEFAULT_GUARDED_SAMPLE: 0..2^31-1");

int64_t _kite_opt_value[KITE_OPT_COUNT] = {
  [KITE_OPT_SHOW_STATS] = KITE_DEFAULT_SHOW_STATS,     [KITE_OPT_VERBOSE] = KITE_DEFAULT_VERBOSE,
  [KITE_OPT_ABORT_ON_ERROR] = KITE_DEFAULT_ABORT_ON_ERROR, [KITE_OPT_PURGE_DELAY_MS] = KITE_DEFAULT_PURGE_DELAY_MS,
  [KITE_OPT_HUGEPAGES] = KITE_DEFAULT_HUGEPAGES,       [KITE_OPT_BACKGROUND] = KITE_DEFAULT_BACKGROUND,
  [KITE_OPT_GUARDED_SAMPLE] = KITE_DEFAULT_GUARDED_SAMPLE, [KITE_OPT_PROF_SAMPLE] = KITE_DEFAULT_PROF_SAMPLE,
  [KITE_OPT_PROF_LEAKS] = KITE_DEFAULT_PROF_LEAKS,     [KITE_OPT_PROF_PEAK] = KITE_DEFAULT_PROF_PEAK,
};
static int64_t opt_initial[KITE_OPT_COUNT]; /* written once, before _kite_options_once is DONE */
kite_once_t _kite_options_once = KITE_ONCE_INIT;
size_t _kite_small_route; /* 0 until the options are read (options.h) */
size_t _kite_guarded_route; /* the same */
int _kite_prof_enabled;
char _kite_prof_prefix[256];

const char *const _kite_env_other[] = {
  "KITE_LAB_", "KITE_TRACE_", "KITE_TEST_", "KITE_BENCH_", "KITE_FUZZ_", /* tools, lab, test drivers */
  "KITE_REPLAY_CLOCK", "KITE_SOURCE_DIR", "KITE_MODEL_OPS", "KITE_MEMRET_TSAN", "KITE_STRESS_SIZE",
  "KITE_THREADS_SCALE", "KITE_PROF", NULL,
};

/* malloc's slow-path routes for KITE_GUARDED_SAMPLE = v (options.h). */
static void routes_store(int64_t v) {
  __atomic_store_n(&_kite_guarded_route, _kite_guarded_route_for(v), __ATOMIC_RELAXED);
  __atomic_store_n(&_kite_small_route, _kite_small_route_for(v), __ATOMIC_RELAXED);
}

bool _kite_option_store(kite_opt_t o, int64_t v) {
  if ((unsigned)o >= KITE_OPT_COUNT || v < _kite_opt_desc[o].min || v > _kite_opt_desc[o].max) return false;
  __atomic_store_n(&_kite_opt_value[o], v, __ATOMIC_RELAXED);
  if (o == KITE_OPT_GUARDED_SAMPLE) routes_store(v);
  return true;
}

int64_t _kite_option_initial(kite_opt_t o) {
  _kite_options_ensure();
  return opt_initial[o];
}

static void out_i64(kite_out_t *o, int64_t v) {
  if (v < 0) _kite_out_str(o, "-");
  _kite_out_u64(o, v < 0 ? -(uint64_t)v : (uint64_t)v);
}

/* "kite: NAME=VALUE: " with at most 40 characters of the value, unprintable ones as '?'. */
static void report_head(kite_out_t *o, const char *name, const char *value) {
  _kite_out_str(o, "kite: "); _kite_out_str(o, name); _kite_out_str(o, "=");
  char v[44];
  size_t i = 0;
  for (; value[i] && i < 40; i++) v[i] = (value[i] >= 32 && value[i] < 127) ? value[i] : '?';
  v[i] = 0;
  _kite_out_str(o, v);
  if (value[i]) _kite_out_str(o, "...");
  _kite_out_str(o, ": ");
}

static void report_range(kite_out_t *o, const kite_opt_desc_t *d) {
  _kite_out_str(o, "["); out_i64(o, d->min); _kite_out_str(o, ", "); out_i64(o, d->max); _kite_out_str(o, "]");
}

/* Parse text as a whole number; *v saturates (the caller's range check then refuses it). */
static bool parse_number(const char *s, int64_t *v) {
  bool neg = false;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  if (!*s) return false;
  uint64_t r = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    r = r > (UINT64_MAX - 9) / 10 ? UINT64_MAX : r * 10 + (uint64_t)(*s - '0');
  }
  if (neg) *v = r > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)r;
  else *v = r > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r;
  return true;
}

/* Option o from the environment: its value, or false after one report (O1: unchanged). */
static bool env_option(kite_opt_t o, const char *text, int64_t *v) {
  const kite_opt_desc_t *d = &_kite_opt_desc[o];
  kite_out_t out = {.len = 0, .fd = KITE_MSG_FD};
  if (d->parser == KITE_OPT_WORDS) {
    for (const kite_opt_word_t *w = d->words; w->word; w++)
      if (strcasecmp(text, w->word) == 0) { *v = w->value; return true; }
    report_head(&out, d->env, text);
    _kite_out_str(&out, "not one of ");
    for (const kite_opt_word_t *w = d->words; w->word; w++) {
      if (w != d->words) _kite_out_str(&out, ", ");
      _kite_out_str(&out, w->word);
    }
  } else if (!parse_number(text, v)) {
    report_head(&out, d->env, text);
    _kite_out_str(&out, "not a whole number in ");
    report_range(&out, d);
  } else if (*v < d->min || *v > d->max) {
    report_head(&out, d->env, text);
    _kite_out_str(&out, "out of range ");
    report_range(&out, d);
  } else {
    return true;
  }
  _kite_out_str(&out, " (ignored)\n");
  _kite_out_flush(&out);
  return false;
}

/* Levenshtein distance of two short upper-case names, on the stack (names are cut at 63). */
static unsigned edit_distance(const char *a, size_t na, const char *b) {
  unsigned row[64];
  size_t nb = strlen(b);
  if (na > 63) na = 63;
  if (nb > 63) nb = 63;
  for (size_t j = 0; j <= nb; j++) row[j] = (unsigned)j;
  for (size_t i = 1; i <= na; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= nb; j++) {
      unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[nb];
}

static bool is_known(const char *name, size_t n) {
  for (unsigned o = 0; o < KITE_OPT_COUNT; o++)
    if (strlen(_kite_opt_desc[o].env) == n && memcmp(name, _kite_opt_desc[o].env, n) == 0) return true;
  for (const char *const *p = _kite_env_other; *p; p++) {
    size_t k = strlen(*p);
    if ((*p)[k - 1] == '_' ? n > k && memcmp(name, *p, k) == 0 : k == n && memcmp(name, *p, k) == 0) return true;
  }
  return false;
}

/* One warning per KITE_* name of the environment that kite does not know. */
static void check_unknown_names(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    const char *s = *e;
    if (strncmp(s, "KITE_", 5) != 0) continue;
    const char *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s) : strlen(s);
    if (is_known(s, n)) continue;
    unsigned best = 0;
    for (unsigned o = 1; o < KITE_OPT_COUNT; o++)
      if (edit_distance(s, n, _kite_opt_desc[o].env) < edit_distance(s, n, _kite_opt_desc[best].env)) best = o;
    kite_out_t out = {.len = 0, .fd = KITE_MSG_FD};
    char name[72];
    size_t k = 0;
    for (; k < n && k < 64; k++) name[k] = (s[k] >= 32 && s[k] < 127) ? s[k] : '?';
    name[k] = 0;
    _kite_out_str(&out, "kite: ");
    _kite_out_str(&out, name);
    if (k < n) _kite_out_str(&out, "...");
    _kite_out_str(&out, ": not a kite option, the closest is ");
    _kite_out_str(&out, _kite_opt_desc[best].env);
    _kite_out_str(&out, " (ignored)\n");
    _kite_out_flush(&out);
  }
}

/* An OS page larger than the build's layouts hold (KITE_OS_PAGE_MAX: an arena's first guard,
 * the guarded-sample region) cannot be guarded or purged in place: refuse to start, clearly,
 * rather than misbehave later. */
static void refuse_page(size_t page) {
  if (likely(page <= KITE_OS_PAGE_MAX)) return;
  kite_out_t out = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&out, "kite: the OS page size is ");
  _kite_out_bytes(&out, page);
  _kite_out_str(&out, "; this build of kite supports pages up to ");
  _kite_out_bytes(&out, KITE_OS_PAGE_MAX);
  _kite_out_str(&out, " (KITE_OS_PAGE_MAX): cannot start\n");
  _kite_out_flush(&out);
  _kite_os_abort();
}

/* KITE_PROF (a path prefix, outside the table of numbers and words) and whether the
 * profiler samples (options.h). A prefix that does not fit is refused with one report. */
static void prof_read(void) {
  const char *p = secure_getenv("KITE_PROF");
  bool on = p != NULL || _kite_opt(KITE_OPT_PROF_LEAKS) || _kite_opt(KITE_OPT_PROF_PEAK);
  if (p && strlen(p) >= sizeof _kite_prof_prefix) {
    kite_out_t out = {.len = 0, .fd = KITE_MSG_FD};
    report_head(&out, "KITE_PROF", p);
    _kite_out_str(&out, "longer than 255 bytes (no profile at exit)\n");
    _kite_out_flush(&out);
  } else if (p) {
    memcpy(_kite_prof_prefix, p, strlen(p) + 1);
  }
  __atomic_store_n(&_kite_prof_enabled, on, __ATOMIC_RELAXED);
}

void _kite_options_read(void) {
  /* (another thread reading them: wait, as before, without yielding; an ancestor's claim,
   * in a child forked mid-read with no handler of kite's: take it over, once.h O6) */
  if (_kite_once_claim(&_kite_options_once, _kite_os_getpid(), NULL)) {
    _kite_message_init(); /* the start-up stderr, before anything is reported */
    refuse_page(_kite_os_init()); /* the OS geometry, before the first mapping */
    for (unsigned o = 0; o < KITE_OPT_COUNT; o++) {
      const char *text = secure_getenv(_kite_opt_desc[o].env);
      int64_t v;
      if (text && *text && env_option((kite_opt_t)o, text, &v)) _kite_option_store((kite_opt_t)o, v);
      opt_initial[o] = _kite_opt((kite_opt_t)o);
    }
    prof_read();
    routes_store(_kite_opt(KITE_OPT_GUARDED_SAMPLE));
    if (!getauxval(AT_SECURE)) check_unknown_names(); /* where secure_getenv read nothing */
    _kite_once_end(&_kite_options_once, true);
  }
}

#ifdef KITE_TEST_HOOKS
/* Tests: set the read's word (-1: as a thread of this process reading them), return the
 * word before (to set it back). */
int _kite_test_options_stage(int w) {
  return __atomic_exchange_n(&_kite_options_once.state, w < 0 ? _kite_once_busy_word(_kite_os_getpid()) : w, __ATOMIC_ACQ_REL);
}
#endif
