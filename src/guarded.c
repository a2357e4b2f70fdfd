/* src/guarded.c -- sampled guarded allocations (contract in guarded.h).
 *
 * The region: one reservation of KITE_ARENA_SIZE bytes aligned to its size, so that its
 * page-map entry (KITE_PM_GUARDED) is its own and free() routes a pointer there by one
 * look at the page map. It is PROT_NONE but for the pages of live blocks:
 *   [guard][slot 0][guard][slot 1] ... [guard][slot SLOTS-1][never accessible]
 * a guard is one page, a slot KITE_GUARDED_MAX bytes. A block of n bytes takes usable =
 * max(n, 1) rounded up to 16 bytes at the END of its slot, so the byte after its usable
 * end is the next guard page; only the pages it spans become read/write.
 *
 * Alignment against right alignment: malloc promises 16-byte alignment, so the block can
 * end exactly at the guard only when n is a multiple of 16. An overflow of fewer than
 * usable - n (at most 15) bytes stays in the block's padding and is not caught; it is also
 * within what malloc_usable_size says the program may use. Every overflow past the usable
 * end faults at its first byte. An underflow faults only once it leaves the block's first
 * page (the bytes of that page before the block are accessible): at once for blocks that
 * start on a page boundary, within up to 4 KiB - 16 bytes for the others.
 *
 * Invariants
 *   G1 A slot at index >= fresh was never used. Every other slot is LIVE (handed out),
 *      FREEING (a free is making it inaccessible: not on the queue yet) or FREED (on the
 *      queue of freed slots exactly once); all three have block and size set.
 *   G2 Only a LIVE slot's pages [page of block, slot end) are accessible; a slot becomes
 *      FREED only after its pages were made PROT_NONE. Its pages below the last one are
 *      given back at its free (a block over one page); its last page, where every block of
 *      at most a page lies, stays committed while the slot waits (G6), so a reuse of the
 *      slot faults nothing and no free of a small block asks the kernel to decommit.
 *   G3 A slot is reused only once every never-used slot has been taken, and then the
 *      oldest freed one first (a FIFO): a freed block stays inaccessible as long as possible.
 *   G4 slot_lock guards fresh, the queue, the counters and every slot's state; it is a leaf
 *      (nothing is called while it is held but G6's decommits, system calls that take no
 *      lock of kite's). The fault handler reads without it.
 *   G5 The region is made (mapped, protected, published) under make_lock, which a fork's
 *      prepare takes (before slot_lock): a forked child never holds mappings a thread of
 *      the parent had made and not published. It finds the region made (the fork waited
 *      for the making), or not begun, or claimed and nothing mapped yet (a fork between the
 *      claim and the lock: once.h O5 takes it back, and the child makes its own).
 *   G6 q_held is NO_SLOT or a slot on the queue: every queued slot before it (from the
 *      head) has its last page given back; it and the slots after it may keep theirs. A
 *      queued slot's last page is given back once it has waited GUARDED_HOLD_MS (checked at
 *      each guarded free, in queue order, at most HOLD_BATCH a free, under slot_lock: a
 *      slot on the queue can be taken at any moment, and a decommit after its reuse would
 *      clear the live block), at once with KITE_PURGE_DELAY_MS=0, and at malloc_trim
 *      (_kite_guarded_trim); with a negative delay at malloc_trim only. A program that
 *      samples often reuses its slots before they age (it pays no decommit and no fault);
 *      one that samples seldom pays them, seldom. At most one page a slot is held.
 *
 * Sampling, without a line in the malloc fast path: each thread keeps `left`, the eligible
 * allocations (at most KITE_GUARDED_MAX bytes) to let pass before its next sampled one,
 * drawn from the geometric distribution of parameter 1/N (every allocation sampled with
 * probability 1/N, independently). A request reaches the sampler only when its page's
 * allocation list is empty (the malloc fast path fails for sizes up to KITE_DIRECT_MAX;
 * larger ones come here every time and are popped at once while their page has a block):
 * the refill is counted whole (every block of the list is handed out before the class
 * comes back), from the page's counts before its first pop, the quick refill's (the page's
 * local list) here and the generic one's by the heap (heap.h's _kite_heap_refill_charged,
 * which first joins a page's local list to its allocation list: a page from further down
 * the queue may hold both, and the fast path takes one list at a time, so a count of the
 * two would count the local one again at the quick refill after it),
 * and when the sampled allocation falls inside the
 * list, the list is cut after `left` blocks (the rest goes to the page's local free list,
 * where the next refill finds it: page.h's lists stay whole), so the fast path fails
 * exactly at the sampled allocation and brings it here. The one other way a list the fast
 * path is using could grow, heap_reclaim's collect of another class's current page, is
 * skipped while sampling is on (heap.c). The count runs ahead of
 * the allocations by at most one list per size class. Not sampled: first-class heaps
 * (kite_heap_malloc) and aligned requests above 16 bytes.
 */
#define _GNU_SOURCE
#include "guarded.h"
#include "heap.h"
#include "page.h"
#include "pagemap.h"
#include "stack.h"
#include "message.h"
#include "os.h"
#include "once.h"
#include <errno.h>
#include <string.h>

/* a slot is KITE_GUARDED_MAX bytes, or one OS page where that is larger (64 KiB pages) */
#define SLOT_BYTES (KITE_GUARDED_MAX > KITE_OS_PAGE ? KITE_GUARDED_MAX : KITE_OS_PAGE)
#define STRIDE (SLOT_BYTES + KITE_OS_PAGE)
#define SLOTS ((uint32_t)((KITE_ARENA_SIZE - KITE_OS_PAGE) / STRIDE))
#define SLOTS_MAX ((uint32_t)(KITE_ARENA_SIZE / (KITE_GUARDED_MAX + 4096))) /* SLOTS at 4 KiB pages */
#define NO_SLOT UINT32_MAX
#ifndef GUARDED_HOLD_MS
/* How long a freed slot keeps its last page committed on the queue (G6), in ms. */
#define GUARDED_HOLD_MS 10000
#endif
#define HOLD_BATCH 64 /* aged slots decommitted at most by one free (G6) */
#ifdef KITE_TEST_HOOKS
static int64_t hold_ms = GUARDED_HOLD_MS; /* (tests shorten it: _kite_test_guarded_hold) */
#else
#define hold_ms ((int64_t)GUARDED_HOLD_MS)
#endif
enum { SLOT_NEVER = 0, SLOT_LIVE = 1, SLOT_FREEING = 2, SLOT_FREED = 3 };

typedef struct {
  uintptr_t block;   /* the user pointer */
  uint32_t size;     /* the request */
  uint8_t state;     /* SLOT_* (G1) */
  uint32_t next;     /* the queue of freed slots (NO_SLOT: last) */
  uint64_t freed_ms; /* when it joined the queue (_kite_os_now_ms; 0 when no delay applies) */
  kite_stack_t alloc, freed;
} slot_t;

static uint8_t *region;  /* set once, before region_once is done */
static slot_t *slots;    /* SLOTS entries, mapped with the region */
static kite_once_t region_once; /* once.h: the region's making (FAILED: no region, for good) */
static kite_lock_t slot_lock = KITE_LOCK_INIT; /* lock: the slots' states, the freed queue, fresh, the counts */
static kite_lock_t make_lock = KITE_LOCK_INIT; /* lock: the region's making (G5) */
static uint32_t fresh, q_head = NO_SLOT, q_tail = NO_SLOT, q_held = NO_SLOT; /* G6 */
static uint64_t n_allocs, n_frees;

static __thread int64_t left __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec"))); /* 0: not seeded */

static inline uintptr_t slot_end(uint32_t s) { return (uintptr_t)region + (uintptr_t)(s + 1) * STRIDE; }
static inline size_t usable_of(size_t n) { return n == 0 ? 16 : (n + 15) & ~(size_t)15; }
static inline uintptr_t page_down(uintptr_t u) { return u & ~(uintptr_t)(KITE_OS_PAGE - 1); }

/* The slot whose data area holds u (not a guard page); false when there is none. */
static bool slot_of(uintptr_t u, uint32_t *s) {
  uintptr_t r = (uintptr_t)region;
  if (!_kite_once_done(&region_once) || u < r) return false;
  uint64_t off = u - r;
  if (off / STRIDE >= SLOTS || off % STRIDE < KITE_OS_PAGE) return false;
  *s = (uint32_t)(off / STRIDE);
  return true;
}

/* ---- the random gap between samples ---- */

static uint64_t rng_next(void) { /* xorshift64* */
  uint64_t x = rng;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Allocations to let pass before the next sampled one: geometric, P(k) = (1-p)^k p. */
static int64_t draw(int64_t n) {
  if (n <= 1) return 0;
  double u = (double)((rng_next() >> 11) + 1) * 0x1p-53; /* (0, 1] */
  double g = _kite_ln(u) / _kite_ln(1.0 - 1.0 / (double)n);
  return g < 1e15 ? (int64_t)g : (int64_t)1e15;
}

/* ---- the region ---- */

static bool on_fault(void *addr);

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_region_mapped)(void);
#endif

/* Makes the region for the thread that claimed region_once, under make_lock (G5). */
static KITE_COLD bool region_build(void) {
  size_t meta = ((size_t)SLOTS * sizeof(slot_t) + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  _kite_lock(&make_lock);
  uint8_t *r = _kite_os_map_aligned(KITE_ARENA_SIZE, KITE_ARENA_SIZE, NULL);
  slot_t *m = r ? _kite_os_map_aligned(meta, KITE_OS_PAGE, NULL) : NULL;
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_region_mapped) _kite_test_hook_region_mapped();
#endif
  bool ok = m && _kite_os_protect(r, KITE_ARENA_SIZE, false);
  if (ok) {
    slots = m;
    region = r;
    /* before the handler: a fault it sees in the region finds the slots */
    ok = _kite_os_catch_faults(on_fault);
  }
  if (!ok) {
    region = NULL;
    slots = NULL;
    if (m) _kite_os_unmap(m, meta);
    if (r) _kite_os_unmap(r, KITE_ARENA_SIZE);
    _kite_once_end(&region_once, false);
    _kite_unlock(&make_lock);
    return false;
  }
  _kite_pagemap_set((uintptr_t)r, KITE_ARENA_SIZE, KITE_PM_GUARDED);
  _kite_once_end(&region_once, true);
  _kite_unlock(&make_lock);
  return true;
}

static KITE_COLD bool region_make(void) {
  if (_kite_once_claim(&region_once, _kite_os_getpid(), _kite_os_yield)) return region_build();
  return _kite_once_done(&region_once); /* another thread made it, or failed to */
}

/* Slot s, FREEING (or LIVE and never handed out), joins the queue's tail (slot_lock held). */
static void queue_push(uint32_t s, uint64_t now) {
  slot_t *m = &slots[s];
  m->next = NO_SLOT;
  m->freed_ms = now;
  __atomic_store_n(&m->state, (uint8_t)SLOT_FREED, __ATOMIC_RELEASE);
  if (q_tail != NO_SLOT) slots[q_tail].next = s; else q_head = s;
  q_tail = s;
  if (q_held == NO_SLOT) q_held = s;
}

/* G6: the slots that waited GUARDED_HOLD_MS give their last page back, oldest first, at
 * most HOLD_BATCH of them (slot_lock held). The clock was read before the lock, by threads
 * that may queue out of its order: a slot a little younger than now is one that waits on. */
static void queue_age(uint64_t now) {
  for (int i = 0; i < HOLD_BATCH && q_held != NO_SLOT; i++) {
    if ((int64_t)(now - slots[q_held].freed_ms) < hold_ms) break;
    _kite_os_decommit((void *)(slot_end(q_held) - KITE_OS_PAGE), KITE_OS_PAGE);
    q_held = slots[q_held].next;
  }
}

static KITE_NOINLINE void *guarded_alloc(size_t n) {
  if (!_kite_once_done(&region_once) && !region_make()) return NULL;
  kite_stack_t st;
  _kite_stack_capture(&st, 0);
  size_t usable = usable_of(n);
  uint32_t s = NO_SLOT;
  _kite_lock(&slot_lock);
  if (fresh < SLOTS) {
    s = fresh++;
  } else if (q_head != NO_SLOT) { /* G3: the oldest freed slot */
    s = q_head;
    q_head = slots[s].next;
    if (q_head == NO_SLOT) q_tail = NO_SLOT;
    if (q_held == s) q_held = q_head; /* (its page held: the block finds it, no fault) */
  }
  uintptr_t b = 0;
  if (s != NO_SLOT) {
    slot_t *m = &slots[s];
    b = slot_end(s) - usable;
    __atomic_store_n(&m->block, b, __ATOMIC_RELAXED);
    m->size = (uint32_t)n;
    m->alloc = st;
    m->freed.depth = 0;
    __atomic_store_n(&m->state, (uint8_t)SLOT_LIVE, __ATOMIC_RELEASE);
    n_allocs++;
  }
  _kite_unlock(&slot_lock);
  if (s == NO_SLOT) return NULL; /* every slot live or waiting: not sampled */
  if (unlikely(!_kite_os_protect((void *)page_down(b), slot_end(s) - page_down(b), true))) {
    /* the kernel refused (its limit on mappings): the slot goes to the queue unused */
    uint64_t now = _kite_os_now_ms();
    _kite_lock(&slot_lock);
    queue_push(s, now);
    n_frees++;
    _kite_unlock(&slot_lock);
    return NULL;
  }
  return (void *)b;
}

static KITE_NOINLINE void *cut_list(kite_page_t *pg, void *p);

/* The list just put on page pg (the current page of class cls of h, after the pop that
 * served this allocation) is handed to the fast path: count it, and cut it where the
 * sampled allocation falls (see the file comment). Owner only. */
static inline __attribute__((always_inline)) void *account_page(kite_heap_t *h, unsigned cls, kite_page_t *pg, void *p) {
  kite_assert(!pg->in_full && pg == h->queue[cls].first && pg == h->pinned[cls]);
  if (pg->free == KITE_LINK_END) return p;
  /* a generic refill's page may hold its own frees on the local list: counted once, on
   * the one list the fast path is handed (heap.h's _kite_heap_list_join) */
  if (unlikely(pg->local_free != KITE_LINK_END)) _kite_heap_list_join(h, pg);
  int64_t k = _kite_heap_list_count(pg);
  if (left >= k) {
    left -= k;
    return p;
  }
  return cut_list(pg, p); /* a tail call: the caller keeps no frame for it */
}
/* account_page for the class's current page, whatever the refill left there; p is the
 * block the refill served (NULL: none, nothing counted). */
static inline __attribute__((always_inline)) void *account_list(kite_heap_t *h, unsigned cls, void *p) {
  kite_page_t *pg = h->queue[cls].first;
  return p && pg ? account_page(h, cls, pg, p) : p;
}

/* account_list's rare part: the sampled allocation falls inside pg's list (left < its
 * length): cut the list after `left` blocks, the rest to the local list, which every
 * refill that counts leaves empty (_kite_heap_list_join). Returns p (the block just served). */
static KITE_NOINLINE void *cut_list(kite_page_t *pg, void *p) {
  kite_assert(pg->local_free == KITE_LINK_END);
  uint16_t *l = pg->links;
  if (left == 0) { /* the next allocation of this class is the sampled one */
    pg->local_free = pg->free;
    pg->free = KITE_LINK_END;
    return p;
  }
  uint32_t j = pg->free;
  for (int64_t i = 1; i < left; i++) j = l[j]; /* left < |free|: stays on the list */
  uint32_t rest = l[j];
  if (rest != KITE_LINK_END) {
    __atomic_store_n(&l[j], (uint16_t)KITE_LINK_END, __ATOMIC_RELAXED);
    pg->local_free = (uint16_t)rest;
  }
  left = 0;
  return p;
}

/* A generic refill's rare case (heap.h's _kite_heap_refill_charged): the sampled
 * allocation lies inside the list just refilled on pg (0 < left < its count). This
 * allocation is counted, and the list cut after `left` more (account_page's cut, after the
 * pop): the same count as one allocation and then the rest. */
static KITE_NOINLINE void *refill_over(kite_page_t *pg) {
  kite_assert(left > 0);
  left--;
  return cut_list(pg, _kite_page_pop(pg));
}

/* The sampled allocation, or the thread's first visit (its heap and its count). */
static KITE_COLD void *sample_or_start(kite_heap_t *h, size_t n) {
  _kite_options_ensure(); /* the first requests come here before the options are read */
#if defined(KITE_SECURE) && KITE_SECURE
  int64_t rate = 0; /* the secure build has guard pages of its own (options.h) */
#else
  int64_t rate = _kite_opt(KITE_OPT_GUARDED_SAMPLE);
#endif
  if (unlikely(rate <= 0 || _kite_stack_busy())) return _kite_malloc_small_generic(h, n);
  if (unlikely(h == &_kite_heap_empty)) { /* the thread's first allocation: its heap first */
    kite_heap_t *made = _kite_heap_get();
    if (!made) return _kite_malloc_small_generic(h, n);
    h = made;
  }
  void *p;
  if (unlikely(rng == 0)) { /* the thread's first visit: its first gap */
    _kite_os_random(&rng, sizeof rng);
    rng |= 1;
    left = draw(rate);
    if (left > 0) {
      left--;
      p = _kite_malloc_small_generic(h, n);
      return account_list(h, _kite_class_of(n), p);
    }
  }
  left = draw(rate); /* this allocation is the sampled one */
  p = guarded_alloc(n);
  if (p) return p;
  p = _kite_malloc_small_generic(h, n); /* no slot free: a plain block, its list counted */
  return account_list(h, _kite_class_of(n), p);
}

/* A refill the two common ones below do not take: the sampled allocation (left == 0), the
 * thread's first visit (left is 0 then too), a list the sampled allocation falls inside
 * (left < its length: cut there), a thread past its exit teardown (the empty heap, whose
 * late requests heap.c serves: not counted), statistics on (the quick refill skips their
 * counting), a page whose allocation list the fast path did not empty, no current page.
 * One allocation counted, then the rest of the list (account_page), as the file comment
 * says; a generic refill is counted as _kite_guarded_malloc counts it. */
static KITE_NOINLINE void *refill_counted(size_t n, kite_heap_t *h, unsigned c) {
  if (unlikely(left == 0)) return sample_or_start(h, n);
  if (unlikely(h == &_kite_heap_empty)) {
    left--;
    return _kite_malloc_small_cls(h, c);
  }
  kite_page_t *pg = _kite_heap_current_page(h, c);
  if (pg == NULL) return _kite_heap_refill_charged(h, c, &left, refill_over);
  left--;
  return account_page(h, c, pg, _kite_page_pop(pg));
}

void *_kite_guarded_malloc(size_t n, kite_heap_t *h) {
  unsigned c = _kite_class_of(n);
  kite_page_t *pg = h->queue[c].first;
  if (pg == NULL) return refill_counted(n, h, c); /* a fresh page, or the empty heap */
  /* Both refills count the list they hand the fast path whole, this allocation included,
   * from the page's counts (_kite_heap_list_count) before its first pop, with one compare
   * and one store of the countdown while the sampled allocation lies beyond the list (left
   * >= the count; left == 0 fails it). The generic refill (heap.c's: no local list to take) is
   * charged by the heap (a tail call, no frame here); the quick refill (heap.h's, inline:
   * the page's local list becomes its allocation list) here. Anything else, the sampled
   * allocation included, goes the counted way before any list moves (cut_list's cut stays
   * put). */
  if (pg->free == KITE_LINK_END) {
    if (pg->local_free == KITE_LINK_END) {
      if (likely(left > 0)) return _kite_heap_refill_charged(h, c, &left, refill_over);
      return refill_counted(n, h, c);
    }
    int64_t k = _kite_heap_list_count(pg);
    if (unlikely(left < k || _kite_opt(KITE_OPT_SHOW_STATS))) return refill_counted(n, h, c);
    left -= k;
    pg->free = pg->local_free;
    pg->local_free = KITE_LINK_END;
  }
  /* a block of a list counted when it was handed out: sizes above the direct range come
   * here every time (sizes up to it find an empty list here, the fast path's page being
   * this one, heap.c I-P1) */
  return _kite_page_pop(pg);
}

void _kite_guarded_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  uint32_t s;
  if (!slot_of(u, &s)) {
    _kite_report_invalid("free(): invalid pointer (a guard page of the guarded region)", p);
    return;
  }
  kite_stack_t st;
  _kite_stack_capture(&st, 0);
  slot_t *m = &slots[s];
  _kite_lock(&slot_lock);
  uint8_t state = m->state;
  if (state != SLOT_LIVE || m->block != u) {
    bool twice = state != SLOT_NEVER && m->block == u;
    _kite_unlock(&slot_lock);
    _kite_report_invalid(twice ? "free(): double free of a guarded block" : "free(): invalid pointer (not a guarded block's start)", p);
    return;
  }
  m->freed = st;
  __atomic_store_n(&m->state, (uint8_t)SLOT_FREEING, __ATOMIC_RELEASE);
  n_frees++;
  _kite_unlock(&slot_lock);
  /* G2, G6: the last page stays committed (given back at once only with a purge delay of
   * 0); the PROT_NONE is what catches a use after free, the one system call a small
   * block's free keeps */
  uintptr_t lo = page_down(u), last = slot_end(s) - KITE_OS_PAGE;
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (delay == 0) _kite_os_decommit((void *)lo, slot_end(s) - lo);
  else if (lo < last) _kite_os_decommit((void *)lo, last - lo);
  if (unlikely(!_kite_os_protect((void *)lo, slot_end(s) - lo, false))) {
    /* cannot be made inaccessible: never reused either (it stays FREEING, off the queue),
     * its pages given back (a use after free reads zeroes, not the block) */
    _kite_os_decommit((void *)lo, slot_end(s) - lo);
    return;
  }
  uint64_t now = delay > 0 ? _kite_os_now_ms() : 0;
  _kite_lock(&slot_lock);
  queue_push(s, now);
  if (delay > 0) queue_age(now);
  _kite_unlock(&slot_lock);
}

size_t _kite_guarded_trim(void) {
  if (!_kite_once_done(&region_once)) return 0;
  size_t given = 0;
  _kite_lock(&slot_lock);
  for (; q_held != NO_SLOT; q_held = slots[q_held].next) {
    _kite_os_decommit((void *)(slot_end(q_held) - KITE_OS_PAGE), KITE_OS_PAGE);
    given += KITE_OS_PAGE;
  }
  _kite_unlock(&slot_lock);
  return given;
}

size_t _kite_guarded_usable(const void *p) {
  uintptr_t u = (uintptr_t)p;
  uint32_t s;
  if (!slot_of(u, &s)) return 0;
  slot_t *m = &slots[s];
  if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) != SLOT_LIVE || __atomic_load_n(&m->block, __ATOMIC_RELAXED) != u) return 0;
  return usable_of(m->size);
}

void _kite_guarded_counts(uint64_t *allocs, uint64_t *frees) {
  _kite_lock(&slot_lock);
  *allocs = n_allocs;
  *frees = n_frees;
  _kite_unlock(&slot_lock);
}

/* ---- the fault report (async-signal-safe: no lock, no malloc, no stdio) ---- */

static void out_signed(kite_out_t *o, int64_t v) {
  _kite_out_str(o, v < 0 ? "-" : "+");
  _kite_out_u64(o, v < 0 ? (uint64_t)-v : (uint64_t)v);
}

/* The slot a fault at a belongs to, and what it was: the slot whose data area holds a, or
 * for a guard page the nearer of the block that ends at it (an overflow) and the block
 * after it (an underflow). A freed block makes it a use after free. */
static const char *classify(uintptr_t a, uint32_t *slot) {
  uint64_t off = a - (uintptr_t)region;
  uint32_t k = (uint32_t)(off / STRIDE);
  *slot = NO_SLOT;
  if (k < SLOTS && off % STRIDE >= KITE_OS_PAGE) {
    slot_t *m = &slots[k];
    uint8_t st = __atomic_load_n(&m->state, __ATOMIC_ACQUIRE);
    if (st == SLOT_NEVER) return "wild access";
    *slot = k;
    if (st != SLOT_LIVE) return "use after free";
    return a < m->block ? "buffer underflow" : "wild access";
  }
  /* a guard page: before slot k, after slot k - 1 */
  uint64_t d_over = UINT64_MAX, d_under = UINT64_MAX;
  if (k >= 1 && k - 1 < SLOTS && __atomic_load_n(&slots[k - 1].state, __ATOMIC_ACQUIRE) != SLOT_NEVER)
    d_over = a - slot_end(k - 1);
  if (k < SLOTS && __atomic_load_n(&slots[k].state, __ATOMIC_ACQUIRE) != SLOT_NEVER)
    d_under = slots[k].block - a;
  if (d_over == UINT64_MAX && d_under == UINT64_MAX) return "wild access";
  bool over = d_over <= d_under;
  *slot = over ? k - 1 : k;
  if (__atomic_load_n(&slots[*slot].state, __ATOMIC_ACQUIRE) != SLOT_LIVE) return "use after free";
  return over ? "buffer overflow" : "buffer underflow";
}

static bool on_fault(void *addr) {
  uintptr_t a = (uintptr_t)addr, r = (uintptr_t)region;
  if (r == 0 || a < r || a - r >= KITE_ARENA_SIZE) return false;
  uint32_t s;
  const char *what = classify(a, &s);
  kite_out_t o = {.len = 0, .fd = KITE_MSG_FD};
  _kite_out_str(&o, "kite: guarded allocation: ");
  _kite_out_str(&o, what);
  _kite_out_str(&o, "\n  fault address: ");
  _kite_out_hex(&o, a);
  _kite_out_str(&o, "\n");
  if (s != NO_SLOT) {
    const slot_t *m = &slots[s];
    _kite_out_str(&o, "  block: ");
    _kite_out_hex(&o, m->block);
    _kite_out_str(&o, ", ");
    _kite_out_u64(&o, m->size);
    _kite_out_str(&o, " bytes (usable ");
    _kite_out_u64(&o, usable_of(m->size));
    _kite_out_str(&o, ")\n  offset from the block's start: ");
    out_signed(&o, (int64_t)(a - m->block));
    _kite_out_str(&o, "\n  allocated by thread ");
    _kite_out_u64(&o, m->alloc.tid);
    _kite_out_str(&o, ":\n");
    _kite_stack_print(&o, &m->alloc);
    if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) != SLOT_LIVE) {
      _kite_out_str(&o, "  freed by thread ");
      _kite_out_u64(&o, m->freed.tid);
      _kite_out_str(&o, ":\n");
      _kite_stack_print(&o, &m->freed);
    }
  }
  _kite_out_str(&o, "kite: aborting\n");
  _kite_out_flush(&o);
  _kite_os_abort();
}

/* ---- validators and fork ---- */

bool _kite_guarded_check(void) {
  if (!_kite_once_done(&region_once)) return true;
  if (_kite_pagemap_kind((uintptr_t)region) != KITE_PM_GUARDED) return _kite_check_failed("guarded: page-map entry of the region", (uintptr_t)region);
  uint64_t seen[(SLOTS_MAX + 63) / 64] = {0};
  bool ok = true;
  _kite_lock(&slot_lock);
  uint32_t queued = 0, live = 0, freeing = 0;
  for (uint32_t s = q_head; ok && s != NO_SLOT; s = slots[s].next) {
    if (s >= fresh) ok = _kite_check_failed("guarded: a never-used slot on the free queue", s);
    else if ((seen[s >> 6] >> (s & 63)) & 1) ok = _kite_check_failed("guarded: a slot twice on the free queue", s);
    else if (slots[s].state != SLOT_FREED) ok = _kite_check_failed("guarded: a slot on the free queue is not FREED", s);
    else if (slots[s].next == NO_SLOT && s != q_tail) ok = _kite_check_failed("guarded: the queue's tail", s);
    seen[s >> 6] |= (uint64_t)1 << (s & 63);
    queued++;
  }
  for (uint32_t s = 0; ok && s < SLOTS; s++) {
    const slot_t *m = &slots[s];
    if (s >= fresh) {
      if (m->state != SLOT_NEVER) ok = _kite_check_failed("guarded: a slot above fresh is in use", s);
      continue;
    }
    if (m->state == SLOT_FREED && !((seen[s >> 6] >> (s & 63)) & 1)) ok = _kite_check_failed("guarded: a FREED slot off the queue", s);
    else if (m->state == SLOT_NEVER) ok = _kite_check_failed("guarded: a slot below fresh was never used", s);
    else if (m->size > KITE_GUARDED_MAX || m->block + usable_of(m->size) != slot_end(s))
      ok = _kite_check_failed("guarded: block not at its slot's end", s);
    live += m->state == SLOT_LIVE;
    freeing += m->state == SLOT_FREEING;
  }
  if (ok && q_held != NO_SLOT && (q_held >= fresh || !((seen[q_held >> 6] >> (q_held & 63)) & 1)))
    ok = _kite_check_failed("guarded: the first held slot is not on the free queue", q_held);
  if (ok && live != n_allocs - n_frees) ok = _kite_check_failed("guarded: live slots != allocations - frees", live);
  if (ok && queued + freeing + live != fresh) ok = _kite_check_failed("guarded: slots unaccounted for", fresh);
  _kite_unlock(&slot_lock);
  return ok;
}

void _kite_guarded_fork_prepare(void) {
  _kite_lock(&make_lock); /* G5: a making under way ends before the fork */
  _kite_lock(&slot_lock);
}
void _kite_guarded_fork_parent(void) {
  _kite_unlock(&slot_lock);
  _kite_unlock(&make_lock);
}
/* Claimed in a forked child: the parent's thread that claimed the region (and had not yet
 * taken make_lock: nothing was mapped, G5) does not exist here, and every sampled
 * allocation would wait for it for good (once.h O5). Nothing can hold a block of it or have
 * read its slots (every reader checks that the region is done first, O3; the fault handler
 * for a region pointer, cleared here), so the child's next sampled allocation makes its
 * own. (A child no handler runs in, once.h O6, may keep mappings of a making under way at
 * the fork, reserved and untouched: at most one region's, docs/design.md.) */
void _kite_guarded_fork_child(void) {
  _kite_lock_fork_child(&make_lock);
  _kite_lock_fork_child(&slot_lock);
  if (_kite_once_fork_child(&region_once, NULL)) {
    region = NULL;
    slots = NULL;
  }
}

#ifdef KITE_TEST_HOOKS
/* Tests: act as a thread that claimed the region and is making it (false, doing nothing,
 * when it is made or being made already), then finish making it. */
bool _kite_test_guarded_claim(void) { return _kite_once_try(&region_once, _kite_os_getpid()); }
bool _kite_test_guarded_finish(void) { return region_build(); }
/* Tests: how long a freed slot keeps its page (G6), in ms; returns the value before. */
int64_t _kite_test_guarded_hold(int64_t ms) {
  int64_t was = hold_ms;
  hold_ms = ms;
  return was;
}
#endif
