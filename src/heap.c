/* src/heap.c -- per-thread heaps (contract in heap.h).
 *
 * Small page life cycle, as the heap drives it (page.c does the work on one page):
 *   fresh (from the heap's cache or a buddy run) -> in heap->queue[cls] while it may have
 *   free blocks -> on heap->full[cls] once collecting found nothing (sign bit of used set;
 *   a local free moves it back at once, remote frees are found by an amortized scan of the
 *   full list before a fresh page is taken) -> empty: cached or given back to the arena.
 *   At thread exit every non-empty page is abandoned: heap = NULL, pushed on abandoned[cls]
 *   (one global lock); a thread short of pages of that class adopts it. A free of a block of
 *   an abandoned page takes heap_lock (_kite_heap_free_abandoned): the free that leaves the
 *   page empty keeps it at the front of its list for the next thread (at most
 *   KITE_ABANDONED_EMPTY_MAX pages so kept) or gives it back to the arena, so memory of
 *   exited threads does not wait for an adopter that may never come. Under heap_lock, heap ==
 *   NULL on a small page with blocks means: on its abandoned list (abandon and adopt change
 *   both together); abandoned_empty counts the listed pages with used == 0.
 *
 * First-class heaps (kite_heap_new) are handed out as handles:
 *   I-H1 handle = struct address | (handle_gen & 0xffff) << 48, with handle_gen the struct's
 *        value when kite_heap_new made it; kite_heap_destroy adds 1 to handle_gen, and
 *        nothing else changes it (heap_reset keeps it). So a handle names a live heap
 *        exactly while its tag equals the struct's handle_gen: once its heap is destroyed,
 *        and after the struct is reused for another heap (of a thread or first-class), it
 *        is stale, until the same struct has been destroyed 65536 more times.
 *   I-H2 heap structs are never unmapped (heap_carve's units stay metadata), so reading
 *        handle_gen through a stale handle is safe; a pointer that was never a handle is
 *        as undefined as in free().
 *
 * Locks: heap_lock guards the heap pool, the list of live heaps, and the abandoned lists.
 * It is taken only on slow paths (thread start/exit, adoption, trim, stats, heap_steal).
 * Each heap's lock guards its full lists (full[], full_count[]): another thread's
 * heap_steal takes pages with no live block off them. Order: heap_lock, then a heap's lock
 * (heap_steal tries both); the owner never takes heap_lock while holding its own.
 */
#include "heap.h"
#include "page.h"
#include "remote.h"
#include "huge.h"
#include "arena.h"
#include "pagemap.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define KITE_HEAP_CACHE_MAX 8
/* First-class heap handles keep their generation above the address bits (I-H1). */
#define KITE_HANDLE_SHIFT 48
_Static_assert(KITE_ADDR_BITS <= KITE_HANDLE_SHIFT, "kite's mappings lie below the handle tag");

/* direct[] of a heap's empty classes: a page with no free block (malloc's test fails) */
kite_page_t _kite_page_empty = {.free = KITE_LINK_END, .local_free = KITE_LINK_END, .thread_free = KITE_TF_EMPTY};
kite_heap_t _kite_heap_empty = {.direct = {[0 ... KITE_DIRECT_SLOTS - 1] = &_kite_page_empty}};
__thread kite_heap_t *_kite_heap_tls __attribute__((tls_model("initial-exec"))) = &_kite_heap_empty;

static kite_lock_t heap_lock = KITE_LOCK_INIT;
static kite_heap_t *heap_pool;     /* heaps of exited threads, for reuse (via next_all) */
static kite_heap_t *heap_live;     /* all live heaps */
static kite_page_t *abandoned[KITE_CLASSES];
/* Empty pages kept on the abandoned lists (at their fronts) for the next threads: at most
 * this many; an abandoned page emptied beyond it goes back to the arena at once. */
#define KITE_ABANDONED_EMPTY_MAX 128
static uint32_t abandoned_empty;
static pthread_key_t heap_key;
static bool heap_key_made;

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

static void page_release(kite_heap_t *h, kite_page_t *pg, bool may_cache);
static void heap_pin(kite_heap_t *h, unsigned cls);

/* Put pg (with a free block) at the back of its class's queue; pinned when it is the first. */
static void queue_back(kite_heap_t *h, unsigned cls, kite_page_t *pg) {
  q_push_back(&h->queue[cls], pg);
  if (h->queue[cls].first == pg) heap_pin(h, cls);
}

/* h->lock, the full lists' lock. The owner takes it around every move of a page onto or
 * off a full list (a page filling up, a free into a full page: in a random-order program
 * a tenth of all frees and mallocs), and another heap only tries it, in heap_steal, a few
 * times per fresh page at most. So a spin lock: one exchange to take it and a store to
 * give it back, where a pthread mutex cost two locked instructions and about 30 others (6%
 * of all instructions of rnbench). The owner waits only while a thief walks its list; a
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
/* Put pg (no free block, all carved: used == capacity, no pin) on its heap's full list. */
static void full_push(kite_heap_t *h, kite_page_t *pg) {
  pg->used |= KITE_PAGE_IN_FULL;
  list_lock(h);
  q_push_back(&h->full[pg->cls], pg);
  full_count_add(h, pg->cls, 1);
  list_unlock(h);
}

/* direct[lo..hi] = pg. A class has 17 (the first), 16, 32 or 64 entries, and a program whose
 * current pages change often (random sizes, scattered frees) pays this on every change: four
 * entries a step (two 16-byte stores) where SSE2 is there. */
static inline void direct_fill(kite_heap_t *h, unsigned lo, unsigned hi, kite_page_t *pg) {
#if defined(__SSE2__)
  if (lo == 0) h->direct[lo++] = pg;
  __m128i v = _mm_set1_epi64x((long long)(uintptr_t)pg);
  for (unsigned s = lo; s <= hi; s += 4) { /* hi - lo + 1 is a multiple of 4 */
    _mm_storeu_si128((__m128i *)&h->direct[s], v);
    _mm_storeu_si128((__m128i *)&h->direct[s + 2], v);
  }
#else
  for (unsigned s = lo; s <= hi; s++) h->direct[s] = pg;
#endif
}

/* After any change of the first page of queue[cls]: move the pin (+1 on used) to the new
 * first page, release the old one if that leaves it empty, and point the direct slots of
 * the class at the new first page (or the empty page). */
static void heap_pin(kite_heap_t *h, unsigned cls) {
  kite_page_t *first = h->queue[cls].first, *old = h->pinned[cls];
  if (first != old) {
    if (first) first->used++;
    h->pinned[cls] = first;
    if (old && --old->used == 0) { /* empty, and still in the queue (not full) */
      q_remove(&h->queue[cls], old);
      page_release(h, old, true);
    }
  }
  if (cls >= KITE_DIRECT_CLASSES) return;
  kite_page_t *pg = first ? first : &_kite_page_empty;
  /* the class's entries are always written together: one tells them all (most calls find
   * them right, and a class has 16 to 64 of them) */
  unsigned hi = _kite_class_direct_hi(cls);
  if (h->direct[hi] != pg) direct_fill(h, _kite_class_direct_lo(cls), hi, pg);
  kite_assert_internal(_kite_heap_check_class(h, cls, 0));
  kite_assert_expensive(_kite_heap_check_class(h, cls, 1));
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

/* A former small page's run goes back to its arena, without its link array. */
static void run_free(kite_page_t *pg) {
  _kite_page_fini(pg);
  _kite_arena_free_run(pg);
}

/* Give an empty page back: to the heap's cache (single units) or to its arena. */
static void page_release(kite_heap_t *h, kite_page_t *pg, bool may_cache) {
  kite_assert_internal(_kite_page_check(pg, true, -1));
  __atomic_store_n(&pg->heap, NULL, __ATOMIC_RELAXED);
  pg->kind = KITE_KIND_HELD; /* until the arena has it */
  if (may_cache && pg->order == 0 && h->cache_count < KITE_HEAP_CACHE_MAX) {
    /* not a block page while cached; it keeps its link array for the next class */
    pg->kind = KITE_KIND_CACHED;
    pg->next = h->cache;
    h->cache = pg;
    h->cache_count++;
    return;
  }
  run_free(pg);
}

/* ---- pages emptied by other threads' frees ----
 * A page whose blocks all went back through remote frees still counts them in used until
 * its owner collects thread_free, and the owner collects a page only when it allocates in
 * its class, and then only one full page per full_scan: pages of a class the thread no
 * longer asks for (a program whose sizes moved on: realloc ladders, phases) and pages deep
 * in a busy class's full list stay committed with no live block. Before a heap takes a
 * fresh page (the caller's class had nothing: full_scan and adoption failed) it looks at
 * RECLAIM_VISITS pages: up to half of them on the caller's class's full list, the rest
 * round robin over at most RECLAIM_CLASSES classes, the caller's included (a few loads per
 * class without pages): a page with remote frees is collected; if that leaves it empty
 * it is released (to the page cache, where page_fresh finds it, or the arena), otherwise a
 * full page moves to its class's queue. Visited pages without remote frees rotate to the
 * back of their list, so successive calls see others.
 * A class's current (pinned) page is never empty by its own count (the pin holds +1), so
 * it would stay with the heap after the program left the class for good (every class of a
 * realloc ladder keeps one, 64 KiB each): when it is found empty on two looks in a row,
 * nothing having been allocated from it in between, it is released too; the class's next
 * malloc takes the slow path to a fresh page (the page cache, or the arena's dirty units). */
#define RECLAIM_VISITS 32
#define RECLAIM_CLASSES 16 /* classes looked at per call, at most */

/* Visit pages of q (class c, not the pinned first one) while *budget lasts. */
static void reclaim_list(kite_heap_t *h, unsigned c, bool full, uint32_t *budget) {
  kite_pageq_t *q = full ? &h->full[c] : &h->queue[c];
  kite_page_t *skip = full ? NULL : h->pinned[c];
  uint32_t n = 0;
  if (full) {
    list_lock(h);
    n = full_n(h, c);
    list_unlock(h);
  }
  if (!full) for (kite_page_t *pg = q->first; pg; pg = pg->next) if (pg != skip && ++n >= *budget) break;
  for (; n > 0 && *budget > 0; n--) {
    if (full) list_lock(h);
    kite_page_t *pg = skip ? skip->next : q->first;
    if (!pg) {
      if (full) list_unlock(h);
      break;
    }
    (*budget)--;
    q_remove(q, pg);
    if (__atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) == KITE_TF_EMPTY) {
      q_push_back(q, pg); /* rotate */
      if (full) list_unlock(h);
      continue;
    }
    if (full) {
      pg->used &= ~KITE_PAGE_IN_FULL;
      full_count_add(h, c, -1);
      list_unlock(h);
    }
    page_collect(h, pg, true);
    if (pg->used == 0) {
      page_release(h, pg, true);
      continue;
    }
    queue_back(h, c, pg);
  }
}

/* The pinned page of class c: released when empty at this look and the one before. */
static void reclaim_pinned(kite_heap_t *h, unsigned c) {
  kite_page_t *pin = h->pinned[c];
  uint64_t bit = (uint64_t)1 << (c & 63), *idle = &h->reclaim_idle[c >> 6];
  page_collect(h, pin, true);
  if (pin->used != 1) { *idle &= ~bit; return; }
  if (!(*idle & bit)) { *idle |= bit; return; }
  *idle &= ~bit;
  q_remove(&h->queue[c], pin);
  h->pinned[c] = NULL;
  pin->used = 0;
  heap_pin(h, c); /* pins the next page, if any, and points the direct slots at it */
  page_release(h, pin, true);
}

static void heap_reclaim(kite_heap_t *h, unsigned cls) {
  uint32_t budget = RECLAIM_VISITS / 2;
  if (full_n(h, cls)) reclaim_list(h, cls, true, &budget); /* the caller's class first */
  budget += RECLAIM_VISITS / 2;
  unsigned c = h->reclaim_cls;
  for (unsigned k = 0; k < RECLAIM_CLASSES && budget > 0; k++, c = c + 1 < KITE_CLASSES ? c + 1 : 0) {
    /* guarded.h: while sampling is on, the current lists are the sampler's count (and may
     * be cut at a sampled allocation): a collect would lengthen them behind its back */
    bool counted = _kite_opt(KITE_OPT_GUARDED_SAMPLE) != 0;
    if (h->pinned[c] && c != cls && !counted) { budget--; reclaim_pinned(h, c); }
    if (full_n(h, c)) reclaim_list(h, c, true, &budget);
    if (budget && h->queue[c].first && h->queue[c].first->next) reclaim_list(h, c, false, &budget);
  }
  h->reclaim_cls = c;
}

/* ---- dead pages of other heaps ----
 * A page on a heap's full list whose blocks were all freed by other threads stays
 * committed until its owner allocates in that class and its full_scan or heap_reclaim
 * comes to it. An owner that sleeps (more threads than cores) or has moved on to other
 * work keeps such pages while the threads that freed its blocks take fresh pages: with 4
 * threads on 2 cores that was several MiB at the peak of collatz-list, all in pages with no
 * live block. Before a heap takes a fresh run from its arena it looks at up to
 * STEAL_VISITS pages at the front of each other thread heap's full list of the class
 * (STEAL_VISITS_ALL in all; pages that are not dead rotate to the back) and takes the dead
 * ones: they go through its own collect and into its page cache (or the
 * arena), where page_fresh reuses them.
 * Dead, from another thread: thread_free's count == capacity. A page on the full list had
 * no free block when it went there (all carved, used == capacity: the pin's +1 leaves it
 * before, and a local free takes it off the list), so every carved block is then on
 * thread_free: none is handed out, so neither its owner (whose free checks LIVE first) nor
 * any other thread (claim: LIVE -> REMOTE) writes to the page any more. The list itself is
 * guarded by the victim's lock, taken with trylock under heap_lock (a busy victim is
 * skipped); the owner changes its full lists only under that lock and reads the fields
 * heap_steal takes over (free, local_free, used) only while the page is on its lists. */
#define STEAL_VISITS 32      /* pages looked at per other heap, at most */
#define STEAL_VISITS_ALL 128 /* and in all */

/* Pages taken (stolen) by a look, or -1 when heap_lock was busy (another thread steals,
 * adopts or starts): no look then, the caller does not wait for it. */
static int heap_steal(kite_heap_t *h, unsigned cls) {
  kite_page_t *got = NULL;
  uint32_t budget = STEAL_VISITS_ALL;
  int taken = 0;
  if (!_kite_trylock(&heap_lock)) return -1;
  for (kite_heap_t *v = heap_live; v && budget; v = v->next_all) {
    if (v == h || v->user || !full_n(v, cls) || !list_trylock(v)) continue;
    kite_pageq_t *fq = &v->full[cls];
    uint32_t n = v->full_count[cls];
    if (n > STEAL_VISITS) n = STEAL_VISITS;
    for (; n && budget; n--, budget--) {
      kite_page_t *pg = fq->first;
      q_remove(fq, pg);
      uint64_t tf = __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE);
      if ((uint32_t)KITE_TF_COUNT(tf) != __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED)) {
        q_push_back(fq, pg); /* rotate: the next look starts at others */
        continue;
      }
      full_count_add(v, cls, -1);
      pg->next = got;
      got = pg;
      taken++;
    }
    list_unlock(v);
  }
  _kite_unlock(&heap_lock);
  while (got) {
    kite_page_t *pg = got;
    got = pg->next;
    pg->next = NULL;
    pg->used &= ~KITE_PAGE_IN_FULL;
    page_collect(h, pg, true);
    if (pg->used == 0) {
      page_release(h, pg, true);
      continue;
    }
    /* a racing double free broke its cross-thread list (blocks stay claimed): h keeps it */
    __atomic_store_n(&pg->heap, h, __ATOMIC_RELEASE);
    if (pg->free != KITE_LINK_END) {
      queue_back(h, cls, pg);
    } else {
      full_push(h, pg);
    }
  }
  return taken;
}

/* heap_steal, paced per class: a look that finds no dead page makes the class's next
 * 2^k - 1 refills skip it (k: looks in a row that found none, at most STEAL_BACKOFF_MAX),
 * and a look that finds one resets k. Each look visits up to STEAL_VISITS_ALL descriptors
 * of other threads' pages under their locks (their owners wait on them, and a thief
 * preempted there keeps them waiting: more threads than cores) and rotates the pages it
 * passes, writing into lines their owners read next; where no thread frees another's
 * blocks (rnbench: every look finds nothing) that was all cost. A class whose frees do
 * leave dead pages elsewhere finds some on most looks and keeps looking at every refill. */
#define STEAL_BACKOFF_MAX 4 /* so at most 15 refills (about 1 MiB of single-unit pages) between looks */

static void heap_steal_paced(kite_heap_t *h, unsigned cls) {
  if (h->steal_skip[cls]) {
    h->steal_skip[cls]--;
    return;
  }
  int got = heap_steal(h, cls);
  if (got < 0) return;
  if (got > 0) {
    h->steal_miss[cls] = 0;
    return;
  }
  if (h->steal_miss[cls] < STEAL_BACKOFF_MAX) h->steal_miss[cls]++;
  h->steal_skip[cls] = (uint8_t)((1u << h->steal_miss[cls]) - 1);
}

/* The first page of queue[cls] if it has a free block or blocks left to carve. */
static inline kite_page_t *queued_with_room(kite_heap_t *h, unsigned cls) {
  kite_page_t *pg = h->queue[cls].first;
  return pg && (pg->free != KITE_LINK_END || pg->capacity < pg->reserved) ? pg : NULL;
}

/* A page of class cls for a heap whose queue of cls has none with a free block: returns it
 * at the front of h->queue[cls], or NULL. heap_reclaim and heap_steal may put pages of cls
 * with free blocks (remote frees collected) on that queue: the first of them is taken,
 * before the page cache or a fresh run. */
static kite_page_t *page_fresh(kite_heap_t *h, unsigned cls) {
  kite_page_t *pg;
  unsigned order = _kite_class_order_[cls];
  heap_reclaim(h, cls);
  if ((pg = queued_with_room(h, cls)) != NULL) return pg;
  if (!h->user && (order != 0 || !h->cache)) heap_steal_paced(h, cls);
  if ((pg = queued_with_room(h, cls)) != NULL) return pg;
  if (order == 0 && h->cache) {
    pg = h->cache;
    h->cache = pg->next;
    h->cache_count--;
    pg->next = pg->prev = NULL;
  } else {
    bool zero;
    pg = _kite_run_alloc(order, &zero);
    if (!pg) return NULL;
  }
  if (!_kite_page_init_small(pg, h, cls)) {
    run_free(pg);
    return NULL;
  }
  if (h->scan_credit[cls] < (1u << 20)) h->scan_credit[cls] += 4;
  kite_assert_internal(_kite_page_check(pg, true, 0));
  q_push_front(&h->queue[cls], pg);
  return pg;
}

/* Look through the full list of cls for pages that received remote frees. Amortized: each
 * fresh page of the class earns 4 page visits of credit; a call visits at most 2 pages more
 * than its credit and never more pages than the list holds, so scanning costs O(1) per slow
 * allocation however many pages are full. Visited pages without remote frees rotate to the
 * back, so successive calls look at different pages. */
static kite_page_t *full_scan(kite_heap_t *h, unsigned cls) {
  kite_pageq_t *fq = &h->full[cls];
  uint32_t credit = h->scan_credit[cls];
  uint32_t budget = credit + 2, visited = 0;
  kite_page_t *found = NULL;
  list_lock(h);
  if (budget > h->full_count[cls]) budget = h->full_count[cls];
  while (visited < budget && fq->first) {
    kite_page_t *pg = fq->first;
    visited++;
    q_remove(fq, pg);
    if (__atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) != KITE_TF_EMPTY) {
      pg->used &= ~KITE_PAGE_IN_FULL;
      full_count_add(h, cls, -1);
      found = pg;
      break;
    }
    q_push_back(fq, pg); /* rotate */
  }
  list_unlock(h);
  if (found) {
    page_collect(h, found, true);
    q_push_front(&h->queue[cls], found);
  }
  h->scan_credit[cls] = credit > visited ? credit - visited : 0;
  return found;
}

/* The abandoned lists are doubly linked (next, prev), so that the free that empties a page
 * can take it out of the middle. Caller holds heap_lock. */
static void abandoned_push(kite_page_t *pg) {
  kite_page_t *first = abandoned[pg->cls];
  pg->prev = NULL;
  pg->next = first;
  if (first) first->prev = pg;
  __atomic_store_n(&abandoned[pg->cls], pg, __ATOMIC_RELAXED); /* peeked unlocked */
}
static void abandoned_unlink(kite_page_t *pg) {
  if (pg->prev) pg->prev->next = pg->next;
  else __atomic_store_n(&abandoned[pg->cls], pg->next, __ATOMIC_RELAXED);
  if (pg->next) pg->next->prev = pg->prev;
  pg->next = pg->prev = NULL;
}

/* Caller holds heap_lock; pg is abandoned. If every block is free (the remote frees on
 * thread_free are all that is left), merges them and sets used to 0; then, with keep and
 * fewer than KITE_ABANDONED_EMPTY_MAX empty pages kept, moves pg to the front of its list
 * (the next thread short of that class adopts it without a trip through the arena and a
 * page fault), else unlinks it and returns true: the caller gives it to the arena after
 * unlocking. Pages already empty (used == 0) are left alone unless !keep. */
static bool abandoned_settle(kite_page_t *pg, bool keep) {
  if (pg->used == 0) {
    if (keep) return false;
    abandoned_empty--;
    abandoned_unlink(pg);
    return true;
  }
  uint64_t tfw = __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE);
  if (KITE_TF_COUNT(tfw) != pg->used) return false;
  uint32_t remote;
  _kite_page_collect(pg, true, false, &remote);
  if (remote) _kite_stat_add(&_kite_stats.remote_frees, remote);
  if (pg->used != 0) return false; /* a racing double free broke the list: blocks stay claimed */
  abandoned_unlink(pg);
  if (keep && abandoned_empty < KITE_ABANDONED_EMPTY_MAX) {
    abandoned_empty++;
    abandoned_push(pg);
    return false;
  }
  return true;
}

bool _kite_heap_free_abandoned(kite_page_t *pg, uint32_t i) {
  _kite_lock(&heap_lock);
  if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL) { /* adopted meanwhile */
    _kite_unlock(&heap_lock);
    return false;
  }
  /* remote.c R5: the bit is set while we hold heap_lock, so the push lands (or reports) */
  _kite_remote_push_claimed(pg, i, true);
  bool empty = abandoned_settle(pg, true);
  _kite_unlock(&heap_lock);
  if (empty) run_free(pg);
  return true;
}

/* Take an abandoned page of class cls, if any. */
static kite_page_t *adopt(kite_heap_t *h, unsigned cls) {
  for (int tries = 0; tries < 8; tries++) {
    if (__atomic_load_n(&abandoned[cls], __ATOMIC_RELAXED) == NULL) return NULL;
    _kite_lock(&heap_lock);
    kite_page_t *pg = abandoned[cls];
    if (pg) {
      if (pg->used == 0) abandoned_empty--;
      abandoned_unlink(pg);
      _kite_remote_mark_abandoned(pg, false); /* remote.c R5 */
      __atomic_store_n(&pg->heap, h, __ATOMIC_RELEASE);
    }
    _kite_unlock(&heap_lock);
    if (!pg) return NULL;
    _kite_stat_add(&_kite_stats.pages_adopted, 1);
    page_collect(h, pg, true);
    kite_assert_internal(_kite_page_check(pg, true, 0) && pg->cls == cls);
    if (pg->free != KITE_LINK_END || pg->capacity < pg->reserved) {
      q_push_front(&h->queue[cls], pg);
      return pg;
    }
    full_push(h, pg);
  }
  return NULL;
}

/* ---- heaps ---- */
static void heap_thread_done(void *arg);

/* Everything but handle_gen (I-H1: a stale handle's check may read it meanwhile). */
_Static_assert(offsetof(kite_heap_t, handle_gen) + sizeof(uint32_t) > sizeof(kite_heap_t) - 8,
               "handle_gen is kite_heap_t's last field");
static void heap_reset(kite_heap_t *h) {
  memset(h, 0, offsetof(kite_heap_t, handle_gen));
  for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++) h->direct[s] = &_kite_page_empty;
}

/* Heap structs (the direct[] table the malloc fast path follows first of all) are carved
 * from chunks of their own between PROT_NONE guard pages (_kite_arena_guarded_chunk; one
 * unit of an arena, guards inside, when the OS refuses a mapping), never next to a block:
 * no overflow out of a block reaches one. Never given back: exited threads' heaps wait in
 * heap_pool for the next thread. */
#define HEAP_CHUNK ((size_t)KITE_UNIT_SIZE - 2 * KITE_OS_PAGE)
static uint8_t *heap_slab_cur, *heap_slab_end;
static bool heap_slab_in_arena; /* the current chunk is an arena unit: the arena counts it committed */
static kite_heap_t *heap_carve(void) {
  size_t sz = (sizeof(kite_heap_t) + 63) & ~(size_t)63;
  _kite_lock(&heap_lock);
  if (heap_slab_cur == NULL || heap_slab_cur + sz > heap_slab_end) {
    uint8_t *m = _kite_arena_guarded_chunk(HEAP_CHUNK, &heap_slab_in_arena);
    if (!m) { _kite_unlock(&heap_lock); return NULL; }
    heap_slab_cur = m;
    heap_slab_end = m + HEAP_CHUNK;
  }
  kite_heap_t *h = (kite_heap_t *)heap_slab_cur;
  heap_slab_cur += sz;
  if (!heap_slab_in_arena) _kite_stat_commit((int64_t)sz); /* counted when first cut, as links.c does */
  _kite_unlock(&heap_lock);
  return h;
}

#ifdef KITE_TEST_HOOKS
bool _kite_test_fail_setspecific;
#endif
/* Register h for the thread-exit destructor (heap_thread_done). */
static int heap_key_set(kite_heap_t *h) {
#ifdef KITE_TEST_HOOKS
  if (_kite_test_fail_setspecific) return ENOMEM;
#endif
  return pthread_setspecific(heap_key, h);
}

static void heap_abandon(kite_heap_t *h);

static KITE_COLD kite_heap_t *heap_create(void) {
  _kite_options_ensure();
  _kite_lock(&heap_lock);
  if (!heap_key_made) {
    if (pthread_key_create(&heap_key, heap_thread_done) != 0) {
      _kite_unlock(&heap_lock);
      errno = ENOMEM;
      return NULL;
    }
    heap_key_made = true;
  }
  kite_heap_t *h = heap_pool;
  if (h) heap_pool = h->next_all;
  _kite_unlock(&heap_lock);
  if (!h) h = heap_carve();
  if (!h) return NULL;
  heap_reset(h);
  _kite_lock(&heap_lock);
  h->next_all = heap_live;
  if (heap_live) heap_live->prev_all = h;
  heap_live = h;
  _kite_unlock(&heap_lock);
  _kite_heap_tls = h;
  /* may allocate (keys >= 32): the TLS heap is ready */
  if (unlikely(heap_key_set(h) != 0)) {
    /* without the key, no thread-exit destructor would ever abandon h: its pages would stay
     * with a heap nobody uses. Given up as a thread exit gives it up; the caller's request
     * fails (a later one tries again). */
    _kite_heap_tls = &_kite_heap_empty;
    heap_abandon(h);
    _kite_report_note("pthread_setspecific failed: no heap for this thread (the request gets NULL, errno ENOMEM)");
    errno = ENOMEM;
    return NULL;
  }
  return h;
}

kite_heap_t *_kite_heap_get(void) {
  kite_heap_t *h = _kite_heap_tls;
  if (likely(h != &_kite_heap_empty)) return h;
  return heap_create();
}

/* Move h's counters into the globals and take h off the live list, in one heap_lock
 * section: _kite_heap_collect_stats reads the globals and the live heaps in one such section
 * too, so it counts h's figures once, in h or in the globals. Caller holds heap_lock. */
static void heap_unlink_merging_stats(kite_heap_t *h) {
  for (unsigned c = 0; c < KITE_CLASSES; c++)
    if (h->issued[c]) __atomic_fetch_add(&_kite_stats.issued[c], h->issued[c], __ATOMIC_RELAXED);
  __atomic_fetch_add(&_kite_stats.remote_frees, h->remote_frees, __ATOMIC_RELAXED);
  if (h->prev_all) h->prev_all->next_all = h->next_all; else heap_live = h->next_all;
  if (h->next_all) h->next_all->prev_all = h->prev_all;
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_heap_abandon)(void);
#endif

/* Thread exit: give back empty pages, abandon the others, return the heap to the pool. */
static void heap_abandon(kite_heap_t *h) {
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (h->pinned[c]) { h->pinned[c]->used--; h->pinned[c] = NULL; }
    /* the full list leaves h's lock at once: no heap_steal sees it after this */
    list_lock(h);
    kite_pageq_t full = h->full[c];
    h->full[c].first = h->full[c].last = NULL;
    full_count_add(h, c, -(int)h->full_count[c]);
    list_unlock(h);
    kite_pageq_t *qs[2] = {&h->queue[c], &full};
    for (int k = 0; k < 2; k++) {
      kite_page_t *pg;
      while ((pg = qs[k]->first) != NULL) {
        q_remove(qs[k], pg);
        pg->used &= ~KITE_PAGE_IN_FULL;
        page_collect(h, pg, true);
        if (pg->used == 0) { page_release(h, pg, false); continue; }
        kite_assert_internal(_kite_page_check(pg, true, 0));
        _kite_lock(&heap_lock);
        __atomic_store_n(&pg->heap, NULL, __ATOMIC_RELEASE);
        _kite_remote_mark_abandoned(pg, true); /* remote.c R5: later pushes come here */
        abandoned_push(pg);
        /* the frees that came after the collect may have emptied it (remote.c R5: a free
         * that claimed its block before the bit and pushes after it sees the bit and
         * settles the page itself) */
        bool empty = abandoned_settle(pg, true);
        _kite_unlock(&heap_lock);
        _kite_stat_add(&_kite_stats.pages_abandoned, 1);
        if (empty) run_free(pg);
      }
    }
  }
  while (h->cache) {
    kite_page_t *pg = h->cache;
    h->cache = pg->next;
    pg->next = NULL;
    run_free(pg);
  }
  h->cache_count = 0;
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_heap_abandon) _kite_test_hook_heap_abandon();
#endif
  _kite_lock(&heap_lock);
  heap_unlink_merging_stats(h);
  __atomic_fetch_add(&h->handle_gen, 1, __ATOMIC_RELAXED); /* I-H1: its handle is stale now */
  heap_reset(h);
  h->next_all = heap_pool;
  heap_pool = h;
  _kite_unlock(&heap_lock);
}

static void heap_thread_done(void *arg) {
  kite_heap_t *h = arg;
  if (!h || h == &_kite_heap_empty) return;
  _kite_heap_tls = &_kite_heap_empty; /* a later malloc on this thread makes a new heap */
  heap_abandon(h);
}

/* ---- generic allocation ---- */


static KITE_NOINLINE void *malloc_class_generic(kite_heap_t *h, unsigned cls) {
  if (unlikely(h == &_kite_heap_empty)) {
    h = heap_create();
    if (!h) return NULL;
  }
  kite_pageq_t *q = &h->queue[cls];
  kite_page_t *pg = q->first;
  while (pg) {
    kite_page_t *next = pg->next;
    page_collect(h, pg, false);
    if (pg->free != KITE_LINK_END) break;
    if (pg->capacity < pg->reserved) { page_extend(h, pg); break; }
    q_remove(q, pg);
    if (pg == h->pinned[cls]) { /* the pin's +1 goes now: a page on the full list has none */
      h->pinned[cls] = NULL;
      pg->used--;
    }
    full_push(h, pg);
    pg = next;
  }
  if (!pg) pg = full_n(h, cls) ? full_scan(h, cls) : NULL;
  if (!pg && !h->user) pg = adopt(h, cls);
  if (!pg) {
    pg = page_fresh(h, cls);
    if (!pg) {
      heap_pin(h, cls); /* the direct slots follow the queue (empty) */
      return NULL;
    }
  }
  if (pg->free == KITE_LINK_END) {
    page_collect(h, pg, false);
    if (pg->free == KITE_LINK_END) page_extend(h, pg);
  }
  if (q->first != pg) {
    q_remove(q, pg);
    q_push_front(q, pg);
  }
  heap_pin(h, cls);
  return _kite_page_pop(pg);
}

void *_kite_malloc_small_generic(kite_heap_t *h, size_t n) {
  unsigned cls = _kite_class_of(n);
  /* sizes above the direct range allocate here */
  kite_page_t *pg = _kite_heap_current_page(h, cls);
  if (pg) return _kite_page_pop(pg);
  return malloc_class_generic(h, cls);
}

void *_kite_malloc_class(unsigned cls) {
  kite_heap_t *h = _kite_heap_tls;
  kite_page_t *pg = h->queue[cls].first;
  if (pg && pg->free != KITE_LINK_END) return _kite_page_pop(pg);
  return malloc_class_generic(h, cls);
}

/* ---- generic free ---- */

void _kite_free_local_slow(kite_heap_t *h, kite_page_t *pg) {
  unsigned cls = pg->cls;
  if (pg->used < 0) { /* was on the full list: it has a free block now */
    pg->used &= ~KITE_PAGE_IN_FULL;
    list_lock(h);
    q_remove(&h->full[cls], pg);
    full_count_add(h, cls, -1);
    list_unlock(h);
    if (pg->used != 0) {
      queue_back(h, cls, pg);
      return;
    }
  } else {
    /* empty and not pinned, so not the first page: the fast path never allocates from it */
    kite_assert(h->pinned[cls] != pg);
    q_remove(&h->queue[cls], pg);
  }
  page_release(h, pg, true);
}

/* ---- first-class heaps ---- */

kite_heap_t *_kite_heap_new_user(void) {
  _kite_options_ensure();
  _kite_lock(&heap_lock);
  kite_heap_t *h = heap_pool;
  if (h) heap_pool = h->next_all;
  _kite_unlock(&heap_lock);
  if (!h) h = heap_carve();
  if (!h) return NULL;
  heap_reset(h);
  h->user = true;
  _kite_lock(&heap_lock);
  h->next_all = heap_live;
  if (heap_live) heap_live->prev_all = h;
  heap_live = h;
  _kite_unlock(&heap_lock);
  uintptr_t tag = (uintptr_t)(__atomic_load_n(&h->handle_gen, __ATOMIC_RELAXED) & 0xffffu) << KITE_HANDLE_SHIFT;
  return (kite_heap_t *)((uintptr_t)h | tag); /* I-H1 */
}

kite_heap_t *_kite_heap_of_handle(kite_heap_t *handle, const char *what) {
  uintptr_t u = (uintptr_t)handle;
  kite_heap_t *h = (kite_heap_t *)(u & (((uintptr_t)1 << KITE_HANDLE_SHIFT) - 1));
  /* (a struct is at least pointer-aligned: a cheap filter of a garbage handle) */
  if (likely(h != NULL && ((uintptr_t)h & (_Alignof(kite_heap_t) - 1)) == 0 &&
             (__atomic_load_n(&h->handle_gen, __ATOMIC_RELAXED) & 0xffffu) == u >> KITE_HANDLE_SHIFT))
    return h;
  _kite_report_invalid(what, handle);
  errno = EINVAL;
  return NULL;
}

void _kite_heap_own(kite_heap_t *h, kite_owned_t *o, void *block) {
  _kite_lock(&heap_lock);
  o->owner = h;
  o->block = block;
  o->prev = NULL;
  o->next = h->owned;
  if (h->owned) h->owned->prev = o;
  h->owned = o;
  _kite_unlock(&heap_lock);
}

void _kite_heap_disown(kite_owned_t *o) {
  if (!o->owner) return;
  _kite_lock(&heap_lock);
  if (o->owner) {
    if (o->prev) o->prev->next = o->next; else o->owner->owned = o->next;
    if (o->next) o->next->prev = o->prev;
    o->owner = NULL;
  }
  _kite_unlock(&heap_lock);
}

/* Give back every page of h whatever it holds, and its large and huge blocks. */
void _kite_heap_destroy_user(kite_heap_t *h) {
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    h->pinned[c] = NULL;
    kite_pageq_t *qs[2] = {&h->queue[c], &h->full[c]};
    for (int k = 0; k < 2; k++) {
      kite_page_t *pg;
      while ((pg = qs[k]->first) != NULL) {
        q_remove(qs[k], pg);
        page_release(h, pg, false);
      }
    }
  }
  while (h->cache) {
    kite_page_t *pg = h->cache;
    h->cache = pg->next;
    pg->next = NULL;
    run_free(pg);
  }
  _kite_lock(&heap_lock);
  kite_owned_t *list = h->owned;
  h->owned = NULL;
  for (kite_owned_t *o = list; o; o = o->next) o->owner = NULL;
  _kite_unlock(&heap_lock);
  while (list) {
    kite_owned_t *o = list;
    list = o->next;
    void *b = o->block;
    if (_kite_pagemap_kind((uintptr_t)b) == KITE_PM_HUGE) _kite_huge_free(b, NULL);
    else _kite_arena_free_run(_kite_page_head(_kite_unit_of((uintptr_t)b)));
  }
  _kite_lock(&heap_lock);
  heap_unlink_merging_stats(h);
  __atomic_fetch_add(&h->handle_gen, 1, __ATOMIC_RELAXED); /* I-H1: its handle is stale now */
  heap_reset(h);
  h->next_all = heap_pool;
  heap_pool = h;
  _kite_unlock(&heap_lock);
}

/* ---- trim, stats, fork ---- */

size_t _kite_heap_trim(void) {
  size_t released = 0;
  kite_heap_t *h = _kite_heap_tls;
  /* the calling thread's empty pages, the current ones included */
  for (unsigned c = 0; h != &_kite_heap_empty && c < KITE_CLASSES; c++) {
    if (h->pinned[c]) { h->pinned[c]->used--; h->pinned[c] = NULL; }
    kite_page_t *pg = h->queue[c].first;
    while (pg) {
      kite_page_t *next = pg->next;
      page_collect(h, pg, true);
      if (pg->used == 0) {
        q_remove(&h->queue[c], pg);
        released += KITE_UNIT_SIZE << pg->order;
        page_release(h, pg, false);
      }
      pg = next;
    }
    heap_pin(h, c);
  }
  while (h != &_kite_heap_empty && h->cache) {
    kite_page_t *pg = h->cache;
    h->cache = pg->next;
    h->cache_count--;
    pg->next = NULL;
    run_free(pg);
    released += KITE_UNIT_SIZE;
  }
  /* abandoned pages that became empty */
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!__atomic_load_n(&abandoned[c], __ATOMIC_RELAXED)) continue;
    _kite_lock(&heap_lock);
    kite_page_t *empty = NULL;
    for (kite_page_t *pg = abandoned[c], *next; pg; pg = next) {
      next = pg->next;
      if (abandoned_settle(pg, false)) { pg->next = empty; empty = pg; }
    }
    _kite_unlock(&heap_lock);
    while (empty) {
      kite_page_t *pg = empty;
      empty = pg->next;
      pg->next = NULL;
      released += KITE_UNIT_SIZE << pg->order;
      run_free(pg);
    }
  }
  return released;
}

void _kite_heap_collect_stats(kite_gstats_t *out) {
  /* the globals and the live heaps in one heap_lock section: a heap that exits moves its
   * counters into the globals in one too (heap_unlink_merging_stats), so each is counted
   * once. Every field is a uint64_t that other threads update atomically (the purger
   * thread among them): copied word by word with atomic loads; a heap's own counters are
   * written by its owner only, read here with relaxed loads (heap_count). */
  const uint64_t *src = (const uint64_t *)&_kite_stats;
  uint64_t *dst = (uint64_t *)out;
  _kite_lock(&heap_lock);
  for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++) dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  for (kite_heap_t *h = heap_live; h; h = h->next_all) {
    for (unsigned c = 0; c < KITE_CLASSES; c++) out->issued[c] += __atomic_load_n(&h->issued[c], __ATOMIC_RELAXED);
    out->remote_frees += __atomic_load_n(&h->remote_frees, __ATOMIC_RELAXED);
  }
  _kite_unlock(&heap_lock);
}

void _kite_heap_foreach(void (*fn)(kite_heap_t *h, void *arg), void *arg) {
  _kite_lock(&heap_lock);
  for (kite_heap_t *h = heap_live; h; h = h->next_all) fn(h, arg);
  _kite_unlock(&heap_lock);
}

void _kite_heap_fork_prepare(void) { _kite_lock(&heap_lock); }
void _kite_heap_fork_parent(void) { _kite_unlock(&heap_lock); }
void _kite_heap_fork_child(void) { _kite_lock_reinit(&heap_lock); }


/* ---- validators (contracts in heap.h) ---- */

/* Walk queue q of class cls: links (first/last, next/prev agree, which also rules out
 * cycles), every page owned by h, of class cls, IN_FULL set exactly on the full list;
 * each page checked with its lists when depth >= 2. *n = pages. */
static bool check_queue(const kite_heap_t *h, const kite_pageq_t *q, unsigned cls, bool full, int depth, uint32_t *n) {
  uint32_t k = 0;
  kite_page_t *prev = NULL;
  for (kite_page_t *pg = q->first; pg; prev = pg, pg = pg->next) {
    if (pg->prev != prev) return _kite_check_failed("heap: queue link prev != previous page", (uintptr_t)pg);
    if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != h) return _kite_check_failed("heap: queued page of another heap", (uintptr_t)pg);
    if (pg->cls != cls) return _kite_check_failed("heap: page in the queue of another class", pg->cls);
    if (((pg->used & KITE_PAGE_IN_FULL) != 0) != full) return _kite_check_failed("heap: full bit disagrees with the list", (uintptr_t)pg);
    if (!_kite_page_check(pg, depth >= 2, pg == h->pinned[cls] ? 1 : 0)) return false;
    k++;
  }
  if (q->last != prev) return _kite_check_failed("heap: queue last is not the last page", cls);
  *n = k;
  return true;
}

bool _kite_heap_check_class(const kite_heap_t *h, unsigned cls, int depth) {
  kite_page_t *first = h->queue[cls].first;
  if (h->pinned[cls] != first) return _kite_check_failed("heap: pinned page is not the queue's first", cls);
  if (first && (first->used & ~KITE_PAGE_IN_FULL) < 1) return _kite_check_failed("heap: pinned page without its +1", cls);
  if ((first == NULL) != (h->queue[cls].last == NULL)) return _kite_check_failed("heap: queue first/last", cls);
  if (cls < KITE_DIRECT_CLASSES)
    for (unsigned s = _kite_class_direct_lo(cls); s <= _kite_class_direct_hi(cls); s++)
      if (h->direct[s] != (first ? first : &_kite_page_empty)) return _kite_check_failed("heap: direct slot is not the queue's first page", s);
  if (depth < 1) return true;
  uint32_t n;
  if (!check_queue(h, &h->queue[cls], cls, false, depth, &n)) return false;
  /* the full list under h's lock: heap_steal may be taking pages off it */
  list_lock((kite_heap_t *)h);
  bool ok = check_queue(h, &h->full[cls], cls, true, depth, &n);
  if (ok && n != h->full_count[cls]) ok = _kite_check_failed("heap: full_count", h->full_count[cls]);
  list_unlock((kite_heap_t *)h);
  return ok;
}

bool _kite_heap_check(const kite_heap_t *h) {
  if (h == &_kite_heap_empty) {
    for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++)
      if (h->direct[s] != &_kite_page_empty) return _kite_check_failed("heap: the empty heap has a page", s);
    return _kite_page_empty.free == KITE_LINK_END || _kite_check_failed("heap: the empty page has a block", 0);
  }
  for (unsigned c = 0; c < KITE_CLASSES; c++)
    if (!_kite_heap_check_class(h, c, 2)) return false;
  uint32_t n = 0;
  for (kite_page_t *pg = h->cache; pg; pg = pg->next, n++) {
    if (n >= KITE_HEAP_CACHE_MAX) return _kite_check_failed("heap: page cache longer than its bound", n);
    if (pg->kind != KITE_KIND_CACHED || pg->order != 0 || __atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL)
      return _kite_check_failed("heap: cached page is not an unowned single unit", (uintptr_t)pg);
  }
  if (n != h->cache_count) return _kite_check_failed("heap: cache_count", h->cache_count);
  return true;
}

bool _kite_heap_check_all(void) {
  if (!_kite_heap_check(_kite_heap_tls)) return false;
  bool ok = true;
  _kite_lock(&heap_lock);
  /* abandoned pages: nobody owns them, and nobody collects them while heap_lock is held */
  uint32_t n_empty = 0;
  for (unsigned c = 0; c < KITE_CLASSES && ok; c++) {
    kite_page_t *slow = abandoned[c];
    uint64_t k = 0;
    kite_page_t *prev = NULL;
    for (kite_page_t *pg = abandoned[c]; pg && ok; prev = pg, pg = pg->next, k++) {
      if (k && (k & 1) == 0) {
        slow = slow->next;
        if (slow == pg) { ok = _kite_check_failed("heap: abandoned list has a cycle", c); break; }
      }
      if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL || pg->cls != c)
        ok = _kite_check_failed("heap: abandoned page owned or of another class", (uintptr_t)pg);
      else if (pg->prev != (k ? prev : NULL))
        ok = _kite_check_failed("heap: abandoned list's back link", (uintptr_t)pg);
      else if (pg->used == 0)
        n_empty++;
      else ok = _kite_page_check(pg, true, 0);
    }
  }
  if (ok && n_empty != abandoned_empty)
    ok = _kite_check_failed("heap: count of empty abandoned pages", abandoned_empty);
  _kite_unlock(&heap_lock);
  return ok;
}
