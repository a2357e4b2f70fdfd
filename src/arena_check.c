/* src/arena_check.c -- the arena module's validators (contracts in arena.h): one arena
 * against its buddy heap and descriptors (arena.c's I1-I3), a run just claimed or freed, and
 * every arena with the page map.
 */
#include "arena_int.h"
#include "pagemap.h"
#include "message.h"
#include <kite/buddy.h>

/* What is read under a slot's lock: the buddy heap, is_free, dirty and dirty_free (the
 * lock's), and of the descriptors only those of free units (written before the unit is
 * made free under the lock, and rewritten only after a claim under it) and the META kind
 * of the metadata units. A run just claimed may still have stale descriptors (its claimer
 * writes them after the lock), and units a purge is decommitting are reserved in the buddy
 * heap (not free, not a block): neither is read. */

/* The run of 2^order units at idx, just claimed (is_free false: an allocated block of that
 * order in the buddy heap) or just freed (every unit free, descriptor FREE). Slot lock held. */
bool _kite_arena_check_run(kite_arena_t *a, uint32_t idx, unsigned order, bool is_free) {
  kite_page_t *pages = arena_pages(a);
  int bo = kite_buddy_block_order(a->buddy, idx);
  if (is_free ? bo >= 0 : bo != (int)order) return _kite_check_failed("arena: run disagrees with the buddy heap", idx);
  for (uint32_t i = 0; i < (1u << order); i++) {
    if (a->is_free[idx + i] != is_free) return _kite_check_failed("arena: is_free of a run", idx + i);
    kite_page_t *d = pages + idx + i;
    if (is_free && (d->kind != KITE_KIND_FREE || d->head_off != 0)) return _kite_check_failed("arena: descriptor of a freed run", idx + i);
  }
  return true;
}

/* One arena, slot lock held: magic, buddy metadata (kite_buddy_check), meta units META and
 * never free, is_free agrees with the buddy heap unit by unit over the mapped units (a free
 * unit is no allocated block and its descriptor says FREE; an allocated block's units are
 * none of them free), the free count equals the buddy heap's, dirty_free counts is_free &&
 * dirty, and the slot's dirty_avail bit says whether it is above 0. */
bool _kite_arena_check_one(kite_arena_t *a) {
  if (a->magic != KITE_ARENA_MAGIC) return _kite_check_failed("arena: magic", (uintptr_t)a);
  int rc = kite_buddy_check(a->buddy);
  if (rc != 0) return _kite_check_failed("arena: buddy heap metadata (kite_buddy_check)", (uint64_t)-rc);
  if (a->mapped_units > KITE_ARENA_UNITS || a->meta_units >= a->mapped_units) return _kite_check_failed("arena: mapped units", a->mapped_units);
  kite_page_t *pages = arena_pages(a);
  for (uint32_t u = 0; u < a->meta_units; u++)
    if (a->is_free[u] || pages[u].kind != KITE_KIND_META) return _kite_check_failed("arena: metadata unit", u);
  uint64_t nfree = 0, dirty = 0;
  uint32_t u = a->meta_units;
  while (u < a->mapped_units) {
    if (a->is_free[u]) {
      if (pages[u].kind != KITE_KIND_FREE || pages[u].head_off != 0) return _kite_check_failed("arena: free unit's descriptor", u);
      if (kite_buddy_block_order(a->buddy, u) >= 0) return _kite_check_failed("arena: free unit is allocated in the buddy heap", u);
      nfree++;
      dirty += a->dirty[u] != 0;
      if (((a->dirty_map[u >> 6] >> (u & 63)) & 1) != (a->dirty[u] != 0)) return _kite_check_failed("arena: dirty_map of a free unit", u);
      u++;
      continue;
    }
    int order = kite_buddy_block_order(a->buddy, u);
    if (order < 0) { u++; continue; } /* reserved: being purged */
    if (order > KITE_LARGE_MAX_ORDER || u + (1u << order) > a->mapped_units)
      return _kite_check_failed("arena: block in use past the mapped units", u);
    for (uint32_t i = 0; i < (1u << order); i++)
      if (a->is_free[u + i]) return _kite_check_failed("arena: free unit inside a block in use", u + i);
    u += 1u << order;
  }
  for (; u < KITE_ARENA_UNITS; u++)
    if (a->is_free[u]) return _kite_check_failed("arena: free unit past the mapped units", u);
  if (nfree != kite_buddy_free_units(a->buddy)) return _kite_check_failed("arena: free units != the buddy heap's", nfree);
  if (dirty != a->dirty_free) return _kite_check_failed("arena: dirty free units", a->dirty_free);
  bool dbit = _kite_arena_dirty_listed(a->slot);
  if (dbit != (a->dirty_free > 0)) return _kite_check_failed("arena: dirty_avail bit disagrees with dirty_free", a->slot);
  return true;
}

/* Every arena (each under its slot's lock, purges held off by purge_lock so no unit is
 * half purged) and the page map: each arena's slot says ARENA, and the page map has at least as many
 * ARENA slots as there are arenas. */
bool _kite_arena_check(void) {
  bool ok = true;
  size_t n = 0, pm_arenas = 0;
  _kite_lock(&_kite_arena_purge_lock);
  _kite_lock(&_kite_arena_table_lock);
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi && ok; i++) {
    _kite_lock(&_kite_arena_slots[i].lock);
    kite_arena_t *a = _kite_arena_slots[i].arena;
    if (a) {
      n++;
      uintptr_t base = arena_base(a);
      if (_kite_pagemap_kind(base) != KITE_PM_ARENA) ok = _kite_check_failed("page map: a live arena's slot is not ARENA", base);
      else if (a->slot != i) ok = _kite_check_failed("arena: slot number", i);
      else ok = _kite_arena_check_one(a);
    }
    _kite_unlock(&_kite_arena_slots[i].lock);
  }
  if (ok && !_kite_pagemap_check(&pm_arenas, NULL)) ok = false;
  /* an arena being mapped (or unmapped) by another thread is marked before it enters the
   * table (and unmarked after it left): the page map may count more, never fewer */
  if (ok && pm_arenas < n) ok = _kite_check_failed("page map: fewer ARENA slots than arenas", pm_arenas);
  _kite_unlock(&_kite_arena_table_lock);
  _kite_unlock(&_kite_arena_purge_lock);
  return ok;
}
