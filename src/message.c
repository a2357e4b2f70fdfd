/* src/message.c -- assertions, validator failures and the formatter (contract in
 * message.h). The misuse reports, which count and read options, are in report.c. */
#include "message.h"
#include "os.h"
#include "once.h"

/* The start-up stderr's recording (once.h: DONE once recorded; never FAILED). It runs before
 * kite's fork handlers are registered (init.c), so a child forked while another thread
 * records has no handler to take the claim back: its own recording takes it over (once.h
 * O6). The three below are written by the claimer and read only after DONE (O3), but for
 * M1's read of msg_fd by a claimer that took the claim over.
 *   M1 The claimer stores its duplicate in msg_fd as soon as dup returns it, before anything
 *      else: a child that takes the claim over (O6) from an ancestor's claimer finds the
 *      duplicate it inherited there and reuses it while it is still the file at fd 2, so
 *      the child holds one duplicate, not that one beside its own. A number that is no
 *      longer fd 2's file is left alone: the child may have closed it and opened one of
 *      its own there. (A fork between dup's return and that store, or a child that moved
 *      fd 2 before its first message, still keeps the inherited one, close-on-exec.) */
static kite_once_t msg_once = KITE_ONCE_INIT;
static bool msg_open;      /* fd 2 was open at start-up */
static uint64_t msg_id[2]; /* what fd 2 was (device, inode) */
static int msg_fd = -1;    /* a close-on-exec duplicate of it, or -1 (dup refused) */

/* Whether fds a and b are open on the same file. */
static bool same_file(int a, int b) {
  uint64_t x[2], y[2];
  return _kite_os_fd_identity(a, x) && _kite_os_fd_identity(b, y) && x[0] == y[0] && x[1] == y[1];
}

void _kite_message_init(void) {
  if (likely(_kite_once_done(&msg_once))) return;
  /* a claim this thread does not win waits until another thread has recorded it */
  if (_kite_once_claim(&msg_once, _kite_os_getpid(), _kite_os_yield)) {
    /* the duplicate first, then its identity: both are surely the same file. An
     * inherited duplicate (M1: -1 but in a takeover) is reused while it is fd 2's file. */
    int fd = msg_fd;
    if (fd < 0 || !same_file(fd, 2)) {
      fd = _kite_os_dup_cloexec(2);
      msg_fd = fd; /* M1 */
    }
    uint64_t id[2];
    bool is_open = _kite_os_fd_identity(fd >= 0 ? fd : 2, id);
    msg_id[0] = id[0]; msg_id[1] = id[1];
    msg_open = is_open;
    _kite_once_end(&msg_once, true);
  }
}

/* Recorded before the program's own constructors run: in a static link this object is in
 * the program whenever anything can print a message (every message is written by
 * _kite_out_flush), and priority 101, the first a program may use, puts this constructor
 * before every constructor of default priority (or of a priority above 101), which could
 * otherwise have moved fd 2 first. Loaded as a shared library, kite is initialized before
 * the program that depends on it anyway. */
__attribute__((constructor(101))) static void message_ctor(void) { _kite_message_init(); }

#ifdef KITE_TEST_HOOKS
/* Tests: set the recording's word (-1: as a thread of this process recording it), return
 * the word before (to set it back). */
int _kite_test_message_stage(int w) {
  return __atomic_exchange_n(&msg_once.state, w < 0 ? _kite_once_busy_word(_kite_os_getpid()) : w,
                             __ATOMIC_ACQ_REL);
}
/* Tests: set the recorded duplicate (as a claimer whose dup returned fd, M1), return the one
 * before (to set it back). */
int _kite_test_message_stage_fd(int fd) {
  return __atomic_exchange_n(&msg_fd, fd, __ATOMIC_ACQ_REL);
}
#endif

static bool is_startup_stderr(int fd) {
  uint64_t id[2];
  return fd >= 0 && _kite_os_fd_identity(fd, id) && id[0] == msg_id[0] && id[1] == msg_id[1];
}

int _kite_message_fd(void) {
  _kite_message_init();
  if (!msg_open) return -1;
  /* fd 2 while it is still that file (the program's own description of it: its offset), else
   * the duplicate while nothing has replaced it (a dup2 onto it, a close and a reuse) */
  if (is_startup_stderr(2)) return 2;
  return is_startup_stderr(msg_fd) ? msg_fd : -1;
}

void _kite_out_flush(kite_out_t *o) {
  int fd = o->fd == KITE_MSG_FD ? _kite_message_fd() : o->fd;
  if (fd >= 0) _kite_os_write(fd, o->buf, o->len);
  o->len = 0;
}

void _kite_out_str(kite_out_t *o, const char *s) {
  while (*s) { if (o->len == sizeof o->buf) _kite_out_flush(o); o->buf[o->len++] = *s++; }
}

void _kite_out_u64w(kite_out_t *o, uint64_t v, unsigned width) {
  char t[24]; unsigned i = 0;
  do { t[i++] = (char)('0' + v % 10); v /= 10; } while (v);
  char s[48]; unsigned j = 0;
  while (j + i < width && j < 24) s[j++] = ' ';
  while (i) s[j++] = t[--i];
  s[j] = 0;
  _kite_out_str(o, s);
}

void _kite_out_u64(kite_out_t *o, uint64_t v) { _kite_out_u64w(o, v, 0); }

void _kite_out_hex(kite_out_t *o, uint64_t v) {
  char s[19]; s[0] = '0'; s[1] = 'x';
  int i = 0; char t[16];
  do { t[i++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
  int j = 2;
  while (i) s[j++] = t[--i];
  s[j] = 0;
  _kite_out_str(o, s);
}

void _kite_out_bytes(kite_out_t *o, uint64_t v) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0; uint64_t scaled = v * 10;
  while (scaled >= 10240 && u < 4) { scaled /= 1024; u++; }
  _kite_out_u64(o, scaled / 10);
  if (u) { _kite_out_str(o, "."); _kite_out_u64(o, scaled % 10); }
  _kite_out_str(o, " "); _kite_out_str(o, units[u]);
}

void _kite_write_str(int fd, const char *s) {
  kite_out_t o = {.len = 0, .fd = fd == 2 ? KITE_MSG_FD : fd};
  _kite_out_str(&o, s);
  _kite_out_flush(&o);
}

void _kite_assert_fail(const char *expr, const char *file, int line) {
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: assertion failed: "); _kite_out_str(&o, expr);
  _kite_out_str(&o, " ("); _kite_out_str(&o, file); _kite_out_str(&o, ":");
  _kite_out_u64(&o, (uint64_t)line); _kite_out_str(&o, ")\n");
  _kite_out_flush(&o);
  _kite_os_abort();
}

bool _kite_check_failed(const char *what, uint64_t detail) {
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: check failed: "); _kite_out_str(&o, what);
  _kite_out_str(&o, " ("); _kite_out_u64(&o, detail); _kite_out_str(&o, ")\n");
  _kite_out_flush(&o);
  return false;
}

void _kite_report_corruption(const char *what, const void *p) {
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: heap corruption: "); _kite_out_str(&o, what); _kite_out_str(&o, ": ");
  _kite_out_hex(&o, (uintptr_t)p);
  _kite_out_str(&o, " (aborting)\n");
  _kite_out_flush(&o);
  _kite_os_abort();
}
