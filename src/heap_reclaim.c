/* src/heap_reclaim.c -- a fresh page for a heap short of one (heap_impl.h: shared parts).
 *
 * Before a heap takes a new run from its arena it looks for pages that need no new memory,
 * in this order: its own pages emptied by other threads' frees (reclaim), other threads'
 * pages whose every block was freed by another thread (steal, paced per class), its page
 * cache; only then a buddy run.
 *
 * Data structures: per heap (kite_heap_t) reclaim_cls and reclaim_idle[] (reclaim's round
 * robin and its "empty at the last look" bits), steal_skip[] and steal_miss[] (the pacing).
 *
 * Invariants:
 *   I-R1 reclaim touches only its own heap's lists (full lists under its own lock, I-Q1);
 *        steal takes another heap's page only when thread_free's count == capacity (dead:
 *        no block of it is live, so neither its owner nor another thread writes it).
 *   I-R2 steal runs only under a trylock of _kite_heap_lock and trylocks of the victims'
 *        list locks (I-Q3): it never waits, and never on a first-class heap (they do not
 *        share pages).
 *   I-R3 pages visited and kept rotate to the back of their list, so successive looks
 *        see others; neither reclaim nor steal ever takes a pinned page of another heap.
 */
#include "heap_impl.h"
#include "huge.h"
#include "options.h"
#include "message.h"

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
      _kite_page_from_full(pg);
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
  /* Empty is used == 1 once the remote frees are collected, and thread_free's count says
   * so before the collect (which walks the local free list to join it to the allocation
   * list): a current page in use, the common case, is passed over with two loads. A
   * remote free that lands after the load is seen at the next look. */
  uint64_t tf = __atomic_load_n(&pin->thread_free, __ATOMIC_RELAXED);
  if (pin->used - KITE_TF_COUNT(tf) != 1) { *idle &= ~bit; return; }
  page_collect(h, pin, true);
  if (pin->used != 1) { *idle &= ~bit; return; }
  if (!(*idle & bit)) { *idle |= bit; return; }
  *idle &= ~bit;
  q_remove(&h->queue[c], pin);
  h->pinned[c] = NULL;
  pin->used = 0;
  _kite_heap_pin(h, c); /* pins the next page, if any, and points the direct slots at it */
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
    bool counted = _kite_opt(KITE_OPT_GUARDED_SAMPLE) != 0 || KITE_LOAD_RELAXED(_kite_prof_enabled); /* and prof.h */
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
 * work keeps such pages while the threads that freed its blocks take fresh pages: memory
 * in pages with no live block grows with the threads' number. Before a heap takes a fresh run from its arena it looks at up to
 * STEAL_VISITS pages at the front of each other thread heap's full list of the class
 * (STEAL_VISITS_ALL in all; pages that are not dead rotate to the back) and takes the dead
 * ones: they go through its own collect and into its page cache (or the
 * arena), where page_fresh reuses them.
 * Dead, from another thread: thread_free's count == capacity. A page on the full list had
 * no free block when it went there (all carved, used == capacity: the pin's +1 leaves it
 * before, and a local free takes it off the list), so every carved block is then on
 * thread_free: none is handed out, so neither its owner (whose free checks LIVE first) nor
 * any other thread (claim: LIVE -> REMOTE) writes to the page any more. The list itself is
 * guarded by the victim's lock, taken with trylock under _kite_heap_lock (a busy victim is
 * skipped); the owner changes its full lists only under that lock and reads the fields
 * heap_steal takes over (free, local_free, used) only while the page is on its lists. */
#define STEAL_VISITS 32      /* pages looked at per other heap, at most */
#define STEAL_VISITS_ALL 128 /* and in all */

/* Pages taken (stolen) by a look, or -1 when _kite_heap_lock was busy (another thread steals,
 * adopts or starts): no look then, the caller does not wait for it. */
static int heap_steal(kite_heap_t *h, unsigned cls) {
  kite_page_t *got = NULL;
  uint32_t budget = STEAL_VISITS_ALL;
  int taken = 0;
  if (!_kite_trylock(&_kite_heap_lock)) return -1;
  for (kite_heap_t *v = _kite_heap_all; v && budget; v = v->next_all) {
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
  _kite_unlock(&_kite_heap_lock);
  while (got) {
    kite_page_t *pg = got;
    got = pg->next;
    pg->next = NULL;
    _kite_page_from_full(pg);
    page_collect(h, pg, true);
    if (pg->used == 0) {
      page_release(h, pg, true);
      continue;
    }
    /* a racing double free broke its cross-thread list (blocks stay claimed): h keeps it */
    page_own(h, pg);
    if (pg->free != KITE_LINK_END) {
      queue_back(h, cls, pg);
    } else {
      _kite_heap_full_push(h, pg);
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
 * blocks (every look finds nothing) that was all cost. A class whose frees do
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
kite_page_t *_kite_heap_page_fresh(kite_heap_t *h, unsigned cls) {
  kite_page_t *pg;
  unsigned order = _kite_class_order_[cls];
  heap_reclaim(h, cls);
  if ((pg = queued_with_room(h, cls)) != NULL) return pg;
  kite_page_t *cached = cache_take(h, order);
  /* a dead page of another heap is taken before a cached page of several units, so that it
   * does not wait for its owner (the steal is paced per class: a few loads when it finds
   * none); single units come from the cache first, as they always did */
  if (!h->user && (order != 0 || !cached)) heap_steal_paced(h, cls);
  if ((pg = queued_with_room(h, cls)) != NULL) {
    if (cached) page_release(h, cached, true); /* back where it was: the cache had room for it */
    return pg;
  }
  bool zero = false; /* a cached page holds the bytes of its last blocks */
  if (cached) {
    pg = cached;
  } else {
    pg = _kite_run_alloc(order, &zero);
    if (!pg) return NULL;
  }
  if (!_kite_page_init_small(pg, h, cls)) {
    run_free(pg);
    return NULL;
  }
  pg->zero_tail = zero; /* page.h: nothing is carved yet, so every block is zero */
  page_own(h, pg);
  if (h->scan_credit[cls] < (1u << 20)) h->scan_credit[cls] += 4;
  kite_assert_internal(_kite_page_check(pg, true, 0));
  q_push_front(&h->queue[cls], pg);
  return pg;
}
