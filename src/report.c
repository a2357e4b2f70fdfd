/* src/report.c -- reports of misuse and of memory refused (declared in message.h): they
 * count in the statistics and read options, so they sit above message, options and stats
 * (message.c itself needs only os.h; the size classes' validator reports through it). */
#include "message.h"
#include "options.h"
#include "stats.h"
#include "os.h"

void (*_kite_report_invalid_hook)(const char *what, const void *p);

void _kite_report_invalid(const char *what, const void *p) {
  _kite_stat_add(&_kite_stats.invalid_frees, 1);
  void (*hook)(const char *, const void *) = __atomic_load_n(&_kite_report_invalid_hook, __ATOMIC_ACQUIRE);
  if (hook) { hook(what, p); return; }
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: "); _kite_out_str(&o, what); _kite_out_str(&o, ": ");
  _kite_out_hex(&o, (uintptr_t)p);
  _kite_out_str(&o, _kite_opt(KITE_OPT_ABORT_ON_ERROR) ? " (aborting)\n" : " (ignored)\n");
  _kite_out_flush(&o);
  if (_kite_opt(KITE_OPT_ABORT_ON_ERROR)) _kite_os_abort();
}

void _kite_report_oom(size_t size) {
  if (!_kite_opt(KITE_OPT_VERBOSE)) return;
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: out of memory: the OS refused memory for a request of ");
  _kite_out_u64(&o, size);
  _kite_out_str(&o, " bytes (NULL, errno ENOMEM)\n");
  _kite_out_flush(&o);
}
