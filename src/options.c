/* src/options.c -- reading KITE_* options (contract in options.h).
 *
 * Values are read with secure_getenv: a setuid or setgid program (the loader sets
 * AT_SECURE) ignores every KITE_* variable, as glibc ignores MALLOC_* there. Parsing is
 * strict: a boolean is one of 0/1, no/yes, false/true, off/on (any case); an integer is an
 * optional sign and decimal digits within the option's range, nothing else. A malformed
 * value is reported once on stderr, naming the variable, and the default is kept.
 */
#define _GNU_SOURCE
#include "options.h"
#include "message.h"
#include <stdlib.h>
#include <strings.h>

kite_options_t _kite_options = {.purge_delay_ms = KITE_DEFAULT_PURGE_DELAY_MS, .guarded_sample = KITE_DEFAULT_GUARDED_SAMPLE};
int _kite_options_state;
size_t _kite_small_route; /* 0 until the options are read (options.h) */

static void report_bad(const char *name, const char *value, const char *want, const char *dflt) {
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: ignoring "); _kite_out_str(&o, name); _kite_out_str(&o, "=\"");
  /* at most 40 characters of the value */
  char v[44]; size_t i = 0;
  for (; value[i] && i < 40; i++) v[i] = (value[i] >= 32 && value[i] < 127) ? value[i] : '?';
  v[i] = 0;
  _kite_out_str(&o, v); if (value[i]) _kite_out_str(&o, "...");
  _kite_out_str(&o, "\": expected "); _kite_out_str(&o, want);
  _kite_out_str(&o, "; using the default "); _kite_out_str(&o, dflt); _kite_out_str(&o, "\n");
  _kite_out_flush(&o);
}

/* Is the variable set to exactly word? */
static bool env_is(const char *name, const char *word) {
  const char *v = secure_getenv(name);
  if (!v) return false;
  while (*word && *v == *word) { v++; word++; }
  return *v == 0 && *word == 0;
}

static bool env_bool(const char *name, bool dflt) {
  const char *v = secure_getenv(name);
  if (!v || !*v) return dflt;
  static const char *yes[] = {"1", "yes", "true", "on"}, *no[] = {"0", "no", "false", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0) return true;
    if (strcasecmp(v, no[i]) == 0) return false;
  }
  report_bad(name, v, "0/1, no/yes, false/true or off/on", dflt ? "1" : "0");
  return dflt;
}

/* An integer in [lo, hi]. */
static int64_t env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi, const char *dflt_text) {
  const char *v = secure_getenv(name);
  if (!v || !*v) return dflt;
  const char *s = v;
  int neg = 0;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  int64_t r = 0;
  bool ok = *s >= '0' && *s <= '9';
  for (; ok && *s; s++) {
    if (*s < '0' || *s > '9' || r > (INT64_MAX - 9) / 10) { ok = false; break; }
    r = r * 10 + (*s - '0');
  }
  if (ok) {
    r = neg ? -r : r;
    if (r >= lo && r <= hi) return r;
  }
  report_bad(name, v, "a whole number in range", dflt_text);
  return dflt;
}

/* KITE_HUGEPAGES: a boolean (0: off, 1: whole arenas), "auto" or "dense" (any case). */
static uint8_t env_hugepages(void) {
  const char *v = secure_getenv("KITE_HUGEPAGES");
  if (!v || !*v) return KITE_DEFAULT_HUGEPAGES;
  if (strcasecmp(v, "auto") == 0) return KITE_HUGEPAGES_AUTO;
  if (strcasecmp(v, "dense") == 0) return KITE_HUGEPAGES_DENSE;
  static const char *yes[] = {"1", "yes", "true", "on"}, *no[] = {"0", "no", "false", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0) return KITE_HUGEPAGES_ARENAS;
    if (strcasecmp(v, no[i]) == 0) return KITE_HUGEPAGES_OFF;
  }
  static const char *names[] = {"0", "1", "auto", "dense"};
  report_bad("KITE_HUGEPAGES", v, "0/1, no/yes, false/true, off/on, auto or dense", names[KITE_DEFAULT_HUGEPAGES]);
  return KITE_DEFAULT_HUGEPAGES;
}

#define KITE_STR_(x) #x
#define KITE_STR(x) KITE_STR_(x)

void _kite_options_read(void) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&_kite_options_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    _kite_message_init(); /* the start-up stderr, before anything is reported */
    _kite_options.show_stats = env_is("KITE_SHOW_STATS", "json") ? 2 : env_bool("KITE_SHOW_STATS", false);
    _kite_options.verbose = env_bool("KITE_VERBOSE", false);
    _kite_options.abort_on_error = env_bool("KITE_ABORT_ON_ERROR", false);
    _kite_options.hugepages = env_hugepages();
    /* -1 (or any negative): only on malloc_trim; at most a day */
    _kite_options.purge_delay_ms = env_int("KITE_PURGE_DELAY_MS", KITE_DEFAULT_PURGE_DELAY_MS, INT32_MIN,
                                           86400000, KITE_STR(KITE_DEFAULT_PURGE_DELAY_MS));
    _kite_options.background = env_bool("KITE_BACKGROUND", false);
    _kite_options.guarded_sample = env_int("KITE_GUARDED_SAMPLE", KITE_DEFAULT_GUARDED_SAMPLE, 0, INT32_MAX,
                                           KITE_STR(KITE_DEFAULT_GUARDED_SAMPLE));
    __atomic_store_n(&_kite_small_route, _kite_small_route_for(_kite_options.guarded_sample), __ATOMIC_RELAXED);
    __atomic_store_n(&_kite_options_state, 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&_kite_options_state, __ATOMIC_ACQUIRE) != 2) { /* another thread is reading */ }
  }
}
