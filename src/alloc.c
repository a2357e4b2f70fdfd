/* src/alloc.c -- the allocating entry points: the malloc fast path first, then the rest of
 * the malloc family, first-class heaps, and (KITE_OVERRIDE) the standard names as aliases.
 * free and the pointer queries are in free.c.
 *
 * Fast path (x86-64, -O2; counted with callgrind, see docs/design.md):
 *   malloc(n <= 1024): TLS heap -> direct[n] -> i = page->free; i < capacity; page->free =
 *            links[i]; links[i] = LIVE; used++; direct_start[n] + i * size, the page's
 *            start kept in the heap beside direct[n] (heap.h), not read from the descriptor.
 *            The block is not touched.
 * Everything else (larger sizes, an empty current page, the first allocation of a thread)
 * goes to *_generic functions, out of line.
 *
 * Size routing: n <= 64 KiB small (slab pages), <= 16 MiB large (buddy runs: 2^k units,
 * usable size n rounded up to 4 KiB, the untouched tail costs no memory), above: huge.
 *
 * Failures: every public entry point that returns NULL (or ENOMEM) for lack of memory, or
 * for a size no block can have, reports it with KITE_VERBOSE, once per request: the
 * internal paths (malloc_quiet, alloc_large, alloc_aligned, heap_malloc_quiet) never
 * report, and each entry point calls _kite_report_oom where it gives up.
 */
#include <kite.h>
#include "alloc.h"
#include "entry.h"
#include "heap.h"
#include "page.h"
#include "links.h"
#include "huge.h"
#include "arena.h"
#include "pagemap.h"
#include "classify.h"
#include "options.h"
#include "message.h"
#include "guarded.h"
#include "prof.h"
#include "secure_layout.h"
#include <errno.h>
#include <string.h>

static void *alloc_large(size_t n, size_t align, bool *zero);
static void *alloc_run_or_huge(size_t n, size_t align, bool *zero);
static void *large_run_ready(kite_page_t *pg, size_t n);
static KITE_NOINLINE void *prof_small(kite_heap_t *h, size_t n, size_t asked);
static KITE_NOINLINE void *malloc_generic(size_t n, kite_heap_t *h);
static KITE_NOINLINE void *malloc_generic_quiet(size_t n, kite_heap_t *h);

/* The malloc fast path, for kite_malloc and (with a generic path that does not report a
 * failure) the entry points that allocate on behalf of another request. */
static inline __attribute__((always_inline)) void *malloc_fast(size_t n, void *(*generic)(size_t, kite_heap_t *)) {
  kite_heap_t *h = _kite_heap_tls;
  if (likely(n <= KITE_DIRECT_MAX)) {
    kite_page_t *pg = h->direct[n];
    uint32_t i = pg->free;
    /* i < capacity: a free block (the allocation list's end, KITE_LINK_END, is above every
     * capacity, and so is the empty page's); an index past the carved blocks, which no
     * list holds, goes to the generic path, which reports it */
    if (likely(i < pg->capacity)) {
      uint16_t *l = pg->links;
      pg->free = l[i];
      /* remote.c R1 compares it; an atomic store (not KITE_STORE_RELAXED) also because gcc
       * writes it as one 16-bit immediate store then, where it loads a plain store's
       * constant into a register first */
      __atomic_store_n(&l[i], (uint16_t)KITE_LINK_LIVE, __ATOMIC_RELAXED);
      pg->used++;
      /* the page's start from the heap (heap.h), the offset kept below the largest page's
       * size as _kite_page_block keeps it: no descriptor field steers malloc out of it */
      void *b = KITE_TOOL_START(h->direct_start[n]) + ((i * pg->block_size) & (uint32_t)(KITE_SMALL_PAGE_MAX - 1));
      KITE_TOOL_BLOCK_LIVE(b, pg->block_size); /* before the check reads the block */
      if (KITE_DEBUG >= 3) _kite_block_check_fresh(pg, b);
      return b;
    }
  }
  return generic(n, h);
}

/* The fast path: a block from the current page of the size's class (docs/design.md). */
KITE_API void *kite_malloc(size_t n) { return malloc_fast(n, malloc_generic); }

/* malloc for the other entry points: they report their own failure. */
static inline void *malloc_quiet(size_t n) { return malloc_fast(n, malloc_generic_quiet); }

/* malloc of a large or huge request. Apart from malloc_unrouted, whose small requests then
 * pay for no frame (the heap profiler's come there every time: prof.h). */
static KITE_NOINLINE void *malloc_large(size_t n) {
  bool zero;
  return alloc_large(n, 0, &zero);
}

/* Past the small route: a small request above guarded.h's largest while that sampler is on
 * (KITE_GUARDED_SAMPLE), or a large or huge one. Out of line, so that malloc_generic_quiet
 * stays compares and tail calls (no frame of its own). */
static KITE_NOINLINE void *malloc_unrouted(size_t n, kite_heap_t *h) {
  if (n <= KITE_SMALL_MAX) return _kite_malloc_small_generic(h, n);
  return malloc_large(n);
}

static KITE_NOINLINE void *malloc_generic_quiet(size_t n, kite_heap_t *h) { /* n first: malloc's n stays in its register */
  if (likely(n < KITE_LOAD_RELAXED(_kite_small_route))) /* <= KITE_SMALL_MAX unless sampling (options.h) */
    return _kite_malloc_small_generic(h, n);
  if (likely(n < KITE_LOAD_RELAXED(_kite_guarded_route))) /* the guarded sampler alone on (options.h) */
    return _kite_guarded_malloc(n, h);
  if (n <= KITE_SMALL_MAX) {
    /* the samplers straight from here: their requests come by every list refill */
    if (KITE_LOAD_RELAXED(_kite_prof_enabled)) return prof_small(h, n, n); /* prof.h: the heap profiler */
    if (n <= KITE_GUARDED_MAX) return _kite_guarded_malloc(n, h);
  }
  return malloc_unrouted(n, h);
}

static KITE_COLD void *alloc_failed(size_t count, size_t size);

static KITE_NOINLINE void *malloc_generic(size_t n, kite_heap_t *h) {
  void *p = malloc_generic_quiet(n, h);
  return likely(p != NULL) ? p : alloc_failed(1, n);
}


/* Large order for n bytes (n > KITE_SMALL_MAX). */
static inline unsigned large_order(size_t n) {
  return _kite_ceil_log2((n + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
}

/* The heap profiler's sampled blocks (prof.h). In the secure build the core serves its
 * wrappers' requests, which carry a canary (small) or a guard page (large) beyond the
 * program's bytes: a sample records the program's request, and a sampled small block's run
 * has room for the guard page secure.c then puts after it, as after a large block. */
#if KITE_SECURE
#define PROF_ASKED_SMALL(n) ((n) > KITE_SECURE_CANARY ? (n) - KITE_SECURE_CANARY : (n))
#define PROF_ASKED_LARGE(n) ((n) > KITE_SECURE_GUARD ? (n) - KITE_SECURE_GUARD : (n))
#define PROF_RUN_BYTES(n) ((((n) + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1)) + KITE_SECURE_GUARD)
#else
#define PROF_ASKED_SMALL(n) (n)
#define PROF_ASKED_LARGE(n) (n)
#define PROF_RUN_BYTES(n) (n)
#endif

/* A run of its own for a sampled small block of n bytes (a kept one when it fits), or NULL. */
static void *prof_run(size_t n) {
  size_t bytes = PROF_RUN_BYTES(n);
  bool zero;
  kite_page_t *cached = bytes <= KITE_UNIT_SIZE ? _kite_prof_cached_run() : NULL; /* kept at a sampled free */
  return cached ? large_run_ready(cached, bytes) : alloc_run_or_huge(bytes, 0, &zero);
}

/* A small request while the heap profiler samples, its class's current list empty: a
 * block of the list the refill hands out, counted; or, sampled, a run of its own, which
 * free() takes to its generic path (prof.h); a plain block when no run can be had. n is
 * counted (a class's bytes), `asked` recorded (the request: less than n for a small
 * aligned one). */
static KITE_NOINLINE void *prof_small_refill(kite_heap_t *h, size_t n, unsigned c, size_t asked) {
  size_t weigh;
  void *p = _kite_prof_malloc_small(h, n, c, &weigh);
  if (!weigh) return p;
  p = prof_run(n);
  if (!p) return _kite_malloc_small_generic(_kite_heap_tls, n);
  _kite_prof_record(p, PROF_ASKED_SMALL(asked), weigh);
  return p;
}
/* The same, first taking a block of the current list, or of its quick refill, counted
 * inline (prof.h). Apart: so that this common case pays for no frame. */
static KITE_NOINLINE void *prof_small(kite_heap_t *h, size_t n, size_t asked) {
  unsigned c = _kite_class_of(n); /* (found once for the refill's count too) */
  kite_page_t *pg = _kite_prof_counted_page(h, c); /* prof.h: counted with its list */
  return likely(pg != NULL) ? _kite_page_pop(pg) : prof_small_refill(h, n, c, asked);
}

/* Large run or huge map for n bytes aligned to align (0 or a power of two), sampled by the
 * heap profiler while it is on (prof.h). */
static void *alloc_large(size_t n, size_t align, bool *zero) {
  void *p = alloc_run_or_huge(n, align, zero);
  if (unlikely(KITE_LOAD_RELAXED(_kite_prof_enabled)) && p && _kite_prof_large_due(n))
    _kite_prof_record(p, PROF_ASKED_LARGE(n), n);
  return p;
}

/* Large run or huge map for n bytes aligned to align (0 or a power of two). */
static void *alloc_run_or_huge(size_t n, size_t align, bool *zero) {
  if (unlikely(n > KITE_MAX_REQUEST)) { errno = ENOMEM; return NULL; }
  _kite_options_ensure();
  unsigned order = large_order(n);
  unsigned aorder = align > KITE_UNIT_SIZE ? _kite_ceil_log2(align) - KITE_UNIT_SHIFT : 0;
  if (aorder > order) order = aorder;
  *zero = true;
  if (n <= KITE_LARGE_MAX && order <= KITE_LARGE_MAX_ORDER) {
    kite_page_t *pg = _kite_run_alloc(order, zero);
    if (!pg) return NULL;
    _kite_stat_add(&_kite_stats.large_allocs, 1);
    return large_run_ready(pg, n);
  }
  return _kite_huge_alloc(n, align, zero);
}

/* Run pg (head, not visible as a block yet) becomes the large block of n bytes. */
static void *large_run_ready(kite_page_t *pg, size_t n) {
  pg->block_size = 0;
  pg->sampled = 0;
  pg->large_size = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  pg->next = pg->prev = NULL;
  pg->owned.owner = NULL;
  __atomic_store_n(&pg->kind, KITE_KIND_LARGE, __ATOMIC_RELEASE);
  _kite_arena_advise_run(pg, n);
  return _kite_page_start(pg);
}

/* An entry point gives up: report (KITE_VERBOSE), keep errno (ENOMEM), return NULL. */
static KITE_COLD void *alloc_failed(size_t count, size_t size) {
  int e = errno;
  _kite_report_oom(count, size);
  errno = e;
  return NULL;
}

KITE_API void *kite_calloc(size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return alloc_failed(count, size); }
  void *p;
  if (n <= KITE_SMALL_MAX) {
    p = malloc_quiet(n);
    if (p) memset(p, 0, n);
  } else {
    bool zero;
    p = alloc_large(n, 0, &zero);
    if (p && !zero) memset(p, 0, n);
  }
  return likely(p != NULL) ? p : alloc_failed(count, size);
}

/* A small aligned request of class c while the heap profiler samples: a block of the list
 * the sampler counted (the fast path's), else the sampler's way for a malloc of the class's
 * size (prof.h): counted there, or sampled, its run aligned to a unit. */
static KITE_NOINLINE void *prof_aligned(unsigned c, size_t n) {
  kite_heap_t *h = _kite_heap_tls;
  kite_page_t *pg = h->queue[c].first;
  if (pg && pg->free != KITE_LINK_END) return _kite_page_pop(pg);
  return prof_small(h, _kite_class_size_[c], n);
}

/* Small aligned blocks come from a class whose size is a multiple of the alignment (all
 * pages start on 64 KiB boundaries); bigger alignments from buddy runs (aligned to their
 * size) or huge maps. align is a power of two. */
static void *alloc_aligned(size_t align, size_t n) {
  if (align <= 16) return malloc_quiet(n);
  if (n <= KITE_SMALL_MAX && align <= KITE_UNIT_SIZE) {
    unsigned c = _kite_class_of(n < align ? align : n);
    while (_kite_class_size_[c] & (align - 1)) c++;
    if (unlikely(KITE_LOAD_RELAXED(_kite_prof_enabled))) return prof_aligned(c, n);
    return _kite_malloc_class(c);
  }
  bool zero;
  return alloc_large(n, align, &zero);
}

/* The aligned entry points fail with EINVAL (a bad alignment: not reported) or ENOMEM. */
static inline void *aligned_reported(void *p, size_t n) {
  return likely(p != NULL) || errno != ENOMEM ? p : alloc_failed(1, n);
}
KITE_API int kite_posix_memalign(void **out, size_t align, size_t n) {
  int rc = _kite_posix_memalign_via(alloc_aligned, out, align, n);
  if (unlikely(rc == ENOMEM)) alloc_failed(1, n);
  return rc;
}
KITE_API void *kite_aligned_alloc(size_t align, size_t n) { return aligned_reported(_kite_aligned_alloc_via(alloc_aligned, align, n), n); }
KITE_API void *kite_memalign(size_t align, size_t n) { return aligned_reported(_kite_aligned_alloc_via(alloc_aligned, align, n), n); }
KITE_API void *kite_valloc(size_t n) { return aligned_reported(alloc_aligned(KITE_OS_PAGE, n), n); }
KITE_API void *kite_pvalloc(size_t n) { return aligned_reported(_kite_pvalloc_via(alloc_aligned, n), n); }

/* Move small block p (block i of page pg, handed out, old = its class size) to a block for
 * n bytes (n > 0 and not served in place): a new block, a copy of old or n bytes (the
 * program cannot have more in it), and the free of p. A block that grows gets headroom
 * (realloc_want), so a vector growing by small steps moves every few classes. */
static KITE_NOINLINE void *realloc_small_move(void *p, size_t old, size_t n) {
  size_t want = n;
  if (n > old && n <= KITE_SMALL_MAX) {
    /* 25% headroom: a vector growing by small steps moves every ~2 classes instead of
     * every class (classes are 12.5% apart). */
    size_t grown = old + old / 4;
    if (grown > n) want = grown < KITE_SMALL_MAX ? grown : KITE_SMALL_MAX;
  } else if (unlikely(n > KITE_MAX_REQUEST)) {
    errno = ENOMEM;
    return alloc_failed(1, n);
  }
  void *q = malloc_quiet(want);
  if (unlikely(!q) && want != n) q = malloc_quiet(n);
  if (unlikely(!q)) return alloc_failed(1, n);
  memcpy(q, p, old < n ? old : n);
  kite_free(p);
  return q;
}

/* realloc without moving where it can: a small block stays when n still fits its class (and
 * is more than half of it); a large run keeps its place when n needs the same order, gives
 * its tail back when n needs a smaller one, and grows into its free buddy run (or buddies)
 * when n needs a bigger one; a huge block shrinks in place, grows in place when the address
 * space after it is free, else moves its pages (mremap, no copy). Everything else is a new
 * block, a copy and a free.
 *
 * Small blocks first (the block stays where it is, with no copy and no call): page map says
 * "arena" -> head descriptor -> kind SMALL -> one multiply gives "p is a block start" and its
 * index i -> links[i] == LIVE (uncarved blocks' entries read 0; an index past the last block
 * lands on the spare entry, never LIVE) -> n in (size / 2, size]. Everything else goes to
 * realloc_generic. */
static KITE_NOINLINE void *realloc_generic(void *p, size_t n);

/* realloc of a block start of small page pg whose entry is not LIVE: a block freed (or
 * being freed), or one never carved yet (its entry reads 0, as does the spare entry past the
 * last block). Reported; EINVAL. */
static KITE_COLD void *realloc_not_live(const kite_page_t *pg, uint32_t i, void *p) {
  bool carved = i < __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  _kite_report_invalid(carved ? "realloc(): freed block" : "realloc(): invalid pointer", p);
  errno = EINVAL;
  return NULL;
}

KITE_API void *kite_realloc(void *p, size_t n) {
  uintptr_t u = (uintptr_t)p;
  if (likely(_kite_pagemap_kind(u) == KITE_PM_ARENA)) {
    kite_page_t *pg = _kite_page_head(_kite_unit_of(u));
    uint64_t i;
    if (likely(__atomic_load_n(&pg->kind, __ATOMIC_ACQUIRE) == KITE_KIND_SMALL)) {
      /* classify.h C1: i <= reserved, and the entries past the carved blocks read 0 */
      if (likely(_kite_block_index(pg, (uint64_t)(u - (uintptr_t)_kite_page_block(pg, 0)), &i))) {
        if (unlikely(!_kite_page_block_live(pg, (uint32_t)i))) return realloc_not_live(pg, (uint32_t)i, p);
        size_t old = pg->block_size;
        if (likely(n <= old && n > old / 2)) return p;
        if (n == 0) { kite_free(p); return NULL; }
        return realloc_small_move(p, old, n);
      }
    }
  }
  return realloc_generic(p, n);
}

/* realloc of p in the guarded region (guarded.h), n > 0: always a new block. */
static KITE_NOINLINE void *realloc_guarded(void *p, size_t n) {
  size_t old = _kite_guarded_usable(p);
  if (!old) {
    _kite_report_invalid("realloc(): invalid pointer or freed guarded block", p);
    errno = EINVAL;
    return NULL;
  }
  if (unlikely(n > KITE_MAX_REQUEST)) { errno = ENOMEM; return NULL; }
  void *q = kite_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  kite_free(p);
  return q;
}

/* NULL, large runs, huge blocks, guarded blocks and invalid pointers. */
static KITE_NOINLINE void *realloc_generic(void *p, size_t n) {
  if (p == NULL) return kite_malloc(n);
  if (n == 0) { kite_free(p); return NULL; }
  if (unlikely(_kite_pagemap_kind((uintptr_t)p) == KITE_PM_GUARDED)) return realloc_guarded(p, n); /* guarded.h */
  kite_ptr_t c = {NULL, 0};
  unsigned kind = _kite_classify(p, &c);
  kite_page_t *pg = c.page;
  size_t old, huge = kind == KITE_PTR_HUGE ? _kite_huge_usable(p) : 0;
  if (kind == KITE_PTR_SMALL) {
    /* kite_realloc serves these itself; here only when pg->kind changed between the two
     * reads (the page was freed meanwhile: a use after free) */
    if (!_kite_page_block_live(pg, c.index)) return realloc_not_live(pg, c.index, p);
    old = pg->block_size;
    if (n <= old && n > old / 2) return p;
    return realloc_small_move(p, old, n);
  } else if (kind == KITE_PTR_LARGE) {
    old = pg->large_size;
    if (n > KITE_SMALL_MAX && n <= KITE_LARGE_MAX && !pg->sampled) { /* prof.h: a record keeps its block */
      unsigned order = large_order(n);
      if (order == pg->order || _kite_arena_resize_run(pg, order, NULL)) {
        pg->large_size = (n + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
        if (n > old) _kite_arena_advise_run(pg, n);
        return p;
      }
    }
  } else if (huge) {
    old = huge;
    if (n > KITE_LARGE_MAX && n <= KITE_MAX_REQUEST && !_kite_prof_sampled_huge(p)) {
      void *q = _kite_huge_resize(p, n, true);
      if (q) return q;
    }
  } else {
    _kite_report_invalid("realloc(): invalid pointer", p);
    errno = EINVAL;
    return NULL;
  }
  if (unlikely(n > KITE_MAX_REQUEST)) { errno = ENOMEM; return alloc_failed(1, n); }
  void *q = malloc_quiet(n);
  if (!q) return alloc_failed(1, n);
  memcpy(q, p, old < n ? old : n);
  kite_free(p);
  return q;
}

KITE_API void *kite_reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return alloc_failed(count, size); }
  return kite_realloc(p, n);
}

KITE_API int kite_malloc_trim(size_t pad) {
  (void)pad;
  size_t r = _kite_heap_trim();
  r += _kite_arena_purge(true);
  r += _kite_huge_cache_release(true);
  r += _kite_links_trim();
  r += _kite_guarded_trim(); /* guarded.h */
  return r > 0;
}

/* ---- first-class heaps ----
 * A kite_heap_t is used by one thread at a time; its blocks may be freed with kite_free from
 * any thread (small ones come back through the pages' thread_free lists). kite_realloc of
 * one of its blocks may move it to the calling thread's heap. The pointer the caller holds
 * is a handle (heap.h): a destroyed heap's handle is reported and ignored, never taken for
 * the heap that reuses its struct. */
KITE_API kite_heap_t *kite_heap_new(void) {
  _kite_process_init();
  return _kite_heap_new_user();
}

/* The heap profiler forgets the sampled blocks of first-class heap h, which its destroy
 * frees without free() (prof.h P1). The heap's own thread, before the destroy. */
static KITE_NOINLINE void prof_heap_forget(kite_heap_t *h) {
  for (kite_owned_t *o = h->owned; o; o = o->next) {
    if (_kite_pagemap_kind((uintptr_t)o->block) == KITE_PM_HUGE) {
      _kite_prof_free(o->block);
      continue;
    }
    kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)o->block));
    if (!pg->sampled) continue;
    _kite_prof_free(o->block);
    pg->sampled = 0;
  }
}

KITE_API void kite_heap_destroy(kite_heap_t *handle) {
  if (!handle) return;
  kite_heap_t *h = _kite_heap_of_handle(handle, "kite_heap_destroy(): invalid or stale heap");
  if (!h) return;
  if (unlikely(KITE_LOAD_RELAXED(_kite_prof_enabled))) prof_heap_forget(h);
  _kite_heap_destroy_user(h);
}

/* Block p (a large run or huge block) belongs to first-class heap h (freed with it). */
static void heap_own(kite_heap_t *h, void *p) {
  kite_owned_t *o = _kite_pagemap_kind((uintptr_t)p) == KITE_PM_HUGE ? _kite_huge_owned(p)
                                                                    : &_kite_page_head(_kite_unit_of((uintptr_t)p))->owned;
  _kite_heap_own(h, o, p);
}

/* A small request to first-class heap h while the heap profiler samples. Every one comes
 * here (these heaps have no fast path), so each is counted alone, in its class's bytes, on
 * the count of the larger requests; a sampled one gets a run of its own, owned by h. */
static KITE_NOINLINE void *prof_heap_small(kite_heap_t *h, size_t n) {
  size_t s = _kite_class_size_[_kite_class_of(n)];
  void *p = _kite_prof_large_due(s) ? prof_run(n) : NULL;
  if (!p) return _kite_malloc_small_generic(h, n);
  heap_own(h, p);
  _kite_prof_record(p, PROF_ASKED_SMALL(n), s);
  return p;
}

static void *heap_malloc_quiet(kite_heap_t *h, size_t n) {
  bool prof = KITE_LOAD_RELAXED(_kite_prof_enabled);
  if (n <= KITE_SMALL_MAX) return unlikely(prof) ? prof_heap_small(h, n) : _kite_malloc_small_generic(h, n);
  bool zero;
  void *p = alloc_run_or_huge(n, 0, &zero);
  if (!p) return NULL;
  heap_own(h, p);
  if (unlikely(prof) && _kite_prof_large_due(n)) _kite_prof_record(p, PROF_ASKED_LARGE(n), n);
  return p;
}

KITE_API void *kite_heap_malloc(kite_heap_t *handle, size_t n) {
  kite_heap_t *h = _kite_heap_of_handle(handle, "kite_heap_malloc(): invalid or stale heap");
  if (unlikely(!h)) return NULL;
  void *p = heap_malloc_quiet(h, n);
  return likely(p != NULL) ? p : alloc_failed(1, n);
}

KITE_API void *kite_heap_calloc(kite_heap_t *handle, size_t count, size_t size) {
  kite_heap_t *h = _kite_heap_of_handle(handle, "kite_heap_calloc(): invalid or stale heap");
  if (unlikely(!h)) return NULL;
  void *p = _kite_heap_calloc_via(heap_malloc_quiet, h, count, size);
  return likely(p != NULL) ? p : alloc_failed(count, size);
}

#if KITE_OVERRIDE
/* The standard names, as aliases of the kite_ functions (an alias must live in the file
 * that defines its target): no extra jump, and calls inside the library bind directly
 * (-fno-semantic-interposition). free.c has free and malloc_usable_size. */
KITE_ALLOC_ALIASES
#endif
