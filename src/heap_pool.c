/* src/heap_pool.c -- heap structs: where they come from, where they go, who is live
 * (heap_impl.h: shared parts).
 *
 * Data structures: heap_pool, the structs of retired heaps waiting for reuse (via
 * next_all); _kite_heap_all, every live heap, thread and first-class (next_all/prev_all);
 * the chunks heap structs are carved from (heap_carve). One path obtains a heap
 * (heap_obtain) and one retires it (heap_retire), whichever kind it is: a thread's heap
 * (obtained on the thread's first malloc, retired at its exit) or a first-class heap
 * (kite_heap_new / kite_heap_destroy).
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
 *   I-H3 a heap struct is on exactly one of: _kite_heap_all (live), heap_pool (retired), or
 *        neither for the moment between them (obtain and retire move it in one
 *        _kite_heap_lock section each); a retired heap holds no page and no owned block,
 *        and in the secure build no quarantined block or kept run (heap.h's retire hook
 *        gives them back first, whoever retires it: its thread or I-H4's) (its fields are stale until heap_obtain resets it: nothing reads a pooled heap but
 *        handle_gen).
 *   I-H5 a heap struct off the live list (pooled, or carved and not yet handed out) has every
 *        direct[] entry on the empty page: heap_carve fills a new struct's table, and
 *        heap_retire clears the classes the heap used (_kite_heap_direct_clear) after its
 *        pages are gone, before the struct reaches the pool. So heap_obtain does not write
 *        the table (KITE_DIRECT_SLOTS entries) at each thread's start, and a thread that
 *        used few classes does not pay for the whole table at its exit either.
 *   I-H4 a live heap whose key is the calling thread's key (the thread pointer, types.h) is
 *        of a thread that exited without its thread-exit destructor: thread pointers are
 *        unique among running threads. That happens to a heap registered in the C
 *        library's last round of key destructors (the thread's first request came there:
 *        nothing can tell that round from an earlier one, and no destructor runs after
 *        it). The C library gives a dead thread's cached stack, thread pointer included, to
 *        a later thread; that thread's first heap_obtain retires the heap left behind,
 *        from the one thread whose frees the fast path could take into its pages (its
 *        pages carry that key), before it makes its own; or, when its first request is a
 *        free the fast path takes into a page of that heap (it frees and never allocates),
 *        that free's slow path retires it (_kite_heap_retire_left). Where there is no thread
 *        pointer (the key is the heap's address, which no later thread has), the heap is
 *        found by pthread_self(), which the C library gives to later threads as it does the
 *        thread pointer: heap_self, kept in each thread heap's self. There a later thread's
 *        frees into the heap's pages are remote: its first free that leaves the fast path
 *        while it has no heap looks for the heap once (_kite_heap_retire_left_by_self; a heap
 *        with its self can only be older than the thread, so once is enough).
 *
 * Locks: _kite_heap_lock guards the heap pool, the list of live heaps, and the abandoned lists
 * (heap_abandon.c). It is taken only on slow paths (thread start/exit, adoption, trim, stats,
 * heap_steal). Each heap's lock guards its full lists (I-Q1). Order: _kite_heap_lock, then a
 * heap's lock (I-Q3).
 */
#include "heap_impl.h"
#include "huge.h"
#include "pagemap.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include <errno.h>
#include <string.h>

/* First-class heap handles keep their generation above the address bits (I-H1). */
#define KITE_HANDLE_SHIFT 48
_Static_assert(KITE_ADDR_BITS <= KITE_HANDLE_SHIFT, "kite's mappings lie below the handle tag");

kite_lock_t _kite_heap_lock = KITE_LOCK_INIT; /* lock: the heap pool and carving, the live heaps' list, owned blocks, abandoned pages */
static kite_heap_t *heap_pool;     /* heaps of exited threads and destroyed heaps, for reuse (via next_all) */
kite_heap_t *_kite_heap_all;       /* all live heaps */
static pthread_key_t heap_key;
static bool heap_key_made;

static void heap_thread_done(void *arg);
/* The calling thread's identity, unique among running threads (I-H4). */
static uintptr_t heap_self(void) {
#ifdef KITE_THREAD_KEY
  return KITE_THREAD_KEY();
#else
  return (uintptr_t)pthread_self();
#endif
}
/* Set once the thread's exit has retired its heap (heap_thread_done): a heap made after that
 * (a later destructor's malloc) may never be retired, so it gets no key (heap.h). */
static __thread bool heap_exiting __attribute__((tls_model("initial-exec")));

/* Everything but direct[] and handle_gen (I-H1: a stale handle's check may read it
 * meanwhile): what the statistics walks read of a live heap (its queues, full lists and
 * counters) is zero before the heap is on the live list. direct_start[] is left as it was
 * (heap.h: it means something only beside a page in direct[]), so the memset starts after
 * it; direct[], which only the heap's own thread reads, is on the empty page already
 * (I-H5). */
_Static_assert(offsetof(kite_heap_t, handle_gen) + sizeof(uint32_t) > sizeof(kite_heap_t) - 8,
               "handle_gen is kite_heap_t's last field");
static void heap_reset(kite_heap_t *h) {
  memset(&h->queue, 0, offsetof(kite_heap_t, handle_gen) - offsetof(kite_heap_t, queue));
}
static void heap_reset_direct(kite_heap_t *h) {
  for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++) h->direct[s] = &_kite_page_empty;
}
static bool heap_direct_is_empty(const kite_heap_t *h) {
  for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++)
    if (h->direct[s] != &_kite_page_empty) return false;
  return true;
}

/* Heap structs (the direct[] table the malloc fast path follows first of all) are carved
 * from chunks of their own between PROT_NONE guard pages (_kite_arena_guarded_chunk; one
 * unit of an arena, guards inside, when the OS refuses a mapping), never next to a block:
 * no overflow out of a block reaches one. Never given back: retired heaps wait in
 * heap_pool for the next thread or kite_heap_new (I-H2). Caller holds _kite_heap_lock. */
#define HEAP_CHUNK KITE_ARENA_GUARDED_CHUNK
static uint8_t *heap_slab_cur, *heap_slab_end;
static bool heap_slab_in_arena; /* the current chunk is an arena unit: the arena counts it committed */
static kite_heap_t *heap_carve(void) {
  size_t sz = (sizeof(kite_heap_t) + 63) & ~(size_t)63;
  if (heap_slab_cur == NULL || heap_slab_cur + sz > heap_slab_end) {
    uint8_t *m = _kite_arena_guarded_chunk(HEAP_CHUNK, &heap_slab_in_arena);
    if (!m) return NULL;
    heap_slab_cur = m;
    heap_slab_end = m + HEAP_CHUNK;
  }
  kite_heap_t *h = (kite_heap_t *)heap_slab_cur;
  heap_slab_cur += sz;
  if (!heap_slab_in_arena) _kite_stat_commit((int64_t)sz); /* counted when first cut, as links.c does */
  heap_reset_direct(h); /* I-H5: once a struct; heap_retire keeps it so */
  return h;
}

#ifdef KITE_TEST_HOOKS
bool _kite_test_fail_setspecific;
uint64_t _kite_test_obtain_lock_sections; /* heap.h */
#endif
/* Register h for the thread-exit destructor (heap_thread_done). */
static int heap_key_set(kite_heap_t *h) {
#ifdef KITE_TEST_HOOKS
  if (_kite_test_fail_setspecific) return ENOMEM;
#endif
  return pthread_setspecific(heap_key, h);
}

/* A heap struct from the pool (or carved), reset, of the given kind, on the live list;
 * NULL + ENOMEM. A thread's heap needs the thread-exit key first: made here once. One
 * _kite_heap_lock section (threads that start together queue on it): the struct leaves the
 * pool, is reset and goes on the live list in it (I-H3). Cold (a thread's start,
 * kite_heap_new): compiled for size, its reset is one string store instead of a call to
 * memset. */
static void heap_retire(kite_heap_t *h);
static KITE_COLD kite_heap_t *heap_obtain(bool user) {
  _kite_options_ensure();
  _kite_lock(&_kite_heap_lock);
#ifdef KITE_TEST_HOOKS
  _kite_test_obtain_lock_sections++;
#endif
  if (!user && !heap_key_made) {
    if (pthread_key_create(&heap_key, heap_thread_done) != 0) {
      _kite_unlock(&_kite_heap_lock);
      errno = ENOMEM;
      return NULL;
    }
    heap_key_made = true;
  }
  kite_heap_t *left = NULL; /* I-H4: a heap of a dead thread that had this thread pointer */
  uintptr_t self = user || heap_exiting ? 0 : heap_self();
  for (kite_heap_t *o = self ? _kite_heap_all : NULL; o && !left; o = o->next_all)
    if (o->self == self) left = o;
  kite_heap_t *h = heap_pool;
  if (h) heap_pool = h->next_all;
  else h = heap_carve();
  if (h) {
    heap_reset(h);
    h->user = user;
    /* the key in this section: another thread's I-H4 look reads it under the lock */
#ifdef KITE_THREAD_KEY
    h->key = user || heap_exiting ? 0 : KITE_THREAD_KEY();
#else
    h->key = user || heap_exiting ? 0 : (uintptr_t)h;
#endif
    h->self = self;
    h->next_all = _kite_heap_all;
    if (_kite_heap_all) _kite_heap_all->prev_all = h;
    _kite_heap_all = h;
    __atomic_fetch_add(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  }
  _kite_unlock(&_kite_heap_lock);
  if (unlikely(left != NULL)) heap_retire(left); /* (only this thread can match it: I-H4) */
  kite_assert_internal(heap_direct_is_empty(h)); /* I-H5 */
  return h;
}

/* Move h's counters into the globals and take h off the live list, in one _kite_heap_lock
 * section: _kite_heap_collect_stats reads the globals and the live heaps in one such section
 * too, so it counts h's figures once, in h or in the globals. Caller holds _kite_heap_lock. */
static void heap_unlink_merging_stats(kite_heap_t *h) {
  for (unsigned c = 0; c < KITE_CLASSES; c++)
    if (h->issued[c]) __atomic_fetch_add(&_kite_stats.issued[c], h->issued[c], __ATOMIC_RELAXED);
  __atomic_fetch_add(&_kite_stats.remote_frees, h->remote_frees, __ATOMIC_RELAXED);
  if (h->prev_all) h->prev_all->next_all = h->next_all; else _kite_heap_all = h->next_all;
  if (h->next_all) h->next_all->prev_all = h->prev_all;
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_heap_abandon)(void);
#endif

/* Give back every page of a first-class heap h whatever it holds, and its large and huge
 * blocks. */
static void heap_release_all(kite_heap_t *h) {
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
  _kite_lock(&_kite_heap_lock);
  kite_owned_t *list = h->owned;
  h->owned = NULL;
  for (kite_owned_t *o = list; o; o = o->next) o->owner = NULL;
  _kite_unlock(&_kite_heap_lock);
  while (list) {
    kite_owned_t *o = list;
    list = o->next;
    void *b = o->block;
    if (_kite_pagemap_kind((uintptr_t)b) == KITE_PM_HUGE) _kite_huge_free(b, NULL);
    else _kite_arena_free_run(_kite_page_head(_kite_unit_of((uintptr_t)b)));
  }
}

#if KITE_SECURE
void (*_kite_heap_retire_hook)(kite_heap_t *h);
#endif
/* The one way out for a heap of either kind: its pages (a thread's abandoned, a first-class
 * heap's freed with its owned blocks), its page cache, then its struct back to the pool with
 * its counters merged into the globals (I-H3); its handle, if any, is stale from here (I-H1). */
static void heap_retire(kite_heap_t *h) {
  if (h->user) heap_release_all(h);
  else _kite_heap_abandon_pages(h);
  while (h->cache) {
    kite_page_t *pg = h->cache;
    h->cache = pg->next;
    pg->next = NULL;
    run_free(pg);
  }
  h->cache_count = 0;
#if KITE_SECURE
  /* its quarantine's blocks go back to their pages, abandoned now, as any exited thread's
   * blocks do (before the pages' abandonment they would empty them, to be made again by
   * the next thread); before the struct can reach the pool, whose next user resets it */
  void (*hook)(kite_heap_t *) = __atomic_load_n(&_kite_heap_retire_hook, __ATOMIC_ACQUIRE);
  if (!h->user && hook) hook(h);
#endif
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_heap_abandon) _kite_test_hook_heap_abandon();
#endif
  _kite_heap_direct_clear(h); /* I-H5: no page left to point at */
  _kite_lock(&_kite_heap_lock);
  heap_unlink_merging_stats(h);
  __atomic_fetch_sub(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->handle_gen, 1, __ATOMIC_RELAXED); /* I-H1: its handle is stale now */
  /* the rest is reset by heap_obtain when the struct is handed out again (I-H3) */
  h->next_all = heap_pool;
  heap_pool = h;
  _kite_unlock(&_kite_heap_lock);
}

/* heap_exiting (above) is set by the thread-exit destructor. A destructor of a key made
 * after kite's runs after it
 * and may allocate, in the last destructor round too, when no destructor will run again: a
 * heap registered then would never be retired (its pages and struct lost with each such
 * thread). So once a thread's heap was retired, each request it makes gets a heap of its own
 * that is retired right after it (_kite_heap_late_end): the block lives on in an abandoned
 * page, as the blocks of any exited thread do. */

bool _kite_heap_late(void) { return heap_exiting; }

/* left's thread is dead and the caller has its key: only the caller's frees reach left's
 * lists, and only the caller retires it (I-H4), so no lock is needed to know it is live. */
void _kite_heap_retire_left(kite_heap_t *left) { heap_retire(left); }

#ifndef KITE_THREAD_KEY
static __thread bool heap_left_looked __attribute__((tls_model("initial-exec")));
void _kite_heap_retire_left_by_self(void) {
  if (heap_left_looked || heap_exiting) return;
  heap_left_looked = true;
  uintptr_t self = heap_self();
  kite_heap_t *left = NULL;
  _kite_lock(&_kite_heap_lock); /* (self is written under it: heap_obtain) */
  for (kite_heap_t *o = _kite_heap_all; o && !left; o = o->next_all)
    if (o->self == self) left = o;
  _kite_unlock(&_kite_heap_lock);
  if (left) heap_retire(left); /* (only this thread can match it: I-H4) */
}
#endif

void _kite_heap_late_end(kite_heap_t *h) {
  _kite_heap_tls = &_kite_heap_empty;
  heap_retire(h);
}

kite_heap_t *_kite_heap_create(void) {
  kite_heap_t *h = heap_obtain(false); /* its key set there (I-H4) */
  if (!h) return NULL;
  _kite_heap_tls = h;
  if (unlikely(heap_exiting)) return h; /* no key: the caller retires it (_kite_heap_late_end) */
  /* may allocate (keys >= 32): the TLS heap is ready */
  if (unlikely(heap_key_set(h) != 0)) {
    /* without the key, no thread-exit destructor would ever abandon h: its pages would stay
     * with a heap nobody uses. Given up as a thread exit gives it up; the caller's request
     * fails (a later one tries again). */
    _kite_heap_tls = &_kite_heap_empty;
    heap_retire(h);
    _kite_report_note("pthread_setspecific failed: no heap for this thread (the request gets NULL, errno ENOMEM)");
    errno = ENOMEM;
    return NULL;
  }
  return h;
}

kite_heap_t *_kite_heap_get(void) {
  kite_heap_t *h = _kite_heap_tls;
  if (likely(h != &_kite_heap_empty)) return h;
  if (unlikely(heap_exiting)) return NULL; /* malloc_class_generic serves late requests */
  return _kite_heap_create();
}

static void heap_thread_done(void *arg) {
  kite_heap_t *h = arg;
  if (!h || h == &_kite_heap_empty) return;
  heap_exiting = true;
  _kite_heap_tls = &_kite_heap_empty; /* a later malloc on this thread: one heap a request */
  heap_retire(h);
}

/* ---- first-class heaps ---- */

kite_heap_t *_kite_heap_new_user(void) {
  kite_heap_t *h = heap_obtain(true);
  if (!h) return NULL;
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
  _kite_lock(&_kite_heap_lock);
  o->owner = h;
  o->block = block;
  o->prev = NULL;
  o->next = h->owned;
  if (h->owned) h->owned->prev = o;
  h->owned = o;
  _kite_unlock(&_kite_heap_lock);
}

void _kite_heap_disown(kite_owned_t *o) {
  if (!o->owner) return;
  _kite_lock(&_kite_heap_lock);
  if (o->owner) {
    if (o->prev) o->prev->next = o->next; else o->owner->owned = o->next;
    if (o->next) o->next->prev = o->prev;
    o->owner = NULL;
  }
  _kite_unlock(&_kite_heap_lock);
}

void _kite_heap_destroy_user(kite_heap_t *h) { heap_retire(h); }

/* ---- statistics, the live heaps, fork ---- */

void _kite_heap_collect_stats(kite_gstats_t *out) {
  /* the globals and the live heaps in one _kite_heap_lock section: a heap that exits moves its
   * counters into the globals in one too (heap_unlink_merging_stats), so each is counted
   * once. Every field is a uint64_t that other threads update atomically (the purger
   * thread among them): copied word by word with atomic loads; a heap's own counters are
   * written by its owner only, read here with relaxed loads (heap_count). */
  const uint64_t *src = (const uint64_t *)&_kite_stats;
  uint64_t *dst = (uint64_t *)out;
  _kite_lock(&_kite_heap_lock);
  for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++) dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  for (kite_heap_t *h = _kite_heap_all; h; h = h->next_all) {
    for (unsigned c = 0; c < KITE_CLASSES; c++) out->issued[c] += __atomic_load_n(&h->issued[c], __ATOMIC_RELAXED);
    out->remote_frees += __atomic_load_n(&h->remote_frees, __ATOMIC_RELAXED);
  }
  _kite_unlock(&_kite_heap_lock);
}

void _kite_heap_foreach(void (*fn)(kite_heap_t *h, void *arg), void *arg) {
  _kite_lock(&_kite_heap_lock);
  for (kite_heap_t *h = _kite_heap_all; h; h = h->next_all) fn(h, arg);
  _kite_unlock(&_kite_heap_lock);
}

void _kite_heap_fork_prepare(void) { _kite_lock(&_kite_heap_lock); }
void _kite_heap_fork_parent(void) { _kite_unlock(&_kite_heap_lock); }
/* The child has one thread: the other threads' heaps stay (their pages' frees go the remote
 * way, as to any heap nobody collects), but their keys go, pages first: a thread the child
 * starts may get an exited thread's thread pointer (heap.h). */
void _kite_heap_fork_child(void) {
  _kite_lock_fork_child(&_kite_heap_lock);
  _kite_heap_fork_settle(); /* the settles due in parent threads (heap_abandon.c I-A4) */
  for (kite_heap_t *h = _kite_heap_all; h; h = h->next_all) {
    if (h == _kite_heap_tls || !h->key) continue;
    for (unsigned c = 0; c < KITE_CLASSES; c++)
      for (int k = 0; k < 2; k++)
        for (kite_page_t *pg = (k ? h->full[c] : h->queue[c]).first; pg; pg = pg->next) KITE_STORE_RELAXED(pg->owner_key, 0);
    h->key = 0;
    h->self = 0; /* a thread the child starts may get its pthread_self(): not a left heap */
  }
}
