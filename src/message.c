/* src/message.c -- assertions, validator failures and the formatter (contract in
 * message.h). The misuse reports, which count and read options, are in report.c. */
#include "message.h"
#include "os.h"

static int msg_state;      /* 0: not recorded, 1: fd 2 was open at start-up, 2: it was closed */
static uint64_t msg_id[2]; /* what fd 2 was */

void _kite_message_init(void) {
  if (__atomic_load_n(&msg_state, __ATOMIC_ACQUIRE)) return;
  uint64_t id[2];
  int st = _kite_os_fd_identity(2, id) ? 1 : 2;
  msg_id[0] = id[0]; msg_id[1] = id[1];
  __atomic_store_n(&msg_state, st, __ATOMIC_RELEASE);
}

int _kite_message_fd(void) {
  _kite_message_init();
  if (msg_state != 1) return -1;
  uint64_t id[2];
  if (!_kite_os_fd_identity(2, id) || id[0] != msg_id[0] || id[1] != msg_id[1]) return -1;
  return 2;
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
