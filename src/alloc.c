/* src/alloc.c -- the public entry points: malloc and free fast paths first, then the rest
 * of the malloc family, and (KITE_OVERRIDE) the standard names as aliases.
 *
 * Fast paths (x86-64, -O2; counted with callgrind, see docs/design.md):
 *   malloc(n <= 1024): TLS heap -> direct[(n+15)/16] -> pop page->free, used++.
 *   free(p): page map says "arena" -> descriptor by masking -> owner is this thread's heap
 *            and p is a carved block start of the page (one compare, one multiply) -> push
 *            on local_free, --used; used <= 0 (empty, or the page is on the full list) -> slow path.
 * Everything else (other threads' blocks, large runs, huge maps, invalid pointers, the
 * first allocation of a thread) goes to *_generic functions, out of line.
 *
 * Size routing: n <= 64 KiB small (slab pages), <= 16 MiB large (buddy runs: 2^k units,
 * usable size n rounded up to 4 KiB, the untouched tail costs no memory), above: huge.
 */
#include <kite.h>
#include "types.h"
#include "heap.h"
#include "arena.h"
#include <errno.h>
#include <string.h>

#define KITE_MAX_REQUEST ((size_t)PTRDIFF_MAX)

static void *alloc_large(size_t n, size_t align, bool *zero);
static KITE_NOINLINE void *malloc_generic(kite_heap_t *h, size_t n);
static KITE_NOINLINE void free_generic(void *p);
static KITE_NOINLINE void free_arena_generic(void *p, kite_page_t *d);

/* ~11 instructions when the current page has a free block. */
KITE_API void *kite_malloc(size_t n) {
  kite_heap_t *h = _kite_heap_tls;
  if (likely(n <= KITE_DIRECT_MAX)) {
    kite_page_t *pg = h->direct[(n + 15) >> 4];
    kite_block_t *b = pg->free;
    if (likely(b != NULL)) {
      pg->free = b->next;
      b->key = 0;
      pg->used++;
      return b;
    }
  }
  return malloc_generic(h, n);
}

/* ~30 instructions for a block of this thread's own small page (docs/design.md). */
KITE_API void kite_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (likely(_kite_pagemap_kind(u) == KITE_PM_ARENA)) {
    kite_page_t *pg = _kite_unit_of(u);
    kite_heap_t *h = _kite_heap_tls;
    uint64_t off = u & (KITE_UNIT_SIZE - 1);
    /* owner, block start, carved (a pointer into the uncarved tail is not a block yet) */
    if (likely(KITE_LOAD_RELAXED(pg->heap) == h && (uint32_t)off < pg->carved_end && _kite_is_block_offset(pg, off))) {
      kite_block_t *b = p;
      if (unlikely(b->key == (uintptr_t)pg)) goto arena; /* double free? */
      b->next = pg->local_free;
      b->key = (uintptr_t)pg;
      pg->local_free = b;
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
      /* one read-modify-write and its flags (gcc emits load, sub, store, test) */
      __asm__ goto("subl $1, %0\n\tjle %l[slow]" : "+m"(pg->used) : : "cc" : slow);
      return;
    slow:
#else
      if (likely(--pg->used > 0)) return;
#endif
      _kite_free_local_slow(h, pg);
      return;
    }
  arena:
    free_arena_generic(p, pg);
    return;
  }
  free_generic(p);
}

static KITE_NOINLINE void *malloc_generic(kite_heap_t *h, size_t n) {
  void *p;
  if (n <= KITE_SMALL_MAX) {
    p = _kite_malloc_small_generic(h, n);
  } else {
    bool zero;
    p = alloc_large(n, 0, &zero);
  }
  if (unlikely(!p)) _kite_report_oom(n);
  return p;
}

static unsigned ceil_log2(size_t x) { return x <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(x - 1); }

/* Large run or huge map for n bytes aligned to align (0 or a power of two). */
static void *alloc_large(size_t n, size_t align, bool *zero) {
  if (unlikely(n > KITE_MAX_REQUEST)) { errno = ENOMEM; return NULL; }
  if (unlikely(_kite_initialized != 2)) _kite_init();
  unsigned order = ceil_log2((n + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
  unsigned aorder = align > KITE_UNIT_SIZE ? ceil_log2(align) - KITE_UNIT_SHIFT : 0;
  if (aorder > order) order = aorder;
  *zero = true;
  if (n <= KITE_LARGE_MAX && order <= KITE_LARGE_MAX_ORDER) {
    kite_page_t *pg = _kite_arena_alloc_run(order, zero);
    if (!pg) return NULL;
    pg->kind = KITE_KIND_LARGE;
    pg->block_size = 0;
    pg->large_size = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
    __atomic_fetch_add(&_kite_stats.large_allocs, 1, __ATOMIC_RELAXED);
    return _kite_page_start(pg);
  }
  return _kite_huge_alloc(n, align, zero);
}

/* Is offset off (from the page start) the start of a block carved so far in small page pg?
 * off < 2^32: off / size == high half of off * ceil(2^64 / size). */
static inline bool small_block_at(const kite_page_t *pg, uint64_t off) {
  return _kite_is_block_offset(pg, off) &&
         (uint64_t)(((unsigned __int128)off * pg->div_magic) >> 64) <
             __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
}

/* Classify p. Returns the head descriptor for arena blocks (small or large), NULL for
 * huge blocks (*huge = usable size) and for invalid pointers (*huge = 0). */
static kite_page_t *lookup(const void *p, size_t *huge) {
  uintptr_t u = (uintptr_t)p;
  *huge = 0;
  unsigned k = _kite_pagemap_kind(u);
  if (k == KITE_PM_HUGE) { *huge = _kite_huge_usable(p); return NULL; }
  if (k != KITE_PM_ARENA) return NULL;
  kite_page_t *d = _kite_unit_of(u);
  kite_page_t *pg = _kite_page_head(d);
  uint8_t *start = _kite_page_start(pg);
  if (pg->kind == KITE_KIND_SMALL) {
    return small_block_at(pg, (uint64_t)(u - (uintptr_t)start)) ? pg : NULL;
  }
  if (pg->kind == KITE_KIND_LARGE && (uint8_t *)p == start) return pg;
  return NULL;
}

/* free(p) of a pointer the page map puts in an arena (d: its unit's descriptor) that the
 * fast path did not take: mostly another thread's block (remote free). Checks a small block
 * as lookup() does without consulting the page map again; anything else (large run, invalid
 * pointer) goes to free_generic. */
static KITE_NOINLINE void free_arena_generic(void *p, kite_page_t *d) {
  kite_page_t *pg = _kite_page_head(d);
  if (likely(pg->kind == KITE_KIND_SMALL)) {
    if (likely(small_block_at(pg, (uint64_t)((uintptr_t)p - (uintptr_t)_kite_page_start(pg))))) {
      _kite_free_small_any(pg, p);
      return;
    }
  }
  free_generic(p);
}

static KITE_NOINLINE void free_generic(void *p) {
  if (p == NULL) return;
  size_t huge;
  kite_page_t *pg = lookup(p, &huge);
  if (pg == NULL) {
    if (_kite_pagemap_kind((uintptr_t)p) == KITE_PM_HUGE) {
      kite_owned_t *o = _kite_huge_owned(p);
      if (o) {
        _kite_heap_disown(o);
        _kite_huge_free(p);
        return;
      }
    }
    _kite_report_invalid("free(): invalid pointer or double free", p);
    return;
  }
  if (pg->kind == KITE_KIND_SMALL) {
    _kite_free_small_any(pg, p);
  } else {
    _kite_heap_disown(&pg->owned);
    _kite_arena_free_run(pg);
  }
}

KITE_API size_t kite_malloc_usable_size(const void *p) {
  if (!p) return 0;
  size_t huge;
  kite_page_t *pg = lookup(p, &huge);
  if (!pg) return huge;
  return pg->kind == KITE_KIND_SMALL ? pg->block_size : pg->large_size;
}

KITE_API bool kite_owns(const void *p) {
  if (!p) return false;
  size_t huge;
  kite_page_t *pg = lookup(p, &huge);
  if (!pg) return huge != 0;
  if (pg->kind == KITE_KIND_SMALL) return !_kite_block_is_free_local(pg, p);
  return true;
}

KITE_API void *kite_calloc(size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return NULL; }
  if (n <= KITE_SMALL_MAX) {
    void *p = kite_malloc(n);
    if (p) memset(p, 0, n);
    return p;
  }
  bool zero;
  void *p = alloc_large(n, 0, &zero);
  if (p && !zero) memset(p, 0, n);
  return p;
}

/* Small aligned blocks come from a class whose size is a multiple of the alignment (all
 * pages start on 64 KiB boundaries); bigger alignments from buddy runs (aligned to their
 * size) or huge maps. align is a power of two. */
static void *alloc_aligned(size_t align, size_t n) {
  if (align <= 16) return kite_malloc(n);
  if (n <= KITE_SMALL_MAX && align <= KITE_UNIT_SIZE) {
    if (unlikely(_kite_initialized != 2)) _kite_init();
    unsigned c = _kite_class_of(n < align ? align : n);
    while (_kite_class_size_[c] & (align - 1)) c++;
    return _kite_malloc_class(c);
  }
  bool zero;
  return alloc_large(n, align, &zero);
}

static inline bool is_pow2(size_t a) { return a && !(a & (a - 1)); }

KITE_API int kite_posix_memalign(void **out, size_t align, size_t n) {
  if (!is_pow2(align) || align < sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = alloc_aligned(align, n);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

KITE_API void *kite_aligned_alloc(size_t align, size_t n) {
  if (!is_pow2(align)) { errno = EINVAL; return NULL; }
  return alloc_aligned(align, n);
}

KITE_API void *kite_memalign(size_t align, size_t n) {
  if (!is_pow2(align)) { errno = EINVAL; return NULL; }
  return alloc_aligned(align, n);
}

KITE_API void *kite_valloc(size_t n) { return alloc_aligned(KITE_OS_PAGE, n); }

KITE_API void *kite_pvalloc(size_t n) {
  size_t r = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (r < n) { errno = ENOMEM; return NULL; }
  return alloc_aligned(KITE_OS_PAGE, r ? r : KITE_OS_PAGE);
}

KITE_API void *kite_realloc(void *p, size_t n) {
  if (p == NULL) return kite_malloc(n);
  if (n == 0) { kite_free(p); return NULL; }
  size_t huge;
  kite_page_t *pg = lookup(p, &huge);
  size_t old;
  if (pg && pg->kind == KITE_KIND_SMALL) {
    old = pg->block_size;
    if (n <= old && n > old / 2) return p;
  } else if (pg) {
    size_t run = KITE_UNIT_SIZE << pg->order;
    old = pg->large_size;
    if (n <= run && n > KITE_SMALL_MAX && n >= run / 4) {
      pg->large_size = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
      return p;
    }
  } else if (huge) {
    old = huge;
    if (n > KITE_LARGE_MAX && n <= KITE_MAX_REQUEST && n >= old / 2 && _kite_huge_resize(p, n)) return p;
  } else {
    _kite_report_invalid("realloc(): invalid pointer", p);
    errno = EINVAL;
    return NULL;
  }
  /* A small block that grows gets 25% headroom, so a vector growing by small steps moves
   * every ~4 classes instead of every class (classes are 12.5% apart). */
  size_t want = n;
  if (n > old && n <= KITE_SMALL_MAX && pg && pg->kind == KITE_KIND_SMALL) {
    size_t grown = old + old / 4;
    if (grown > n) want = grown < KITE_SMALL_MAX ? grown : KITE_SMALL_MAX;
  }
  void *q = kite_malloc(want);
  if (!q && want != n) q = kite_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  kite_free(p);
  return q;
}

KITE_API void *kite_reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return NULL; }
  return kite_realloc(p, n);
}

KITE_API void kite_free_sized(void *p, size_t size) { (void)size; kite_free(p); }
KITE_API void kite_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment; (void)size;
  kite_free(p);
}

KITE_API int kite_malloc_trim(size_t pad) {
  (void)pad;
  size_t r = _kite_heap_trim();
  r += _kite_arena_purge(true);
  return r > 0;
}

/* ---- first-class heaps ----
 * A kite_heap_t is used by one thread at a time; its blocks may be freed with kite_free from
 * any thread (small ones come back through the pages' thread_free lists). kite_realloc of
 * one of its blocks may move it to the calling thread's heap. */
KITE_API kite_heap_t *kite_heap_new(void) { return _kite_heap_new_user(); }

KITE_API void kite_heap_destroy(kite_heap_t *h) {
  if (h && h->user) _kite_heap_destroy_user(h);
}

KITE_API void *kite_heap_malloc(kite_heap_t *h, size_t n) {
  if (n <= KITE_SMALL_MAX) return _kite_malloc_small_generic(h, n);
  bool zero;
  void *p = alloc_large(n, 0, &zero);
  if (!p) return NULL;
  kite_owned_t *o = _kite_pagemap_kind((uintptr_t)p) == KITE_PM_HUGE ? _kite_huge_owned(p)
                                                                    : &_kite_page_head(_kite_unit_of((uintptr_t)p))->owned;
  _kite_heap_own(h, o, p);
  return p;
}

KITE_API void *kite_heap_calloc(kite_heap_t *h, size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return NULL; }
  void *p = kite_heap_malloc(h, n);
  if (p) memset(p, 0, n);
  return p;
}

#if KITE_OVERRIDE
/* The standard names, as aliases: no extra jump, and calls inside the library bind
 * directly (-fno-semantic-interposition). */
#define KITE_ALIAS(name, target) __attribute__((alias(#target), visibility("default"), used))
void *malloc(size_t n) KITE_ALIAS(malloc, kite_malloc);
void free(void *p) KITE_ALIAS(free, kite_free);
void cfree(void *p) KITE_ALIAS(cfree, kite_free);
void *calloc(size_t c, size_t n) KITE_ALIAS(calloc, kite_calloc);
void *realloc(void *p, size_t n) KITE_ALIAS(realloc, kite_realloc);
void *reallocarray(void *p, size_t c, size_t n) KITE_ALIAS(reallocarray, kite_reallocarray);
int posix_memalign(void **out, size_t a, size_t n) KITE_ALIAS(posix_memalign, kite_posix_memalign);
void *aligned_alloc(size_t a, size_t n) KITE_ALIAS(aligned_alloc, kite_aligned_alloc);
void *memalign(size_t a, size_t n) KITE_ALIAS(memalign, kite_memalign);
void *valloc(size_t n) KITE_ALIAS(valloc, kite_valloc);
void *pvalloc(size_t n) KITE_ALIAS(pvalloc, kite_pvalloc);
size_t malloc_usable_size(void *p) KITE_ALIAS(malloc_usable_size, kite_malloc_usable_size);
int malloc_trim(size_t pad) KITE_ALIAS(malloc_trim, kite_malloc_trim);
void *__libc_malloc(size_t n) KITE_ALIAS(__libc_malloc, kite_malloc);
void __libc_free(void *p) KITE_ALIAS(__libc_free, kite_free);
void *__libc_calloc(size_t c, size_t n) KITE_ALIAS(__libc_calloc, kite_calloc);
void *__libc_realloc(void *p, size_t n) KITE_ALIAS(__libc_realloc, kite_realloc);
void *__libc_memalign(size_t a, size_t n) KITE_ALIAS(__libc_memalign, kite_memalign);
void *__libc_valloc(size_t n) KITE_ALIAS(__libc_valloc, kite_valloc);
void *__libc_pvalloc(size_t n) KITE_ALIAS(__libc_pvalloc, kite_pvalloc);
int __posix_memalign(void **out, size_t a, size_t n) KITE_ALIAS(__posix_memalign, kite_posix_memalign);
#endif
