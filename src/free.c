/* src/free.c -- free: the fast path first, then the generic paths, and the queries that
 * classify a pointer (malloc_usable_size, kite_owns).
 *
 * Fast path (x86-64, -O2; counted with callgrind, see docs/design.md):
 *   free(p): page map says "arena" -> descriptor by masking -> owner is this thread's heap
 *            and p is a carved block start of the page (one compare, one multiply) -> push
 *            on local_free, --used; used <= 0 (empty, or the page is on the full list) -> slow
 *            path.
 * Everything else (other threads' blocks, large runs, huge maps, invalid pointers) goes to
 * *_generic functions, out of line.
 *
 * Double frees: a free block carries key == its page descriptor's address; a block being
 * freed whose key matches is checked against the lists on the slow path (the owner can
 * check exactly; another thread decides by the key).
 */
#include <kite.h>
#include "alloc.h"
#include "heap.h"
#include "page.h"
#include "huge.h"
#include "arena.h"
#include "pagemap.h"
#include "message.h"

#if defined(__SANITIZE_THREAD__)
void __tsan_write4(void *addr); /* the TSan runtime's hook for a 4-byte store */
#endif
static KITE_NOINLINE void free_generic(void *p);
static KITE_NOINLINE void free_arena_generic(void *p, kite_page_t *d);

/* ~30 instructions for a block of this thread's own small page (docs/design.md). */
KITE_API void kite_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (likely(_kite_pagemap_kind(u) == KITE_PM_ARENA)) {
    kite_page_t *pg = _kite_unit_of(u);
    kite_heap_t *h = _kite_heap_tls;
    uint64_t off = u & (KITE_UNIT_SIZE - 1);
    /* owner: pg->heap is stored atomically by others, so it is read as one atomic access. On
     * x86-64 that is the compare's own memory operand (an aligned 8-byte read is atomic, and
     * the asm cannot be split or repeated); gcc does not fold a C relaxed atomic load into
     * the compare (one instruction more). TSan builds use the C atomic, which it sees. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
    __asm__ goto("cmpq %0, %1\n\tjne %l[arena]" : : "r"(h), "m"(pg->heap) : "cc" : arena);
#else
    if (unlikely(__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != h)) goto arena;
#endif
    /* block start, carved (a pointer into the uncarved tail is not a block yet) */
    if (likely((uint32_t)off < pg->carved_end && _kite_is_block_offset(pg, off))) {
      kite_block_t *b = p;
      if (unlikely(b->key == (uintptr_t)pg)) goto arena; /* double free? */
      if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
      KITE_TOOL_BLOCK_FREE(b, pg->block_size);
      b->next = pg->local_free;
      b->key = (uintptr_t)pg;
      pg->local_free = b;
#if defined(__x86_64__)
      /* one read-modify-write and its flags (gcc emits load, sub, store, test). The same in
       * sanitizer builds: ASan checks no metadata access of kite's anyway (its maps are not
       * poisoned); TSan does not see inside asm, so the access is announced to it (used is
       * owner-only: a report would be a real race). */
#if defined(__SANITIZE_THREAD__)
      __tsan_write4(&pg->used);
#endif
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

/* Free block b of small page pg (head descriptor) from any thread; b is a carved block
 * start of pg. */
static void free_small_any(kite_page_t *pg, kite_block_t *b) {
  kite_heap_t *h = _kite_heap_tls;
  bool own = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED) == h;
  if (unlikely(b->key == (uintptr_t)pg)) {
    /* The owner can check exactly (nobody else edits its lists; thread_free nodes are
     * immutable until the owner collects them). Another thread cannot look into the
     * owner's lists: the key alone decides (a live block whose second word equals its
     * page descriptor's address is taken for a free one). */
    if (!own || _kite_page_has_free_local(pg, b) || _kite_page_has_free_remote(pg, b)) {
      _kite_report_invalid("free(): invalid pointer or double free", b);
      return;
    }
  }
  if (own) {
    if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
    KITE_TOOL_BLOCK_FREE(b, pg->block_size); /* after the fill writes it */
    b->key = (uintptr_t)pg;
    b->next = pg->local_free;
    pg->local_free = b;
    if (--pg->used <= 0) _kite_free_local_slow(h, pg);
    return;
  }
  /* no owner (its thread exited): heap.c frees it, and gives the page back once empty */
  if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL || !_kite_heap_free_abandoned(pg, b))
    _kite_page_free_remote(pg, b);
  if (h != &_kite_heap_empty) h->remote_frees++;
  else _kite_stat_add(&_kite_stats.remote_frees, 1);
}

kite_page_t *_kite_lookup(const void *p, size_t *huge) {
  uintptr_t u = (uintptr_t)p;
  *huge = 0;
  unsigned k = _kite_pagemap_kind(u);
  if (k == KITE_PM_HUGE) { *huge = _kite_huge_usable(p); return NULL; }
  if (k != KITE_PM_ARENA) return NULL;
  kite_page_t *d = _kite_unit_of(u);
  kite_page_t *pg = _kite_page_head(d);
  uint8_t *start = _kite_page_start(pg);
  if (pg->kind == KITE_KIND_SMALL) {
    return _kite_page_block_at(pg, (uint64_t)(u - (uintptr_t)start)) ? pg : NULL;
  }
  if (pg->kind == KITE_KIND_LARGE && (uint8_t *)p == start) return pg;
  return NULL;
}

/* free(p) of a pointer the page map puts in an arena (d: its unit's descriptor) that the
 * fast path did not take: mostly another thread's block (remote free). Checks a small block
 * as _kite_lookup() does without consulting the page map again; anything else (large run,
 * invalid pointer) goes to free_generic. */
static KITE_NOINLINE void free_arena_generic(void *p, kite_page_t *d) {
  kite_page_t *pg = _kite_page_head(d);
  if (likely(pg->kind == KITE_KIND_SMALL)) {
    if (likely(_kite_page_block_at(pg, (uint64_t)((uintptr_t)p - (uintptr_t)_kite_page_start(pg))))) {
      free_small_any(pg, p);
      return;
    }
  }
  free_generic(p);
}

static KITE_NOINLINE void free_generic(void *p) {
  if (p == NULL) return;
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
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
    free_small_any(pg, p);
  } else {
    _kite_heap_disown(&pg->owned);
    _kite_arena_free_run(pg);
  }
}

KITE_API void kite_free_sized(void *p, size_t size) { (void)size; kite_free(p); }
KITE_API void kite_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment; (void)size;
  kite_free(p);
}

KITE_API size_t kite_malloc_usable_size(const void *p) {
  if (!p) return 0;
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
  if (!pg) return huge;
  return pg->kind == KITE_KIND_SMALL ? pg->block_size : pg->large_size;
}

KITE_API bool kite_owns(const void *p) {
  if (!p) return false;
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
  if (!pg) return huge != 0;
  if (pg->kind == KITE_KIND_SMALL) {
    /* the owner can look into every list; another thread cannot read the owner's lists
     * and goes by the key (a free block carries its page's address, as free() decides) */
    if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != _kite_heap_tls) return ((const kite_block_t *)p)->key != (uintptr_t)pg;
    if (_kite_page_has_free_local(pg, p) || _kite_page_has_free_remote(pg, p)) return false;
  }
  return true;
}

#if KITE_OVERRIDE
/* The standard names, as aliases of the kite_ functions (an alias must live in the file
 * that defines its target): no extra jump, and calls inside the library bind directly
 * (-fno-semantic-interposition). alloc.c has the allocating names. */
#define KITE_ALIAS(target) __attribute__((alias(#target), visibility("default"), used))
void free(void *p) KITE_ALIAS(kite_free);
void cfree(void *p) KITE_ALIAS(kite_free);
void __libc_free(void *p) KITE_ALIAS(kite_free);
size_t malloc_usable_size(void *p) KITE_ALIAS(kite_malloc_usable_size);
#endif
