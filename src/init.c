/* src/init.c -- process start-up, options, fork handlers, error reports and statistics.
 *
 * Nothing here allocates: options come from getenv (which does not allocate), messages
 * and statistics are formatted into stack buffers and written with write(2).
 *
 * Start-up: _kite_initialized goes 0 -> 1 (one thread reads the options) -> 2. The fork
 * handlers are registered afterwards (pthread_atfork may itself call malloc, which then
 * finds kite initialized). A constructor also runs _kite_init so that KITE_SHOW_STATS
 * works even for programs that never allocate.
 */
#define _GNU_SOURCE
#include <kite.h>
#include "types.h"
#include "heap.h"
#include "arena.h"
#include "os.h"
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

kite_gstats_t _kite_stats;
kite_options_t _kite_options = {.purge_delay_ms = 10};
int _kite_initialized;
static int atfork_done;
static int stats_fd = 2;

#ifndef KITE_DEFAULT_PURGE_DELAY_MS
/* Default for KITE_PURGE_DELAY_MS: free runs stay committed this long (0: purge at once). */
#define KITE_DEFAULT_PURGE_DELAY_MS 10
#endif

/* ---- tiny formatter ---- */
typedef struct { char buf[512]; size_t len; int fd; } kite_out_t;
static void out_flush(kite_out_t *o) { _kite_os_write(o->fd, o->buf, o->len); o->len = 0; }
static void out_str(kite_out_t *o, const char *s) {
  while (*s) { if (o->len == sizeof o->buf) out_flush(o); o->buf[o->len++] = *s++; }
}
static void out_u64(kite_out_t *o, uint64_t v) {
  char t[24]; int i = 0;
  do { t[i++] = (char)('0' + v % 10); v /= 10; } while (v);
  char s[24]; int j = 0;
  while (i) s[j++] = t[--i];
  s[j] = 0;
  out_str(o, s);
}
static void out_hex(kite_out_t *o, uint64_t v) {
  char s[19]; s[0] = '0'; s[1] = 'x';
  int i = 0; char t[16];
  do { t[i++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
  int j = 2;
  while (i) s[j++] = t[--i];
  s[j] = 0;
  out_str(o, s);
}
/* bytes with a unit: "12.3 MiB" */
static void out_bytes(kite_out_t *o, uint64_t v) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0; uint64_t scaled = v * 10;
  while (scaled >= 10240 && u < 4) { scaled /= 1024; u++; }
  out_u64(o, scaled / 10);
  if (u) { out_str(o, "."); out_u64(o, scaled % 10); }
  out_str(o, " "); out_str(o, units[u]);
}

void _kite_fmt_write(int fd, const char *s) { _kite_os_write(fd, s, strlen(s)); }

void _kite_assert_fail(const char *expr, const char *file, int line) {
  kite_out_t o = {.len = 0, .fd = 2};
  out_str(&o, "kite: assertion failed: "); out_str(&o, expr);
  out_str(&o, " ("); out_str(&o, file); out_str(&o, ":"); out_u64(&o, (uint64_t)line); out_str(&o, ")\n");
  out_flush(&o);
  _kite_os_abort();
}

void _kite_report_invalid(const char *what, const void *p) {
  __atomic_fetch_add(&_kite_stats.invalid_frees, 1, __ATOMIC_RELAXED);
  kite_out_t o = {.len = 0, .fd = 2};
  out_str(&o, "kite: "); out_str(&o, what); out_str(&o, ": "); out_hex(&o, (uintptr_t)p);
  out_str(&o, _kite_options.abort_on_error ? " (aborting)\n" : " (ignored)\n");
  out_flush(&o);
  if (_kite_options.abort_on_error) _kite_os_abort();
}

void _kite_report_oom(size_t size) {
  if (!_kite_options.verbose) return;
  kite_out_t o = {.len = 0, .fd = 2};
  out_str(&o, "kite: out of memory: the OS refused memory for a request of ");
  out_u64(&o, size);
  out_str(&o, " bytes (NULL, errno ENOMEM)\n");
  out_flush(&o);
}

void _kite_stat_commit(int64_t delta) {
  uint64_t now = __atomic_add_fetch(&_kite_stats.committed, (uint64_t)delta, __ATOMIC_RELAXED);
  uint64_t peak = __atomic_load_n(&_kite_stats.peak_committed, __ATOMIC_RELAXED);
  while (delta > 0 && now > peak &&
         !__atomic_compare_exchange_n(&_kite_stats.peak_committed, &peak, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* ---- options ---- */
static bool env_bool(const char *name, bool dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  return !(v[0] == '0' || v[0] == 'n' || v[0] == 'N' || v[0] == 'f' || v[0] == 'F');
}
static int64_t env_int(const char *name, int64_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  int neg = 0; int64_t r = 0;
  if (*v == '-') { neg = 1; v++; }
  while (*v >= '0' && *v <= '9') r = r * 10 + (*v++ - '0');
  return neg ? -r : r;
}

/* ---- fork ---- */
static void fork_prepare(void) {
  _kite_heap_fork_prepare();
  _kite_arena_fork_prepare();
}
static void fork_parent(void) {
  _kite_arena_fork_parent();
  _kite_heap_fork_parent();
}
static void fork_child(void) {
  _kite_arena_fork_child();
  _kite_heap_fork_child();
}

void _kite_init(void) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&_kite_initialized, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    _kite_heap_init_tables();
    _kite_options.show_stats = env_bool("KITE_SHOW_STATS", false);
    _kite_options.verbose = env_bool("KITE_VERBOSE", false);
    _kite_options.abort_on_error = env_bool("KITE_ABORT_ON_ERROR", false);
    _kite_options.hugepages = env_bool("KITE_HUGEPAGES", false);
    _kite_options.purge_delay_ms = env_int("KITE_PURGE_DELAY_MS", KITE_DEFAULT_PURGE_DELAY_MS);
    __atomic_store_n(&_kite_initialized, 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&_kite_initialized, __ATOMIC_ACQUIRE) != 2) { /* another thread is reading options */ }
  }
  if (!__atomic_exchange_n(&atfork_done, 1, __ATOMIC_ACQ_REL)) pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((constructor)) static void kite_ctor(void) {
  _kite_init();
  if (_kite_options.show_stats) {
    int fd = _kite_os_dup_cloexec(2);
    if (fd >= 0) stats_fd = fd;
  }
}

/* ---- statistics ---- */
KITE_API void kite_stats_print(int fd) {
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  kite_out_t o = {.len = 0, .fd = fd};
  uint64_t total = 0;
  for (unsigned c = 0; c < KITE_CLASSES; c++) total += s.issued[c];
  out_str(&o, "kite statistics\n");
  out_str(&o, "  small allocations: "); out_u64(&o, total);
  out_str(&o, " (counted per block handed to an allocation list)\n");
  out_str(&o, "  class      size   allocations\n");
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!s.issued[c]) continue;
    out_str(&o, "  ");
    char pad[16]; size_t k = 0;
    uint64_t v = c; int digits = 1; while (v >= 10) { v /= 10; digits++; }
    for (int i = digits; i < 5; i++) pad[k++] = ' ';
    pad[k] = 0; out_str(&o, pad); out_u64(&o, c);
    v = _kite_class_size_[c]; digits = 1; while (v >= 10) { v /= 10; digits++; }
    k = 0; for (int i = digits; i < 10; i++) pad[k++] = ' ';
    pad[k] = 0; out_str(&o, pad); out_u64(&o, _kite_class_size_[c]);
    out_str(&o, "   "); out_u64(&o, s.issued[c]); out_str(&o, "\n");
  }
  out_str(&o, "  large allocations: "); out_u64(&o, s.large_allocs); out_str(&o, "\n");
  out_str(&o, "  huge allocations: "); out_u64(&o, s.huge_allocs); out_str(&o, "\n");
  out_str(&o, "  remote frees: "); out_u64(&o, s.remote_frees); out_str(&o, "\n");
  out_str(&o, "  invalid frees: "); out_u64(&o, s.invalid_frees); out_str(&o, "\n");
  out_str(&o, "  committed: "); out_bytes(&o, s.committed);
  out_str(&o, ", peak committed: "); out_bytes(&o, s.peak_committed);
  out_str(&o, ", purged: "); out_bytes(&o, s.purged); out_str(&o, "\n");
  out_str(&o, "  arenas: "); out_u64(&o, s.arenas);
  out_str(&o, ", pages abandoned: "); out_u64(&o, s.pages_abandoned);
  out_str(&o, ", adopted: "); out_u64(&o, s.pages_adopted); out_str(&o, "\n");
  out_flush(&o);
}

/* Programs often close stderr at exit (gnulib's close_stdout does), before library
 * destructors run: the statistics go to a duplicate of stderr taken at start-up. */
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
  if (unlikely(_kite_initialized != 2)) _kite_init();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: return _kite_options.show_stats;
  case KITE_OPTION_VERBOSE: return _kite_options.verbose;
  case KITE_OPTION_ABORT_ON_ERROR: return _kite_options.abort_on_error;
  case KITE_OPTION_PURGE_DELAY_MS: return (long)_kite_options.purge_delay_ms;
  case KITE_OPTION_HUGEPAGES: return _kite_options.hugepages;
  }
  return -1;
}

KITE_API void kite_option_set(kite_option_t option, long value) {
  if (unlikely(_kite_initialized != 2)) _kite_init();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: _kite_options.show_stats = value != 0; break;
  case KITE_OPTION_VERBOSE: _kite_options.verbose = value != 0; break;
  case KITE_OPTION_ABORT_ON_ERROR: _kite_options.abort_on_error = value != 0; break;
  case KITE_OPTION_PURGE_DELAY_MS: _kite_options.purge_delay_ms = value; break;
  case KITE_OPTION_HUGEPAGES: _kite_options.hugepages = value != 0; break;
  }
}

__attribute__((destructor)) static void kite_dtor(void) {
  if (_kite_options.show_stats) kite_stats_print(stats_fd);
}

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
