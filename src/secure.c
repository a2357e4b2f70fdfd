/* src/secure.c -- the secure build's entry points (libkite-secure.so; contract and layout in
 * secure_layout.h). Each public kite_* name, and the standard names, is a thin wrapper around the
 * core's entry point (alloc.c and free.c, renamed _kite_core_* in this build by alloc.h):
 *
 *   malloc(n <= 64 KiB - 8): a core block of n + 8 bytes, its last 8 bytes the canary;
 *       checked zero and marked where secure_layout.h keeps free blocks so (else: write
 *       after free). The core's pop is inlined here, so the block's page is known.
 *   malloc(larger), big alignments: a large run or huge block of round_up(n, 4 KiB) + 4 KiB,
 *       PROT_NONE from round_up(n, 4 KiB) on; a freed large run may be kept by its thread,
 *       guard in place (secure_large.c).
 *   free(small): the canary claimed with one compare-and-swap (canary -> freed mark: of two
 *       racing frees one proceeds), the block's head zeroed, the block put in the thread's
 *       quarantine; the oldest one there goes to the core's free on the page and index kept
 *       beside it (no second lookup). Blocks of first-class heaps skip the quarantine.
 *   realloc: malloc + copy + free (a shrink within the class stays; a small block that
 *       grows gets 25% headroom, as the core's), so the core never resizes a guarded run
 *       in place.
 * docs/security.md's "Secure mode" states each protection, its test and what it misses.
 * Errors are reported as "kite: secure: KIND: 0x..." and the process aborts (test builds
 * may install _kite_secure_error_hook instead, then the operation is skipped).
 * Layer: entry (beside alloc and free).
 */
#define KITE_SECURE_WRAPPERS 1
#include <kite.h>
#include "alloc.h"
#include "entry.h"
#include "secure.h"
#include "visit.h"
#include "heap.h"
#include "page.h"
#include "pagemap.h"
#include "huge.h"
#include "classify.h"
#include "message.h"
#include "os.h"
#include <errno.h>
#include <string.h>

/* Only the secure build compiles the rest (kite-sys builds every file of src/). */
#if KITE_SECURE
_Static_assert(KITE_EXTEND_BYTES / 16 <= KITE_SECURE_CARVE_MAX, "a carve is short enough for secure_layout.h's 16-bit draws");
_Static_assert(KITE_SECURE_ZERO_MAX >= 16 && KITE_SECURE_ZERO_MAX % 16 == 0,
               "the zeroed head is whole 16-byte lanes and holds the word release() checks");

#define SMALL_LIMIT KITE_SECURE_SMALL_LIMIT
#define PAGE_DOWN KITE_SECURE_PAGE_DOWN
#define NO_IPA KITE_NO_IPA
#define secure_error _kite_secure_error

/* ---- errors ---- */
#ifdef KITE_TEST_HOOKS
void (*_kite_secure_error_hook)(const char *kind, const void *p);
#endif

/* What the core finds (e.g. the loser of two racing frees of a large block) is a secure
 * error too: reported with its kind, then abort. */
__attribute__((constructor)) static void secure_report_hook(void) {
  __atomic_store_n(&_kite_report_invalid_hook, _kite_secure_error, __ATOMIC_RELEASE);
}

KITE_COLD NO_IPA void _kite_secure_error(const char *kind, const void *p) {
#ifdef KITE_TEST_HOOKS
  if (_kite_secure_error_hook) { _kite_secure_error_hook(kind, p); return; }
#endif
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: secure: "); _kite_out_str(&o, kind); _kite_out_str(&o, ": ");
  _kite_out_hex(&o, (uintptr_t)p);
  _kite_out_str(&o, " (aborting)\n");
  _kite_out_flush(&o);
  _kite_os_abort();
}

/* ---- canaries and free blocks (secure_layout.h; the keys are secret.c's) ---- */
#define canary_of _kite_secure_canary
#define canary_slot _kite_secure_mark_slot
#define block_take _kite_secure_block_take
#define zero_free_block _kite_secure_zero_block

/* The small page of p if p is a carved block of it (first as free finds a page's first
 * unit), its index in *idx. */
static inline kite_page_t *small_block_of(const void *p, uint32_t *idx) {
  uintptr_t u = (uintptr_t)p;
  uint64_t i;
  if ((u >> KITE_ARENA_SHIFT) < KITE_PAGEMAP_SIZE && _kite_owned_block(_kite_pagemap_unit(u), u, &i)) {
    *idx = (uint32_t)i;
    return _kite_pagemap_unit(u);
  }
  kite_ptr_t c;
  if (_kite_classify(p, &c) != KITE_PTR_SMALL) return NULL;
  *idx = c.index;
  return c.page;
}
static inline kite_page_t *small_page_of(const void *p) {
  uint32_t i;
  return small_block_of(p, &i);
}

/* Why the canary of small block p is not its live value (seen): freed (the
 * caller's kind for a freed block), never (for a carved block never handed out), else an
 * overflow. No free list is read: an overflow may have broken them. */
static KITE_COLD const char *canary_verdict(const void *p, uint64_t seen, const char *freed, const char *never) {
  if (seen == _kite_secure_freed_mark(p)) return freed; /* quarantined or back in the core's lists */
  if (seen == _kite_secure_carved_mark(p)) return never;
  return "buffer overflow (canary overwritten)";
}

/* free(p) of small block p found holding seen, not its canary: reported. Out of line, called
 * last, so the free's fast path needs no stack frame of its own. */
static KITE_COLD NO_IPA void free_refused(void *p, uint64_t seen) {
  secure_error(canary_verdict(p, seen, "double free", "free(): invalid pointer (a block never handed out)"), p);
}

#define WRITE_AFTER_FREE "write after free (a freed block changed before reuse)"
/* block_take refused free block p: its carved mark says it was never handed out (a run
 * known zero is carved unzeroed: bytes written there before the carve stay), so an
 * overflow from outside changed it; any other mark, a write after free. Out of line. */
static KITE_COLD NO_IPA void take_refused(void *p, uint32_t bs) {
  secure_error(*canary_slot(p, bs) == _kite_secure_carved_mark(p) ? "buffer overflow (a block never handed out changed)" : WRITE_AFTER_FREE, p);
}
/* block_take, the refusal reported with take_refused's kind (the block is kept out of use). */
static inline __attribute__((always_inline)) bool block_ready(void *p, uint32_t bs) {
  return likely(block_take(p, bs)) ? true : (take_refused(p, bs), false);
}

/* A core small block about to be handed out: check it is a carved block of a small page
 * (else the core's free list was corrupt: heap corruption, abort), then block_ready. */
static bool small_ready(void *p) {
  kite_page_t *pg = small_page_of(p);
  if (unlikely(pg == NULL)) return _kite_secure_sampled_ready(p); /* a block of the heap profiler, or corruption */
  return block_ready(p, pg->block_size);
}

/* ---- the quarantine ----
 * A ring of KITE_SECURE_QUARANTINE blocks in each thread's heap struct (secure_layout.h:
 * not in thread-local storage, which the C library wipes for a later thread while a heap
 * left behind by a thread with no exit destructor still waits, heap_pool.c I-H4). Its
 * slots fill in order and empty only all at once (a flush), so an empty slot at next means
 * the ring's first round since the heap was made or flushed, or the static empty heap of a
 * thread without one (never written). */
typedef kite_secure_ring_t quarantine_t;

/* A zeroed, marked small block p of page pg leaves the quarantine (or skips it): its first
 * word (where a free list would link, and what an overflow from the block before reaches
 * first) must still be zero, else someone wrote to it after free; then the core frees it,
 * on the page found at free (the block stays LIVE in the core meanwhile, so its page stays
 * a small page: no second page-map lookup). The mark stays (a later free of it is a double
 * free); the rest of what it holds is checked when the core hands it out again
 * (block_ready). h is the calling thread's heap (_kite_heap_tls): a block of its own page
 * is freed here as free.c's generic path frees it (heap.h), another through the remote
 * protocol, with no second look at the owner. */
static inline __attribute__((always_inline)) void release_by(kite_heap_t *h, void *p, kite_page_t *pg, uint32_t i) {
  if (unlikely(*(const uint64_t *)p != 0)) {
    secure_error("write after free (a block changed in the quarantine)", p);
    return; /* (test hook) kept out of use */
  }
  if (likely(__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) == h)) _kite_heap_free_local(h, pg, p, i);
  else _kite_core_free_remote(pg, p, i);
}
static void release(void *p, kite_page_t *pg, uint32_t i) { release_by(_kite_heap_tls, p, pg, i); }

_Static_assert((KITE_SECURE_QUARANTINE & (KITE_SECURE_QUARANTINE - 1)) == 0, "the ring's size is a power of two");

static void quarantine_flush(quarantine_t *q) {
  for (unsigned i = 0; i < KITE_SECURE_QUARANTINE; i++) {
    void *p = q->slot[i];
    q->slot[i] = NULL;
    if (p) release(p, q->page[i], q->index[i]);
  }
  q->next = 0;
}

/* heap.h's retire hook: thread heap h is retired (its thread's exit, or I-H4 from the next
 * thread with its thread pointer): its quarantine and kept runs go back to the core, from
 * whichever thread this runs on (the core's free takes any thread's block). */
static void secure_heap_retire(kite_heap_t *h) {
  quarantine_flush(&h->secure.ring);
  _kite_secure_kept_flush(h);
}

/* The calling thread's quarantine goes to the core's free now (visit.h's hook: the
 * statistics and walks call it first; malloc_trim). */
static void quarantine_flush_own(void) {
  kite_heap_t *h = _kite_heap_tls;
  if (h != &_kite_heap_empty) secure_heap_retire(h);
}

__attribute__((constructor)) static void secure_quarantine_hooks(void) {
  __atomic_store_n(&_kite_visit_flush_hook, quarantine_flush_own, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_heap_retire_hook, secure_heap_retire, __ATOMIC_RELEASE);
}

/* The calling thread's heap, made now when it has none (its first kite call is a free):
 * where its quarantine and kept runs live. NULL once the thread's exit retired its heap
 * (the core makes no heap then: nothing would retire it, heap_pool.c), and when no heap can
 * be made; errno untouched. */
kite_heap_t *_kite_secure_heap(void) {
  kite_heap_t *h = _kite_heap_tls;
  if (likely(h != &_kite_heap_empty)) return h;
  int e = errno;
  h = _kite_heap_get();
  errno = e;
  return h;
}

/* The slot to fill is empty: the ring's first round (fill it), or a thread without a heap
 * (the static empty heap's ring: its heap is made now, or, when none can be, the core frees
 * the block now). */
static KITE_COLD void quarantine_push_empty(quarantine_t *q, void *p, kite_page_t *pg, uint32_t i) {
  if (q == &_kite_heap_empty.secure.ring) {
    kite_heap_t *h = _kite_secure_heap();
    if (!h) {
      release(p, pg, i);
      return;
    }
    q = &h->secure.ring; /* a fresh heap: every slot empty (its making frees nothing into it) */
  }
  uint32_t k = q->next;
  q->slot[k] = p;
  q->page[k] = pg;
  q->index[k] = (uint16_t)i;
  q->next = (k + 1) & (KITE_SECURE_QUARANTINE - 1);
}

/* first in, first out: a block stays out of use for the next KITE_SECURE_QUARANTINE
 * frees of this thread. */
static inline __attribute__((always_inline)) void quarantine_push(void *p, kite_page_t *pg, uint32_t i) {
  kite_heap_t *h = _kite_heap_tls;
  quarantine_t *q = &h->secure.ring;
  uint32_t k = q->next;
  void *old = q->slot[k];
  if (unlikely(old == NULL)) {
    quarantine_push_empty(q, p, pg, i);
    return;
  }
  q->next = (k + 1) & (KITE_SECURE_QUARANTINE - 1); /* first: frees its register (no stack frame) */
  kite_page_t *old_pg = q->page[k];
  uint32_t old_i = q->index[k];
  q->slot[k] = p;
  q->page[k] = pg;
  q->index[k] = (uint16_t)i;
  release_by(h, old, old_pg, old_i);
}

/* ---- free ---- */
/* Small block p (block i of page pg, claimed and zeroed) of a page with no key: a
 * first-class heap's block skips the quarantine (kite_heap_destroy frees its pages whole);
 * another (an abandoned page's, or this thread's heap made after its exit began) is
 * quarantined. Out of line, called last. */
static KITE_NOINLINE NO_IPA void small_free_keyless(void *p, kite_page_t *pg, uint32_t i) {
  kite_heap_t *owner = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED);
  if (owner != _kite_heap_tls && owner != NULL && owner->user) release(p, pg, i);
  else quarantine_push(p, pg, i);
}

/* free(p) of carved block i of small page pg (classify.h's answer, kept with the block in
 * the quarantine: the core's free takes it as it is, no second lookup). */
static inline __attribute__((always_inline)) void small_free(kite_page_t *pg, void *p, uint32_t i) {
  uint32_t bs = pg->block_size;
  uint64_t c = canary_of(p), seen = c;
#if KITE_SECURE_FLOOR /* secure_layout.h: the canary checked and marked, the head zeroed, no more */
  seen = *canary_slot(p, bs);
  if (unlikely(seen != c)) {
    free_refused(p, seen);
    return;
  }
  *canary_slot(p, bs) = _kite_secure_freed_mark_of(c);
  zero_free_block(p, bs);
  _kite_core_free_small(pg, p, i);
  return;
#endif
  /* the claim: exactly one free of a live block wins, whatever the threads do */
  if (unlikely(!__atomic_compare_exchange_n(canary_slot(p, bs), &seen, _kite_secure_freed_mark_of(c), false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))) {
    free_refused(p, seen);
    return;
  }
  zero_free_block(p, bs);
  /* A thread's own heap is never a first-class one; nor is a page with a key, read after
   * the claim: the block is still LIVE in the core, so its page cannot be given up and
   * owned again meanwhile, and a first-class heap's pages carry key 0 (heap.h). So only a
   * page without a key (abandoned, first-class, or of a heap made after its thread's exit
   * began) needs its heap looked at. */
  if (likely(KITE_LOAD_RELAXED(pg->owner_key) != 0)) quarantine_push(p, pg, i);
  else small_free_keyless(p, pg, i);
}

/* small_free of a block kite_free found off its fast path (a page with no key, or through
 * classify.h): out of line, so the fast path keeps one copy of small_free and no frame. */
static KITE_NOINLINE NO_IPA void small_free_generic(kite_page_t *pg, void *p, uint32_t i) { small_free(pg, p, i); }

/* The fast path finds small blocks as free.c's does: the unit's descriptor through the page
 * map (pagemap.h M1), a block start by the multiply, carved (below capacity; C3's answer
 * for these blocks), and a key on the page, this thread's or another's (classify.h C2: any
 * key makes it a small page's head, with p in its first unit); a page with no key from
 * the descriptor's heap (below); other pointers: classify.h. */
KITE_API void kite_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (likely((u >> KITE_ARENA_SHIFT) < KITE_PAGEMAP_SIZE)) {
    kite_page_t *pg = _kite_pagemap_unit(u);
    /* acquire, as free.c's: another thread's key makes the fields read below at least as
     * new as the page's set-up */
    uintptr_t owner = __atomic_load_n(&pg->owner_key, __ATOMIC_ACQUIRE);
    uint64_t i;
    /* the index and capacity of any descriptor are readable (M1), and mean something only
     * with a key (C2: then pg is a head and p lies in its first unit) */
    if (likely(_kite_block_index(pg, u & (KITE_UNIT_SIZE - 1), &i) && i < __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED) &&
               owner != 0)) {
      /* this thread's block or another's: one path (small_free looks at the key again
       * after its claim; the quarantine's release tells the two apart) */
      small_free(pg, p, (uint32_t)i);
      return;
    }
    /* a page with no key (abandoned, a first-class heap's), as free.c's free_arena_generic
     * finds it, with the capacity checked too */
    if (likely(_kite_owned_block(pg, u, &i))) {
      small_free_generic(pg, p, (uint32_t)i);
      return;
    }
  }
  kite_ptr_t c;
  if (likely(_kite_classify(p, &c) == KITE_PTR_SMALL)) small_free_generic(c.page, p, c.index);
  else _kite_secure_free_other(p);
}

KITE_API void kite_free_sized(void *p, size_t size) { (void)size; kite_free(p); }
KITE_API void kite_free_aligned_sized(void *p, size_t alignment, size_t size) { (void)alignment; (void)size; kite_free(p); }

/* ---- allocation ---- */

/* A small block from alloc (the core, asked for n + 8 bytes), made ready; a block found
 * written after free (only when a test hook lets the program go on) is left out of use
 * and another one taken. */
#define SMALL_FROM(alloc)                                   \
  for (int tries_ = 0; tries_ < 8; tries_++) {              \
    void *p_ = (alloc);                                     \
    if (!p_) return NULL;                                   \
    if (likely(small_ready(p_))) return p_;                 \
  }                                                         \
  errno = ENOMEM;                                           \
  return NULL

static KITE_NOINLINE void *malloc_generic(size_t n) {
  if (likely(n <= SMALL_LIMIT)) {
    /* the class's current page, which the core's small path takes first, popped here (with
     * its quick refill, as _kite_malloc_small_generic does it: the page's own frees become
     * its allocation list), so the block's page is at hand for the check: above 1016
     * bytes, and when the direct page had none (with the quarantine feeding one block at a
     * time to the page's own frees, that is most mallocs of a steady loop) */
    kite_heap_t *h = _kite_heap_tls;
    unsigned c = _kite_class_of(n + KITE_SECURE_CANARY);
    kite_page_t *pg = h->queue[c].first;
    /* the quick refill: not while the heap profiler samples, which counts each list the
     * core's small path hands out (prof.h) */
    if (pg == NULL || pg->free == KITE_LINK_END)
      pg = KITE_LOAD_RELAXED(_kite_prof_enabled) ? NULL : _kite_heap_current_page(h, c);
    if (pg) {
      void *b = _kite_page_pop(pg);
      if (likely(block_ready(b, pg->block_size))) return b;
    }
    SMALL_FROM(_kite_core_malloc(n + KITE_SECURE_CANARY));
  }
  return _kite_secure_large_alloc(n, 0, false);
}

/* Block b, just popped for malloc(n), changed while free: reported (take_refused), kept out of
 * use, and malloc goes on with another block. Called last (no frame on malloc's fast path). */
static KITE_COLD NO_IPA void *malloc_refused(void *b, size_t n) {
  kite_page_t *pg = small_page_of(b); /* b was popped from its small page's list: found */
  if (pg) take_refused(b, pg->block_size); else secure_error(WRITE_AFTER_FREE, b);
  return malloc_generic(n);
}

/* The core's pop, inlined as alloc.c's is (the page at hand for the check): one compare
 * for "a carved free block" (the list's end is above every capacity; another index past
 * them goes to malloc_generic, whose pop reports it), the start from heap.h's direct_start. */
KITE_API void *kite_malloc(size_t n) {
  if (likely(n <= KITE_DIRECT_MAX - KITE_SECURE_CANARY)) {
    kite_heap_t *h = _kite_heap_tls;
    kite_page_t *pg = h->direct[n + KITE_SECURE_CANARY];
    uint32_t i = pg->free;
    if (likely(i < pg->capacity)) {
      uint16_t *l = pg->links;
      pg->free = l[i];
      __atomic_store_n(&l[i], (uint16_t)KITE_LINK_LIVE, __ATOMIC_RELAXED); /* remote.c R1 */
      pg->used++;
      uint32_t bs = pg->block_size;
      void *b = KITE_TOOL_START(h->direct_start[n + KITE_SECURE_CANARY]) + ((i * bs) & (uint32_t)(KITE_SMALL_PAGE_MAX - 1));
      if (likely(block_take(b, bs))) return b;
      return malloc_refused(b, n);
    }
  }
  return malloc_generic(n);
}

KITE_API void *kite_calloc(size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) { errno = ENOMEM; return NULL; }
  if (n > SMALL_LIMIT) return _kite_secure_large_alloc(n, 0, true);
  void *p = kite_malloc(n); /* the inlined pop up to 1016 bytes */
  /* block_ready checked the first KITE_SECURE_ZERO_MAX bytes zero; the rest may hold old data */
  if (p && n > KITE_SECURE_ZERO_MAX) memset((uint8_t *)p + KITE_SECURE_ZERO_MAX, 0, n - KITE_SECURE_ZERO_MAX);
  return p;
}

static void *aligned(size_t align, size_t n) {
  if (align <= 16) return kite_malloc(n);
  if (n <= SMALL_LIMIT && align <= KITE_UNIT_SIZE) { SMALL_FROM(_kite_core_memalign(align, n + KITE_SECURE_CANARY)); }
  return _kite_secure_large_alloc(n, align, false);
}

KITE_API int kite_posix_memalign(void **out, size_t align, size_t n) { return _kite_posix_memalign_via(aligned, out, align, n); }
KITE_API void *kite_aligned_alloc(size_t align, size_t n) { return _kite_aligned_alloc_via(aligned, align, n); }
KITE_API void *kite_memalign(size_t align, size_t n) { return _kite_aligned_alloc_via(aligned, align, n); }
KITE_API void *kite_valloc(size_t n) { return aligned(KITE_OS_PAGE, n); }
KITE_API void *kite_pvalloc(size_t n) { return _kite_pvalloc_via(aligned, n); }

/* The usable size of live block p; 0 for a pointer that is not a block. A small block whose
 * canary is not intact is reported (what: the caller's name for a freed block); so is a
 * pointer that is no block start at all (the stack, a global, inside a block) when foreign
 * is not NULL (the caller's name for it). A block's usable size is never 0. */
static size_t usable(const void *p, const char *what, const char *never, const char *foreign) {
  kite_page_t *pg = small_page_of(p);
  if (pg) {
    uint64_t seen = __atomic_load_n(canary_slot(p, pg->block_size), __ATOMIC_RELAXED);
    if (unlikely(seen != canary_of(p))) { secure_error(canary_verdict(p, seen, what, never), p); return 0; }
    return pg->block_size - KITE_SECURE_CANARY;
  }
  if (_kite_secure_is_large(p)) return _kite_secure_guarded_usable(p);
  if (foreign) secure_error(foreign, p);
  return 0;
}

/* realloc of small block p, block i of page pg, found live (its canary intact), n > 0: in
 * place within the class; else a new block (one that grows gets the core's 25% headroom,
 * alloc.c's realloc_small_move: a vector growing by small steps moves every ~2 classes,
 * not every one), the copy, and p's free on the page found here (small_free: the claim,
 * so a racing free of p is still caught; no second lookup). */
static void *realloc_small(void *p, kite_page_t *pg, uint32_t i, size_t n) {
  size_t old = pg->block_size - KITE_SECURE_CANARY;
  if (n <= old && n > old / 2) return p; /* same class: in place */
  size_t want = n;
  if (n > old && n <= SMALL_LIMIT) {
    size_t grown = old + old / 4;
    if (grown > n) want = grown < SMALL_LIMIT ? grown : SMALL_LIMIT;
  }
  void *q = kite_malloc(want);
  if (unlikely(!q) && want != n) q = kite_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  small_free(pg, p, i);
  return q;
}

KITE_API void *kite_realloc(void *p, size_t n) {
  if (p == NULL) return kite_malloc(n);
  if (n == 0) { kite_free(p); return NULL; }
  uint32_t i;
  kite_page_t *pg = small_block_of(p, &i);
  size_t old;
  if (pg) {
    uint64_t seen = __atomic_load_n(canary_slot(p, pg->block_size), __ATOMIC_RELAXED);
    if (likely(seen == canary_of(p))) return realloc_small(p, pg, i, n);
    /* as usable() reports it, then refused below */
    secure_error(canary_verdict(p, seen, "realloc(): use after free", "realloc(): invalid pointer (a block never handed out)"), p);
    old = 0;
  } else {
    old = _kite_secure_is_large(p) ? _kite_secure_guarded_usable(p) : 0;
  }
  if (old == 0) {
    secure_error("realloc(): invalid pointer", p);
    errno = EINVAL;
    return NULL;
  }
  if (n <= old && n > old / 2) return p; /* the same large run: in place */
  void *q = kite_malloc(n);
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

/* A pointer that is no block is reported in the default build's words (free.c). */
KITE_API size_t kite_malloc_usable_size(const void *p) {
  return p ? usable(p, "malloc_usable_size(): use after free",
                    "malloc_usable_size(): invalid pointer (a block never handed out)",
                    "malloc_usable_size(): invalid pointer") : 0;
}

KITE_API bool kite_owns(const void *p) {
  if (!p || !_kite_core_owns(p)) return false;
  kite_page_t *pg = small_page_of(p);
  return !pg || __atomic_load_n(canary_slot(p, pg->block_size), __ATOMIC_RELAXED) == canary_of(p);
}

KITE_API int kite_malloc_trim(size_t pad) {
  quarantine_flush_own();
  return _kite_core_malloc_trim(pad);
}

/* ---- first-class heaps ---- */
KITE_API kite_heap_t *kite_heap_new(void) { return _kite_core_heap_new(); }

KITE_API void kite_heap_destroy(kite_heap_t *handle) {
  if (!handle) return;
  kite_heap_t *h = _kite_heap_of_handle(handle, "kite_heap_destroy(): invalid or stale heap");
  if (!h) return;
  /* its large and huge blocks lose their guards before the core frees them whole */
  for (kite_owned_t *o = h->owned; o; o = o->next) _kite_secure_unguard(o->block);
  _kite_core_heap_destroy(handle);
}

KITE_API void *kite_heap_malloc(kite_heap_t *h, size_t n) {
  if (n <= SMALL_LIMIT) { SMALL_FROM(_kite_core_heap_malloc(h, n + KITE_SECURE_CANARY)); }
  if (n > KITE_MAX_REQUEST - 2 * KITE_SECURE_GUARD) { errno = ENOMEM; return NULL; }
  return _kite_secure_guarded(_kite_core_heap_malloc(h, PAGE_DOWN((n ? n : 1) + KITE_OS_PAGE - 1) + KITE_SECURE_GUARD));
}

KITE_API void *kite_heap_calloc(kite_heap_t *handle, size_t count, size_t size) {
  if (!_kite_heap_of_handle(handle, "kite_heap_calloc(): invalid or stale heap")) return NULL;
  return _kite_heap_calloc_via(kite_heap_malloc, handle, count, size);
}

#if KITE_OVERRIDE
/* The standard names, as aliases of the wrappers (alloc.c and free.c define none in this
 * build). */
KITE_ALLOC_ALIASES
KITE_FREE_ALIASES
#endif
#endif /* KITE_SECURE */
