/* src/message.h -- assertions, error reports and a formatter that never allocates.
 *
 * Layer: bottom (used by every module). Nothing here calls malloc: text is formatted into
 * a stack buffer (kite_out_t) and written with write(2) through os.h.
 *
 * Assertions are graded by KITE_DEBUG and always type-checked:
 *   kite_assert(e)            KITE_DEBUG >= 1  cheap invariants on slow paths
 *   kite_assert_internal(e)   KITE_DEBUG >= 2  internal invariants; validators after slow ops
 *   kite_assert_expensive(e)  KITE_DEBUG >= 3  whole-structure validators
 *   kite_check(e)             always           conditions whose failure means corruption
 * (The public int kite_check(void) of kite.h, which runs the validators, is defined as
 * (kite_check) in introspect.c; kite.h is included before this header.)
 */
#ifndef KITE_MESSAGE_H
#define KITE_MESSAGE_H
#include "types.h"

void _kite_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn, cold));
#define kite_assert(e) do { if (unlikely(KITE_DEBUG >= 1 && !(e))) _kite_assert_fail(#e, __FILE__, __LINE__); } while (0)
#define kite_assert_internal(e) do { if (unlikely(KITE_DEBUG >= 2 && !(e))) _kite_assert_fail(#e, __FILE__, __LINE__); } while (0)
#define kite_assert_expensive(e) do { if (unlikely(KITE_DEBUG >= 3 && !(e))) _kite_assert_fail(#e, __FILE__, __LINE__); } while (0)
#define kite_check(e) do { if (unlikely(!(e))) _kite_assert_fail(#e, __FILE__, __LINE__); } while (0)

/* A validator found a broken invariant: print "kite: check failed: WHAT (DETAIL)" and return
 * false, so validators read `if (bad) return _kite_check_failed("...", x);`. */
bool _kite_check_failed(const char *what, uint64_t detail) __attribute__((cold));

/* Where messages go: the stderr the process had at start-up. _kite_message_init() (run by
 * message.c's constructor, before the program's constructors of default priority, or by
 * the first message) records what fd 2 is (device and inode) and keeps a close-on-exec
 * duplicate of it (fd >= 100). A message goes to fd 2 while fd 2 is still that file, else
 * to the duplicate while it is still that file, else nowhere: a program that started with
 * fd 2 closed, or put another file at fd 2 (even in a constructor of its own), never finds
 * kite's text in its own data, and the report still reaches the start-up stderr. */
void _kite_message_init(void);

/* Heap corruption (a checksum or an encoded link that does not verify): reported with the
 * address, then the process aborts whatever the options say: corruption is never ignored. */
void _kite_report_corruption(const char *what, const void *p) __attribute__((noreturn, cold));

/* (report.c) An invalid or double free (or another misuse): reported on stderr, and then
 * ignored or, with KITE_ABORT_ON_ERROR, the process aborts. `what` starts with the name of
 * the call that was misused, "free(): ..." for free (and its sized forms): only those count
 * in the statistics' invalid_frees. */
void _kite_report_invalid(const char *what, const void *p);
/* When set (the secure build sets it), _kite_report_invalid counts the misuse and hands it
 * to this function instead of printing it. */
extern void (*_kite_report_invalid_hook)(const char *what, const void *p) KITE_HIDDEN;
/* (report.c) With KITE_VERBOSE: say that a request of count x size bytes (count 1: one
 * block; calloc and reallocarray pass their two arguments) failed: NULL, errno ENOMEM. */
void _kite_report_oom(size_t count, size_t size);
/* (report.c) With KITE_VERBOSE: "kite: what" on a line. */
void _kite_report_note(const char *what);

/* Write string s to fd (best effort; for C++ callers that have no kite_out_t). fd 2 means
 * "kite's message stream" (see _kite_message_init). */
void _kite_write_str(int fd, const char *s);
/* The fd messages go to (2, or the duplicate), or -1 when neither is the start-up stderr. */
int _kite_message_fd(void);

/* kite_out_t.fd value meaning "kite's message stream" (the start-up stderr, see
 * _kite_message_init, or nowhere). */
#define KITE_MSG_FD (-2)

/* The formatter: a buffer flushed to fd when full and by _kite_out_flush. */
typedef struct { char buf[512]; size_t len; int fd; } kite_out_t;
void _kite_out_flush(kite_out_t *o);
void _kite_out_str(kite_out_t *o, const char *s);
void _kite_out_u64(kite_out_t *o, uint64_t v);
/* v right-aligned in width columns */
void _kite_out_u64w(kite_out_t *o, uint64_t v, unsigned width);
void _kite_out_hex(kite_out_t *o, uint64_t v);
void _kite_out_bytes(kite_out_t *o, uint64_t v); /* "12.3 MiB" */
#endif
