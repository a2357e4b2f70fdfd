/* src/heap_impl.h -- what the heap module's files share (heap.c, heap_reclaim.c,
 * heap_abandon.c, heap_pool.c); nothing outside the module includes it.
 *
 * Data structures (the per-heap ones are kite_heap_t's, heap.h):
 *   queue[cls], full[cls]  doubly linked page queues (q_* below) of a heap's pages of class
 *                          cls: pages that may have a free block, and pages found full.
 *   h->lock                the full lists' spin lock (list_lock below).
 *   _kite_heap_lock        the module's one mutex (heap_pool.c): the heap pool, the list of
 *                          live heaps (_kite_heap_all), the abandoned lists (heap_abandon.c).
 *
 * Invariants (heap.h states the queue ones; these are the sharing rules):
 *   I-Q1 full[] and full_count[] change only under h->lock; the owner may peek at
 *        full_count without it (full_n), another heap only tries the lock (heap_steal).
 *   I-Q2 a page on a full list has no free block and no pin: its count is capacity,
 *        in_full set and used 1 (full_push, page.h); a local free takes it off at once.
 *   I-Q3 lock order: _kite_heap_lock, then a heap's lock; the owner never takes
 *        _kite_heap_lock while holding its own.
 *   I-Q4 a heap's counters (issued[], remote_frees) are written by its owner only, with
 *        relaxed stores (heap_count): other threads' statistics read them with relaxed loads.
 *
 * The small helpers are static inline here (they were file-local to one heap.c and the
 * compiler inlined them; they still are in every file that uses them).
 */
#ifndef KITE_HEAP_IMPL_H
#define KITE_HEAP_IMPL_H
#include "heap.h"
#include "page.h"
#include "arena.h"
#include "options.h"
#include "message.h"
#include "os.h"

/* Units of empty small pages a heap keeps for its next pages (I-C1, heap.c): 512 KiB, one
 * page of the largest small page order or eight of one unit. */
#define KITE_HEAP_CACHE_UNITS 8u

/* heap_pool.c */
extern kite_lock_t _kite_heap_lock KITE_HIDDEN;
extern kite_heap_t *_kite_heap_all KITE_HIDDEN; /* live heaps (via next_all) */
/* The calling thread's new heap (thread start; cold): NULL + ENOMEM. After the thread's
 * exit teardown (_kite_heap_late() true) the heap has no exit destructor: the caller serves
 * one request from it and gives it to _kite_heap_late_end, which retires it. */
kite_heap_t *_kite_heap_create(void) KITE_HIDDEN;
bool _kite_heap_late(void) KITE_HIDDEN;
/* A free took a page of left, a heap left behind by a dead thread that had the calling
 * thread's key (heap_pool.c I-H4): left is retired now. */
void _kite_heap_retire_left(kite_heap_t *left) KITE_HIDDEN KITE_COLD;
void _kite_heap_late_end(kite_heap_t *h) KITE_HIDDEN;

/* heap.c */
/* After any change of the first page of queue[cls]: move the pin, point direct[] at it. */
void _kite_heap_pin(kite_heap_t *h, unsigned cls) KITE_HIDDEN;
/* Put pg (no free block, all carved, no pin: I-Q2) on its heap's full list. */
void _kite_heap_full_push(kite_heap_t *h, kite_page_t *pg) KITE_HIDDEN;
/* A heap with no page left (its retire): every direct[] class that still points at a page
 * points at the empty page again, so the pool holds only such heaps (heap_pool.c I-H5). */
void _kite_heap_direct_clear(kite_heap_t *h) KITE_HIDDEN;

/* heap_reclaim.c: a page of class cls for a heap whose queue of cls has none with a free
 * block, at the front of h->queue[cls]; NULL + ENOMEM. */
kite_page_t *_kite_heap_page_fresh(kite_heap_t *h, unsigned cls) KITE_HIDDEN;

/* heap_abandon.c */
/* Take an abandoned page of class cls for h, if any (at the front of its queue, or on its
 * full list when it has no room: then NULL). */
kite_page_t *_kite_heap_adopt(kite_heap_t *h, unsigned cls) KITE_HIDDEN;
/* Thread exit: give back h's empty pages, abandon the others (its cache is left). */
void _kite_heap_abandon_pages(kite_heap_t *h) KITE_HIDDEN;
/* A forked child's handler (after the arena's, _kite_heap_lock released): settle the
 * abandoned pages whose settle was due in a parent thread (I-A4). */
void _kite_heap_fork_settle(void) KITE_HIDDEN;

/* ---- queues ---- */
static inline void q_remove(kite_pageq_t *q, kite_page_t *pg) {
  if (pg->prev) pg->prev->next = pg->next; else q->first = pg->next;
  if (pg->next) pg->next->prev = pg->prev; else q->last = pg->prev;
  pg->next = pg->prev = NULL;
}
static inline void q_push_front(kite_pageq_t *q, kite_page_t *pg) {
  pg->prev = NULL;
  pg->next = q->first;
  if (q->first) q->first->prev = pg; else q->last = pg;
  q->first = pg;
}
static inline void q_push_back(kite_pageq_t *q, kite_page_t *pg) {
  pg->next = NULL;
  pg->prev = q->last;
  if (q->last) q->last->next = pg; else q->first = pg;
  q->last = pg;
}

/* h->lock, the full lists' lock. The owner takes it around every move of a page onto or
 * off a full list (a page filling up, a free into a full page: in a random-order program
 * a tenth of all frees and mallocs), and another heap only tries it, in heap_steal, a few
 * times per fresh page at most. So a spin lock: one exchange to take it and a store to
 * give it back, where a pthread mutex costs two locked instructions and about 30 others.
 * The owner waits only while a thief walks its list; a
 * thief preempted there (more threads than cores) is given the processor by a yield. */
static inline bool list_trylock(kite_heap_t *h) {
  return __atomic_load_n(&h->lock, __ATOMIC_RELAXED) == 0 && __atomic_exchange_n(&h->lock, 1, __ATOMIC_ACQUIRE) == 0;
}
static inline void list_lock(kite_heap_t *h) {
  while (__atomic_exchange_n(&h->lock, 1, __ATOMIC_ACQUIRE) != 0) {
    for (unsigned spins = 0; __atomic_load_n(&h->lock, __ATOMIC_RELAXED) != 0; spins++) {
      if (spins >= 64) _kite_os_yield();
#if defined(__x86_64__) || defined(__i386__)
      else __builtin_ia32_pause();
#endif
    }
  }
}
static inline void list_unlock(kite_heap_t *h) { __atomic_store_n(&h->lock, 0, __ATOMIC_RELEASE); }

/* full_count[c] is changed under h->lock only (heap_steal changes it from another thread):
 * the owner may peek at it without the lock. */
static inline uint32_t full_n(const kite_heap_t *h, unsigned c) { return __atomic_load_n(&h->full_count[c], __ATOMIC_RELAXED); }
static inline void full_count_add(kite_heap_t *h, unsigned c, int d) { /* h->lock held */
  __atomic_store_n(&h->full_count[c], h->full_count[c] + (uint32_t)d, __ATOMIC_RELAXED);
}

/* ---- small pages ---- */

/* A heap's own counter, which the statistics read from other threads: only the owner
 * writes it, with a relaxed store (a plain add on x86-64, no locked instruction), so the
 * readers' relaxed loads never see a torn value. */
static inline void heap_count(uint64_t *counter, uint64_t n) {
  __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline void page_collect(kite_heap_t *h, kite_page_t *pg, bool all) {
  uint32_t remote, n = _kite_page_collect(pg, all, _kite_opt(KITE_OPT_SHOW_STATS), &remote);
  if (n) {
    heap_count(&h->issued[pg->cls], n);
    heap_count(&h->remote_frees, remote);
  }
}

static inline void page_extend(kite_heap_t *h, kite_page_t *pg) {
  heap_count(&h->issued[pg->cls], _kite_page_extend(pg));
}

/* pg (a small page's head) is h's from now: its heap (the release pairs with remote frees'
 * acquire, remote.c) and the key the free fast path compares (I-P2). */
static inline void page_own(kite_heap_t *h, kite_page_t *pg) {
  __atomic_store_n(&pg->heap, h, __ATOMIC_RELEASE);
  __atomic_store_n(&pg->owner_key, h->key, __ATOMIC_RELEASE); /* free.c's acquire */
}

/* A former small page's run goes back to its arena, without its link array. */
static inline void run_free(kite_page_t *pg) {
  _kite_page_fini(pg);
  _kite_arena_free_run(pg);
}

/* Give an empty page back: to the heap's cache while it has room (I-C1), else to its
 * arena. A thread that empties a page and soon needs one of the same order again takes it
 * from its cache: no arena lock, no purge and no page fault in between. */
static inline void page_release(kite_heap_t *h, kite_page_t *pg, bool may_cache) {
  kite_assert_internal(_kite_page_check(pg, true, -1));
  KITE_STORE_RELAXED(pg->owner_key, 0);
  __atomic_store_n(&pg->heap, NULL, __ATOMIC_RELAXED);
  pg->kind = KITE_KIND_HELD; /* until the arena has it */
  if (may_cache && h->cache_count + (1u << pg->order) <= KITE_HEAP_CACHE_UNITS) {
    /* not a block page while cached; it keeps its link array for the next class */
    pg->kind = KITE_KIND_CACHED;
    pg->next = h->cache;
    h->cache = pg;
    h->cache_count += 1u << pg->order;
    return;
  }
  run_free(pg);
}

/* Take a cached page of the given order out of h's cache: NULL if there is none. */
static inline kite_page_t *cache_take(kite_heap_t *h, unsigned order) {
  for (kite_page_t **at = &h->cache; *at; at = &(*at)->next) {
    kite_page_t *pg = *at;
    if (pg->order != order) continue;
    *at = pg->next;
    h->cache_count -= 1u << order;
    pg->next = pg->prev = NULL;
    return pg;
  }
  return NULL;
}

/* Put pg (with a free block) at the back of its class's queue; pinned when it is the first. */
static inline void queue_back(kite_heap_t *h, unsigned cls, kite_page_t *pg) {
  q_push_back(&h->queue[cls], pg);
  if (h->queue[cls].first == pg) _kite_heap_pin(h, cls);
}

#endif
