/* src/entry.h -- what the files that define the public entry points share: the argument
 * rules of the aligned family and the standard names as aliases. Included by alloc.c and
 * free.c (the default build) and by secure.c (the secure build, whose wrappers are the
 * entry points there).
 *
 * An alias must live in the file that defines its target, so the alias lists are macros
 * that the defining file expands at its end.
 * Layer: entry (beside alloc, free and secure).
 */
#ifndef KITE_ENTRY_H
#define KITE_ENTRY_H
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "types.h"

static inline bool _kite_is_pow2(size_t a) { return a && !(a & (a - 1)); }

/* The aligned family over one allocator `aligned(align, n)` (align a power of two): the
 * checks and errno of posix_memalign, aligned_alloc, memalign, valloc and pvalloc. */
typedef void *(*kite_aligned_fn)(size_t align, size_t n);
static inline int _kite_posix_memalign_via(kite_aligned_fn aligned, void **out, size_t align, size_t n) {
  if (!_kite_is_pow2(align) || align < sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = aligned(align, n);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
static inline void *_kite_aligned_alloc_via(kite_aligned_fn aligned, size_t align, size_t n) {
  if (!_kite_is_pow2(align)) { errno = EINVAL; return NULL; }
  return aligned(align, n);
}
static inline void *_kite_pvalloc_via(kite_aligned_fn aligned, size_t n) {
  size_t r = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (r < n) { errno = ENOMEM; return NULL; }
  return aligned(KITE_OS_PAGE, r ? r : KITE_OS_PAGE);
}

/* kite_heap_calloc over the expanding file's kite_heap_malloc (the core's, or the secure
 * build's wrapper): overflow is NULL + ENOMEM. */
typedef void *(*kite_heap_malloc_fn)(struct kite_heap_s *h, size_t n);
static inline void *_kite_heap_calloc_via(kite_heap_malloc_fn heap_malloc, struct kite_heap_s *h, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) { errno = ENOMEM; return NULL; }
  void *p = heap_malloc(h, n);
  if (p) memset(p, 0, n);
  return p;
}

/* The standard names as aliases of the kite_ functions defined in the expanding file. */
#define KITE_ALIAS(target) __attribute__((alias(#target), visibility("default"), used))
/* Hidden names of the same functions, for the C++ operators (override_cxx.cpp): a call
 * through them binds inside the library (a direct call, no GOT load), as the C entry
 * points' calls do, where a call to the exported kite_ name would go through the GOT. */
#define KITE_LOCAL_ALIAS(target) __attribute__((alias(#target), visibility("hidden")))
#define KITE_ALLOC_ALIASES                                                   \
  void *malloc(size_t n) KITE_ALIAS(kite_malloc);                            \
  void *calloc(size_t c, size_t n) KITE_ALIAS(kite_calloc);                  \
  void *realloc(void *p, size_t n) KITE_ALIAS(kite_realloc);                 \
  void *reallocarray(void *p, size_t c, size_t n) KITE_ALIAS(kite_reallocarray); \
  int posix_memalign(void **out, size_t a, size_t n) KITE_ALIAS(kite_posix_memalign); \
  void *aligned_alloc(size_t a, size_t n) KITE_ALIAS(kite_aligned_alloc);    \
  void *memalign(size_t a, size_t n) KITE_ALIAS(kite_memalign);              \
  void *valloc(size_t n) KITE_ALIAS(kite_valloc);                            \
  void *pvalloc(size_t n) KITE_ALIAS(kite_pvalloc);                          \
  int malloc_trim(size_t pad) KITE_ALIAS(kite_malloc_trim);                  \
  void *__libc_malloc(size_t n) KITE_ALIAS(kite_malloc);                     \
  void *__libc_calloc(size_t c, size_t n) KITE_ALIAS(kite_calloc);           \
  void *__libc_realloc(void *p, size_t n) KITE_ALIAS(kite_realloc);          \
  void *__libc_memalign(size_t a, size_t n) KITE_ALIAS(kite_memalign);       \
  void *__libc_valloc(size_t n) KITE_ALIAS(kite_valloc);                     \
  void *__libc_pvalloc(size_t n) KITE_ALIAS(kite_pvalloc);                   \
  int __posix_memalign(void **out, size_t a, size_t n) KITE_ALIAS(kite_posix_memalign); \
  void *_kite_cxx_malloc(size_t n) KITE_LOCAL_ALIAS(kite_malloc);            \
  int _kite_cxx_posix_memalign(void **out, size_t a, size_t n) KITE_LOCAL_ALIAS(kite_posix_memalign);
#define KITE_FREE_ALIASES                                                    \
  void free(void *p) KITE_ALIAS(kite_free);                                  \
  void cfree(void *p) KITE_ALIAS(kite_free);                                 \
  void __libc_free(void *p) KITE_ALIAS(kite_free);                           \
  /* C23's sized frees (a program built against a C library that has them must not reach \
   * that library's free with a kite block) */                                \
  void free_sized(void *p, size_t n) KITE_ALIAS(kite_free_sized);            \
  void free_aligned_sized(void *p, size_t a, size_t n) KITE_ALIAS(kite_free_aligned_sized); \
  size_t malloc_usable_size(void *p) KITE_ALIAS(kite_malloc_usable_size);   \
  void _kite_cxx_free(void *p) KITE_LOCAL_ALIAS(kite_free);
#endif
