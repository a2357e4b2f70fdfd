/* src/arena.c -- arenas, runs of units and purging (contract in arena.h).
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
 * dirty_avail has bit s set iff slot s's arena has free units still committed: a small
 * page is claimed from the first of those first (units freed by any thread, in any arena,
 * are reused before a fresh unit is faulted in).
 *
 * Invariants (under the slot's lock):
 *   is_free[u] iff u is free in the buddy heap (then its descriptor says FREE);
 *   avail[k] bit s iff largest_free_order(slots[s].arena) >= k;
 *   dirty_avail bit s iff slots[s].arena->dirty_free > 0.
 * Units being purged are reserved in the buddy heap (is_free = 0, dirty = 0) while the OS
 * call runs without the lock; purging is serialized by purge_lock, which also guards
 * unmapping empty arenas, so a purge never meets a vanishing arena. No OS call is made
 * under a slot lock or the table lock.
 *
 * Decay (KITE_PURGE_DELAY_MS = D > 0): a purge step looks at the ages of an arena's dirty
 * free units in 16 bands of D/16. A unit freed at age a may stay committed with weight
 * 1 - a/D, so the step keeps at most sum(1 - a/D) units and purges the oldest first until
 * it does (older bands whole, the youngest one it reaches only in part, top down): what has been free for D or more always goes, recent frees stay for reuse, and
 * a steady free rate leaves about half of the last D's frees committed. Steps run from
 * frees at most every D/16 ms (purge_lock is only tried: a free never waits for a purge),
 * from thread exit, and from the background purger. An arena whose units are all free and
 * purged is unmapped by a step (unless it is the only one); malloc_trim (a forced purge) and a
 * failed mapping unmap every empty arena.
 */
#include "arena.h"
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

#define KITE_ARENA_MAGIC 0x6b69746561726e61ull /* "kitearna" */
#ifndef KITE_ARENA_MAX
/* Most arenas at once (16384 x 64 MiB = 1 TiB of small and large blocks). */
#define KITE_ARENA_MAX 16384
#endif
#define AVAIL_WORDS (KITE_ARENA_MAX / 64)
#ifndef KITE_ARENA_FIRST_UNITS
/* Units of a new arena mapped at first (16 = 1 MiB): the arena grows by doubling as it
 * fills, so a small program reserves a few MiB of address space, not 64. */
#define KITE_ARENA_FIRST_UNITS 16
#endif
#define DECAY_BANDS 16
/* Freed runs of RECENT_MIN_ORDER or more (256 KiB) are remembered, RECENT_RUNS per arena, and
 * a request of such an order is first carved from one of them that is still free and
 * committed: a program that frees a big buffer and asks for another of a nearby size gets
 * the same pages back, with no page fault and no growth of its resident set. */
#define RECENT_RUNS 8
#define RECENT_MIN_ORDER 2
/* The whole 2 MiB pieces of the bytes a large block was asked for (runs of 2 MiB or more
 * are 2 MiB aligned) are advised as transparent huge pages: a big buffer is faulted in 2 MiB
 * at a time, not 4 KiB at a time, and a small request in a big (aligned) run is not. */
#define THP_UNITS 32u
/* advised[] values: what the kernel was told about the unit. */
enum {
  THP_UNDECIDED = 0, /* nothing said to the kernel */
  THP_ADVISED = 1,   /* MADV_HUGEPAGE given for small pages (auto: a dense granule) */
  THP_SMALL = 2,     /* MADV_NOHUGEPAGE given, or the granule stays on 4 KiB pages (auto,
                      * dense: for good) */
  THP_COLLAPSED = 3, /* dense: the granule is on a huge page */
  THP_LOOKING = 4,   /* dense: a thread is looking at the granule */
  THP_RUN = 5,       /* MADV_HUGEPAGE given for a large run of a granule or more
                      * (_kite_arena_advise_run). Taken back (MADV_NOHUGEPAGE, THP_SMALL)
                      * when a run smaller than a granule is claimed in the granule, unless
                      * KITE_HUGEPAGES=1 advises whole arenas: else a small page carved there
                      * would fault in a whole 2 MiB page at its first touch. */
};
/* KITE_HUGEPAGES=auto: a 2 MiB granule (THP_UNITS aligned units) of an arena is advised,
 * or not, once and for all when a run smaller than a granule is first claimed in it, before
 * anything in it is touched (a granule touched with 4 KiB pages keeps its page table: advice
 * given later would not make its faults huge). It is advised when it will probably be used
 * densely: the process has at least THP_AUTO_MIN_COMMITTED bytes committed (a small program
 * gets no huge page, which would be resident whole) and the granule below it in the arena has
 * every unit in use or committed (small pages are carved lowest first, dirty_claim: the next
 * granule up is where the carving goes on). A granule the decay purges, in whole or in part,
 * goes back to 4 KiB pages for good (MADV_NOHUGEPAGE, purge_range): memory that comes and goes
 * is not worth a huge page. Runs of a granule or more are advised by
 * _kite_arena_advise_run over the part the program asked for, as in every mode. */
#ifndef THP_AUTO_MIN_COMMITTED
#define THP_AUTO_MIN_COMMITTED ((uint64_t)16 << 20)
#endif
/* Adaptive decay: while the units claimed in the last one or two windows of DEMAND_WINDOWS
 * purge delays are at least the dirty free units of all arenas (the program asks for as much
 * memory as it has just given back), and keeping them does not lift the committed total
 * above the most the program had in use in those windows, a step keeps every free unit
 * younger than one window (only older ones go); otherwise the plain decay. A program that
 * frees everything and builds it again (rounds of work) keeps its pages; one that stops
 * allocating, or whose free memory does not fit its new requests, is purged as before. */
#ifndef DEMAND_WINDOWS
#define DEMAND_WINDOWS 8
#endif

/* Per-unit state owned by the slot lock lives here, not in the descriptors (which the
 * page owners write without the lock). */
typedef struct kite_arena_s {
  uint64_t magic;
  kite_buddy_t *buddy;
  uint32_t slot;
  uint32_t meta_units;
  uint32_t dirty_free;                 /* units with is_free && dirty */
  uint32_t mapped_units;               /* [0, mapped_units) is mapped; the rest reserved */
  bool growing;                        /* a thread is mapping more of it (no lock held) */
  uint8_t is_free[KITE_ARENA_UNITS];   /* free in the buddy heap */
  uint8_t dirty[KITE_ARENA_UNITS];     /* touched since the last purge */
  uint8_t advised[KITE_ARENA_UNITS];   /* THP_* below: huge-page state of the unit (auto,
                                        * dense: of its granule, kept at the granule's first unit) */
  uint32_t freed_ms[KITE_ARENA_UNITS]; /* when it was freed (for the decay) */
  uint32_t recent[RECENT_RUNS];        /* start units of the last freed big runs, newest first */
  uint64_t dirty_map[KITE_ARENA_UNITS / 64]; /* bit u: is_free[u] && dirty[u] (dirty_claim) */
} kite_arena_t;

#define ARENA_HDR_OFF (KITE_ARENA_GUARD + (size_t)KITE_ARENA_UNITS * sizeof(kite_page_t))
#define ARENA_BUDDY_OFF ((ARENA_HDR_OFF + sizeof(kite_arena_t) + 63) & ~(size_t)63)

typedef struct {
  kite_lock_t lock;
  kite_arena_t *arena; /* written under lock (atomic: peeked by the fork hooks) */
} __attribute__((aligned(64))) arena_slot_t;

static arena_slot_t slots[KITE_ARENA_MAX];
static uint64_t avail[KITE_LARGE_MAX_ORDER + 1][AVAIL_WORDS]; /* atomic words */
static uint64_t dirty_avail[AVAIL_WORDS]; /* atomic words: bit s iff dirty_free > 0 */
static uint64_t taken[AVAIL_WORDS];  /* slot has an arena; guarded by table_lock */
static uint64_t growable[AVAIL_WORDS]; /* atomic: slot's arena is not all mapped (may grow) */
static uint32_t slots_hi;            /* 1 + highest slot ever used (atomic) */
static uint32_t arena_count;         /* changed under table_lock; read without it (atomic) */
static kite_lock_t table_lock = KITE_LOCK_INIT;
static kite_lock_t purge_lock = KITE_LOCK_INIT;
static uintptr_t arena_hint;         /* where to map the next arena (atomic) */
static uint64_t last_purge_ms;       /* atomic */
static size_t dirty_free_units;      /* atomic: sum of dirty_free */
static uint64_t demand_cur;          /* atomic: units claimed in this demand window */
static uint64_t demand_prev;         /* units claimed in the previous window (purge_lock) */
static uint64_t demand_epoch_ms;     /* start of this window (purge_lock) */
static uint64_t used_peak_cur;       /* most units in use (committed, not free) seen by a step */
static uint64_t used_peak_prev;      /* in this and the previous window (purge_lock) */
static __thread uint32_t tls_slot __attribute__((tls_model("initial-exec")));

void (*_kite_arena_dirty_hook)(void);

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_arena_growing)(void);
#endif

static bool arena_check(kite_arena_t *a);
static bool arena_check_run(kite_arena_t *a, uint32_t idx, unsigned order, bool is_free);

static inline kite_arena_t *arena_of_page(kite_page_t *pg) {
  return (kite_arena_t *)(((uintptr_t)pg & ~(uintptr_t)KITE_ARENA_MASK) + ARENA_HDR_OFF);
}
static inline uintptr_t arena_base(kite_arena_t *a) { return (uintptr_t)a - ARENA_HDR_OFF; }
static inline kite_page_t *arena_pages(kite_arena_t *a) {
  return (kite_page_t *)(arena_base(a) + KITE_ARENA_GUARD);
}

/* Keep dirty_map's bit of unit u equal to is_free[u] && dirty[u]. Slot lock held. */
static inline void dirty_mark(kite_arena_t *a, uint32_t u, bool on) {
  uint64_t bit = (uint64_t)1 << (u & 63);
  if (on) a->dirty_map[u >> 6] |= bit; else a->dirty_map[u >> 6] &= ~bit;
}

static inline void bit_set(uint64_t *words, uint32_t slot, bool want) {
  uint64_t bit = (uint64_t)1 << (slot & 63);
  bool has = (__atomic_load_n(&words[slot >> 6], __ATOMIC_RELAXED) & bit) != 0;
  if (want && !has) __atomic_fetch_or(&words[slot >> 6], bit, __ATOMIC_RELEASE);
  else if (!want && has) __atomic_fetch_and(&words[slot >> 6], ~bit, __ATOMIC_RELEASE);
}

/* Make avail[] and dirty_avail agree with a's largest free block and its dirty_free.
 * Caller holds a's slot lock. */
static void avail_update(kite_arena_t *a) {
  int top = kite_buddy_largest_free_order(a->buddy);
  for (int k = 0; k <= KITE_LARGE_MAX_ORDER; k++) bit_set(avail[k], a->slot, k <= top);
  bit_set(dirty_avail, a->slot, a->dirty_free > 0);
}
static void avail_clear(uint32_t slot) {
  for (int k = 0; k <= KITE_LARGE_MAX_ORDER; k++) bit_set(avail[k], slot, false);
  bit_set(dirty_avail, slot, false);
}

/* The first slot at or after `from` (wrapping) whose bit is set in bits (avail[k]: whose
 * arena may have a block of order k); -1 if none. Reads one word per 64 slots in use. */
static int slot_find(const uint64_t *bits, uint32_t from) {
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
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

/* Map and initialize a new arena and put it in a free slot. No lock held on entry; takes
 * the table lock only to register it. false + ENOMEM on failure. */
static bool arena_new(void) {
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
  if (!base) return false;
  if ((uintptr_t)base >> KITE_ADDR_BITS) { /* outside the page map: cannot be ours */
    _kite_os_unmap(base, first_bytes);
    errno = ENOMEM;
    return false;
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

  _kite_lock(&table_lock);
  int slot = -1;
  for (uint32_t w = 0; w < AVAIL_WORDS && slot < 0; w++)
    if (~taken[w]) slot = (int)(w * 64 + (uint32_t)__builtin_ctzll(~taken[w]));
  if (slot >= 0) {
    taken[slot >> 6] |= (uint64_t)1 << (slot & 63);
    __atomic_fetch_add(&arena_count, 1, __ATOMIC_RELAXED); /* read without the lock (purge_all, stats) */
    a->slot = (uint32_t)slot;
    if ((uint32_t)slot + 1 > slots_hi) __atomic_store_n(&slots_hi, (uint32_t)slot + 1, __ATOMIC_RELEASE);
    _kite_lock(&slots[slot].lock);
    __atomic_store_n(&slots[slot].arena, a, __ATOMIC_RELEASE);
    avail_update(a);
    if (first < KITE_ARENA_UNITS) __atomic_fetch_or(&growable[slot >> 6], (uint64_t)1 << (slot & 63), __ATOMIC_RELEASE);
    _kite_unlock(&slots[slot].lock);
  }
  _kite_unlock(&table_lock);
  if (slot < 0) { /* the table is full */
    _kite_pagemap_set((uintptr_t)base, KITE_ARENA_SIZE, KITE_PM_NONE);
    _kite_os_unmap(base, first_bytes);
    errno = ENOMEM;
    return false;
  }
  tls_slot = (uint32_t)slot;
  _kite_stat_commit((int64_t)(a->meta_units * KITE_UNIT_SIZE));
  __atomic_fetch_add(&_kite_stats.arenas, 1, __ATOMIC_RELAXED);
  return true;
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
  arena_slot_t *s = &slots[slot];
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
    avail_update(a);
  }
  if (!ok || now == KITE_ARENA_UNITS) __atomic_fetch_and(&growable[slot >> 6], ~bit, __ATOMIC_RELEASE);
  a->growing = false;
  _kite_unlock(&s->lock);
  return ok;
}

/* The first slot at or after `from` whose arena may grow; -1 if none. (A bit per slot: on
 * the path that found no arena with space, before mapping a new one.) */
static int growable_find(uint32_t from) {
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
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

/* Small runs (order < RECENT_MIN_ORDER: the small pages) come from the lowest units that
 * are free and still committed, when there are any: the buddy heap's own choice (the lowest
 * free block of the smallest order that fits) would often be a purged or never touched unit
 * while freed pages wait for the decay, and each such claim is page faults now and a purge
 * later. Slot lock held. */
static bool dirty_claim(kite_arena_t *a, unsigned order, uint64_t *idx) {
  if (a->dirty_free < (1u << order)) return false;
  for (uint32_t w = 0; w < KITE_ARENA_UNITS / 64; w++) {
    uint64_t m = a->dirty_map[w];
    if (order == 1) m &= (m >> 1) & 0x5555555555555555ull; /* aligned pairs */
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
 * the units that were committed (reused) and those that were not (fresh). Slot lock held. */
static void units_take(kite_arena_t *a, uint64_t idx, uint32_t n, size_t *fresh, size_t *reused) {
  for (uint32_t i = 0; i < n; i++) {
    uint64_t u = idx + i;
    kite_assert(a->is_free[u]);
    a->is_free[u] = 0;
    if (a->dirty[u]) (*reused)++; else (*fresh)++;
    a->dirty[u] = 1;
    dirty_mark(a, (uint32_t)u, false);
  }
  a->dirty_free -= (uint32_t)*reused;
}

/* KITE_HUGEPAGES=auto (see THP_AUTO_MIN_COMMITTED): decides the granule of a run of order
 * `order` starting at unit u that is being claimed, if that is the granule's first claim.
 * Returns the granule's first unit when it is to be advised (the caller advises it after
 * dropping the lock, before the run is handed out), else 0. Slot lock held. */
static uint32_t thp_auto_pick(kite_arena_t *a, uint32_t u, unsigned order) {
  if (_kite_opt(KITE_OPT_HUGEPAGES) != KITE_HUGEPAGES_AUTO || (1u << order) >= THP_UNITS) return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  if (a->advised[g] != THP_UNDECIDED) return 0; /* decided */
  bool dense = g >= THP_UNITS && g + THP_UNITS <= a->mapped_units &&
               __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED) >= THP_AUTO_MIN_COMMITTED;
  for (uint32_t v = g - THP_UNITS; dense && v < g; v++) dense = !a->is_free[v] || a->dirty[v];
  memset(&a->advised[g], dense ? THP_ADVISED : THP_SMALL, THP_UNITS);
  return dense ? g : 0;
}

/* KITE_HUGEPAGES=dense: a granule is put on a transparent huge page only once it is dense,
 * so that the huge page costs no memory the program had not touched: when a run smaller
 * than a granule is claimed in the granule above it (the carving has moved on), every unit
 * of the granule is in use (small pages, large runs, or the arena's metadata) and all of its
 * 4 KiB pages are resident (mincore; THP_DENSE_MAX_MISSING may be missing), it is collapsed
 * in place (MADV_COLLAPSE: the kernel copies the resident pages into a huge page and would
 * zero fill missing ones). Nothing is advised: faults stay 4 KiB, khugepaged leaves the
 * arena alone and a later purge of part of the granule splits the huge page back, after
 * which the granule is never collapsed again (THP_SMALL). A granule not dense enough
 * yet is looked at again at a later claim above it. The collapse runs with purge_lock
 * held (tried, never waited for), so no purge decommits part of the granule meanwhile;
 * with KITE_PURGE_DELAY_MS=0 (frees decommit at once, without that lock) the mode does
 * nothing. advised[g] for a granule's first unit g: THP_UNDECIDED, THP_LOOKING,
 * THP_COLLAPSED, THP_SMALL (never again); a large run of a granule or more sets
 * THP_RUN (advise_run). */
#ifndef THP_DENSE_MAX_MISSING
/* 4 KiB pages of a granule that may be missing (zero filled by the collapse: more resident
 * memory). 0: only a granule that is resident whole, so the huge page costs no memory; with 0
 * graph-teardown still gets 20 of its 38 MiB on huge pages (22 with 8, 26 with 16). */
#define THP_DENSE_MAX_MISSING 0u
#endif

/* The granule to look at for a run of order `order` being claimed at unit u: the one
 * below u's granule, when it is undecided and all in use; 0 if none. Slot lock held. */
static uint32_t thp_dense_pick(kite_arena_t *a, uint32_t u, unsigned order) {
  if (_kite_opt(KITE_OPT_HUGEPAGES) != KITE_HUGEPAGES_DENSE || _kite_opt(KITE_OPT_PURGE_DELAY_MS) == 0 ||
      (1u << order) >= THP_UNITS)
    return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  if (g < THP_UNITS) return 0;
  uint32_t c = g - THP_UNITS;
  if (a->advised[c] != THP_UNDECIDED) return 0;
  for (uint32_t v = c; v < g; v++)
    if (a->is_free[v]) return 0;
  a->advised[c] = THP_LOOKING;
  return c;
}

/* Collapse granule c of a if enough of it is resident (see THP_DENSE_MAX_MISSING); no lock
 * held on entry. The caller holds a run in a, so a stays mapped. */
static void thp_dense_collapse(arena_slot_t *s, kite_arena_t *a, uint32_t c) {
  uint8_t state = THP_UNDECIDED; /* purge_lock busy, or not dense enough yet: look again later */
  if (_kite_trylock(&purge_lock)) {
    void *p = _kite_page_start(&arena_pages(a)[c]);
    size_t len = (size_t)THP_UNITS << KITE_UNIT_SHIFT;
    if (_kite_os_resident_pages(p, len) + THP_DENSE_MAX_MISSING >= len / KITE_OS_PAGE)
      state = _kite_os_collapse_huge(p, len) ? THP_COLLAPSED : THP_SMALL;
    _kite_unlock(&purge_lock);
  }
  _kite_lock(&s->lock);
  a->advised[c] = state;
  _kite_unlock(&s->lock);
}

/* A run of order `order` smaller than a granule is being claimed at unit u: if its granule
 * still has the advice of a large run that was there (THP_RUN), the granule goes back to 4
 * KiB pages (THP_SMALL). Returns the granule's first unit + 1 when the caller is to give
 * MADV_NOHUGEPAGE (after dropping the lock, before the run is handed out), else 0. Slot lock
 * held. */
static uint32_t thp_run_unadvise(kite_arena_t *a, uint32_t u, unsigned order) {
  if ((1u << order) >= THP_UNITS || _kite_opt(KITE_OPT_HUGEPAGES) == KITE_HUGEPAGES_ARENAS) return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  if (a->advised[g] != THP_RUN) return 0; /* advise_run advises whole granules */
  memset(&a->advised[g], THP_SMALL, THP_UNITS);
  return g + 1;
}

/* Claim a block of 2^order units from the arena in `slot`, if it has one. */
static kite_arena_t *slot_claim(uint32_t slot, unsigned order, uint64_t *idx, bool *clean, size_t *newly) {
  arena_slot_t *s = &slots[slot];
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  if (!a || !((order >= RECENT_MIN_ORDER ? recent_claim(a, order, idx) : dirty_claim(a, order, idx)) ||
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
  uint32_t unadvise_at = thp_run_unadvise(a, (uint32_t)*idx, order);
  uint32_t advise_at = thp_auto_pick(a, (uint32_t)*idx, order);
  uint32_t collapse_at = thp_dense_pick(a, (uint32_t)*idx, order);
  size_t fresh = 0, reused = 0;
  units_take(a, *idx, 1u << order, &fresh, &reused);
  avail_update(a);
  kite_assert_internal(arena_check_run(a, (uint32_t)*idx, order, false));
  kite_assert_expensive(arena_check(a));
  _kite_unlock(&s->lock);
  if (unadvise_at) _kite_os_advise_small(_kite_page_start(&arena_pages(a)[unadvise_at - 1]), (size_t)THP_UNITS << KITE_UNIT_SHIFT);
  if (advise_at) _kite_os_advise_huge(_kite_page_start(&arena_pages(a)[advise_at]), (size_t)THP_UNITS << KITE_UNIT_SHIFT);
  if (collapse_at) thp_dense_collapse(s, a, collapse_at);
  if (reused) __atomic_fetch_sub(&dirty_free_units, reused, __ATOMIC_RELAXED);
  __atomic_fetch_add(&demand_cur, (uint64_t)1 << order, __ATOMIC_RELAXED);
  *clean = reused == 0;
  *newly = fresh;
  return a;
}

kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero) {
  uint64_t idx = 0;
  bool clean = true;
  size_t newly = 0;
  kite_arena_t *a = NULL;
  /* Small pages: an arena with committed free units first. Another arena than the one the
   * thread used last may hold them (pages of another thread given back there, a second
   * arena mapped when the first could not grow): claiming fresh units where the thread was
   * would commit new memory while those wait for the decay. */
  if (order < RECENT_MIN_ORDER) {
    int s = slot_find(dirty_avail, tls_slot);
    if (s >= 0 && (a = slot_claim((uint32_t)s, order, &idx, &clean, &newly)) != NULL) tls_slot = (uint32_t)s;
  }
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
    if (round == 3) { errno = ENOMEM; return NULL; }
    int g = growable_find(tls_slot);
    if (g >= 0 && arena_grow((uint32_t)g)) { round--; continue; } /* grown: not a new arena */
    if (!arena_new()) return NULL; /* errno = ENOMEM */
  }
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
  head->order = (uint8_t)order;
  *zero = clean;
  return head;
}

/* Give the run back; dirty: its units stay committed (for reuse, until the decay). */
static void free_run(kite_page_t *head, bool dirty, uint64_t now) {
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
  arena_slot_t *s = &slots[a->slot];
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
  avail_update(a);
  kite_assert_internal(arena_check_run(a, idx, order, true));
  kite_assert_expensive(arena_check(a));
  _kite_unlock(&s->lock);
  if (dirty) __atomic_fetch_add(&dirty_free_units, n, __ATOMIC_SEQ_CST); /* see purger.c */
  else {
    _kite_stat_commit(-(int64_t)((size_t)n << KITE_UNIT_SHIFT));
    __atomic_fetch_add(&_kite_stats.purged, (size_t)n << KITE_UNIT_SHIFT, __ATOMIC_RELAXED);
  }
}

void _kite_arena_free_run(kite_page_t *head) {
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (delay == 0) {
    _kite_os_decommit(_kite_page_start(head), (size_t)KITE_UNIT_SIZE << head->order);
    free_run(head, false, 0);
    return;
  }
  uint64_t now = _kite_os_now_ms();
  free_run(head, true, now);
  if (delay > 0) {
    uint64_t tick = (uint64_t)delay / DECAY_BANDS;
    if (tick == 0) tick = 1;
    if (now - __atomic_load_n(&last_purge_ms, __ATOMIC_RELAXED) >= tick) _kite_arena_purge(false);
  }
  void (*hook)(void) = __atomic_load_n(&_kite_arena_dirty_hook, __ATOMIC_ACQUIRE);
  if (hook) hook();
}

void _kite_arena_advise_run(kite_page_t *head, size_t bytes) {
  uint32_t n = (uint32_t)(bytes >> KITE_UNIT_SHIFT) & ~(THP_UNITS - 1);
  if (n == 0 || (n << KITE_UNIT_SHIFT) > (KITE_UNIT_SIZE << head->order)) return;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a)), first = n, last = 0;
  arena_slot_t *s = &slots[a->slot];
  _kite_lock(&s->lock);
  for (uint32_t i = 0; i < n; i++)
    if (a->advised[idx + i] != THP_RUN && a->advised[idx + i] != THP_ADVISED) { /* (auto's advice stays auto's) */
      a->advised[idx + i] = THP_RUN;
      if (i < first) first = i;
      last = i + 1;
    }
  _kite_unlock(&s->lock);
  if (first < last)
    _kite_os_advise_huge(_kite_page_start(head + first), (size_t)(last - first) << KITE_UNIT_SHIFT);
}

/* Grow or shrink the run in place (see arena.h). Growing: the units that join are checked
 * free in is_free (units being purged are not) and the run's start must be aligned to the
 * new order; then, under the slot lock, the buddy block is freed and taken again at the same
 * place with the new order, so no other thread sees the units in between. Shrinking: the
 * tail's descriptors are written FREE first (as free_run does), then the same exchange. */
bool _kite_arena_resize_run(kite_page_t *head, unsigned new_order, bool *tail_zero) {
  unsigned old = head->order;
  if (new_order == old) return true;
  if (new_order > KITE_LARGE_MAX_ORDER) return false;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a));
  uint32_t n_old = 1u << old, n_new = 1u << new_order;
  arena_slot_t *s = &slots[a->slot];
  if (new_order > old) {
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
      avail_update(a);
      kite_assert_internal(arena_check_run(a, idx, new_order, false));
      kite_assert_expensive(arena_check(a));
    }
    _kite_unlock(&s->lock);
    if (!ok) return false;
    if (reused) __atomic_fetch_sub(&dirty_free_units, reused, __ATOMIC_RELAXED);
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
  avail_update(a);
  kite_assert_internal(arena_check_run(a, idx, new_order, false));
  kite_assert_expensive(arena_check(a));
  _kite_unlock(&s->lock);
  __atomic_fetch_add(&dirty_free_units, n_old - n_new, __ATOMIC_SEQ_CST); /* see purger.c */
  void (*hook)(void) = __atomic_load_n(&_kite_arena_dirty_hook, __ATOMIC_ACQUIRE);
  if (hook) hook();
  return true;
}

/* ---- purging (caller holds purge_lock) ---- */

/* Decommit [i, j) of a: reserved while the OS call runs without the slot lock. Entered and
 * left with the slot lock held. */
static void purge_range(arena_slot_t *s, kite_arena_t *a, uint32_t i, uint32_t j) {
  kite_check(kite_buddy_reserve(a->buddy, i, j - i) == 0);
  for (uint32_t k = i; k < j; k++) { a->is_free[k] = 0; a->dirty[k] = 0; dirty_mark(a, k, false); }
  a->dirty_free -= j - i;
  avail_update(a);
  /* KITE_HUGEPAGES=auto: a granule the decay purges (any of it) is given back to 4 KiB
   * pages for good: a huge page purged whole would come back whole at the first touch of
   * any unit in it (2 MiB resident for 64 KiB used), and one purged in part is split anyway */
  uint32_t gi = i & ~(THP_UNITS - 1), gj = (j + THP_UNITS - 1) & ~(THP_UNITS - 1), ui = gj, uj = gi;
  for (uint32_t g = gi; g < gj; g += THP_UNITS) {
    if (a->advised[g] == THP_COLLAPSED) { /* dense: a collapsed granule purged in part is split */
      a->advised[g] = THP_SMALL;
    } else if (a->advised[g] == THP_ADVISED && _kite_opt(KITE_OPT_HUGEPAGES) == KITE_HUGEPAGES_AUTO) {
      memset(&a->advised[g], THP_SMALL, THP_UNITS);
      if (g < ui) ui = g;
      uj = g + THP_UNITS;
    }
  }
  _kite_unlock(&s->lock);
  _kite_os_decommit(_kite_page_start(arena_pages(a) + i), (size_t)(j - i) << KITE_UNIT_SHIFT);
  if (ui < uj) _kite_os_advise_small(_kite_page_start(arena_pages(a) + ui), (size_t)(uj - ui) << KITE_UNIT_SHIFT);
  _kite_lock(&s->lock);
  kite_check(kite_buddy_unreserve(a->buddy, i, j - i) == 0);
  for (uint32_t k = i; k < j; k++) a->is_free[k] = 1;
  avail_update(a);
}

/* The age at `now` of a unit stamped freed_ms (both in ms, modulo 2^32). The stamp may be
 * later than now: a step reads the clock once before it walks the arenas, and a free stamps
 * its own reading, taken any time before it gets the slot lock (purge_range drops the lock
 * in the middle of a step). Such a unit was freed during the step: age 0, never the
 * wrapped difference (about 2^32 ms: "older than any delay", purged at once). */
static inline uint32_t unit_age(uint64_t now, uint32_t freed_ms) {
  int32_t age = (int32_t)((uint32_t)now - freed_ms);
  return age > 0 ? (uint32_t)age : 0;
}

/* One decay step (or, force, a full purge) of the arena in slot s. Returns bytes purged;
 * *empty tells whether the arena is now all free and all purged. */
static size_t arena_decay(arena_slot_t *s, bool force, uint64_t now, uint32_t keep_young, bool *empty) {
  size_t purged = 0;
  *empty = false;
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  if (!a) { _kite_unlock(&s->lock); return 0; }
  int64_t d = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  uint32_t min_age = 0;          /* purge the dirty free units at least this old (ms) */
  uint32_t part_age = 0;         /* then, of those at least this old, */
  uint64_t part = 0;             /* at most this many */
  if (!a->dirty_free) goto done;
  if (!force && keep_young) {
    min_age = keep_young;
  } else if (!force) {
    if (d <= 0) goto done;
    uint32_t band = (uint32_t)(d / DECAY_BANDS) ? (uint32_t)(d / DECAY_BANDS) : 1;
    uint32_t hist[DECAY_BANDS + 1] = {0};
    for (uint32_t u = a->meta_units; u < KITE_ARENA_UNITS; u++) {
      if (!(a->is_free[u] && a->dirty[u])) continue;
      uint32_t b = unit_age(now, a->freed_ms[u]) / band;
      hist[b < DECAY_BANDS ? b : DECAY_BANDS]++;
    }
    /* kept units allowed, in 32nds: band b (ages [b, b+1) bands) weighs 1 - (b + 1/2)/16 */
    uint64_t allowed32 = 0, total = 0;
    for (uint32_t b = 0; b < DECAY_BANDS; b++) allowed32 += (uint64_t)hist[b] * (2 * DECAY_BANDS - 1 - 2 * b);
    for (uint32_t b = 0; b <= DECAY_BANDS; b++) total += hist[b];
    uint64_t allowed = allowed32 / (2 * DECAY_BANDS);
    if (total <= allowed) goto done;
    uint64_t excess = total - allowed, acc = 0;
    uint32_t b = DECAY_BANDS + 1;
    while (b > 0 && acc < excess) acc += hist[--b];
    /* the bands older than b go whole; of band b only what the excess still asks for
     * (rounded up to 2 MiB, a huge page), in address order: purging all of the youngest band
     * purged would purge a fresh free at once when it is alone in its band */
    min_age = (b + 1) * band;
    part_age = b * band;
    part = excess - (acc - hist[b]);
    part = (part + THP_UNITS - 1) & ~(uint64_t)(THP_UNITS - 1);
  }
#define PURGEABLE(k, age) (a->is_free[k] && a->dirty[k] && unit_age(now, a->freed_ms[k]) >= (age))
  for (uint32_t i = a->meta_units; i < KITE_ARENA_UNITS;) {
    if (!PURGEABLE(i, min_age)) { i++; continue; }
    uint32_t j = i;
    while (j < KITE_ARENA_UNITS && PURGEABLE(j, min_age)) j++;
    purge_range(s, a, i, j);
    purged += (size_t)(j - i) << KITE_UNIT_SHIFT;
    __atomic_fetch_sub(&dirty_free_units, j - i, __ATOMIC_RELAXED);
    i = j;
  }
  /* the part, from the top down: runs are reused from their start (the recently freed
   * runs) and carved lowest first, so the top of free memory is the least likely reused */
  for (uint32_t j = KITE_ARENA_UNITS; j > a->meta_units && part;) {
    if (!PURGEABLE(j - 1, part_age)) { j--; continue; }
    uint32_t i = j;
    while (i > a->meta_units && PURGEABLE(i - 1, part_age) && j - i < part) i--;
    part -= j - i;
    purge_range(s, a, i, j);
    purged += (size_t)(j - i) << KITE_UNIT_SHIFT;
    __atomic_fetch_sub(&dirty_free_units, j - i, __ATOMIC_RELAXED);
    j = i;
  }
#undef PURGEABLE
done:
  *empty = a->dirty_free == 0 && !a->growing && kite_buddy_free_units(a->buddy) == a->mapped_units - a->meta_units;
  _kite_unlock(&s->lock);
  return purged;
}

/* Unmap the arena in slot s if it is still empty. Caller holds purge_lock. Bytes unmapped. */
static size_t arena_unmap(uint32_t slot) {
  arena_slot_t *s = &slots[slot];
  _kite_lock(&table_lock);
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena;
  bool empty = a && a->dirty_free == 0 && !a->growing &&
               kite_buddy_free_units(a->buddy) == a->mapped_units - a->meta_units;
  size_t mapped = empty ? (size_t)a->mapped_units << KITE_UNIT_SHIFT : 0;
  if (empty) {
    __atomic_store_n(&s->arena, NULL, __ATOMIC_RELEASE);
    avail_clear(slot);
    __atomic_fetch_and(&growable[slot >> 6], ~((uint64_t)1 << (slot & 63)), __ATOMIC_RELEASE);
    taken[slot >> 6] &= ~((uint64_t)1 << (slot & 63));
    __atomic_fetch_sub(&arena_count, 1, __ATOMIC_RELAXED);
  }
  _kite_unlock(&s->lock);
  _kite_unlock(&table_lock);
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

static size_t purge_all(bool force, uint64_t now) {
  size_t purged = 0, unmapped = 0;
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  /* the demand windows (see DEMAND_WINDOWS) */
  uint32_t keep_young = 0;
  int64_t d = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (!force && d > 0) {
    uint64_t w = (uint64_t)d * DEMAND_WINDOWS;
    if (now - demand_epoch_ms >= w) {
      uint64_t cur = __atomic_exchange_n(&demand_cur, 0, __ATOMIC_RELAXED);
      bool gap = now - demand_epoch_ms >= 2 * w;
      demand_prev = gap ? 0 : cur;
      used_peak_prev = gap ? 0 : used_peak_cur;
      used_peak_cur = 0;
      demand_epoch_ms = now;
    }
    uint64_t dirty = __atomic_load_n(&dirty_free_units, __ATOMIC_RELAXED);
    uint64_t committed = __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED) >> KITE_UNIT_SHIFT;
    uint64_t used = committed > dirty ? committed - dirty : 0;
    if (used > used_peak_cur) used_peak_cur = used;
    uint64_t demand = demand_prev + __atomic_load_n(&demand_cur, __ATOMIC_RELAXED);
    uint64_t ceiling = used_peak_prev > used_peak_cur ? used_peak_prev : used_peak_cur;
    if (dirty <= demand && committed <= ceiling) keep_young = (uint32_t)w;
  }
  for (uint32_t i = 0; i < hi; i++) {
    if (!__atomic_load_n(&slots[i].arena, __ATOMIC_ACQUIRE)) continue;
    bool empty;
    purged += arena_decay(&slots[i], force, now, keep_young, &empty);
    /* a decay step keeps one arena mapped (the next run would map it again) */
    if (empty && (force || __atomic_load_n(&arena_count, __ATOMIC_RELAXED) > 1)) unmapped += arena_unmap(i);
  }
  if (purged) {
    _kite_stat_commit(-(int64_t)purged);
    __atomic_fetch_add(&_kite_stats.purged, purged, __ATOMIC_RELAXED);
  }
  return purged + unmapped;
}

size_t _kite_arena_purge(bool force) {
  if (force) _kite_lock(&purge_lock);
  else if (!_kite_trylock(&purge_lock)) return 0; /* someone else purges */
  uint64_t now = _kite_os_now_ms();
  __atomic_store_n(&last_purge_ms, now, __ATOMIC_RELAXED);
  size_t r = purge_all(force, now);
  _kite_unlock(&purge_lock);
  return r;
}

#ifdef KITE_TEST_HOOKS
/* Tests: a decay step (not forced) as if the clock read `now`. */
size_t _kite_test_arena_decay_at(uint64_t now) {
  _kite_lock(&purge_lock);
  size_t r = purge_all(false, now);
  _kite_unlock(&purge_lock);
  return r;
}
/* Tests: give a run back committed, stamped freed at `now`. */
void _kite_test_arena_free_run_at(kite_page_t *head, uint64_t now) { free_run(head, true, now); }
/* Tests: whether the arenas are held mapped (purge_lock taken, by any thread). */
bool _kite_test_arena_unmap_held(void) {
  if (!_kite_trylock(&purge_lock)) return true;
  _kite_unlock(&purge_lock);
  return false;
}
/* Tests: whether huge-page advice is in force on unit d, by advised[] (given for small
 * pages, for a large run, or a collapsed granule). */
bool _kite_test_arena_unit_huge(kite_page_t *d) {
  kite_arena_t *a = arena_of_page(d);
  uint32_t u = (uint32_t)(d - arena_pages(a));
  _kite_lock(&slots[a->slot].lock);
  uint8_t v = a->advised[u];
  _kite_unlock(&slots[a->slot].lock);
  return v == THP_ADVISED || v == THP_RUN || v == THP_COLLAPSED;
}
/* Tests: whether any arena is marked growing. */
bool _kite_test_arena_any_growing(void) {
  bool r = false;
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    _kite_lock(&slots[i].lock);
    if (slots[i].arena && slots[i].arena->growing) r = true;
    _kite_unlock(&slots[i].lock);
  }
  return r;
}
/* Tests: whether unit d (a descriptor) is free and still committed. */
bool _kite_test_arena_unit_dirty(kite_page_t *d) {
  kite_arena_t *a = arena_of_page(d);
  uint32_t u = (uint32_t)(d - arena_pages(a));
  _kite_lock(&slots[a->slot].lock);
  bool r = a->is_free[u] && a->dirty[u];
  _kite_unlock(&slots[a->slot].lock);
  return r;
}
#endif

size_t _kite_arena_dirty_bytes(void) {
  return __atomic_load_n(&dirty_free_units, __ATOMIC_SEQ_CST) << KITE_UNIT_SHIFT;
}

/* purge_lock keeps every arena mapped (only purges unmap them); each arena is read under
 * its slot lock, so no run changes hands (is_free, kinds) while it is looked at. */
void _kite_arena_foreach_run(void (*fn)(kite_page_t *head, void *arg), void *arg) {
  _kite_lock(&purge_lock);
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t s = 0; s < hi; s++) {
    if (!__atomic_load_n(&slots[s].arena, __ATOMIC_ACQUIRE)) continue;
    _kite_lock(&slots[s].lock);
    kite_arena_t *a = slots[s].arena;
    if (a) {
      kite_page_t *pages = arena_pages(a);
      uint32_t mapped = __atomic_load_n(&a->mapped_units, __ATOMIC_ACQUIRE);
      for (uint32_t i = a->meta_units; i < mapped && i < KITE_ARENA_UNITS; i++) {
        kite_page_t *d = pages + i;
        uint8_t kind = __atomic_load_n(&d->kind, __ATOMIC_ACQUIRE);
        if (!a->is_free[i] && d->head_off == 0 && (kind == KITE_KIND_SMALL || kind == KITE_KIND_LARGE)) fn(d, arg);
      }
    }
    _kite_unlock(&slots[s].lock);
  }
  _kite_unlock(&purge_lock);
}

size_t _kite_arena_count(void) { return __atomic_load_n(&arena_count, __ATOMIC_RELAXED); }

void _kite_arena_hold_unmap(bool hold) {
  if (hold) _kite_lock(&purge_lock);
  else _kite_unlock(&purge_lock);
}

/* Fork: purge_lock, then the table lock, then every slot lock (the order a thread takes
 * them in); the child re-creates them all. */
void _kite_arena_fork_prepare(void) {
  _kite_lock(&purge_lock);
  _kite_lock(&table_lock);
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) _kite_lock(&slots[i].lock);
}
void _kite_arena_fork_parent(void) {
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) _kite_unlock(&slots[i].lock);
  _kite_unlock(&table_lock);
  _kite_unlock(&purge_lock);
}
void _kite_arena_fork_child(void) {
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    /* a thread of the parent that was growing an arena (arena_grow maps without the lock)
     * does not exist here: its `growing` would keep the arena from growing and from being
     * unmapped for good. The units it was mapping stay reserved in the buddy heap (they
     * are until a grow succeeds); if its mapping was made before the fork, the next grow
     * finds the space taken and the arena stays at its size, as when a neighbour took it. */
    kite_arena_t *a = __atomic_load_n(&slots[i].arena, __ATOMIC_RELAXED);
    if (a) a->growing = false;
    _kite_lock_reinit(&slots[i].lock);
  }
  _kite_lock_reinit(&table_lock);
  _kite_lock_reinit(&purge_lock);
}

/* ---- validators (contracts in arena.h) ----
 * What is read under a slot's lock: the buddy heap, is_free, dirty and dirty_free (the
 * lock's), and of the descriptors only those of free units (written before the unit is
 * made free under the lock, and rewritten only after a claim under it) and the META kind
 * of the metadata units. A run just claimed may still have stale descriptors (its claimer
 * writes them after the lock), and units a purge is decommitting are reserved in the buddy
 * heap (not free, not a block): neither is read. */

/* The run of 2^order units at idx, just claimed (is_free false: an allocated block of that
 * order in the buddy heap) or just freed (every unit free, descriptor FREE). Slot lock held. */
static bool arena_check_run(kite_arena_t *a, uint32_t idx, unsigned order, bool is_free) {
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
static bool arena_check(kite_arena_t *a) {
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
  bool dbit = (__atomic_load_n(&dirty_avail[a->slot >> 6], __ATOMIC_RELAXED) >> (a->slot & 63)) & 1;
  if (dbit != (a->dirty_free > 0)) return _kite_check_failed("arena: dirty_avail bit disagrees with dirty_free", a->slot);
  return true;
}

/* Every arena (each under its slot's lock, purges held off by purge_lock so no unit is
 * half purged) and the page map: each arena's slot says ARENA, and the page map has at least as many
 * ARENA slots as there are arenas. */
bool _kite_arena_check(void) {
  bool ok = true;
  size_t n = 0, pm_arenas = 0;
  _kite_lock(&purge_lock);
  _kite_lock(&table_lock);
  uint32_t hi = __atomic_load_n(&slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi && ok; i++) {
    _kite_lock(&slots[i].lock);
    kite_arena_t *a = slots[i].arena;
    if (a) {
      n++;
      uintptr_t base = arena_base(a);
      if (_kite_pagemap_kind(base) != KITE_PM_ARENA) ok = _kite_check_failed("page map: a live arena's slot is not ARENA", base);
      else if (a->slot != i) ok = _kite_check_failed("arena: slot number", i);
      else ok = arena_check(a);
    }
    _kite_unlock(&slots[i].lock);
  }
  if (ok && !_kite_pagemap_check(&pm_arenas, NULL)) ok = false;
  /* an arena being mapped (or unmapped) by another thread is marked before it enters the
   * table (and unmarked after it left): the page map may count more, never fewer */
  if (ok && pm_arenas < n) ok = _kite_check_failed("page map: fewer ARENA slots than arenas", pm_arenas);
  _kite_unlock(&table_lock);
  _kite_unlock(&purge_lock);
  return ok;
}
