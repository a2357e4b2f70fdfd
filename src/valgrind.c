/* src/valgrind.c -- the malloc family for memcheck (the kite-valgrind library only).
 *
 * Built into libkite-valgrind.so (cmake -DKITE_VALGRIND=ON, the default where valgrind's
 * headers are installed) from the kite_* core (KITE_OVERRIDE=0) plus this file; in every
 * other build it compiles to nothing, and libkite.so's paths carry no client request.
 * Each standard name calls its kite_ function and tells memcheck what happened:
 *   allocation: VALGRIND_MALLOCLIKE_BLOCK(p, requested size) -- bytes past the request are
 *               reported if touched, and the block takes part in the leak check;
 *   free:       VALGRIND_FREELIKE_BLOCK(p) before kite frees it (so a double or invalid free
 *               is memcheck's report); kite keeps nothing in a freed block, so a use
 *               after free anywhere in it is seen.
 * realloc and calloc are done here (new block, copy, free), so kite never copies or clears
 * memory memcheck considers free. Runs handed out again are made addressable by
 * KITE_TOOL_RUN_FRESH (tool.h).
 */
#define _GNU_SOURCE
#include <kite.h>
#include "tool.h"
#include <errno.h>
#include <string.h>

#if KITE_VALGRIND
#define KITE_VG_API __attribute__((visibility("default")))

static void *track(void *p, size_t n, int zeroed) {
  if (p) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, zeroed);
  return p;
}

KITE_VG_API void *malloc(size_t n) { return track(kite_malloc(n), n, 0); }

KITE_VG_API void free(void *p) {
  if (!p) return;
  VALGRIND_FREELIKE_BLOCK(p, 0);
  kite_free(p);
}
KITE_VG_API void cfree(void *p) { free(p); }

KITE_VG_API void *calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) { errno = ENOMEM; return NULL; }
  void *p = track(kite_malloc(n), n, 1);
  if (p) memset(p, 0, n);
  return p;
}

KITE_VG_API void *realloc(void *p, size_t n) {
  if (!p) return malloc(n);
  if (n == 0) { free(p); return NULL; }
  size_t old = kite_malloc_usable_size(p);
  if (!old) return kite_realloc(p, n); /* not kite's: kite reports it (EINVAL) */
  void *q = malloc(n);
  if (!q) return NULL;
  /* the old block's tail past its request is inaccessible to memcheck: copy quietly (the
   * bytes keep their definedness) */
  VALGRIND_DISABLE_ERROR_REPORTING;
  memcpy(q, p, old < n ? old : n);
  VALGRIND_ENABLE_ERROR_REPORTING;
  free(p);
  return q;
}

KITE_VG_API void *reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) { errno = ENOMEM; return NULL; }
  return realloc(p, n);
}

KITE_VG_API int posix_memalign(void **out, size_t align, size_t n) {
  int r = kite_posix_memalign(out, align, n);
  if (r == 0) track(*out, n, 0);
  return r;
}
KITE_VG_API void *aligned_alloc(size_t align, size_t n) { return track(kite_aligned_alloc(align, n), n, 0); }
KITE_VG_API void *memalign(size_t align, size_t n) { return track(kite_memalign(align, n), n, 0); }
KITE_VG_API void *valloc(size_t n) { return track(kite_valloc(n), n, 0); }
KITE_VG_API void *pvalloc(size_t n) {
  void *p = kite_pvalloc(n);
  return track(p, p ? kite_malloc_usable_size(p) : 0, 0);
}
KITE_VG_API size_t malloc_usable_size(void *p) { return kite_malloc_usable_size(p); }
KITE_VG_API int malloc_trim(size_t pad) { return kite_malloc_trim(pad); }
#endif
