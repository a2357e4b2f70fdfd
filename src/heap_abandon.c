/* src/heap_abandon.c -- pages of exited threads: abandonment, adoption, frees into
 * abandoned pages, trim (heap_impl.h: shared parts).
 *
 * Data structures: abandoned[cls], one doubly linked list (next, prev) per class of pages
 * whose thread exited, with its blocks still live; abandoned_empty, how many pages on them
 * are empty (kept for the next thread). All guarded by _kite_heap_lock.
 *
 * At thread exit every non-empty page is abandoned: heap = NULL, pushed on abandoned[cls]; a
 * thread short of pages of that class adopts it. A free of a block of an abandoned page is a
 * remote free like any other, with no lock (remote.c R5): its push lands on thread_free. The
 * one push that frees the page's last block settles the page under _kite_heap_lock
 * (_kite_heap_settle_abandoned): keeps it at the front of its list for the next thread (at
 * most KITE_ABANDONED_EMPTY_MAX pages so kept) or gives it back to the arena, so memory of
 * exited threads does not wait for an adopter that may never come.
 *
 * Invariants (under _kite_heap_lock):
 *   I-A1 heap == NULL on a small page with blocks means: on its abandoned list (abandon and
 *        adopt change both together, in one _kite_heap_lock section).
 *   I-A2 abandoned_empty counts the listed pages with used == 0 (each put at the front of its
 *        list when emptied); there are at most KITE_ABANDONED_EMPTY_MAX of them.
 *   I-A3 nobody takes an abandoned page's thread_free but a settle, _kite_heap_lock held
 *        (remote.c R7), so a validator may read the lists under it (pushes only add to
 *        them, as to any owned page's).
 *   I-A4 a listed page with KITE_TF_EMPTIED set is its settler's (remote.c R5): no adoption
 *        or trim takes it; its settler, waiting for _kite_heap_lock, unlinks it. In a
 *        forked child its settler does not exist (the fork was made between its push and
 *        its settle, _kite_heap_lock held by the fork): the child's fork handler settles
 *        every such page (_kite_heap_fork_settle).
 *   I-A5 a page off the abandoned lists with heap == NULL is nobody's but the arena's: the
 *        settle that unlinks a page to give it back gives its run to the arena in the same
 *        _kite_heap_lock section (arena and links locks come after it, as in the fork
 *        handlers), so a fork never finds a page between the list and the arena (the child
 *        would have no thread to finish the give-back: the run lost there).
 */
#include "heap_impl.h"
#include "remote.h"
#include "options.h"
#include "stats.h"
#include "message.h"

static kite_page_t *abandoned[KITE_CLASSES];
#ifdef KITE_TEST_HOOKS
uint64_t _kite_test_abandon_lock_sections; /* heap.h */
#endif
/* Empty pages kept on the abandoned lists (at their fronts) for the next threads: at most
 * this many; an abandoned page emptied beyond it goes back to the arena at once. */
#define KITE_ABANDONED_EMPTY_MAX 128
#ifdef KITE_TEST_HOOKS
uint32_t _kite_test_abandoned_empty_max = KITE_ABANDONED_EMPTY_MAX; /* heap.h */
#undef KITE_ABANDONED_EMPTY_MAX
#define KITE_ABANDONED_EMPTY_MAX _kite_test_abandoned_empty_max
#endif
static uint32_t abandoned_empty;

/* The abandoned lists are doubly linked (next, prev), so that the free that empties a page
 * can take it out of the middle. Caller holds _kite_heap_lock. */
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

/* Caller holds _kite_heap_lock; pg is abandoned, listed, and a push just emptied it (its
 * KITE_TF_EMPTIED set, remote.c R5). Merges the remote frees (used goes to 0); then, with
 * fewer than KITE_ABANDONED_EMPTY_MAX empty pages kept, moves pg to the front of its list
 * (the next thread short of that class adopts it without a trip through the arena and a
 * page fault), else unlinks it and returns true: the caller gives it to the arena after
 * unlocking. */
static bool abandoned_settle(kite_page_t *pg) {
  for (;;) {
    uint32_t remote;
    _kite_page_collect(pg, true, false, &remote);
    if (remote) _kite_stat_add(&_kite_stats.remote_frees, remote);
    if (pg->used == 0) break;
    /* a racing double free broke the list (R4): blocks stay claimed; the page stays
     * abandoned, emptied when the pushes reach its new count */
    if (!_kite_remote_retarget(pg, (uint32_t)pg->used)) return false;
  }
  abandoned_unlink(pg);
  if (abandoned_empty < KITE_ABANDONED_EMPTY_MAX) {
    abandoned_empty++;
    abandoned_push(pg);
    return false;
  }
  return true;
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_settle_unlocked)(void *pg);
#endif

/* The run of a settled page that is not kept goes to the arena before _kite_heap_lock is let
 * go (I-A5). */
void _kite_heap_settle_abandoned(kite_page_t *pg) {
  uint64_t now = _kite_os_now_ms();
  _kite_lock(&_kite_heap_lock);
  bool release = abandoned_settle(pg);
  if (release) {
    _kite_page_fini(pg);
    _kite_arena_free_run_held(pg, now);
  }
  _kite_unlock(&_kite_heap_lock);
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_settle_unlocked, __ATOMIC_ACQUIRE);
  if (hook) hook(pg);
#endif
  if (release) _kite_arena_free_run_done(now);
}

void _kite_heap_fork_settle(void) {
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    for (kite_page_t *pg = abandoned[c], *next; pg; pg = next) {
      next = pg->next; /* (a settled page kept goes to the front: not seen again) */
      if (!(__atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) & KITE_TF_EMPTIED)) continue;
      if (abandoned_settle(pg)) run_free(pg); /* the child's one thread: no lock to drop */
    }
  }
}

/* Take an abandoned page of class cls, if any. */
kite_page_t *_kite_heap_adopt(kite_heap_t *h, unsigned cls) {
  for (int tries = 0; tries < 8; tries++) {
    if (__atomic_load_n(&abandoned[cls], __ATOMIC_RELAXED) == NULL) return NULL;
    _kite_lock(&_kite_heap_lock);
    kite_page_t *pg = abandoned[cls];
    while (pg && !_kite_remote_adopt(pg)) pg = pg->next; /* I-A4: an emptied page is skipped */
    if (pg) {
      if (pg->used == 0) abandoned_empty--;
      abandoned_unlink(pg);
      page_own(h, pg);
    }
    _kite_unlock(&_kite_heap_lock);
    if (!pg) return NULL;
    _kite_stat_add(&_kite_stats.pages_adopted, 1);
    page_collect(h, pg, true);
    kite_assert_internal(_kite_page_check(pg, true, 0) && pg->cls == cls);
    if (pg->free != KITE_LINK_END || pg->capacity < pg->reserved) {
      q_push_front(&h->queue[cls], pg);
      return pg;
    }
    _kite_heap_full_push(h, pg);
  }
  return NULL;
}

/* The pages of an exiting thread's heap h (thread exit, or a heap whose thread key could not
 * be set): empty ones are released, the others abandoned (I-A1) in one _kite_heap_lock
 * section for the whole heap: threads that exit together (a pool's round) would otherwise
 * queue on that lock once per page. */
void _kite_heap_abandon_pages(kite_heap_t *h) {
  kite_page_t *keep = NULL; /* the pages to abandon, chained through next */
  uint64_t n = 0;
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
        _kite_page_from_full(pg);
        page_collect(h, pg, true);
        if (pg->used == 0) { page_release(h, pg, false); continue; }
        kite_assert_internal(_kite_page_check(pg, true, 0));
        pg->next = keep;
        keep = pg;
        n++;
      }
    }
  }
  if (!keep) return;
  kite_page_t *empty = NULL; /* pages whose every block was freed since the collect */
  _kite_lock(&_kite_heap_lock);
#ifdef KITE_TEST_HOOKS
  _kite_test_abandon_lock_sections++;
#endif
  while (keep) {
    kite_page_t *pg = keep;
    keep = pg->next;
    KITE_STORE_RELAXED(pg->owner_key, 0); /* I-P2: not on the fast path of any thread */
    __atomic_store_n(&pg->heap, NULL, __ATOMIC_RELEASE);
    /* remote.c R5: from here the push that frees its last block settles it; a page whose
     * blocks were all freed since the collect is not abandoned (no free can come) */
    bool listed;
    while (!(listed = _kite_remote_abandon(pg, (uint32_t)pg->used))) {
      page_collect(h, pg, true);
      if (pg->used == 0) break; /* else a racing double free broke its list (R4) */
    }
    if (listed) abandoned_push(pg);
    else { pg->next = empty; empty = pg; n--; }
  }
  _kite_unlock(&_kite_heap_lock);
  _kite_stat_add(&_kite_stats.pages_abandoned, n);
  while (empty) {
    kite_page_t *pg = empty;
    empty = pg->next;
    pg->next = NULL;
    run_free(pg);
  }
}

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
    _kite_heap_pin(h, c);
  }
  while (h != &_kite_heap_empty && h->cache) {
    kite_page_t *pg = h->cache;
    h->cache = pg->next;
    h->cache_count -= 1u << pg->order;
    pg->next = NULL;
    released += KITE_UNIT_SIZE << pg->order;
    run_free(pg);
  }
  /* empty abandoned pages kept for the next threads (the others are given back by the
   * frees that empty them, remote.c R5) */
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!__atomic_load_n(&abandoned[c], __ATOMIC_RELAXED)) continue;
    _kite_lock(&_kite_heap_lock);
    kite_page_t *empty = NULL;
    for (kite_page_t *pg = abandoned[c], *next; pg; pg = next) {
      next = pg->next;
      if (pg->used != 0) continue;
      abandoned_empty--;
      abandoned_unlink(pg);
      pg->next = empty;
      empty = pg;
    }
    _kite_unlock(&_kite_heap_lock);
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

bool _kite_heap_check_all(void) {
  if (!_kite_heap_check(_kite_heap_tls)) return false;
  bool ok = true;
  _kite_lock(&_kite_heap_lock);
  /* abandoned pages: nobody owns them, and nobody collects them while _kite_heap_lock is held */
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
      if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL || pg->owner_key || pg->cls != c)
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
  _kite_unlock(&_kite_heap_lock);
  return ok;
}
