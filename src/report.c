/* src/report.c -- reports of misuse and of memory refused (declared in message.h): they
 * count in the statistics and read options, so they sit above message, options and stats
 * (message.c itself needs only os.h; the size classes' validator reports through it). */
#include "message.h"
#include "options.h"
#include "stats.h"
#include "os.h"
#include <string.h>

void (*_kite_report_invalid_hook)(const char *what, const void *p);

void _kite_report_invalid(const char *what, const void *p) {
  /* the statistic counts what its name says: misuse of free (realloc's and
   * malloc_usable_size's reports are not frees) */
  if (strncmp(what, "free(", 5) == 0) _kite_stat_add(&_kite_stats.invalid_frees, 1);
  void (*hook)(const char *, const void *) = __atomic_load_n(&_kite_report_invalid_hook, __ATOMIC_ACQUIRE);
  if (hook) { hook(what, p); return; }
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: "); _kite_out_str(&o, what); _kite_out_str(&o, ": ");
  _kite_out_hex(&o, (uintptr_t)p);
  _kite_out_str(&o, _kite_opt(KITE_OPT_ABORT_ON_ERROR) ? " (aborting)\n" : " (ignored)\n");
  _kite_out_flush(&o);
  if (_kite_opt(KITE_OPT_ABORT_ON_ERROR)) _kite_os_abort();
}

void _kite_report_oom(size_t count, size_t size) {
  if (!_kite_opt(KITE_OPT_VERBOSE)) return;
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  size_t n;
  _kite_out_str(&o, "kite: out of memory: a request of ");
  if (count == 1 || !__builtin_mul_overflow(count, size, &n)) {
    _kite_out_u64(&o, count == 1 ? size : n);
  } else { /* calloc, reallocarray: the product does not fit */
    _kite_out_u64(&o, count);
    _kite_out_str(&o, " x ");
    _kite_out_u64(&o, size);
  }
  _kite_out_str(&o, " bytes failed (NULL, errno ENOMEM)\n");
  _kite_out_flush(&o);
}

void _kite_report_note(const char *what) {
  if (!_kite_opt(KITE_OPT_VERBOSE)) return;
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: ");
  _kite_out_str(&o, what);
  _kite_out_str(&o, "\n");
  _kite_out_flush(&o);
}
