/* src/arena.c -- arenas and runs of units: the slot table, claims, growth and unmapping
 * (contract in arena.h; the purge policy is decay.c's, the huge-page modes thp.c's).
 *
 * Arena layout (KITE_ARENA_SIZE bytes, aligned to its size; only [0, mapped_units) is
 * mapped: a new arena maps KITE_ARENA_FIRST_UNITS and doubles (MAP_FIXED_NOREPLACE) when
 * no arena has room, so address space follows use; the unmapped rest is reserved in the
 * buddy heap, and an arena whose neighbour took that space just stays smaller):
 *   [0, 4 KiB)              PROT_NONE (KITE_ARENA_GUARD): the arena below this one in the
 *                           address space ends with user blocks
 *   [4 KiB, +128 KiB)       kite_page_t pages[1024], one descriptor per unit
 *   [.., +sizeof)           kite_arena_t header
 *   [.., ..)                the buddy heap's metadata
 *   [.., meta_units units)  PROT_NONE from the metadata's last OS page to the first user
 *                           unit (at least one page: meta_units counts it)
 *   meta_units units are reserved in the buddy heap so they are never handed out. No byte
 *   of metadata is next to a byte a block may hold: an overflow out of a block, up or down,
 *   meets a PROT_NONE page first. An arena is thus four mappings (VMAs) of the kernel's:
 *   guard, metadata, guard, and the user units (the kernel merges an arena's growth into
 *   the last one).
 * Every unit's descriptor says what it is: META, FREE, SMALL/LARGE head, or a non-head
 * unit of a run (head_off != 0). The descriptors of a free run are rewritten when it is
 * allocated. The arena header keeps, per unit, what only the arena's lock holder reads:
 * is_free, dirty (touched since the last purge), advised (MADV_HUGEPAGE given) and freed_ms,
 * and the starts of the last freed big runs (recent[], reused first: see RECENT_RUNS).
 *
 * The arena table: every arena has a slot (slots[], static, so a slot's lock outlives the
 * arena it guards: a thread that read a stale slot number locks it and finds arena ==
 * NULL). avail[k] has bit s set iff slot s holds an arena whose largest free block has
 * order >= k; a run of order k is claimed from the first such slot at or after the
 * calling thread's last slot, so finding space reads a few words, never every arena.
 * dirty_avail has bit s set iff slot s's arena has free units still committed: a run of
 * any order is claimed from the first of those first (units freed by any thread, in any
 * arena, are reused before a fresh unit is faulted in).
 *
 * Invariants (under the slot's lock):
 *   I1 is_free[u] iff u is free in the buddy heap (then its descriptor says FREE);
 *   I2 avail[k] bit s iff largest_free_order(slots[s].arena) >= k;
 *   I3 dirty_avail bit s iff slots[s].arena->dirty_free > 0.
 *   I4 an arena is unmapped only if empty, not growing and not newborn: a new arena is
 *      in the table (so other threads may claim from it) before the thread that made it
 *      has claimed its run there, and a purge step in between would unmap it under that
 *      thread; its maker clears newborn once its claim is over (whichever arena it got).
 * Units being purged are reserved in the buddy heap (is_free = 0, dirty = 0) while the OS
 * call runs without the lock; purging is serialized by purge_lock, which also guards
 * unmapping empty arenas, so a purge never meets a vanishing arena. No OS call is made
 * under a slot lock or the table lock.
 */
#include "arena_int.h"
#include "pagemap.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include "os.h"
#include "tool.h"
#include <errno.h>
#include <string.h>
#include <kite/buddy.h>
#include "secure_layout.h"

#define AVAIL_WORDS (KITE_ARENA_MAX / 64)
#ifndef KITE_ARENA_FIRST_UNITS
/* Units of a new arena mapped at first (16 = 1 MiB): the arena grows by doubling as it
 * fills, so a small program reserves a few MiB of address space, not 64. */
#define KITE_ARENA_FIRST_UNITS 16
#endif

kite_arena_slot_t _kite_arena_slots[KITE_ARENA_MAX];
static uint64_t avail[KITE_LARGE_MAX_ORDER + 1][AVAIL_WORDS]; /* atomic words */
static uint64_t dirty_avail[AVAIL_WORDS]; /* atomic words: bit s iff dirty_free > 0 */
static uint64_t taken[AVAIL_WORDS];  /* slot has an arena; guarded by _kite_arena_table_lock */
static uint64_t growable[AVAIL_WORDS]; /* atomic: slot's arena is not all mapped (may grow) */
uint32_t _kite_arena_slots_hi;
uint32_t _kite_arenas_mapped;       /* changed under _kite_arena_table_lock; read without it (atomic) */
kite_lock_t _kite_arena_table_lock = KITE_LOCK_INIT; /* lock: slot assignment (taken[], a slot's arena coming and going) */
kite_lock_t _kite_arena_purge_lock = KITE_LOCK_INIT; /* lock: purge steps, collapses and unmapping (held: no arena is unmapped) */
static uintptr_t arena_hint;         /* where to map the next arena (atomic) */
size_t _kite_arena_dirty_units;
static __thread uint32_t tls_slot __attribute__((tls_model("initial-exec")));

void (*_kite_arena_dirty_hook)(void);

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_arena_growing)(void);
void (*_kite_test_hook_arena_new)(void);
#endif


static inline void bit_set(uint64_t *words, uint32_t slot, bool want) {
  uint64_t bit = (uint64_t)1 << (slot & 63);
  bool has = (__atomic_load_n(&words[slot >> 6], __ATOMIC_RELAXED) & bit) != 0;
  if (want && !has) __atomic_fetch_or(&words[slot >> 6], bit, __ATOMIC_RELEASE);
  else if (!want && has) __atomic_fetch_and(&words[slot >> 6], ~bit, __ATOMIC_RELEASE);
}

/* Make avail[] and dirty_avail agree with a's largest free block and its dirty_free.
 * Caller holds a's slot lock. */
void _kite_arena_avail_update(kite_arena_t *a) {
  int top = kite_buddy_largest_free_order(a->buddy);
  for (int k = 0; k <= KITE_LARGE_MAX_ORDER; k++) bit_set(avail[k], a->slot, k <= top);
  bit_set(dirty_avail, a->slot, a->dirty_free > 0);
}
static void avail_clear(uint32_t slot) {
  for (int k = 0; k <= KITE_LARGE_MAX_ORDER; k++) bit_set(avail[k], slot, false);
  bit_set(dirty_avail, slot, false);
}

bool _kite_arena_dirty_listed(uint32_t slot) {
  return (__atomic_load_n(&dirty_avail[slot >> 6], __ATOMIC_RELAXED) >> (slot & 63)) & 1;
}

/* The first slot at or after `from` (wrapping) whose bit is set in bits (avail[k]: whose
 * arena may have a block of order k); -1 if none. Reads one word per 64 slots in use. */
static int slot_find(const uint64_t *bits, uint32_t from) {
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  if (hi == 0) return -1;
  uint32_t words = (hi + 63) >> 6;
  if (from >= hi) from = 0;
  uint32_t w0 = from >> 6;
  for (uint32_t i = 0; i <= words; i++) {
    uint32_t w = (w0 + i) % words;
    uint64_t m = __atomic_load_n(&bits[w], __ATOMIC_ACQUIRE);
    if (i == 0) m &= ~(uint64_t)0 << (from & 63);
    if (i == words) m &= ((uint64_t)1 << (from & 63)) - 1; /* the wrapped part of w0 */
    if (m) return (int)(w * 64 + (uint32_t)__builtin_ctzll(m));
  }
  return -1;
}

/* Put the new arena a (its first `first` units mapped) in a free slot: the slot, or -1 when
 * the table is full. Takes the table lock, then the slot's. */
static int slot_register(kite_arena_t *a, uint32_t first) {
  _kite_lock(&_kite_arena_table_lock);
  int slot = -1;
  for (uint32_t w = 0; w < AVAIL_WORDS && slot < 0; w++)
    if (~taken[w]) slot = (int)(w * 64 + (uint32_t)__builtin_ctzll(~taken[w]));
  if (slot >= 0) {
    taken[slot >> 6] |= (uint64_t)1 << (slot & 63);
    __atomic_fetch_add(&_kite_arenas_mapped, 1, __ATOMIC_RELAXED); /* read without the lock (purge_all, stats) */
    a->slot = (uint32_t)slot;
    if ((uint32_t)slot + 1 > _kite_arena_slots_hi) __atomic_store_n(&_kite_arena_slots_hi, (uint32_t)slot + 1, __ATOMIC_RELEASE);
    _kite_lock(&_kite_arena_slots[slot].lock);
    __atomic_store_n(&_kite_arena_slots[slot].arena, a, __ATOMIC_RELEASE);
    _kite_arena_avail_update(a);
    if (first < KITE_ARENA_UNITS) __atomic_fetch_or(&growable[slot >> 6], (uint64_t)1 << (slot & 63), __ATOMIC_RELEASE);
    _kite_unlock(&_kite_arena_slots[slot].lock);
  }
  _kite_unlock(&_kite_arena_table_lock);
  return slot;
}

/* Map and initialize a new arena and put it in a free slot. No lock held on entry; takes
 * the table lock only to register it. false + ENOMEM on failure. */
static kite_arena_t *arena_new(void) {
  size_t meta = kite_buddy_meta_size(KITE_ARENA_UNITS);
  /* the metadata's end, rounded up to an OS page, then at least one guard page */
  size_t meta_end = (ARENA_BUDDY_OFF + meta + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  uint32_t meta_units = (uint32_t)((meta_end + KITE_OS_PAGE + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
  if (KITE_SECURE) meta_units++; /* secure_layout.h: a guard unit between metadata and user pages */
  uint32_t first = KITE_ARENA_FIRST_UNITS;
  while (first < 2 * meta_units && first < KITE_ARENA_UNITS) first *= 2;
  if (first > KITE_ARENA_UNITS) first = KITE_ARENA_UNITS;
  size_t first_bytes = (size_t)first << KITE_UNIT_SHIFT;
  void *hint = (void *)__atomic_load_n(&arena_hint, __ATOMIC_RELAXED);
  /* Where the whole slot is free: map all of it, keep the first units. (The kernel's choice
   * for first_bytes alone may leave the slot's tail to mappings that are already there, the
   * program's libraries among them, and the arena could not grow into it.) With little
   * address space left, as before: only the first units. */
  void *base = _kite_os_map_aligned(KITE_ARENA_SIZE, KITE_ARENA_SIZE, hint);
  if (base) _kite_os_unmap((uint8_t *)base + first_bytes, KITE_ARENA_SIZE - first_bytes);
  else base = _kite_os_map_aligned(first_bytes, KITE_ARENA_SIZE, hint);
  if (!base) return NULL;
  if ((uintptr_t)base >> KITE_ADDR_BITS) { /* outside the page map: cannot be ours */
    _kite_os_unmap(base, first_bytes);
    errno = ENOMEM;
    return NULL;
  }
  if (_kite_opt(KITE_OPT_HUGEPAGES) == KITE_HUGEPAGES_ARENAS) _kite_os_advise_huge(base, first_bytes);
  kite_arena_t *a = (kite_arena_t *)((uint8_t *)base + ARENA_HDR_OFF);
  a->magic = KITE_ARENA_MAGIC;
  a->meta_units = meta_units;
  a->mapped_units = first;
  kite_check(kite_buddy_init(&a->buddy, (uint8_t *)base + ARENA_BUDDY_OFF, meta, KITE_ARENA_UNITS) == 0);
  /* the guards (see the layout above; the secure build's extra unit is in the second) */
  kite_check(_kite_os_protect(base, KITE_ARENA_GUARD, false));
  kite_check(_kite_os_protect((uint8_t *)base + meta_end, ((size_t)meta_units << KITE_UNIT_SHIFT) - meta_end, false));
  kite_check(kite_buddy_reserve(a->buddy, 0, a->meta_units) == 0);
  kite_check(kite_buddy_reserve(a->buddy, first, KITE_ARENA_UNITS - first) == 0);
  kite_page_t *pages = arena_pages(a);
  for (uint32_t i = 0; i < a->meta_units; i++) pages[i].kind = KITE_KIND_META;
  for (uint32_t i = a->meta_units; i < first; i++) a->is_free[i] = 1;
  _kite_pagemap_set((uintptr_t)base, KITE_ARENA_SIZE, KITE_PM_ARENA);
  __atomic_store_n(&arena_hint, (uintptr_t)base + KITE_ARENA_SIZE, __ATOMIC_RELAXED);
  a->newborn = true; /* I4: published by slot_register's lock */

  int slot = slot_register(a, first);
  if (slot < 0) { /* the table is full */
    _kite_pagemap_set((uintptr_t)base, KITE_ARENA_SIZE, KITE_PM_NONE);
    _kite_os_unmap(base, first_bytes);
    errno = ENOMEM;
    return NULL;
  }
  tls_slot = (uint32_t)slot;
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_arena_new) _kite_test_hook_arena_new();
#endif
  _kite_stat_commit((int64_t)(a->meta_units * KITE_UNIT_SIZE));
  __atomic_fetch_add(&_kite_stats.arenas, 1, __ATOMIC_RELAXED);
  return a;
}
/* I4: the maker's claim is over; a purge step may unmap the arena when it is empty. */
static void arena_born(kite_arena_t *a) {
  if (a) __atomic_store_n(&a->newborn, false, __ATOMIC_RELEASE);
}

void *_kite_arena_guarded_chunk(size_t size, bool *in_arena) {
  kite_assert(size % KITE_OS_PAGE == 0 && size <= KITE_ARENA_GUARDED_CHUNK);
  uint8_t *m = _kite_os_map_aligned(size + 2 * KITE_OS_PAGE, KITE_OS_PAGE, NULL);
  *in_arena = false;
  if (!m) { /* the address space is exhausted: a unit, guards inside */
    bool zero;
    kite_page_t *run = _kite_arena_alloc_run(KITE_ARENA_GUARDED_ORDER, &zero);
    if (!run) return NULL; /* errno = ENOMEM */
    run->kind = KITE_KIND_META;
    m = _kite_page_start(run);
    if (!zero) memset(m + KITE_OS_PAGE, 0, size);
    size = KITE_ARENA_GUARDED_CHUNK;
    *in_arena = true;
  }
  /* a refused mprotect (the map count's limit) would leave a chunk without its guards */
  if (!_kite_os_protect(m, KITE_OS_PAGE, false) || !_kite_os_protect(m + KITE_OS_PAGE + size, KITE_OS_PAGE, false)) {
    if (!*in_arena) _kite_os_unmap(m, size + 2 * KITE_OS_PAGE);
    errno = ENOMEM;
    return NULL;
  }
  return m + KITE_OS_PAGE;
}

/* Map more of a partly mapped arena: double it. The OS call runs without the lock, the
 * new units reserved meanwhile (they are until the end). If the address space after it is
 * taken or refused, the arena stays as it is and is no longer grown. */
static bool arena_grow(uint32_t slot) {
  kite_arena_slot_t *s = &_kite_arena_slots[slot];
  uint64_t bit = (uint64_t)1 << (slot & 63);
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  if (!a || a->growing || a->mapped_units >= KITE_ARENA_UNITS) {
    _kite_unlock(&s->lock);
    return false;
  }
  a->growing = true;
  uint32_t old = a->mapped_units, now = old * 2 > KITE_ARENA_UNITS ? KITE_ARENA_UNITS : old * 2;
  _kite_unlock(&s->lock);
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_arena_growing) _kite_test_hook_arena_growing();
#endif
  uint8_t *at = (uint8_t *)arena_base(a) + ((size_t)old << KITE_UNIT_SHIFT);
  /* double; when the OS refuses (RLIMIT_AS nearly reached), grow by half as much, down to
   * KITE_ARENA_FIRST_UNITS, so the last of the address space is used too */
  bool ok;
  while (!(ok = _kite_os_map_at(at, (size_t)(now - old) << KITE_UNIT_SHIFT)) && now - old > KITE_ARENA_FIRST_UNITS)
    now = old + (now - old) / 2;
  size_t len = (size_t)(now - old) << KITE_UNIT_SHIFT;
  if (ok && _kite_opt(KITE_OPT_HUGEPAGES) == KITE_HUGEPAGES_ARENAS) _kite_os_advise_huge(at, len);
  _kite_lock(&s->lock);
  if (ok) {
    kite_check(kite_buddy_unreserve(a->buddy, old, now - old) == 0);
    for (uint32_t u = old; u < now; u++) a->is_free[u] = 1;
    a->mapped_units = now;
    _kite_arena_avail_update(a);
  }
  if (!ok || now == KITE_ARENA_UNITS) __atomic_fetch_and(&growable[slot >> 6], ~bit, __ATOMIC_RELEASE);
  a->growing = false;
  _kite_unlock(&s->lock);
  return ok;
}

/* The first slot at or after `from` whose arena may grow; -1 if none. (A bit per slot: on
 * the path that found no arena with space, before mapping a new one.) */
static int growable_find(uint32_t from) {
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    uint32_t s = (from + i) % hi;
    uint64_t m = __atomic_load_n(&growable[s >> 6], __ATOMIC_ACQUIRE) >> (s & 63);
    if (m & 1) return (int)s;
  }
  return -1;
}

/* A recently freed run of a's that can hold 2^order units and is still free and committed
 * (its first unit at least): take 2^order units at its start. Slot lock held. */
static bool recent_claim(kite_arena_t *a, unsigned order, uint64_t *idx) {
  for (int i = 0; i < RECENT_RUNS; i++) {
    uint32_t u = a->recent[i];
    if (!u) break;
    if ((u & ((1u << order) - 1)) || !a->is_free[u] || !a->dirty[u]) continue;
    if (kite_buddy_alloc_at(a->buddy, u, order) == 0) {
      *idx = u;
      return true;
    }
  }
  return false;
}

/* Remember a freed run's start (newest first; an entry already there moves to the front).
 * Slot lock held. */
static void recent_note(kite_arena_t *a, uint32_t idx) {
  int i = 0;
  while (i < RECENT_RUNS - 1 && a->recent[i] && a->recent[i] != idx) i++;
  for (; i > 0; i--) a->recent[i] = a->recent[i - 1];
  a->recent[0] = idx;
}

/* Bit u of the result is set iff u is a multiple of 2^order and units [u, u + 2^order) of
 * the word's 64 are all set in m (order <= 6). */
static inline uint64_t aligned_runs(uint64_t m, unsigned order) {
  static const uint64_t starts[6] = {~0ull, 0x5555555555555555ull, 0x1111111111111111ull,
                                     0x0101010101010101ull, 0x0001000100010001ull, 0x0000000100000001ull};
  if (order >= 6) return m == ~0ull ? 1 : 0;
  for (unsigned w = 1; w < (1u << order); w <<= 1) m &= m >> w;
  return m & starts[order];
}

/* Runs of every order come from the lowest free units that are still committed, when there
 * is a free aligned block of them: the buddy heap's own choice (the lowest free block of the
 * order) would often be a purged or never touched unit while freed runs wait for the decay,
 * and each such claim is page faults now and a purge later. Slot lock held. */
static bool dirty_claim(kite_arena_t *a, unsigned order, uint64_t *idx) {
  uint32_t n = 1u << order, step = order > 6 ? n / 64 : 1;
  if (a->dirty_free < n) return false;
  for (uint32_t w = 0; w + step <= KITE_ARENA_UNITS / 64; w += step) {
    uint64_t m = aligned_runs(a->dirty_map[w], order);
    for (uint32_t k = 1; k < step && m; k++) m = a->dirty_map[w + k] == ~0ull ? m : 0;
    while (m) {
      uint32_t u = w * 64 + (uint32_t)__builtin_ctzll(m);
      m &= m - 1;
      if (kite_buddy_alloc_at(a->buddy, u, order) == 0) {
        *idx = u;
        return true;
      }
    }
  }
  return false;
}

/* Mark [idx, idx + n) of a in use (they were free in the buddy heap a moment ago). Counts
 * the units that were committed (reused) and those that were not (fresh), and of the fresh
 * ones those a decay step purged a moment ago (they came back: decay.c). Slot lock held. */
static void units_take(kite_arena_t *a, uint64_t idx, uint32_t n, size_t *fresh, size_t *reused) {
  uint64_t now = 0, back = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t u = idx + i;
    kite_assert(a->is_free[u]);
    a->is_free[u] = 0;
    if (a->dirty[u]) (*reused)++; else (*fresh)++;
    if (!a->dirty[u] && a->purged_ms[u]) { /* the clock only where a page fault follows */
      if (!now) now = _kite_os_now_ms();
      back += _kite_decay_is_back(now, a->purged_ms[u]);
      a->purged_ms[u] = 0;
    }
    a->dirty[u] = 1;
    dirty_mark(a, (uint32_t)u, false);
  }
  a->dirty_free -= (uint32_t)*reused;
  if (back) __atomic_fetch_add(&_kite_decay_back, back, __ATOMIC_RELAXED);
}


/* Claim a block of 2^order units from the arena in `slot`, if it has one. */
static kite_arena_t *slot_claim(uint32_t slot, unsigned order, uint64_t *idx, bool *clean, size_t *newly) {
  kite_arena_slot_t *s = &_kite_arena_slots[slot];
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  if (!a || !((order >= RECENT_MIN_ORDER && recent_claim(a, order, idx)) || dirty_claim(a, order, idx) ||
              kite_buddy_alloc(a->buddy, order, idx) == 0)) {
    _kite_unlock(&s->lock);
    return NULL;
  }
#if KITE_SECURE /* secure_layout.h: the run is a random one of the lowest free blocks of its order */
  uint64_t cand[KITE_SECURE_RUN_CHOICES] = {*idx};
  unsigned nc = 1;
  while (nc < KITE_SECURE_RUN_CHOICES && kite_buddy_alloc(a->buddy, order, &cand[nc]) == 0) nc++;
  *idx = cand[_kite_secure_below(nc)];
  for (unsigned i = 0; i < nc; i++) if (cand[i] != *idx) kite_check(kite_buddy_free(a->buddy, cand[i], NULL) == 0);
#endif
  uint32_t unadvise_at = _kite_thp_run_unadvise(a, (uint32_t)*idx, order);
  uint32_t advise_at = _kite_thp_auto_pick(a, (uint32_t)*idx, order);
  uint32_t look_at = _kite_thp_dense_pick(a, (uint32_t)*idx, order);
  size_t fresh = 0, reused = 0;
  units_take(a, *idx, 1u << order, &fresh, &reused);
  _kite_arena_avail_update(a);
  kite_assert_internal(_kite_arena_check_run(a, (uint32_t)*idx, order, false));
  kite_assert_expensive(_kite_arena_check_one(a));
  _kite_unlock(&s->lock);
  if (unadvise_at) _kite_os_advise_small(_kite_page_start(&arena_pages(a)[unadvise_at - 1]), (size_t)THP_UNITS << KITE_UNIT_SHIFT);
  if (advise_at) _kite_os_advise_huge(_kite_page_start(&arena_pages(a)[advise_at]), (size_t)THP_UNITS << KITE_UNIT_SHIFT);
  if (look_at) _kite_thp_dense_check(s, a, look_at); /* (the collapse is the background thread's) */
  if (reused) __atomic_fetch_sub(&_kite_arena_dirty_units, reused, __ATOMIC_RELAXED);
  __atomic_fetch_add(&_kite_decay_demand, (uint64_t)1 << order, __ATOMIC_RELAXED);
  *clean = reused == 0;
  *newly = fresh;
  return a;
}

kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero) {
  uint64_t idx = 0;
  bool clean = true;
  size_t newly = 0;
  kite_arena_t *a = NULL, *born = NULL; /* born: the arena this call made (I4) */
  /* An arena with committed free units first. Another arena than the one the thread used
   * last may hold them (runs of another thread given back there, a second arena mapped when
   * the first could not grow): claiming fresh units where the thread was would commit new
   * memory while those wait for the decay. */
  int ds = slot_find(dirty_avail, tls_slot);
  if (ds >= 0 && (a = slot_claim((uint32_t)ds, order, &idx, &clean, &newly)) != NULL) tls_slot = (uint32_t)ds;
  for (int round = 0; !a; round++) {
    uint32_t from = tls_slot;
    for (int tries = 0; !a && tries < 8; tries++) {
      int s = slot_find(avail[order], from);
      if (s < 0) break;
      a = slot_claim((uint32_t)s, order, &idx, &clean, &newly);
      if (a) tls_slot = (uint32_t)s;
      from = (uint32_t)s + 1;
    }
    if (a) break;
    /* other threads took the space of the arenas this thread mapped three times over */
    if (round == 3) { arena_born(born); errno = ENOMEM; return NULL; }
    int g = growable_find(tls_slot);
    if (g >= 0 && arena_grow((uint32_t)g)) { round--; continue; } /* grown: not a new arena */
    arena_born(born);
    if (!(born = arena_new())) return NULL; /* errno = ENOMEM */
  }
  arena_born(born);
  kite_page_t *head = arena_pages(a) + idx;
  uint32_t n = 1u << order;
  /* the run is ours: its descriptors need no lock */
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    d->head_off = i;
    /* HELD until the caller says what the run is: never FREE */
    d->kind = KITE_KIND_HELD;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
  }
  if (newly) _kite_stat_commit((int64_t)(newly * KITE_UNIT_SIZE));
  _kite_decay_note_use();
  head->order = (uint8_t)order;
  *zero = clean;
  return head;
}

/* Give the run back; dirty: its units stay committed (for reuse, until the decay). */
void _kite_arena_put_run(kite_page_t *head, bool dirty, uint64_t now) {
  unsigned order = head->order;
  uint32_t n = 1u << order;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a));
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
    d->kind = KITE_KIND_FREE;
    d->head_off = 0;
    d->block_size = 0;
  }
  kite_arena_slot_t *s = &_kite_arena_slots[a->slot];
  _kite_lock(&s->lock);
  for (uint32_t i = 0; i < n; i++) {
    a->is_free[idx + i] = 1;
    a->freed_ms[idx + i] = (uint32_t)now;
    a->dirty[idx + i] = dirty;
    dirty_mark(a, idx + i, dirty);
  }
  if (dirty) a->dirty_free += n;
  if (dirty && order >= RECENT_MIN_ORDER) recent_note(a, idx);
  int rc = kite_buddy_free(a->buddy, idx, NULL);
  kite_check(rc == 0);
  _kite_arena_avail_update(a);
  kite_assert_internal(_kite_arena_check_run(a, idx, order, true));
  kite_assert_expensive(_kite_arena_check_one(a));
  _kite_unlock(&s->lock);
  if (dirty) __atomic_fetch_add(&_kite_arena_dirty_units, n, __ATOMIC_SEQ_CST); /* see purger.c */
  else {
    _kite_stat_commit(-(int64_t)((size_t)n << KITE_UNIT_SHIFT));
    __atomic_fetch_add(&_kite_stats.purged, (size_t)n << KITE_UNIT_SHIFT, __ATOMIC_RELAXED);
  }
}



/* Grow or shrink the run in place (see arena.h). Growing: the units that join are checked
 * free in is_free (units being purged are not) and the run's start must be aligned to the
 * new order; then, under the slot lock, the buddy block is freed and taken again at the same
 * place with the new order, so no other thread sees the units in between. Shrinking: the
 * tail's descriptors are written FREE first (as free_run does), then the same exchange. */
/* _kite_arena_resize_run's growth: the units [idx + n_old, idx + n_new) join the run. */
static bool run_grow(kite_page_t *head, kite_arena_t *a, uint32_t idx, unsigned old, unsigned new_order, bool *tail_zero) {
  uint32_t n_old = 1u << old, n_new = 1u << new_order;
  kite_arena_slot_t *s = &_kite_arena_slots[a->slot];
  if ((idx & (n_new - 1)) || idx + n_new > KITE_ARENA_UNITS) return false;
  size_t fresh = 0, reused = 0;
  _kite_lock(&s->lock);
  bool ok = idx + n_new <= a->mapped_units;
  for (uint32_t u = idx + n_old; ok && u < idx + n_new; u++) ok = a->is_free[u];
  if (ok) {
    kite_check(kite_buddy_free(a->buddy, idx, NULL) == 0);
    kite_check(kite_buddy_alloc_at(a->buddy, idx, new_order) == 0);
    units_take(a, idx + n_old, n_new - n_old, &fresh, &reused);
    head->order = (uint8_t)new_order;
    _kite_arena_avail_update(a);
    kite_assert_internal(_kite_arena_check_run(a, idx, new_order, false));
    kite_assert_expensive(_kite_arena_check_one(a));
  }
  _kite_unlock(&s->lock);
  if (!ok) return false;
  if (reused) __atomic_fetch_sub(&_kite_arena_dirty_units, reused, __ATOMIC_RELAXED);
  if (fresh) _kite_stat_commit((int64_t)(fresh * KITE_UNIT_SIZE));
  for (uint32_t i = n_old; i < n_new; i++) {
    kite_page_t *d = head + i;
    d->head_off = i;
    d->kind = KITE_KIND_HELD;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
  }
  KITE_TOOL_RUN_FRESH(_kite_page_start(head + n_old), (size_t)(n_new - n_old) << KITE_UNIT_SHIFT);
  if (tail_zero) *tail_zero = reused == 0;
  return true;
}

bool _kite_arena_resize_run(kite_page_t *head, unsigned new_order, bool *tail_zero) {
  unsigned old = head->order;
  if (new_order == old) return true;
  if (new_order > KITE_LARGE_MAX_ORDER) return false;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a));
  uint32_t n_old = 1u << old, n_new = 1u << new_order;
  kite_arena_slot_t *s = &_kite_arena_slots[a->slot];
  if (new_order > old) return run_grow(head, a, idx, old, new_order, tail_zero);
  /* shrink: the units past the new end become a free (committed) part of the arena */
  for (uint32_t i = n_new; i < n_old; i++) {
    kite_page_t *d = head + i;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
    d->kind = KITE_KIND_FREE;
    d->head_off = 0;
    d->block_size = 0;
  }
  uint64_t now = _kite_os_now_ms();
  _kite_lock(&s->lock);
  for (uint32_t u = idx + n_new; u < idx + n_old; u++) {
    a->is_free[u] = 1;
    a->dirty[u] = 1;
    a->freed_ms[u] = (uint32_t)now;
    dirty_mark(a, u, true);
  }
  a->dirty_free += n_old - n_new;
  kite_check(kite_buddy_free(a->buddy, idx, NULL) == 0);
  kite_check(kite_buddy_alloc_at(a->buddy, idx, new_order) == 0);
  head->order = (uint8_t)new_order;
  if (old - 1 >= RECENT_MIN_ORDER) recent_note(a, idx + n_old / 2); /* the freed upper half */
  _kite_arena_avail_update(a);
  kite_assert_internal(_kite_arena_check_run(a, idx, new_order, false));
  kite_assert_expensive(_kite_arena_check_one(a));
  _kite_unlock(&s->lock);
  __atomic_fetch_add(&_kite_arena_dirty_units, n_old - n_new, __ATOMIC_SEQ_CST); /* see purger.c */
  void (*hook)(void) = __atomic_load_n(&_kite_arena_dirty_hook, __ATOMIC_ACQUIRE);
  if (hook) hook();
  return true;
}


/* Unmap the arena in slot s if it is still empty. Caller holds purge_lock. Bytes unmapped. */
size_t _kite_arena_unmap(uint32_t slot) {
  kite_arena_slot_t *s = &_kite_arena_slots[slot];
  _kite_lock(&_kite_arena_table_lock);
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  bool empty = a && a->dirty_free == 0 && !a->growing && !__atomic_load_n(&a->newborn, __ATOMIC_ACQUIRE) &&
               kite_buddy_free_units(a->buddy) == a->mapped_units - a->meta_units;
  size_t mapped = empty ? (size_t)a->mapped_units << KITE_UNIT_SHIFT : 0;
  if (empty) {
    __atomic_store_n(&s->arena, NULL, __ATOMIC_RELEASE);
    avail_clear(slot);
    __atomic_fetch_and(&growable[slot >> 6], ~((uint64_t)1 << (slot & 63)), __ATOMIC_RELEASE);
    taken[slot >> 6] &= ~((uint64_t)1 << (slot & 63));
    __atomic_fetch_sub(&_kite_arenas_mapped, 1, __ATOMIC_RELAXED);
  }
  _kite_unlock(&s->lock);
  _kite_unlock(&_kite_arena_table_lock);
  if (!empty) return 0;
  /* nobody can reach it now: no run is allocated in it, and the slot says NULL */
  uintptr_t base = arena_base(a);
  uint32_t meta = a->meta_units;
  _kite_pagemap_set(base, KITE_ARENA_SIZE, KITE_PM_NONE);
  _kite_os_unmap((void *)base, mapped); /* only what is ours: the rest may be another map */
  _kite_stat_commit(-(int64_t)((size_t)meta * KITE_UNIT_SIZE));
  __atomic_fetch_sub(&_kite_stats.arenas, 1, __ATOMIC_RELAXED);
  return mapped;
}


#ifdef KITE_TEST_HOOKS
/* Tests: give a run back committed, stamped freed at `now`. */
void _kite_test_arena_free_run_at(kite_page_t *head, uint64_t now) { _kite_arena_put_run(head, true, now); }
/* Tests: whether the arenas are held mapped (purge_lock taken, by any thread). */
bool _kite_test_arena_unmap_held(void) {
  if (!_kite_trylock(&_kite_arena_purge_lock)) return true;
  _kite_unlock(&_kite_arena_purge_lock);
  return false;
}
/* Tests: whether any arena is marked growing. */
bool _kite_test_arena_any_growing(void) {
  bool r = false;
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    _kite_lock(&_kite_arena_slots[i].lock);
    if (_kite_arena_slots[i].arena && _kite_arena_slots[i].arena->growing) r = true;
    _kite_unlock(&_kite_arena_slots[i].lock);
  }
  return r;
}
/* Tests: whether unit d (a descriptor) is free and still committed. */
bool _kite_test_arena_unit_dirty(kite_page_t *d) {
  kite_arena_t *a = arena_of_page(d);
  uint32_t u = (uint32_t)(d - arena_pages(a));
  _kite_lock(&_kite_arena_slots[a->slot].lock);
  bool r = a->is_free[u] && a->dirty[u];
  _kite_unlock(&_kite_arena_slots[a->slot].lock);
  return r;
}
#endif


/* purge_lock keeps every arena mapped (only purges unmap them); each arena is read under
 * its slot lock, so no run changes hands (is_free, kinds) while it is looked at. */
void _kite_arena_foreach_run(void (*fn)(kite_page_t *head, void *arg), void *arg) {
  _kite_lock(&_kite_arena_purge_lock);
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t s = 0; s < hi; s++) {
    if (!__atomic_load_n(&_kite_arena_slots[s].arena, __ATOMIC_ACQUIRE)) continue;
    _kite_lock(&_kite_arena_slots[s].lock);
    kite_arena_t *a = _kite_arena_slots[s].arena;
    if (a) {
      kite_page_t *pages = arena_pages(a);
      uint32_t mapped = __atomic_load_n(&a->mapped_units, __ATOMIC_ACQUIRE);
      for (uint32_t i = a->meta_units; i < mapped && i < KITE_ARENA_UNITS; i++) {
        kite_page_t *d = pages + i;
        uint8_t kind = __atomic_load_n(&d->kind, __ATOMIC_ACQUIRE);
        if (!a->is_free[i] && d->head_off == 0 && (kind == KITE_KIND_SMALL || kind == KITE_KIND_LARGE)) fn(d, arg);
      }
    }
    _kite_unlock(&_kite_arena_slots[s].lock);
  }
  _kite_unlock(&_kite_arena_purge_lock);
}

size_t _kite_arena_count(void) { return __atomic_load_n(&_kite_arenas_mapped, __ATOMIC_RELAXED); }

void _kite_arena_hold_unmap(bool hold) {
  if (hold) _kite_lock(&_kite_arena_purge_lock);
  else _kite_unlock(&_kite_arena_purge_lock);
}

/* Fork: purge_lock, then the table lock, then every slot lock (the order a thread takes
 * them in); the child releases them all (types.h _kite_lock_fork_child). */
void _kite_arena_fork_prepare(void) {
  _kite_lock(&_kite_arena_purge_lock);
  _kite_lock(&_kite_arena_table_lock);
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) _kite_lock(&_kite_arena_slots[i].lock);
}
void _kite_arena_fork_parent(void) {
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) _kite_unlock(&_kite_arena_slots[i].lock);
  _kite_unlock(&_kite_arena_table_lock);
  _kite_unlock(&_kite_arena_purge_lock);
}
void _kite_arena_fork_child(void) {
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    /* a thread of the parent that was growing an arena (arena_grow maps without the lock)
     * does not exist here: its `growing` would keep the arena from growing and from being
     * unmapped for good. The units it was mapping stay reserved in the buddy heap (they
     * are until a grow succeeds); if its mapping was made before the fork, the next grow
     * finds the space taken and the arena stays at its size, as when a neighbour took it. */
    kite_arena_t *a = __atomic_load_n(&_kite_arena_slots[i].arena, __ATOMIC_RELAXED);
    if (a) a->growing = a->newborn = false; /* (and the maker of a newborn one, I4) */
    if (a) _kite_thp_fork_child(a); /* (and a claim looking at a granule, thp.c) */
    _kite_lock_fork_child(&_kite_arena_slots[i].lock);
  }
  _kite_lock_fork_child(&_kite_arena_table_lock);
  _kite_lock_fork_child(&_kite_arena_purge_lock);
}
