/* src/alloc.h -- what alloc.c and free.c (the entry-point layer) share. */
#ifndef KITE_ALLOC_H
#define KITE_ALLOC_H
#include "types.h"

#define KITE_MAX_REQUEST ((size_t)PTRDIFF_MAX)

#if KITE_SECURE && !defined(KITE_SECURE_WRAPPERS)
/* The secure build (secure_layout.h): alloc.c and free.c are the core underneath secure.c, which
 * defines the public kite_* names and the standard ones around these. Their entry points
 * get internal names, hidden, and no aliases. (kite.h is included before this header.) */
#undef KITE_API
#define KITE_API KITE_HIDDEN
#undef KITE_OVERRIDE
#define KITE_OVERRIDE 0
#define kite_malloc _kite_core_malloc
#define kite_calloc _kite_core_calloc
#define kite_realloc _kite_core_realloc
#define kite_reallocarray _kite_core_reallocarray
#define kite_posix_memalign _kite_core_posix_memalign
#define kite_aligned_alloc _kite_core_aligned_alloc
#define kite_memalign _kite_core_memalign
#define kite_valloc _kite_core_valloc
#define kite_pvalloc _kite_core_pvalloc
#define kite_malloc_trim _kite_core_malloc_trim
#define kite_heap_new _kite_core_heap_new
#define kite_heap_destroy _kite_core_heap_destroy
#define kite_heap_malloc _kite_core_heap_malloc
#define kite_heap_calloc _kite_core_heap_calloc
#define kite_free _kite_core_free
#define kite_free_sized _kite_core_free_sized
#define kite_free_aligned_sized _kite_core_free_aligned_sized
#define kite_malloc_usable_size _kite_core_malloc_usable_size
#define kite_owns _kite_core_owns
#endif
#if KITE_SECURE
/* What secure.c (which defines KITE_SECURE_WRAPPERS) calls: the core's entry points. */
void *_kite_core_malloc(size_t n);
void *_kite_core_calloc(size_t count, size_t size);
void *_kite_core_memalign(size_t align, size_t n);
int _kite_core_malloc_trim(size_t pad);
struct kite_heap_s *_kite_core_heap_new(void);
void _kite_core_heap_destroy(struct kite_heap_s *h);
void *_kite_core_heap_malloc(struct kite_heap_s *h, size_t n);
void *_kite_core_heap_calloc(struct kite_heap_s *h, size_t count, size_t size);
void _kite_core_free(void *p);
/* free.c: free carved block i at p of small page pg (head descriptor), classified by the
 * caller (classify.h): of any page (_small), or of a page the caller found not the calling
 * thread's (_remote: the remote protocol at once) */
void _kite_core_free_small(struct kite_page_s *pg, void *p, uint32_t i);
void _kite_core_free_remote(struct kite_page_s *pg, void *p, uint32_t i);
size_t _kite_core_malloc_usable_size(const void *p);
bool _kite_core_owns(const void *p);
#endif

/* init.c: once per process (idempotent, cheap after the first call): options, the exit
 * statistics' stderr duplicate, fork handlers. */
void _kite_process_init(void);
#ifdef KITE_TEST_HOOKS
/* Test builds (free.c): the owner's fast-free stores for block p, unchecked (remote.h has
 * the remote free's hooks). */
void _kite_test_owner_free_store(void *p);
#endif
#endif
