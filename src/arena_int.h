/* src/arena_int.h -- what the arena module's three files share: the arena header, the slot
 * table and its locks. arena.c is the mechanism (slots, claims, growth, unmapping), decay.c
 * the purge policy, thp.c the huge-page modes; nothing outside the module includes this.
 * The invariants are arena.c's (I1-I3 there); the locks are arena.h's.
 */
#ifndef KITE_ARENA_INT_H
#define KITE_ARENA_INT_H
#include "arena.h"
#include "os.h"
#include <kite/buddy.h>

#define KITE_ARENA_MAGIC 0x6b69746561726e61ull /* "kitearna" */
#ifndef KITE_ARENA_MAX
/* Most arenas at once (16384 x 64 MiB = 1 TiB of small and large blocks). */
#define KITE_ARENA_MAX 16384
#endif
/* Freed runs of RECENT_MIN_ORDER or more (256 KiB) are remembered, RECENT_RUNS per arena, and
 * a request of such an order is first carved from one of them that is still free and
 * committed: a program that frees a big buffer and asks for another of a nearby size gets
 * the same pages back, with no page fault and no growth of its resident set. */
#define RECENT_RUNS 8
#define RECENT_MIN_ORDER 2
/* A transparent huge page (2 MiB) in units: the granule of the huge-page modes (thp.c), and
 * what a decay step rounds a partial purge to (decay.c). */
#define THP_UNITS 32u

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
  bool newborn;                        /* its maker has not claimed its run yet (arena.c I4) */
  uint8_t is_free[KITE_ARENA_UNITS];   /* free in the buddy heap */
  uint8_t dirty[KITE_ARENA_UNITS];     /* touched since the last purge */
  uint8_t advised[KITE_ARENA_UNITS];   /* THP_* (thp.c): huge-page state of the unit (auto,
                                        * dense: of its granule, kept at the granule's first unit) */
  uint32_t freed_ms[KITE_ARENA_UNITS]; /* when it was freed (for the decay) */
  uint32_t purged_ms[KITE_ARENA_UNITS]; /* when a decay step purged it (| 1); 0: not since its
                                         * last claim, or purged by a forced purge */
  uint32_t recent[RECENT_RUNS];        /* start units of the last freed big runs, newest first */
  uint64_t dirty_map[KITE_ARENA_UNITS / 64]; /* bit u: is_free[u] && dirty[u] (dirty_claim) */
} kite_arena_t;

#define ARENA_HDR_OFF (KITE_ARENA_GUARD + (size_t)KITE_ARENA_UNITS * sizeof(kite_page_t))
#define ARENA_BUDDY_OFF ((ARENA_HDR_OFF + sizeof(kite_arena_t) + 63) & ~(size_t)63)

typedef struct {
  kite_lock_t lock; /* lock: the arena in the slot (its buddy heap, per-unit state, advised[]) */
  kite_arena_t *arena; /* written under lock (atomic: peeked by the fork hooks) */
} __attribute__((aligned(64))) kite_arena_slot_t;

/* The slot table (arena.c). A slot's lock outlives the arena it guards. */
extern kite_arena_slot_t _kite_arena_slots[KITE_ARENA_MAX] KITE_HIDDEN;
extern uint32_t _kite_arena_slots_hi KITE_HIDDEN;    /* 1 + highest slot ever used (atomic) */
extern uint32_t _kite_arenas_mapped KITE_HIDDEN;     /* arenas in the table (atomic) */
/* Serializes purge steps and unmapping; whoever holds it sees no arena vanish. */
extern kite_lock_t _kite_arena_purge_lock KITE_HIDDEN;
extern kite_lock_t _kite_arena_table_lock KITE_HIDDEN; /* slot assignment (taken after purge_lock) */
extern size_t _kite_arena_dirty_units KITE_HIDDEN;   /* atomic: sum of every arena's dirty_free */

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

/* ---- arena.c: the mechanism ---- */
/* Make the slot's avail[] and dirty_avail bits agree with a. Slot lock held. */
void _kite_arena_avail_update(kite_arena_t *a);
/* Give the run back (head descriptor): its units become free, stamped freed at `now`;
 * dirty: they stay committed (else the caller has decommitted them). Takes the slot lock. */
void _kite_arena_put_run(kite_page_t *head, bool dirty, uint64_t now);
/* Unmap the arena in slot s if it is still empty. Caller holds purge_lock. Bytes unmapped. */
size_t _kite_arena_unmap(uint32_t slot);
/* Whether slot's dirty_avail bit is set (I3). */
bool _kite_arena_dirty_listed(uint32_t slot);

/* ---- arena_check.c: the validators (slot lock held) ---- */
bool _kite_arena_check_one(kite_arena_t *a);
bool _kite_arena_check_run(kite_arena_t *a, uint32_t idx, unsigned order, bool is_free);

/* ---- decay.c: the purge policy ---- */
#ifndef DECAY_BACK_MS
/* A unit claimed within this many ms of the decay step that purged it "came back". */
#define DECAY_BACK_MS 1000
#endif
#ifndef DEMAND_WINDOWS
/* A demand window is this many purge delays (decay.c: the bound's ceiling). */
#define DEMAND_WINDOWS 8
#endif
#ifndef DECAY_MAX_MS
/* The longest delay the stretch reaches (a longer option delay is used as it is). */
#define DECAY_MAX_MS 1000
#endif
extern uint64_t _kite_decay_demand KITE_HIDDEN; /* atomic: units claimed, ever */
extern uint64_t _kite_decay_back KITE_HIDDEN;   /* atomic: purged units claimed again soon, ever */
/* After a claim: the units in use now (committed, not free) raise the mark of the most in
 * use since the last decay step, which the next step takes as the peak it did not see. */
void _kite_decay_note_use(void);
/* Whether a unit a decay step purged at purged_ms (0: none did) and claimed at `now` came
 * back: claimed within DECAY_BACK_MS of its purge. A stamp later than now (the claim read
 * the clock before the step that purged it) is of age 0: it came back. */
bool _kite_decay_is_back(uint64_t now, uint32_t purged_ms);
/* The stretch after a judging period in which the steps purged `purged` units and `back`
 * of the purged units came back, from stretch s with the option's delay d > 0: s + 1 when
 * half or more came back (unless d << (s + 1) passes DECAY_MAX_MS), s - 1 (not below 0)
 * when fewer than an eighth did, s otherwise and when too few were purged to judge. */
unsigned _kite_decay_next_stretch(unsigned s, uint64_t purged, uint64_t back, int64_t d);

/* ---- thp.c: the huge-page modes (each called with the slot lock held; contracts there) ---- */
uint32_t _kite_thp_auto_pick(kite_arena_t *a, uint32_t u, unsigned order);
uint32_t _kite_thp_dense_pick(kite_arena_t *a, uint32_t u, unsigned order);
void _kite_thp_dense_check(kite_arena_slot_t *s, kite_arena_t *a, uint32_t c);
uint32_t _kite_thp_run_unadvise(kite_arena_t *a, uint32_t u, unsigned order);
void _kite_thp_fork_child(kite_arena_t *a);
/* Units [i, j) of a are being purged: the granules whose advice must be taken back are
 * [*ui, *uj) (empty if *ui >= *uj), to be given MADV_NOHUGEPAGE after the lock is dropped. */
void _kite_thp_purged(kite_arena_t *a, uint32_t i, uint32_t j, uint32_t *ui, uint32_t *uj);
#endif
