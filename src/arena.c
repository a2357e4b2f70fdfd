/* src/arena.c -- arenas, runs of units and purging (contract in arena.h).
 *
 * Arena layout (KITE_ARENA_SIZE bytes, aligned to its size):
 *   [0, 128 KiB)            kite_page_t pages[1024], one descriptor per unit
 *   [128 KiB, +256)         kite_arena_t header
 *   [.., ..)                the buddy heap's metadata
 *   meta_units units are reserved in the buddy heap so they are never handed out.
 * Every unit's descriptor says what it is: META, FREE, SMALL/LARGE head, or a non-head
 * unit of a run (head_off != 0). The descriptors of a free run are rewritten when it is
 * allocated. The arena header keeps, per unit, what only the lock holder reads: is_free,
 * dirty (touched since the last purge) and freed_ms.
 *
 * Invariant: is_free[u] iff u is free in the buddy heap (then its descriptor says FREE).
 * All of this is guarded by arena_lock.
 */
#include "arena.h"
#include "pagemap.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#include <kite/buddy.h>

#define KITE_ARENA_MAGIC 0x6b69746561726e61ull /* "kitearna" */

/* Per-unit state owned by the arena lock lives here, not in the descriptors (which the
 * page owners write without the lock). */
typedef struct kite_arena_s {
  uint64_t magic;
  struct kite_arena_s *next;
  kite_buddy_t *buddy;
  uint32_t meta_units;
  uint8_t is_free[KITE_ARENA_UNITS];   /* free in the buddy heap */
  uint8_t dirty[KITE_ARENA_UNITS];     /* touched since the last purge */
  uint32_t freed_ms[KITE_ARENA_UNITS]; /* when it was freed (for the purge delay) */
} kite_arena_t;

#define ARENA_HDR_OFF ((size_t)KITE_ARENA_UNITS * sizeof(kite_page_t))
#define ARENA_BUDDY_OFF ((ARENA_HDR_OFF + sizeof(kite_arena_t) + 63) & ~(size_t)63)

static kite_lock_t arena_lock = KITE_LOCK_INIT;
static kite_arena_t *arena_list;
static uintptr_t arena_hint;
static uint64_t last_purge_ms;
static size_t dirty_free_units;

static inline kite_arena_t *arena_of_page(kite_page_t *pg) {
  return (kite_arena_t *)(((uintptr_t)pg & ~(uintptr_t)KITE_ARENA_MASK) + ARENA_HDR_OFF);
}
static inline kite_page_t *arena_pages(kite_arena_t *a) {
  return (kite_page_t *)((uintptr_t)a - ARENA_HDR_OFF);
}

/* Map and initialize a new arena. Caller holds arena_lock. NULL + ENOMEM on failure. */
static kite_arena_t *arena_new(void) {
  size_t meta = kite_buddy_meta_size(KITE_ARENA_UNITS);
  void *base = _kite_os_map_aligned(KITE_ARENA_SIZE, KITE_ARENA_SIZE, (void *)arena_hint);
  if (!base) return NULL;
  if ((uintptr_t)base >> KITE_ADDR_BITS) { /* outside the page map: cannot be ours */
    _kite_os_unmap(base, KITE_ARENA_SIZE);
    errno = ENOMEM;
    return NULL;
  }
  if (_kite_options.hugepages) _kite_os_advise_huge(base, KITE_ARENA_SIZE);
  kite_arena_t *a = (kite_arena_t *)((uint8_t *)base + ARENA_HDR_OFF);
  a->magic = KITE_ARENA_MAGIC;
  a->meta_units = (uint32_t)((ARENA_BUDDY_OFF + meta + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
  kite_check(kite_buddy_init(&a->buddy, (uint8_t *)base + ARENA_BUDDY_OFF, meta, KITE_ARENA_UNITS) == 0);
  kite_check(kite_buddy_reserve(a->buddy, 0, a->meta_units) == 0);
  kite_page_t *pages = arena_pages(a);
  for (uint32_t i = 0; i < a->meta_units; i++) pages[i].kind = KITE_KIND_META;
  for (uint32_t i = a->meta_units; i < KITE_ARENA_UNITS; i++) a->is_free[i] = 1;
  a->next = arena_list;
  arena_list = a;
  arena_hint = (uintptr_t)base + KITE_ARENA_SIZE;
  _kite_pagemap_set((uintptr_t)base, KITE_ARENA_SIZE, KITE_PM_ARENA);
  _kite_stat_commit((int64_t)(a->meta_units * KITE_UNIT_SIZE));
  __atomic_fetch_add(&_kite_stats.arenas, 1, __ATOMIC_RELAXED);
  return a;
}

kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero) {
  uint64_t idx = 0;
  kite_arena_t *a;
  _kite_lock(&arena_lock);
  for (a = arena_list; a; a = a->next)
    if (kite_buddy_largest_free_order(a->buddy) >= (int)order && kite_buddy_alloc(a->buddy, order, &idx) == 0) break;
  if (!a) {
    a = arena_new();
    if (!a || kite_buddy_alloc(a->buddy, order, &idx) != 0) {
      _kite_unlock(&arena_lock);
      errno = ENOMEM;
      return NULL;
    }
  }
  kite_page_t *head = arena_pages(a) + idx;
  uint32_t n = 1u << order;
  bool clean = true;
  size_t newly = 0;
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    kite_assert(a->is_free[idx + i]);
    a->is_free[idx + i] = 0;
    if (a->dirty[idx + i]) { clean = false; dirty_free_units--; } else newly++;
    a->dirty[idx + i] = 1;
    d->head_off = i;
    /* META until the caller says what the run is: never FREE, or a purge could take it */
    d->kind = KITE_KIND_META;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
  }
  _kite_unlock(&arena_lock);
  if (newly) _kite_stat_commit((int64_t)(newly * KITE_UNIT_SIZE));
  head->order = (uint8_t)order;
  *zero = clean;
  return head;
}

/* Decommit free dirty units of one arena freed before `cutoff` ms. Caller holds the lock. */
static size_t arena_purge_one(kite_arena_t *a, bool force, uint32_t cutoff) {
  size_t purged = 0;
  uint32_t i = a->meta_units;
#define PURGEABLE(k) (a->is_free[k] && a->dirty[k] && (force || (int32_t)(cutoff - a->freed_ms[k]) >= 0))
  while (i < KITE_ARENA_UNITS) {
    if (!PURGEABLE(i)) { i++; continue; }
    uint32_t j = i;
    while (j < KITE_ARENA_UNITS && PURGEABLE(j)) a->dirty[j++] = 0;
#undef PURGEABLE
    _kite_os_decommit(_kite_page_start(arena_pages(a) + i), (size_t)(j - i) << KITE_UNIT_SHIFT);
    purged += (size_t)(j - i) << KITE_UNIT_SHIFT;
    dirty_free_units -= j - i;
    i = j;
  }
  return purged;
}

static size_t purge_locked(bool force, uint64_t now) {
  size_t purged = 0;
  uint32_t cutoff = (uint32_t)(now - (uint64_t)(_kite_options.purge_delay_ms > 0 ? _kite_options.purge_delay_ms : 0));
  for (kite_arena_t *a = arena_list; a; a = a->next) purged += arena_purge_one(a, force, cutoff);
  last_purge_ms = now;
  if (purged) {
    _kite_stat_commit(-(int64_t)purged);
    __atomic_fetch_add(&_kite_stats.purged, purged, __ATOMIC_RELAXED);
  }
  return purged;
}

void _kite_arena_free_run(kite_page_t *head) {
  unsigned order = head->order;
  uint32_t n = 1u << order;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a));
  int64_t delay = _kite_options.purge_delay_ms;
  uint64_t now = delay > 0 ? _kite_os_now_ms() : 0;
  if (delay == 0) _kite_os_decommit(_kite_page_start(head), (size_t)n << KITE_UNIT_SHIFT);
  _kite_lock(&arena_lock);
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
    d->kind = KITE_KIND_FREE;
    d->head_off = 0;
    d->block_size = 0;
    a->is_free[idx + i] = 1;
    a->freed_ms[idx + i] = (uint32_t)now;
    if (delay == 0) a->dirty[idx + i] = 0; else { a->dirty[idx + i] = 1; dirty_free_units++; }
  }
  int rc = kite_buddy_free(a->buddy, idx, NULL);
  kite_check(rc == 0);
  if (delay > 0 && dirty_free_units && now - last_purge_ms >= (uint64_t)delay) purge_locked(false, now);
  _kite_unlock(&arena_lock);
  if (delay == 0) {
    _kite_stat_commit(-(int64_t)((size_t)n << KITE_UNIT_SHIFT));
    __atomic_fetch_add(&_kite_stats.purged, (size_t)n << KITE_UNIT_SHIFT, __ATOMIC_RELAXED);
  }
}

size_t _kite_arena_purge(bool force) {
  _kite_lock(&arena_lock);
  size_t r = purge_locked(force, _kite_os_now_ms());
  _kite_unlock(&arena_lock);
  return r;
}

void _kite_arena_foreach_run(void (*fn)(kite_page_t *head, void *arg), void *arg) {
  _kite_lock(&arena_lock);
  for (kite_arena_t *a = arena_list; a; a = a->next) {
    kite_page_t *pages = arena_pages(a);
    for (uint32_t i = a->meta_units; i < KITE_ARENA_UNITS; i++) {
      kite_page_t *d = pages + i;
      uint8_t kind = __atomic_load_n(&d->kind, __ATOMIC_ACQUIRE);
      if (!a->is_free[i] && d->head_off == 0 && (kind == KITE_KIND_SMALL || kind == KITE_KIND_LARGE)) fn(d, arg);
    }
  }
  _kite_unlock(&arena_lock);
}

void _kite_arena_fork_prepare(void) { _kite_lock(&arena_lock); }
void _kite_arena_fork_parent(void) { _kite_unlock(&arena_lock); }
void _kite_arena_fork_child(void) { _kite_lock_reinit(&arena_lock); }

