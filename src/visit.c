/* src/visit.c -- live counts and block walks (contract in visit.h). */
#include <kite.h>
#include "visit.h"
#include "page.h"
#include "arena.h"
#include "huge.h"
#include "pagemap.h"
#include "stats.h"
#include "secure_layout.h"
#include <string.h>

#if KITE_SECURE
void (*_kite_visit_flush_hook)(void);
#endif

/* The secure build: the calling thread's quarantine goes to the core's free first (visit.h's
 * hook). Every other build: nothing. */
static inline void flush_own(void) {
#if KITE_SECURE
  void (*flush)(void) = __atomic_load_n(&_kite_visit_flush_hook, __ATOMIC_ACQUIRE);
  if (flush) flush();
#endif
}

uint32_t _kite_page_live(const kite_page_t *pg) {
  int32_t used = __atomic_load_n(&pg->used, __ATOMIC_RELAXED) & ~KITE_PAGE_IN_FULL;
  kite_heap_t *h = __atomic_load_n(&pg->heap, __ATOMIC_RELAXED);
  if (h && __atomic_load_n(&h->pinned[pg->cls], __ATOMIC_RELAXED) == pg) used--;
  used -= KITE_TF_COUNT(__atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED));
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  if (used < 0) used = 0; /* a torn read of a page another thread is changing */
  return (uint32_t)used > cap ? cap : (uint32_t)used;
}

static void live_run(kite_page_t *pg, void *arg) {
  kite_live_t *l = arg;
  if (pg->kind == KITE_KIND_LARGE) {
    l->large_blocks++;
    l->large_bytes += pg->large_size;
    return;
  }
  unsigned c = pg->cls;
  if (c >= KITE_CLASSES) return;
  uint32_t n = _kite_page_live(pg);
  l->blocks[c] += n;
  l->bytes[c] += (uint64_t)n * _kite_class_size_[c];
  l->pages[c]++;
}

void _kite_live_collect(kite_live_t *out) {
  flush_own(); /* the caller's quarantined blocks are not live */
  memset(out, 0, sizeof *out);
  _kite_arena_foreach_run(live_run, out);
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    out->small_blocks += out->blocks[c];
    out->small_bytes += out->bytes[c];
    out->small_pages += out->pages[c];
  }
  out->huge_blocks = __atomic_load_n(&_kite_stats.huge_live_blocks, __ATOMIC_RELAXED);
  out->huge_bytes = __atomic_load_n(&_kite_stats.huge_live_bytes, __ATOMIC_RELAXED);
}

/* Pages of another thread's queues may move while we walk them: the walk stops after this
 * many pages so that a torn link can never keep it going. */
#define KITE_WALK_MAX_PAGES (1u << 22)

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_heap_live_page)(void);
#endif

/* Another thread's pages may be given back and their arena unmapped while we follow their
 * links (a page we reach may have left the heap a moment ago): the walk holds off the
 * unmapping of arenas (_kite_arena_hold_unmap), so every descriptor it reaches stays
 * readable. Called under heap_lock (_kite_heap_foreach), which comes before the arena's
 * purge lock. */
void _kite_heap_live(kite_heap_t *h, kite_heap_live_t *out) {
  flush_own(); /* the caller's quarantined blocks are not live */
  out->live_blocks = out->pages = 0;
  out->remote_frees = __atomic_load_n(&h->remote_frees, __ATOMIC_RELAXED);
  uint32_t budget = KITE_WALK_MAX_PAGES;
  _kite_arena_hold_unmap(true);
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    kite_page_t *firsts[2] = {__atomic_load_n(&h->queue[c].first, __ATOMIC_RELAXED),
                              __atomic_load_n(&h->full[c].first, __ATOMIC_RELAXED)};
    for (int k = 0; k < 2; k++)
      for (kite_page_t *pg = firsts[k]; pg && budget; pg = __atomic_load_n(&pg->next, __ATOMIC_RELAXED), budget--) {
#ifdef KITE_TEST_HOOKS
        if (_kite_test_hook_heap_live_page) _kite_test_hook_heap_live_page();
#endif
        out->pages++;
        out->live_blocks += _kite_page_live(pg);
      }
  }
  _kite_arena_hold_unmap(false);
}

/* ---- block walks ---- */

typedef struct {
  kite_block_visitor_t fn;
  void *arg;
  bool stopped;
} visit_t;

/* Visit the live blocks of small page pg: the carved blocks whose entry says LIVE. */
static bool visit_page(kite_page_t *pg, visit_t *v) {
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  if (cap > KITE_PAGE_MAX_BLOCKS) cap = KITE_PAGE_MAX_BLOCKS;
  for (uint32_t i = 0; i < cap; i++) {
    if (!_kite_page_block_live(pg, i)) continue;
#if KITE_SECURE /* secure_layout.h: a block in a quarantine is freed; the canary is not usable */
    if (_kite_secure_block_freed(_kite_page_block(pg, i), pg->block_size)) continue;
    if (!v->fn(_kite_page_block(pg, i), pg->block_size - KITE_SECURE_CANARY, v->arg)) return false;
#else
    if (!v->fn(_kite_page_block(pg, i), pg->block_size, v->arg)) return false;
#endif
  }
  return true;
}

static void visit_run(kite_page_t *pg, void *arg) {
  visit_t *v = arg;
  if (v->stopped) return;
  if (pg->kind == KITE_KIND_LARGE) {
    /* (secure build: the last page is the guard, not usable) */
    if (!v->fn(_kite_page_start(pg), pg->large_size - (KITE_SECURE ? KITE_SECURE_GUARD : 0), v->arg)) v->stopped = true;
    return;
  }
  if (!visit_page(pg, v)) v->stopped = true;
}

static bool visit_huge(void *p, size_t len, void *arg) {
  visit_t *v = arg;
  if (!v->fn(p, (KITE_SECURE ? ((len & ~(size_t)(KITE_OS_PAGE - 1)) - KITE_SECURE_GUARD) : len), v->arg)) v->stopped = true;
  return !v->stopped;
}

/* The usable size of a first-class heap's large or huge block b, as visit_run and
 * visit_huge count them (the secure build's guard page is not usable). Read from the layers
 * below, not through kite_malloc_usable_size: in the secure build that is secure.c's
 * wrapper, and secure.c calls the statistics' callers (a circle). */
static size_t owned_usable(const void *b) {
  uintptr_t u = (uintptr_t)b;
  if (_kite_pagemap_kind(u) == KITE_PM_HUGE) {
    size_t len = _kite_huge_usable(b);
    return KITE_SECURE && len ? (len & ~(size_t)(KITE_OS_PAGE - 1)) - KITE_SECURE_GUARD : len;
  }
  return _kite_page_head(_kite_unit_of(u))->large_size - (KITE_SECURE ? KITE_SECURE_GUARD : 0);
}

KITE_API bool kite_visit_all(kite_block_visitor_t visitor, void *arg) {
  if (!visitor) return true;
  flush_own();
  visit_t v = {visitor, arg, false};
  _kite_arena_foreach_run(visit_run, &v);
  if (!v.stopped) _kite_huge_foreach(visit_huge, &v);
  return !v.stopped;
}

KITE_API bool kite_heap_visit(kite_heap_t *heap, kite_block_visitor_t visitor, void *arg) {
  kite_heap_t *h = heap ? _kite_heap_of_handle(heap, "kite_heap_visit(): invalid or stale heap") : _kite_heap_tls;
  if (!h) return false; /* reported, errno EINVAL: nothing was visited */
  if (!visitor || h == &_kite_heap_empty) return true;
  flush_own();
  visit_t v = {visitor, arg, false};
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    kite_pageq_t *qs[2] = {&h->queue[c], &h->full[c]};
    for (int k = 0; k < 2; k++)
      for (kite_page_t *pg = qs[k]->first; pg; pg = pg->next)
        if (!visit_page(pg, &v)) return false;
  }
  /* a first-class heap's large and huge blocks (the list is only changed by frees of them,
   * which the contract excludes during the walk) */
  for (kite_owned_t *o = h->owned; o; o = o->next) {
    void *b = o->block;
    size_t n = owned_usable(b);
    if (n && !visitor(b, n, arg)) return false;
  }
  return true;
}
