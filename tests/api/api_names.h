/* tests/api/api_names.h -- one test source, two builds.
 *
 * The conformance, OOM and stress tests are written against the names A_malloc, A_free ...
 * Built normally they call kite's own entry points (kite_malloc ...) and link kite-noover,
 * the only variant the sanitizer builds can use. Built with -DKITE_TEST_PLAIN they call the
 * standard names (malloc ...) and link libkite.so: then they test the override itself, and
 * kite_owns() proves that the blocks really came from kite.
 *
 * Also: test_rss_bytes() (resident set from /proc/self/statm), test_kite_committed() (kite's
 * own committed-bytes statistic) and test_opaque() (hides a constant from the compiler so
 * that malloc(SIZE_MAX) is neither folded nor warned about).
 */
#ifndef KITE_TEST_API_NAMES_H
#define KITE_TEST_API_NAMES_H
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kite.h"
#include "test.h" /* test_statm_bytes */

#ifdef KITE_TEST_PLAIN
#define A_VARIANT "override"
#define A_malloc malloc
#define A_free free
#define A_calloc calloc
#define A_realloc realloc
#define A_reallocarray reallocarray
#define A_posix_memalign posix_memalign
#define A_aligned_alloc aligned_alloc
#define A_memalign memalign
#define A_valloc valloc
#define A_pvalloc pvalloc
#define A_usable malloc_usable_size
#define A_trim malloc_trim
#ifndef __GLIBC__
/* musl's headers do not declare these glibc names; libkite.a defines them */
void *pvalloc(size_t size);
int malloc_trim(size_t pad);
void malloc_stats(void);
#endif
#else
#define A_VARIANT "kite_api"
#define A_malloc kite_malloc
#define A_free kite_free
#define A_calloc kite_calloc
#define A_realloc kite_realloc
#define A_reallocarray kite_reallocarray
#define A_posix_memalign kite_posix_memalign
#define A_aligned_alloc kite_aligned_alloc
#define A_memalign kite_memalign
#define A_valloc kite_valloc
#define A_pvalloc kite_pvalloc
#define A_usable kite_malloc_usable_size
#define A_trim kite_malloc_trim

#endif

/* Run a test, then kite_check(): every structure of kite must be sound after each phase
 * (in the override variant too: kite_check is part of libkite.so's API). */
#define RUN_CHECKED(name) do { if (test_selected(#name)) { RUN(name); expect_int_eq(kite_check(), 1); } } while (0)
/* KITE_TEST_ONLY=name,name,...: run only these tests (a sanitizer build's subset). */
static inline int test_selected(const char *name) {
  const char *only = getenv("KITE_TEST_ONLY");
  if (!only || !*only) return 1;
  size_t n = strlen(name);
  for (const char *s = only; (s = strstr(s, name)) != NULL; s += n)
    if ((s == only || s[-1] == ',') && (s[n] == 0 || s[n] == ',')) return 1;
  return 0;
}

/* A value the optimizer cannot see through. */
static inline size_t test_opaque(size_t x) {
  volatile size_t v = x;
  return v;
}

/* realloc / reallocarray through pointers the compiler cannot see through: for the tests
 * that use the old block after a *failed* call (GCC's -Wuse-after-free cannot know it failed). */
static void *(*volatile A_realloc_opaque)(void *, size_t) = A_realloc;
static void *(*volatile A_reallocarray_opaque)(void *, size_t, size_t) = A_reallocarray;
/* free through an opaque pointer: for deliberate misuse (double and invalid frees). */
static void (*volatile A_free_opaque)(void *) = A_free;

/* Resident set size in bytes, read without allocating (0 if /proc is unreadable). */
static inline size_t test_rss_bytes(void) { return test_statm_bytes(1); }

/* Read kite_stats_print's output into a static buffer (NUL-terminated). */
static inline const char *test_kite_stats_text(void) {
  static char buf[65536];
  int fds[2];
  buf[0] = 0;
  if (pipe(fds) != 0) return buf;
  kite_stats_print(fds[1]);
  close(fds[1]);
  size_t len = 0;
  ssize_t n;
  while (len + 1 < sizeof buf && (n = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
  buf[len] = 0;
  close(fds[0]);
  return buf;
}

/* The number after "<label>" in kite's statistics (-1 if absent). */
static inline long long test_kite_stat(const char *label) {
  const char *at = strstr(test_kite_stats_text(), label);
  return at ? strtoll(at + strlen(label), NULL, 10) : -1;
}

/* kite's own count of committed bytes, read from kite_stats_print ("committed: 1.5 MiB")
 * through a pipe; (size_t)-1 if the statistics do not have it. */
static inline size_t test_kite_committed(void) {
  const char *at = strstr(test_kite_stats_text(), "committed: ");
  if (!at) return (size_t)-1;
  char *end;
  double v = strtod(at + 11, &end);
  while (*end == ' ') end++;
  double mult = 1;
  if (end[0] == 'K') mult = 1024.0;
  else if (end[0] == 'M') mult = 1024.0 * 1024;
  else if (end[0] == 'G') mult = 1024.0 * 1024 * 1024;
  else if (end[0] == 'T') mult = 1024.0 * 1024 * 1024 * 1024;
  return (size_t)(v * mult);
}
#endif
