/* src/free.c -- free: the fast path first, then the generic paths, and the queries that
 * classify a pointer (malloc_usable_size, kite_owns). Pointers are classified by
 * classify.h; other threads' blocks go through remote.c's protocol.
 *
 * Fast path: p below the page map's end -> its slot's descriptor table and the unit's
 * descriptor by one load and adds (pagemap.h M1: a descriptor of the none table when p is
 * in no arena) -> its key (acquire) -> one multiply gives "p is a block start" and its
 * index i -> the key is this thread's (classify.h C2: so the descriptor is the head, and p
 * lies in its first unit) -> links[i] == LIVE -> links[i] = local_free, local_free = i,
 * --used == 0 (emptied, or the page is on the full list: page.h) -> the heap's slow path.
 * The block itself is never read or written.
 * A block start of a page with another thread's key goes to the remote free, inline behind
 * the owner test (free_remote, with its index: remote.c). Everything else is one call:
 * anything else in the arenas (free_arena_generic), large runs, huge maps and invalid
 * pointers (free_generic).
 *
 * Double frees: a block is freed only from LIVE. The owner checks and writes its entry
 * with plain accesses (it alone writes entries that are not LIVE or REMOTE); another thread
 * claims LIVE -> REMOTE with one CAS (remote.c R1, R3: when both free one block at once,
 * one of them reports). Uncarved blocks' entries read 0.
 */
#include <kite.h>
#include "alloc.h"
#include "entry.h"
#include "heap.h"
#include "page.h"
#include "remote.h"
#include "classify.h"
#include "pagemap.h"
#include "huge.h"
#include "arena.h"
#include "message.h"
#include "guarded.h"
#include "prof.h"

static KITE_NOINLINE void free_arena_generic(kite_page_t *d, void *p);
static KITE_NOINLINE void free_generic(void *p);
/* The local free's slow end: the page emptied, or it sits on the full list (page.h). */
static KITE_NOINLINE void free_local_slow(kite_page_t *pg) { _kite_free_local_slow(_kite_heap_tls, pg); }

/* The fast path's block i at p of page pg, whose key (read with acquire) is another live
 * thread's: C2, a head, and i is p's index, <= reserved (C1); freed by the remote protocol
 * with no second look at the descriptor. Inline in kite_free: past the owner test it is a
 * jump, not a call (its straight path needs no stack frame, its rare ends are tail calls).
 * Without a thread pointer it first retires a heap a dead thread left, a call: out of line
 * there, so the local fast path keeps no frame for it. */
#ifdef KITE_THREAD_KEY
static inline __attribute__((always_inline)) void free_remote(kite_page_t *pg, void *p, uint64_t i) {
#else
static KITE_NOINLINE KITE_NO_IPA void free_remote(kite_page_t *pg, void *p, uint64_t i) {
  if (unlikely(_kite_heap_tls == &_kite_heap_empty)) _kite_heap_retire_left_by_self(); /* as free_arena_generic does */
#endif
  _kite_remote_free(pg, p, i, _kite_heap_settle_abandoned); /* C1: the claim refuses an uncarved block (R1) */
}

/* The fast path (docs/design.md): this thread's LIVE block of a small page.
 * - owner_key is stored by other threads, with release after the page's set-up (heap_impl.h
 *   page_own): read with acquire (a plain load on x86-64), so that a key of another thread
 *   makes the descriptor's other fields read below at least as new as that set-up, as the
 *   remote path needs (remote.c). heap.h: it is this thread's key exactly when pg->heap is
 *   this thread's heap; classify.h C2: any key makes pg a head, with p in its first unit:
 *   its offset is u's low 16 bits.
 * - The entry is read with an atomic load in every build (other threads CAS it, remote.c
 *   R1): gcc then addresses it in place, where a plain read makes it build the address
 *   first and keep it for the store that links the block. */
KITE_API void kite_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (unlikely((u >> KITE_ARENA_SHIFT) >= KITE_PAGEMAP_SIZE)) {
    free_generic(p); /* not kite's (NULL goes on: it finds the none table, pagemap.h M1) */
    return;
  }
  kite_page_t *pg = _kite_pagemap_unit(u); /* pagemap.h M1: a readable descriptor */
  uintptr_t owner = __atomic_load_n(&pg->owner_key, __ATOMIC_ACQUIRE);
  uint64_t i;
  if (unlikely(!_kite_block_index(pg, u & 0xffff, &i))) {
    free_arena_generic(pg, p); /* not a block start of a keyed page (or no key) */
    return;
  }
  if (unlikely(owner != _kite_this_key())) {
    if (likely(owner != 0))
      free_remote(pg, p, i); /* another thread's block (remote.c) */
    else
      free_arena_generic(pg, p); /* no key: abandoned, a first-class heap's, not a small page */
    return;
  }
  if (unlikely(__atomic_load_n(&pg->links[i], __ATOMIC_RELAXED) != KITE_LINK_LIVE)) {
    free_arena_generic(pg, p); /* reported there (remote.c R1) */
    return;
  }
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, p);
  KITE_TOOL_BLOCK_FREE(p, pg->block_size);
  KITE_STORE_RELAXED(pg->links[i], pg->local_free); /* remote.c R3 */
  pg->local_free = (uint16_t)i;
  if (unlikely(--pg->used == 0)) free_local_slow(pg); /* emptied, or on the full list (page.h) */
}

static KITE_COLD void free_invalid(void *p) { _kite_report_invalid("free(): invalid pointer or double free", p); }

/* Free block i (<= reserved, C1) at p of small page pg (head) from any thread. */
static void free_small(kite_page_t *pg, void *p, uint32_t i) {
  kite_heap_t *owner = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED);
  if (owner != _kite_heap_tls) { /* another thread's, or abandoned (remote.c R5) */
    _kite_remote_free(pg, p, i, _kite_heap_settle_abandoned);
    return;
  }
  _kite_heap_free_local(owner, pg, p, i); /* the owner's plain stores (remote.c R3) */
}

/* free(p) that the fast path and free_remote did not take (d: p's unit's descriptor,
 * pagemap.h M1: one of the none table's when p is in no arena). A
 * descriptor with an owner is a small page's head and p lies in its first unit (C2): the
 * remote path needs no head or kind lookup (the acquire pairs with the owner's release
 * store). The owner is not tested against this thread's heap: the fast path took every
 * LIVE block of this thread's pages, so what is left of them fails the claim and is
 * reported (remote.c R1). Anything else (an abandoned page, a page's other units, large
 * runs) goes through free_generic. */
static KITE_NOINLINE void free_arena_generic(kite_page_t *d, void *p) {
  uint64_t i;
#ifndef KITE_THREAD_KEY
  /* no thread pointer: a heap a dead thread left gets this thread's frees here (heap_pool.c
   * I-H4), and a thread that only frees would never retire it */
  if (unlikely(_kite_heap_tls == &_kite_heap_empty)) _kite_heap_retire_left_by_self();
#endif
  if (likely(_kite_owned_index(d, (uintptr_t)p, &i))) { /* C1: the claim refuses an uncarved block (R1) */
    _kite_remote_free(d, p, i, _kite_heap_settle_abandoned);
    return;
  }
  free_generic(p);
}

static KITE_NOINLINE void free_generic(void *p) {
  if (p == NULL) return;
  kite_ptr_t c;
  switch (_kite_classify(p, &c)) {
  case KITE_PTR_SMALL:
    free_small(c.page, p, c.index);
    return;
  case KITE_PTR_LARGE: {
    /* claimed with one CAS on its kind, so of two racing frees one wins */
    uint8_t k = KITE_KIND_LARGE;
    if (__atomic_compare_exchange_n(&c.page->kind, &k, (uint8_t)KITE_KIND_HELD, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      if (unlikely(c.page->sampled)) { /* prof.h: a block of the heap profiler */
        c.page->sampled = 0;
        if (_kite_prof_free_run(p, c.page)) return; /* kept, held, for the next sampled block */
      }
      _kite_heap_disown(&c.page->owned);
      _kite_arena_free_run(c.page);
      return;
    }
    break;
  }
  case KITE_PTR_HUGE:
    if (unlikely(__atomic_load_n(&_kite_prof_huge_live, __ATOMIC_RELAXED))) _kite_prof_free(p); /* prof.h */
    /* the claim, the header's reads and the disown are huge.c's, in that order: a racing
     * second free never reads a header the first is unmapping */
    if (_kite_huge_free(p, _kite_heap_disown)) return;
    break;
  case KITE_PTR_GUARDED: /* guarded.h: it reports a double or invalid free itself */
    _kite_guarded_free(p);
    return;
  }
  free_invalid(p);
}

#if KITE_SECURE
/* secure.c: free carved block i at p of small page pg (its head descriptor), which the
 * wrapper classified itself: no second lookup. Flattened (free_small's body here, not a
 * jump to it). The quarantine's release frees its own thread's blocks itself (heap.h's
 * _kite_heap_free_local) and others' through _kite_core_free_remote. */
__attribute__((flatten)) void _kite_core_free_small(kite_page_t *pg, void *p, uint32_t i) { free_small(pg, p, i); }
/* The same for a block whose page the wrapper found not the calling thread's (another
 * thread's, or abandoned): the remote protocol at once, its claim a checked plain store
 * (remote.c R8: the wrapper's canary claim made the calling thread p's only freer). */
void _kite_core_free_remote(kite_page_t *pg, void *p, uint32_t i) {
  _kite_remote_free_as(pg, p, i, _kite_heap_settle_abandoned, !KITE_SECURE_FLOOR);
}
#endif

#ifdef KITE_TEST_HOOKS
/* What the owner's fast free does once it has read LIVE: its link, local_free, used (plain
 * stores, no check). Tests call it where an owner that read LIVE just before another
 * thread's claim would store (remote.c R3). */
void _kite_test_owner_free_store(void *p) {
  kite_ptr_t c;
  if (_kite_classify(p, &c) != KITE_PTR_SMALL) return;
  kite_page_t *pg = c.page;
  KITE_STORE_RELAXED(pg->links[c.index], pg->local_free);
  pg->local_free = (uint16_t)c.index;
  pg->used--;
}
#endif

KITE_API void kite_free_sized(void *p, size_t size) { (void)size; kite_free(p); }
KITE_API void kite_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment; (void)size;
  kite_free(p);
}

KITE_API size_t kite_malloc_usable_size(const void *p) {
  if (!p) return 0;
  kite_ptr_t c;
  switch (_kite_classify(p, &c)) {
  case KITE_PTR_SMALL:
    if (!_kite_page_block_live(c.page, c.index)) {
      _kite_report_invalid("malloc_usable_size(): freed block", p);
      return 0;
    }
    return c.page->block_size;
  case KITE_PTR_LARGE: return c.page->large_size;
  case KITE_PTR_HUGE: {
    size_t n = _kite_huge_usable(p);
    if (n) return n;
    break;
  }
  case KITE_PTR_GUARDED: {
    size_t n = _kite_guarded_usable(p);
    if (n) return n;
    break;
  }
  }
  _kite_report_invalid("malloc_usable_size(): invalid pointer", p);
  return 0;
}

KITE_API bool kite_owns(const void *p) {
  if (!p) return false;
  kite_ptr_t c;
  switch (_kite_classify(p, &c)) {
  case KITE_PTR_SMALL: return _kite_page_block_live(c.page, c.index);
  case KITE_PTR_LARGE: return true;
  case KITE_PTR_HUGE: return _kite_huge_usable(p) != 0;
  case KITE_PTR_GUARDED: return _kite_guarded_usable(p) != 0;
  }
  return false;
}

#if KITE_OVERRIDE
/* The standard names, as aliases of the kite_ functions (an alias must live in the file
 * that defines its target): no extra jump, and calls inside the library bind directly
 * (-fno-semantic-interposition). alloc.c has the allocating names. */
KITE_FREE_ALIASES
#endif
