/* src/heap.c -- per-thread heaps: the owner's paths (contract in heap.h; what the heap
 * files share in heap_impl.h).
 *
 * Data structures: kite_heap_t (heap.h): per class a queue of pages that may have free
 * blocks, whose first page is the current one ("pinned": its used count carries +1), a full
 * list, and direct[] (the page every size up to 1024 bytes allocates from).
 *
 * Small page life cycle, as the heap drives it (page.c does the work on one page):
 *   fresh (heap_reclaim.c: reclaimed, stolen, from the heap's cache or a buddy run) -> in
 *   heap->queue[cls] while it may have free blocks -> on heap->full[cls] once collecting
 *   found nothing (in_full set, page.h; a local free moves it back at once, remote frees
 *   are found by an amortized scan of the full list, full_scan, before a fresh page is
 *   taken) -> empty: cached or given back to the arena. At thread exit every non-empty page
 *   is abandoned and later adopted (heap_abandon.c). The heap structs themselves, thread and
 *   first-class, come from and go back to one pool (heap_pool.c).
 *
 * Invariants (heap.h states them for the struct; this file keeps them):
 *   I-P1 direct[n] is the first page of queue[class_of(n)], or the empty page; pinned[cls]
 *        == queue[cls].first, and that page's used carries +1 (_kite_heap_pin moves both).
 *   I-P2 a page in h's queues or full lists has page->heap == h (relaxed atomic: remote
 *        frees compare it) and owner_key == h->key (heap_impl.h's page_own; page_release and
 *        abandonment clear both).
 *   I-C1 h->cache holds empty small pages of any order (kind CACHED, heap NULL, link array
 *        kept), cache_count is the sum of their units and never above KITE_HEAP_CACHE_UNITS;
 *        only the owner touches it. A fresh page of order k is one of them when one has that
 *        order (heap_reclaim.c), before a run is claimed from the arena.
 *
 * Which file does which job of the heap module:
 *   heap.c          queues, pin and direct[], the generic malloc and local free, validators
 *   heap_reclaim.c  a fresh page: reclaim of this heap's dead pages, steal from other heaps
 *                   (paced), the page cache, a new run
 *   heap_abandon.c  thread exit's abandonment, the abandoned lists, adoption, frees into
 *                   abandoned pages, trim
 *   heap_pool.c     heap structs: one obtain and one retire path for thread and first-class
 *                   heaps, handles, owned large blocks, the statistics walk, fork
 */
#include "heap_impl.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* direct[] of a heap's empty classes: a page with no free block (malloc's test fails) */
kite_page_t _kite_page_empty = {.free = KITE_LINK_END, .local_free = KITE_LINK_END, .thread_free = KITE_TF_EMPTY};
kite_heap_t _kite_heap_empty = {.direct = {[0 ... KITE_DIRECT_SLOTS - 1] = &_kite_page_empty}};
__thread kite_heap_t *_kite_heap_tls __attribute__((tls_model("initial-exec"))) = &_kite_heap_empty;

/* Put pg (no free block, all carved: used == capacity, no pin) on its heap's full list. */
void _kite_heap_full_push(kite_heap_t *h, kite_page_t *pg) {
  kite_assert_internal(pg->used == (int32_t)pg->capacity && !pg->in_full);
  _kite_page_to_full(pg);
  list_lock(h);
  q_push_back(&h->full[pg->cls], pg);
  full_count_add(h, pg->cls, 1);
  list_unlock(h);
}

/* direct[lo..hi] = pg and direct_start[lo..hi] = start. A class has 17 (the first), 16, 32
 * or 64 entries, and a program whose current pages change often (random sizes, scattered
 * frees) pays this on every change. Where SSE2 is there: sixteen entries a step, straight
 * stores (two entries of one array each) with one loop test per step, since every class but
 * the first has a multiple of 16 entries (the first, one more: entry 0). */
static inline void direct_fill(kite_heap_t *h, unsigned lo, unsigned hi, kite_page_t *pg, uint8_t *start) {
#if defined(__SSE2__)
  if (lo == 0) {
    h->direct[0] = pg;
    h->direct_start[lo++] = start;
  }
  __m128i v = _mm_set1_epi64x((long long)(uintptr_t)pg), w = _mm_set1_epi64x((long long)(uintptr_t)start);
  kite_page_t **d = &h->direct[lo], **e = &h->direct[hi + 1];
  uint8_t **t = &h->direct_start[lo];
  do { /* hi - lo + 1 is a multiple of 16; written out, as gcc -O2 keeps a loop of 8 */
    __m128i *a = (__m128i *)d, *b = (__m128i *)t;
    _mm_storeu_si128(a, v), _mm_storeu_si128(a + 1, v), _mm_storeu_si128(a + 2, v), _mm_storeu_si128(a + 3, v);
    _mm_storeu_si128(a + 4, v), _mm_storeu_si128(a + 5, v), _mm_storeu_si128(a + 6, v), _mm_storeu_si128(a + 7, v);
    _mm_storeu_si128(b, w), _mm_storeu_si128(b + 1, w), _mm_storeu_si128(b + 2, w), _mm_storeu_si128(b + 3, w);
    _mm_storeu_si128(b + 4, w), _mm_storeu_si128(b + 5, w), _mm_storeu_si128(b + 6, w), _mm_storeu_si128(b + 7, w);
    d += 16;
    t += 16;
  } while (d != e);
#else
  for (unsigned s = lo; s <= hi; s++) {
    h->direct[s] = pg;
    h->direct_start[s] = start;
  }
#endif
}

/* After any change of the first page of queue[cls]: move the pin (+1 on used) to the new
 * first page, release the old one if that leaves it empty, and point the direct slots of
 * the class at the new first page (or the empty page). */
void _kite_heap_pin(kite_heap_t *h, unsigned cls) {
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
  if (h->direct[hi] != pg) direct_fill(h, _kite_class_direct_lo(cls), hi, pg, KITE_TOOL_START(first ? _kite_page_start(first) : NULL));
  kite_assert_internal(_kite_heap_check_class(h, cls, 0));
  kite_assert_expensive(_kite_heap_check_class(h, cls, 1));
}

/* Only the classes the heap used are written: a class's entries are written together (one
 * tells them all), and a thread that used a few classes pays for those, not for the whole
 * table of KITE_DIRECT_SLOTS entries. direct_start[] is left: it means nothing beside the
 * empty page (heap.h). */
void _kite_heap_direct_clear(kite_heap_t *h) {
  kite_page_t *e = &_kite_page_empty;
  for (unsigned c = 0; c < KITE_DIRECT_CLASSES; c++) {
    kite_assert(h->queue[c].first == NULL && h->pinned[c] == NULL);
    unsigned lo = _kite_class_direct_lo(c), hi = _kite_class_direct_hi(c);
    if (h->direct[hi] == e) continue;
    if (lo == 0) h->direct[lo++] = e; /* the first class: 17 entries, the others 16..64 */
#if defined(__SSE2__)
    __m128i v = _mm_set1_epi64x((long long)(uintptr_t)e);
    for (unsigned s = lo; s <= hi; s += 4) { /* hi - lo + 1 is a multiple of 4 */
      _mm_storeu_si128((__m128i *)&h->direct[s], v);
      _mm_storeu_si128((__m128i *)&h->direct[s + 2], v);
    }
#else
    for (unsigned s = lo; s <= hi; s++) h->direct[s] = e;
#endif
  }
}

/* Look through the full list of cls for pages that received remote frees. Amortized: each
 * fresh page of the class earns 4 page visits of credit; a call visits at most 2 pages more
 * than its credit and never more pages than the list holds, so scanning costs O(1) per slow
 * allocation however many pages are full. Visited pages without remote frees rotate to the
 * back, so successive calls look at different pages. */
static inline __attribute__((always_inline)) kite_page_t *full_scan(kite_heap_t *h, unsigned cls) {
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
      _kite_page_from_full(pg);
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

/* ---- generic allocation ---- */

/* The generic refill of class cls of thread heap h (not the empty heap): the page it
 * leaves first in the queue, pinned (I-P1), with a free block on its allocation list; NULL
 * + ENOMEM (the class's queue then empty). Inline in both of its callers, so that
 * malloc's own route keeps one call. */
static inline __attribute__((always_inline)) kite_page_t *class_refill(kite_heap_t *h, unsigned cls) {
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
    _kite_heap_full_push(h, pg);
    pg = next;
  }
  if (!pg) pg = full_n(h, cls) ? full_scan(h, cls) : NULL;
  if (!pg && !h->user) pg = _kite_heap_adopt(h, cls);
  if (!pg) {
    pg = _kite_heap_page_fresh(h, cls);
    if (!pg) {
      _kite_heap_pin(h, cls); /* the direct slots follow the queue (empty) */
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
  _kite_heap_pin(h, cls);
  return pg;
}

static KITE_NOINLINE void *malloc_class_generic(kite_heap_t *h, unsigned cls) {
  if (unlikely(h == &_kite_heap_empty)) {
    h = _kite_heap_create();
    if (!h) return NULL;
    if (unlikely(_kite_heap_late())) { /* after the thread's exit teardown (heap_pool.c) */
      void *b = malloc_class_generic(h, cls);
      _kite_heap_late_end(h);
      return b;
    }
  }
  kite_page_t *pg = class_refill(h, cls);
  return likely(pg != NULL) ? _kite_page_pop(pg) : NULL;
}

void *_kite_heap_refill_charged(kite_heap_t *h, unsigned cls, int64_t *left, void *(*over)(kite_page_t *pg)) {
  kite_page_t *pg = class_refill(h, cls);
  if (unlikely(pg == NULL)) return NULL;
  if (unlikely(pg->local_free != KITE_LINK_END)) page_collect(h, pg, true); /* heap.h: one list */
  int64_t k = _kite_heap_list_count(pg);
  if (unlikely(*left < k)) return over(pg);
  *left -= k;
  return _kite_page_pop(pg);
}

void _kite_heap_list_join(kite_heap_t *h, kite_page_t *pg) { page_collect(h, pg, true); }

void *_kite_malloc_small_generic(kite_heap_t *h, size_t n) {
  unsigned cls = _kite_class_of(n);
  /* sizes above the direct range allocate here */
  kite_page_t *pg = _kite_heap_current_page(h, cls);
  if (pg) return _kite_page_pop(pg);
  return malloc_class_generic(h, cls);
}

void *_kite_malloc_small_cls(kite_heap_t *h, unsigned cls) {
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
  /* a page of a heap its thread left behind, which carries the calling thread's key
   * (heap_pool.c I-H4): its lists are that heap's, retired now (the count the fast path
   * left is what that retire reads), not at this thread's first malloc, which may never
   * come */
  kite_heap_t *owner = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED);
  if (unlikely(owner != h)) {
    _kite_heap_retire_left(owner);
    return;
  }
  unsigned cls = pg->cls;
  if (pg->in_full) { /* was on the full list: it has a free block now */
    _kite_page_from_full(pg);
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

/* ---- validators (contracts in heap.h) ---- */

/* Walk queue q of class cls: links (first/last, next/prev agree, which also rules out
 * cycles), every page owned by h, of class cls, in_full set exactly on the full list;
 * each page checked with its lists when depth >= 2. *n = pages. */
static bool check_queue(const kite_heap_t *h, const kite_pageq_t *q, unsigned cls, bool full, int depth, uint32_t *n) {
  uint32_t k = 0;
  kite_page_t *prev = NULL;
  for (kite_page_t *pg = q->first; pg; prev = pg, pg = pg->next) {
    if (pg->prev != prev) return _kite_check_failed("heap: queue link prev != previous page", (uintptr_t)pg);
    if (__atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != h || __atomic_load_n(&pg->owner_key, __ATOMIC_RELAXED) != h->key)
      return _kite_check_failed("heap: queued page of another heap", (uintptr_t)pg);
    if (pg->cls != cls) return _kite_check_failed("heap: page in the queue of another class", pg->cls);
    if ((pg->in_full != 0) != full) return _kite_check_failed("heap: full bit disagrees with the list", (uintptr_t)pg);
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
  if (first && (first->in_full || first->used < 1)) return _kite_check_failed("heap: pinned page without its +1", cls);
  if ((first == NULL) != (h->queue[cls].last == NULL)) return _kite_check_failed("heap: queue first/last", cls);
  if (cls < KITE_DIRECT_CLASSES)
    for (unsigned s = _kite_class_direct_lo(cls); s <= _kite_class_direct_hi(cls); s++)
      if (h->direct[s] != (first ? first : &_kite_page_empty) || (first && KITE_TOOL_START(h->direct_start[s]) != _kite_page_start(first)))
        return _kite_check_failed("heap: direct slot is not the queue's first page", s);
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
  for (kite_page_t *pg = h->cache; pg; pg = pg->next) {
    if (pg->kind != KITE_KIND_CACHED || __atomic_load_n(&pg->heap, __ATOMIC_RELAXED) != NULL ||
        pg->owner_key)
      return _kite_check_failed("heap: cached page is not an unowned empty page", (uintptr_t)pg);
    n += 1u << pg->order;
    if (n > KITE_HEAP_CACHE_UNITS) return _kite_check_failed("heap: page cache over its bound", n);
  }
  if (n != h->cache_count) return _kite_check_failed("heap: cache_count", h->cache_count);
  return true;
}
