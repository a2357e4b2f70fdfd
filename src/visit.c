/* src/visit.c -- live counts and block walks (contract in visit.h). */
#include <kite.h>
#include "visit.h"
#include "page.h"
#include "arena.h"
#include "huge.h"
#include "pagemap.h"
#include "stats.h"
#include "secure_layout.h"
#include <stddef.h>
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

/* ---- the statistics field table (contract and V1 in visit.h) ---- */

#define CTR(f) KITE_SRC_COUNTER, offsetof(kite_gstats_t, f) / sizeof(uint64_t), {0, 0, 0}
#define CLASSES(f) KITE_SRC_CLASSES, offsetof(kite_gstats_t, f) / sizeof(uint64_t), {0, 0, 0}
#define LIVE(f) KITE_SRC_LIVE, offsetof(kite_live_t, f) / sizeof(uint64_t), {0, 0, 0}
#define SUM(a, b, c) KITE_SRC_SUM, 0, {a, b, c}
#define GET(f) offsetof(kite_stats_t, f)

const kite_stat_field_t _kite_stat_fields[KITE_STAT_COUNT] = {
  [KITE_STAT_COMMITTED] = {"", "committed", "committed",
    "bytes kite holds from the OS now: runs in use, free runs not yet purged, arena metadata, link arrays, huge maps and the huge cache",
    CTR(committed), GET(committed), true, "`arena`", "`<system type=\"current\">`"},
  [KITE_STAT_PEAK_COMMITTED] = {"", "peak_committed", "peak committed", "the most committed has been",
    CTR(peak_committed), GET(peak_committed), true, "`usmblks`", "`<system type=\"max\">`"},
  [KITE_STAT_PURGED] = {"", "purged", "purged",
    "bytes given back to the OS so far: decommitted runs, unmapped huge maps, link arrays malloc_trim decommitted",
    CTR(purged), GET(purged), true, NULL, "`<system type=\"purged\">`"},
  [KITE_STAT_ARENAS] = {"", "arenas", "arenas", "arenas mapped now, at most 64 MiB each; empty ones are unmapped",
    CTR(arenas), GET(arenas), false, NULL, "`<aspace type=\"arenas\">`"},
  [KITE_STAT_LIVE_BLOCKS] = {"live", "blocks", "live blocks", "blocks handed out and not freed: small + large + huge",
    SUM(KITE_STAT_SMALL_LIVE_BLOCKS, KITE_STAT_LARGE_LIVE_BLOCKS, KITE_STAT_HUGE_LIVE_BLOCKS), GET(live_blocks), false,
    NULL, "`<total type=\"live\" count>`"},
  [KITE_STAT_LIVE_BYTES] = {"live", "bytes", "live bytes", "their usable sizes: small + large + huge",
    SUM(KITE_STAT_SMALL_LIVE_BYTES, KITE_STAT_LARGE_LIVE_BYTES, KITE_STAT_HUGE_LIVE_BYTES), GET(live_bytes), true,
    "`uordblks`; `fordblks` = `arena` - this", "`<total type=\"live\" size>`"},
  [KITE_STAT_SMALL_LIVE_BLOCKS] = {"small", "live_blocks", "small live blocks", "small blocks live, summed over the size classes",
    LIVE(small_blocks), GET(small_live_blocks), false, NULL, "`<total type=\"small\" count>`"},
  [KITE_STAT_SMALL_LIVE_BYTES] = {"small", "live_bytes", "small live bytes", "their bytes: live blocks x block size",
    LIVE(small_bytes), GET(small_live_bytes), true, NULL, "`<total type=\"small\" size>`"},
  [KITE_STAT_SMALL_PAGES] = {"small", "pages", "small pages", "small pages of every heap and abandoned ones",
    LIVE(small_pages), GET(small_pages), false, "`ordblks` (with large live blocks)", "`<total type=\"small\" pages>`"},
  [KITE_STAT_SMALL_ISSUED] = {"small", "issued", "small allocations",
    "blocks put on a heap's allocation list: carved, collected from remote frees and, while statistics are on, local frees; not malloc calls",
    CLASSES(issued), GET(small_allocs), false, NULL, "`<total type=\"small\" issued>`"},
  [KITE_STAT_LARGE_ALLOCS] = {"large", "allocs", "large allocations", "large runs of 64 KiB .. 16 MiB allocated since start",
    CTR(large_allocs), GET(large_allocs), false, NULL, "`<total type=\"large\" allocs>`"},
  [KITE_STAT_LARGE_LIVE_BLOCKS] = {"large", "live_blocks", "large live blocks", "large blocks in use",
    LIVE(large_blocks), GET(large_live_blocks), false, "`ordblks` (with small pages)", "`<total type=\"large\" count>`"},
  [KITE_STAT_LARGE_LIVE_BYTES] = {"large", "live_bytes", "large live bytes", "their usable sizes",
    LIVE(large_bytes), GET(large_live_bytes), true, NULL, "`<total type=\"large\" size>`"},
  [KITE_STAT_HUGE_ALLOCS] = {"huge", "allocs", "huge allocations", "huge maps allocated since start",
    CTR(huge_allocs), GET(huge_allocs), false, NULL, "`<total type=\"huge\" allocs>`"},
  [KITE_STAT_HUGE_LIVE_BLOCKS] = {"huge", "live_blocks", "huge live blocks", "huge blocks in use",
    CTR(huge_live_blocks), GET(huge_live_blocks), false, "`hblks`", "`<total type=\"huge\" count>`"},
  [KITE_STAT_HUGE_LIVE_BYTES] = {"huge", "live_bytes", "huge live bytes", "their mapped sizes",
    CTR(huge_live_bytes), GET(huge_live_bytes), true, "`hblkhd`", "`<total type=\"huge\" size>`"},
  [KITE_STAT_REMOTE_FREES] = {"", "remote_frees", "remote frees",
    "frees of small blocks owned by another thread's heap, counted when the owner takes them back",
    CTR(remote_frees), GET(remote_frees), false, NULL, "`<frees remote>`"},
  [KITE_STAT_INVALID_FREES] = {"", "invalid_frees", "invalid frees", "invalid pointers and double frees given to free (reports of realloc, malloc_usable_size and kite_heap_* are not counted)",
    CTR(invalid_frees), GET(invalid_frees), false, NULL, "`<frees invalid>`"},
  [KITE_STAT_PAGES_ABANDONED] = {"", "pages_abandoned", "pages abandoned", "pages of exited threads put on the abandoned lists",
    CTR(pages_abandoned), GET(pages_abandoned), false, NULL, "`<pages abandoned>`"},
  [KITE_STAT_PAGES_ADOPTED] = {"", "pages_adopted", "pages adopted", "abandoned pages another thread took over",
    CTR(pages_adopted), GET(pages_adopted), false, NULL, "`<pages adopted>`"},
};
/* V1 at compile time: a word added to kite_gstats_t needs its field above (the introspect
 * test checks which field reads which word). */
_Static_assert(sizeof(kite_gstats_t) == (KITE_CLASSES + 12) * sizeof(uint64_t), "kite_gstats_t: update the field table");
_Static_assert(sizeof(kite_stats_t) == KITE_STAT_COUNT * sizeof(unsigned long long), "kite_stats_t: one field a statistic");

void _kite_snapshot(kite_snapshot_t *sn) {
  _kite_heap_collect_stats(&sn->s);
  _kite_live_collect(&sn->l);
  const uint64_t *s = (const uint64_t *)&sn->s, *l = (const uint64_t *)&sn->l;
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    const kite_stat_field_t *f = &_kite_stat_fields[i];
    uint64_t v = 0;
    if (f->src == KITE_SRC_COUNTER) v = s[f->at];
    else if (f->src == KITE_SRC_LIVE) v = l[f->at];
    else if (f->src == KITE_SRC_CLASSES) for (unsigned c = 0; c < KITE_CLASSES; c++) v += s[f->at + c];
    sn->v[i] = v;
  }
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) /* sums of fields of the other sources */
    if (_kite_stat_fields[i].src == KITE_SRC_SUM)
      sn->v[i] = sn->v[_kite_stat_fields[i].sum[0]] + sn->v[_kite_stat_fields[i].sum[1]] + sn->v[_kite_stat_fields[i].sum[2]];
}

uint32_t _kite_page_live(const kite_page_t *pg) {
  int32_t used = _kite_page_used(pg);
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
  KITE_TSAN_IGNORE_BEGIN(); /* its reads race with the owners' plain writes (visit.h) */
  _kite_arena_foreach_run(live_run, out);
  KITE_TSAN_IGNORE_END();
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
 * readable. Called under _kite_heap_lock (_kite_heap_foreach), which comes before the arena's
 * purge lock. */
void _kite_heap_live(kite_heap_t *h, kite_heap_live_t *out) {
  flush_own(); /* the caller's quarantined blocks are not live */
  out->live_blocks = out->pages = 0;
  out->remote_frees = __atomic_load_n(&h->remote_frees, __ATOMIC_RELAXED);
  uint32_t budget = KITE_WALK_MAX_PAGES;
  _kite_arena_hold_unmap(true);
  KITE_TSAN_IGNORE_BEGIN(); /* another heap's lists and counts: a snapshot (visit.h) */
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
  KITE_TSAN_IGNORE_END();
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
