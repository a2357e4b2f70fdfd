/* src/options.c -- reading KITE_* options (contract in options.h). */
#include "options.h"
#include <stdlib.h>

kite_options_t _kite_options = {.purge_delay_ms = KITE_DEFAULT_PURGE_DELAY_MS};
int _kite_options_state;

static bool env_bool(const char *name, bool dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  return !(v[0] == '0' || v[0] == 'n' || v[0] == 'N' || v[0] == 'f' || v[0] == 'F');
}

/* Is the variable set to exactly word? */
static bool env_is(const char *name, const char *word) {
  const char *v = getenv(name);
  if (!v) return false;
  while (*word && *v == *word) { v++; word++; }
  return *v == 0 && *word == 0;
}

/* A decimal integer, saturated at +-2^62 (a longer value must not overflow). */
static int64_t env_int(const char *name, int64_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  int neg = 0; int64_t r = 0;
  const int64_t lim = (int64_t)1 << 62;
  if (*v == '-') { neg = 1; v++; }
  while (*v >= '0' && *v <= '9') {
    r = r * 10 + (*v++ - '0');
    if (r > lim) r = lim;
  }
  return neg ? -r : r;
}

void _kite_options_read(void) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&_kite_options_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    _kite_options.show_stats = env_is("KITE_SHOW_STATS", "json") ? 2 : env_bool("KITE_SHOW_STATS", false);
    _kite_options.verbose = env_bool("KITE_VERBOSE", false);
    _kite_options.abort_on_error = env_bool("KITE_ABORT_ON_ERROR", false);
    _kite_options.hugepages = env_bool("KITE_HUGEPAGES", false);
    _kite_options.purge_delay_ms = env_int("KITE_PURGE_DELAY_MS", KITE_DEFAULT_PURGE_DELAY_MS);
    _kite_options.background = env_bool("KITE_BACKGROUND", false);
    __atomic_store_n(&_kite_options_state, 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&_kite_options_state, __ATOMIC_ACQUIRE) != 2) { /* another thread is reading */ }
  }
}
