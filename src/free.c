/* src/free.c -- free: the fast path first, then the generic paths, and the queries that
 * classify a pointer (malloc_usable_size, kite_owns).
 *
 * Fast path (x86-64, -O2; counted with callgrind, see docs/design.md):
 *   free(p): page map says "arena" -> descriptor by masking -> owner is this thread's heap
 *            -> one multiply gives "p is a block start" and the block's index i ->
 *            links[i] == LIVE (else: not handed out) -> links[i] = local_free, local_free =
 *            i, --used; used <= 0 (empty, or the page is on the full list) -> slow path.
 *            The block itself is never read or written.
 * Everything else (other threads' blocks, large runs, huge maps, invalid pointers) goes to
 * *_generic functions, out of line.
 *
 * Double frees: a block is freed only from LIVE. The owner checks and writes its entry with
 * plain accesses (it alone writes entries that are not LIVE); another thread claims LIVE ->
 * REMOTE with one CAS (page.h: when that CAS lands between the owner's check and store,
 * the owner's collect finds the overwritten claim and reports it). Uncarved blocks read 0.
 */
#include <kite.h>
#include "alloc.h"
#include "entry.h"
#include "heap.h"
#include "page.h"
#include "huge.h"
#include "arena.h"
#include "pagemap.h"
#include "message.h"
#include "guarded.h"
#include "prof.h"

#if defined(__GNUC__) && !defined(__clang__)
#define FREE_NOCLONE __attribute__((noclone)) /* keep free_arena_generic's arguments as declared */
#else
#define FREE_NOCLONE
#endif
#if defined(__SANITIZE_THREAD__)
void __tsan_write4(void *addr); /* the TSan runtime's hook for a 4-byte store */
#endif
static KITE_NOINLINE void free_generic(void *p);
/* h comes fourth (the third argument is unused): kite_free holds it in that register (rcx on
 * x86-64), and the multiply's rdx does not clobber it. */
static KITE_NOINLINE FREE_NOCLONE void free_arena_generic(void *p, kite_page_t *d, uintptr_t unused, kite_heap_t *h);
/* The local free's slow end (an emptied page, or one on the full list), for kite_free. */
static KITE_NOINLINE void free_local_slow(kite_page_t *pg) { _kite_free_local_slow(_kite_heap_tls, pg); }

static KITE_NOINLINE void free_arena_headless(kite_heap_t *h, kite_page_t *d, void *p);
static KITE_NOINLINE void free_local_slow(kite_page_t *pg);

/* 29 instructions (with the return) for a block of this thread's own small page that does not
 * empty it (docs/design.md). */
KITE_API void kite_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (likely(_kite_pagemap_kind(u) == KITE_PM_ARENA)) {
    /* _kite_unit_of(u), from the page map's index u >> 26 (one shift instead of a mask) */
    uintptr_t base = u >> KITE_ARENA_SHIFT;
#if defined(__x86_64__)
    __asm__("shlq %1, %0" : "+r"(base) : "i"(KITE_ARENA_SHIFT) : "cc"); /* gcc copies u and masks: one more */
#else
    base <<= KITE_ARENA_SHIFT;
#endif
    kite_page_t *pg = _kite_unit_at(base, u);
    kite_heap_t *h = _kite_heap_tls;
    /* owner: pg->heap is stored atomically by others, so it is read as one atomic access. On
     * x86-64 that is the compare's own memory operand (an aligned 8-byte read is atomic, and
     * the asm cannot be split or repeated); gcc does not fold a C relaxed atomic load into
     * the compare (one instruction more). TSan builds use the C atomic, which it sees. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
    __asm__ goto("cmpq %0, %1\n\tjne %l[arena]" : : "r"(h), "m"(pg->heap) : "cc" : arena);
#else
    if (unlikely(__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != h)) goto arena;
#endif
    {
      /* block start and index in one multiply (offsets in the head unit only: other units'
       * descriptors never match a heap); uncarved blocks' entries read 0, not LIVE */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
      /* the multiply and the compare read div_magic from memory (gcc loads it first) */
      uint64_t lo, i;
      __asm__("mulq %2" : "=a"(lo), "=d"(i) : "m"(pg->div_magic), "0"((uint64_t)(uint16_t)u) : "cc");
      __asm__ goto("cmpq %0, %1\n\tjae %l[arena]" : : "m"(pg->div_magic), "r"(lo) : "cc" : arena);
      {
#else
      unsigned __int128 m = (unsigned __int128)(uint64_t)(uint16_t)u * pg->div_magic;
      if (likely((uint64_t)m < pg->div_magic)) {
        uint64_t i = (uint64_t)(m >> 64);
#endif
        uint16_t *l = pg->links;
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
        __asm__ goto("cmpw $-1, (%0,%1,2)\n\tjne %l[arena]" : : "r"(l), "r"(i), "m"(*(const uint16_t(*)[KITE_PAGE_MAX_BLOCKS + 1])l) : "cc" : arena);
#else
        if (unlikely(KITE_LOAD_RELAXED(l[i]) != KITE_LINK_LIVE)) goto arena;
#endif
        {
          if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, p);
          KITE_TOOL_BLOCK_FREE(p, pg->block_size);
#if defined(__SANITIZE_THREAD__)
          __atomic_store_n(&l[i], pg->local_free, __ATOMIC_RELAXED);
#else
          l[i] = pg->local_free;
#endif
          pg->local_free = (uint16_t)i;
#if defined(__x86_64__)
          /* one read-modify-write and its flags (gcc emits load, sub, store, test). The same
           * in sanitizer builds: ASan checks no metadata access of kite's anyway (its maps are
           * not poisoned); TSan does not see inside asm, so the access is announced to it
           * (used is owner-only: a report would be a real race). */
#if defined(__SANITIZE_THREAD__)
          __tsan_write4(&pg->used);
#endif
          __asm__ goto("subl $1, %0\n\tjle %l[slow]" : "+m"(pg->used) : : "cc" : slow);
          return;
        slow:
#else
          if (likely(--pg->used > 0)) return;
#endif
          free_local_slow(pg); /* not h: it would have to outlive the multiply */
          return;
        }
      }
    }
  arena:
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
    {
      uintptr_t any; /* the unused argument: whatever rdx holds, no instruction to set it */
      __asm__("" : "=d"(any));
      free_arena_generic(p, pg, any, h);
    }
#else
    free_arena_generic(p, pg, 0, h);
#endif
    return;
  }
  free_generic(p);
}

/* The rare end of a free to another thread's page, out of line so that the remote path
 * below needs no saved registers: a page with no owner (its thread exited: heap.c pushes
 * the block, and gives the page back once empty). Remote frees are counted by the owner
 * when it takes them back (heap.c's page_collect), not here. */
static KITE_COLD void free_invalid(const kite_page_t *pg, uint32_t i) {
  _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, i));
}
static KITE_COLD void free_remote_abandoned(kite_page_t *pg, uint32_t i) {
  /* adopted meanwhile: pushed as to any owned page (its new owner may race a double free) */
  if (!_kite_heap_free_abandoned(pg, i) && !_kite_page_push_remote(pg, i)) free_invalid(pg, i);
}

/* Free block i (at p) of small page pg (head descriptor) owned by h, this thread's heap. */
static inline __attribute__((always_inline)) void free_small_own(kite_heap_t *h, kite_page_t *pg, void *p, uint32_t i) {
  if (pg->links[i] != KITE_LINK_LIVE) {
    free_invalid(pg, i);
    return;
  }
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, p);
  KITE_TOOL_BLOCK_FREE(p, pg->block_size); /* after the fill writes it */
  __atomic_store_n(&pg->links[i], pg->local_free, __ATOMIC_RELAXED);
  pg->local_free = (uint16_t)i;
  if (--pg->used <= 0) _kite_free_local_slow(h, pg);
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_remote_claimed)(void *p);
/* What the owner's fast free does once it has read LIVE: its link, local_free, used (plain
 * stores, no check). The racing double free's test calls it between another thread's
 * claim and push, where an owner that read LIVE just before the claim would store. */
void _kite_test_owner_free_store(void *p) {
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
  uint32_t i = (uint32_t)_kite_page_index_of(pg, p);
  pg->links[i] = pg->local_free;
  pg->local_free = (uint16_t)i;
  pg->used--;
}
#endif

/* Free block i (at p) of small page pg (head descriptor) from any thread (h: its heap;
 * owner: pg->heap as the caller read it); p is a block start of pg, i <= pg->reserved (an
 * uncarved block's entry reads 0, as does the spare entry past the last block).
 * Remote (~30 instructions with kite_free's entry before it, x86-64 -O2, callgrind;
 * docs/design.md): claim the entry LIVE -> REMOTE|END (one CAS; fails: not handed out) ->
 * pg->heap still set (else the page is abandoned: out of line) -> push i on thread_free
 * (one CAS). */
static inline __attribute__((always_inline)) void free_small_any(kite_heap_t *h, kite_heap_t *owner, kite_page_t *pg, void *p, size_t i) {
  if (owner == h) {
    free_small_own(h, pg, p, (uint32_t)i);
    return;
  }
  uint16_t *e = &pg->links[i];
  if (unlikely(!_kite_page_claim_remote(pg, i))) {
    free_invalid(pg, (uint32_t)i);
    return;
  }
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_remote_claimed) _kite_test_hook_remote_claimed(p);
#endif
  if (unlikely(__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) == NULL)) {
    free_remote_abandoned(pg, (uint32_t)i);
    return;
  }
  /* false: the owner's own free of the block stored its link after our claim (a racing
   * double free): the owner has it; report ours */
  if (unlikely(!_kite_page_push_remote_at(pg, e, i))) free_invalid(pg, (uint32_t)i);
}

#if KITE_SECURE
/* secure.c: free carved block p of small page pg (its head descriptor), which the wrapper
 * found with its own page-map lookup (kept with the block in its quarantine): no second
 * lookup. As free_generic does for a small block, from the index on. */
void _kite_core_free_small(kite_page_t *pg, void *p) {
  uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)_kite_page_block(pg, 0));
  uint32_t i = (uint32_t)(((unsigned __int128)off * pg->div_magic) >> 64);
  free_small_any(_kite_heap_tls, __atomic_load_n(&pg->heap, __ATOMIC_RELAXED), pg, p, i);
}
#endif

kite_page_t *_kite_lookup(const void *p, size_t *huge) {
  uintptr_t u = (uintptr_t)p;
  *huge = 0;
  unsigned k = _kite_pagemap_kind(u);
  if (k == KITE_PM_HUGE) { *huge = _kite_huge_usable(p); return NULL; }
  /* guarded.h: a live guarded block answers as a huge one does (its usable size, no page) */
  if (k == KITE_PM_GUARDED) { *huge = _kite_guarded_usable(p); return NULL; }
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
 * fast path did not take (h: this thread's heap): mostly another thread's block (remote
 * free). Checks a small block as _kite_lookup() does without consulting the page map again;
 * anything else (large run, invalid pointer) goes to free_generic. Only the head of a small
 * page has an owner (page.c and heap.c set heap, release, on nothing else), so a unit with
 * one needs no head or kind lookup: the acquire pairs with those stores. */
/* A unit without an owner: a small page's other unit, an abandoned page, a large run, or
 * not a block at all. */
static KITE_NOINLINE void free_arena_headless(kite_heap_t *h, kite_page_t *d, void *p) {
  kite_page_t *pg = _kite_page_head(d);
  if (__atomic_load_n(&pg->kind, __ATOMIC_ACQUIRE) == KITE_KIND_SMALL) {
    kite_heap_t *owner = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED);
    /* _kite_page_index_of without its sign: i < capacity <= KITE_PAGE_MAX_BLOCKS */
    uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)_kite_page_block(pg, 0));
    unsigned __int128 m = (unsigned __int128)off * pg->div_magic;
    uint64_t i = (uint64_t)(m >> 64);
    if (likely((uint64_t)m < pg->div_magic && i < __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED))) {
      free_small_any(h, owner, pg, p, (uint32_t)i);
      return;
    }
  }
  free_generic(p);
}

static KITE_NOINLINE FREE_NOCLONE void free_arena_generic(void *p, kite_page_t *d, uintptr_t unused, kite_heap_t *h) {
  (void)unused;
  kite_heap_t *owner = __atomic_load_n(&d->heap, __ATOMIC_ACQUIRE);
  if (unlikely(owner == NULL)) {
    free_arena_headless(h, d, p);
    return;
  }
  /* d is the head of a small page and p in its first unit: p's offset in the unit is its
   * offset in the page. The index is <= reserved (the unit holds no more blocks), so no
   * capacity test: uncarved entries read 0, never LIVE, and the claim fails on them. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  uint64_t lo, i; /* the multiply and the compare read div_magic from memory, as in kite_free */
  __asm__("mulq %2" : "=a"(lo), "=d"(i) : "m"(d->div_magic), "0"((uint64_t)(uint16_t)(uintptr_t)p) : "cc");
  __asm__ goto("cmpq %0, %1\n\tjae %l[generic]" : : "m"(d->div_magic), "r"(lo) : "cc" : generic);
  free_small_any(h, owner, d, p, i);
  return;
generic:
  free_generic(p);
#else
  unsigned __int128 m = (unsigned __int128)(uint64_t)(uint16_t)(uintptr_t)p * d->div_magic;
  if (unlikely((uint64_t)m >= d->div_magic)) {
    free_generic(p);
    return;
  }
  free_small_any(h, owner, d, p, (uint32_t)(uint64_t)(m >> 64));
#endif
}

static KITE_NOINLINE void free_generic(void *p) {
  if (p == NULL) return;
  /* guarded.h: a block of the sampled guarded allocations (KITE_GUARDED_SAMPLE) */
  if (unlikely(_kite_pagemap_kind((uintptr_t)p) == KITE_PM_GUARDED)) { _kite_guarded_free(p); return; }
  if (_kite_pagemap_kind((uintptr_t)p) == KITE_PM_HUGE) {
    if (unlikely(__atomic_load_n(&_kite_prof_huge_live, __ATOMIC_RELAXED))) _kite_prof_free(p); /* prof.h */
    /* the claim, the header's reads and the disown are huge.c's, in that order: a racing
     * second free never reads a header the first is unmapping */
    if (!_kite_huge_free(p, _kite_heap_disown)) _kite_report_invalid("free(): invalid pointer or double free", p);
    return;
  }
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
  if (pg == NULL) {
    _kite_report_invalid("free(): invalid pointer or double free", p);
    return;
  }
  if (pg->kind == KITE_KIND_SMALL) {
    free_small_any(_kite_heap_tls, __atomic_load_n(&pg->heap, __ATOMIC_RELAXED), pg, p, (uint32_t)_kite_page_index_of(pg, p));
  } else {
    /* a large run: claimed with one CAS on its kind, so of two racing frees one wins */
    uint8_t k = KITE_KIND_LARGE;
    if (!__atomic_compare_exchange_n(&pg->kind, &k, (uint8_t)KITE_KIND_HELD, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      _kite_report_invalid("free(): invalid pointer or double free", p);
      return;
    }
    if (unlikely(pg->sampled)) { /* prof.h: a block of the heap profiler */
      pg->sampled = 0;
      if (_kite_prof_free_run(p, pg)) return; /* kept, held, for the next sampled block */
    }
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
  if (!pg) {
    if (!huge) _kite_report_invalid("malloc_usable_size(): invalid pointer", p);
    return huge;
  }
  if (pg->kind == KITE_KIND_SMALL) {
    if (!_kite_page_block_live(pg, (uint32_t)_kite_page_index_of(pg, p))) {
      _kite_report_invalid("malloc_usable_size(): freed block", p);
      return 0;
    }
    return pg->block_size;
  }
  return pg->large_size;
}

KITE_API bool kite_owns(const void *p) {
  if (!p) return false;
  size_t huge;
  kite_page_t *pg = _kite_lookup(p, &huge);
  if (!pg) return huge != 0;
  if (pg->kind == KITE_KIND_SMALL)
    return _kite_page_block_live(pg, (uint32_t)_kite_page_index_of(pg, p));
  return true;
}

#if KITE_OVERRIDE
/* The standard names, as aliases of the kite_ functions (an alias must live in the file
 * that defines its target): no extra jump, and calls inside the library bind directly
 * (-fno-semantic-interposition). alloc.c has the allocating names. */
KITE_FREE_ALIASES
#endif
