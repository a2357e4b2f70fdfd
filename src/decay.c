/* src/decay.c -- the purge policy: when free committed units of the arenas go back to the
 * OS (contract in arena.h; the mechanism, the units' state and the locks are arena.c's).
 *
 * Decay (KITE_PURGE_DELAY_MS = D > 0): a purge step looks at the ages of an arena's dirty
 * free units in 16 bands of D/16. A unit freed at age a may stay committed with weight
 * 1 - a/D, so the step keeps at most sum(1 - a/D) units and purges the oldest first until
 * it does (older bands whole, the youngest one it reaches only in part, top down): what has
 * been free for D or more always goes, recent frees stay for reuse, and a steady free rate
 * leaves about half of the last D's frees committed. Steps run from frees at most every
 * D/16 ms (purge_lock is only tried: a free never waits for a purge), from thread exit, and
 * from the background purger (by default only once the program has stopped freeing runs
 * and claiming: purger.c's idle mode, so the last free of a burst is not the last step).
 * An arena whose units are all free and purged is unmapped by a step (unless it is the
 * only one); malloc_trim (a forced purge) and a failed mapping unmap every empty arena. Two rules adapt D to a program that is claiming memory: the demand
 * windows with their bound (DEMAND_WINDOWS) and the stretch (below).
 *
 * Invariants (the units' fields are arena_int.h's, arena.c I1-I4 hold under the slot lock):
 *   D1 Free units are purged, and empty arenas unmapped, only under purge_lock: a forced
 *      purge waits for it, a decay step only tries it (a free never waits). So an arena
 *      read in a slot stays mapped through the step (re-read under the slot lock: NULL,
 *      gone before). (With delay 0 a run is decommitted by its freer before it is free.)
 *   D2 The demand windows and the judging ledgers (demand_*, used_peak_*, judge_*,
 *      stretch) are read and written only under purge_lock (decay_policy); stretch's
 *      stores are atomic but nothing reads it without that lock.
 *   D3 _kite_decay_demand, _kite_decay_back, used_hi and last_purge_ms are relaxed
 *      counters, ordered with nothing: a stale value moves a step, its need or the idle
 *      purger's look (_kite_arena_activity), never the units' state. used_hi only rises
 *      between steps (note_use's CAS) and a step takes it to 0 (exchange);
 *      _kite_decay_demand and _kite_decay_back only grow (the windows and ledgers take
 *      differences).
 *   D4 A unit is purged only with the slot lock held, free and committed (is_free, dirty:
 *      its dirty_map bit) and old enough for the cut. While the OS call runs (no slot
 *      lock) its units are reserved in the buddy heap with is_free, dirty and their
 *      dirty_map bits 0, and dirty_free lowered: no claim takes them and no other walk
 *      counts them; after it they are free and clean (is_free 1, dirty 0). The global
 *      _kite_arena_dirty_units is lowered after the slot lock is let go (a moment high).
 *   D5 purged_ms[u] is a decay step's clock reading | 1 (never 0) for a unit a step
 *      purged, 0 for a forced purge or a unit claimed since: 0 means "not purged by a
 *      step" (_kite_decay_is_back). Ages are differences mod 2^32 ms, a stamp later than
 *      the step's reading counts as age 0 (unit_age).
 *   D6 A step unmaps only an arena it found empty under the slot lock (all free, none
 *      dirty, not growing; arena.c I4), a decay step never the last one; purge_all lowers
 *      the committed total by exactly the units its steps purged.
 */
#include "arena_int.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include "os.h"
#include <string.h>
#include <kite/buddy.h>

#define DECAY_BANDS 16
/* Claiming (the units claimed in the last one or two windows of DEMAND_WINDOWS purge delays
 * are at least a quarter of the dirty free units of all arenas): a step drops the curve and
 * purges only what has been free for the longer of one window and the stretched delay, plus
 * what the bound asks for: the committed total above the ceiling (the most in use that the
 * steps of those windows saw, or that a claim between two of them left: _kite_decay_note_use)
 * goes at once, oldest first (need, decay_cut). The bound, not
 * the delay, keeps the resident set near the recent peak of use; the curve purged a share
 * of the young free units at every step and the next claims faulted most of it in again.
 * Not claiming (an idle program, or one whose free memory no longer fits its requests): the
 * plain decay curve with D, at the first step after a pause (in an idle program the
 * background purger's: its steps roll the windows on, the claiming mode ends within two). */
/* (DEMAND_WINDOWS is defined in arena_int.h, where the tests read it.) */

/* Stretch: the delay a step uses is D << stretch, from what the program does with the memory
 * the steps give back. A unit a decay step purged is stamped (purged_ms); when a claim takes
 * it again within DECAY_BACK_MS of that stamp it "came back" (_kite_decay_is_back): the
 * purge saved nothing and cost a page fault per page. Every DECAY_JUDGE_MS the steps weigh
 * the units purged against those that came back, each a ledger that keeps half of the
 * previous periods' (_kite_decay_next_stretch): half or more came back, the delay doubles
 * (up to DECAY_MAX_MS); less than an eighth, it halves. The
 * longer delay is used only while the program is claiming memory (above), under the bound. */
#ifndef DECAY_JUDGE_MS
#define DECAY_JUDGE_MS 100
#endif
/* Units purged in a judging period below which it says nothing (2 MiB). */
#define DECAY_JUDGE_MIN 32u

static uint64_t last_purge_ms;       /* atomic */
uint64_t _kite_decay_demand;         /* atomic: units claimed, ever (windows take differences) */
uint64_t _kite_decay_back;           /* atomic: purged units that came back, ever */
static uint64_t used_hi;             /* atomic: most units in use after a claim since the last
                                      * step (_kite_decay_note_use), taken by the next step */
static uint64_t demand_mark;         /* _kite_decay_demand at the start of this window (purge_lock) */
static uint64_t demand_prev;         /* units claimed in the previous window (purge_lock) */
static uint64_t demand_epoch_ms;     /* start of this window (purge_lock) */
static uint64_t used_peak_cur;       /* most units in use (committed, not free) seen by a step */
static uint64_t used_peak_prev;      /* in this and the previous window (purge_lock) */
static uint32_t stretch;             /* atomic (written under purge_lock, D2): D << stretch */
static uint64_t judge_epoch_ms;      /* start of this judging period (purge_lock) */
static uint64_t judge_purged;        /* units the decay purged: in this period, plus half of
                                      * the previous periods' ledger (purge_lock) */
static uint64_t judge_back;          /* the same ledger of units that came back (purge_lock) */
static uint64_t judge_back_mark;     /* _kite_decay_back at its start (purge_lock) */

/* The age at `now` of a unit stamped `stamp` (both in ms, modulo 2^32). The stamp may be
 * later than now: a step reads the clock once before it walks the arenas, and a free stamps
 * its own reading, taken any time before it gets the slot lock (purge_range drops the lock
 * in the middle of a step). Such a unit was freed during the step: age 0, never the
 * wrapped difference (about 2^32 ms: "older than any delay", purged at once): D5. */
static inline uint32_t unit_age(uint64_t now, uint32_t stamp) {
  int32_t age = (int32_t)((uint32_t)now - stamp);
  return age > 0 ? (uint32_t)age : 0;
}

/* Use rises only at claims, and steps run only from frees: between two steps a program can
 * claim far past what either step reads, and a ceiling made of the steps' readings alone
 * left that peak over the bound, to be purged at the next step and faulted in again by the
 * next claims. The mark is stored only when it rises: a program at its peak only reads it
 * (D3). */
void _kite_decay_note_use(void) {
  uint64_t dirty = __atomic_load_n(&_kite_arena_dirty_units, __ATOMIC_RELAXED);
  uint64_t used = __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED) >> KITE_UNIT_SHIFT;
  used = used > dirty ? used - dirty : 0;
  uint64_t hi = __atomic_load_n(&used_hi, __ATOMIC_RELAXED);
  while (used > hi && !__atomic_compare_exchange_n(&used_hi, &hi, used, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

bool _kite_decay_is_back(uint64_t now, uint32_t purged_ms) {
  return purged_ms != 0 && unit_age(now, purged_ms) < DECAY_BACK_MS;
}

/* d << s, but never past DECAY_MAX_MS unless d itself is (an option changed after s grew). */
static int64_t stretched_delay(int64_t d, unsigned s) {
  int64_t cap = d > DECAY_MAX_MS ? d : DECAY_MAX_MS;
  return (d << s) < cap ? d << s : cap;
}

unsigned _kite_decay_next_stretch(unsigned s, uint64_t purged, uint64_t back, int64_t d) {
  if (purged < DECAY_JUDGE_MIN) return s; /* too little to judge by */
  if (back * 2 >= purged) return (d << (s + 1)) <= DECAY_MAX_MS ? s + 1 : s;
  if (back * 8 < purged && s > 0) return s - 1;
  return s;
}

/* After a run went back committed at `now`: a decay step when one is due, and the hook. */
static void run_freed(int64_t delay, uint64_t now) {
  if (delay > 0) {
    uint64_t tick = (uint64_t)delay / DECAY_BANDS; /* also when stretched: the bound is looked at */
    if (tick == 0) tick = 1;
    if (now - __atomic_load_n(&last_purge_ms, __ATOMIC_RELAXED) >= tick) _kite_arena_purge(false);
  }
  void (*hook)(void) = __atomic_load_n(&_kite_arena_dirty_hook, __ATOMIC_ACQUIRE);
  if (hook) hook();
}

void _kite_arena_free_run(kite_page_t *head) {
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (delay == 0) {
    _kite_os_decommit(_kite_page_start(head), (size_t)KITE_UNIT_SIZE << head->order);
    _kite_arena_put_run(head, false, 0);
    return;
  }
  uint64_t now = _kite_os_now_ms();
  _kite_arena_put_run(head, true, now);
  run_freed(delay, now);
}

void _kite_arena_free_run_held(kite_page_t *head, uint64_t now) { _kite_arena_put_run(head, true, now); }

void _kite_arena_free_run_done(uint64_t now) {
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  /* the run went back committed: decommitted here, by a forced purge (a step with delay 0
   * purges nothing, and the run may be another thread's by now: only the arena's own walk
   * knows which units are still free), as malloc_trim does */
  if (delay == 0) _kite_arena_purge(true);
  else run_freed(delay, now);
}

/* ---- purging (caller holds purge_lock) ---- */

/* Decommit [i, j) of a: reserved while the OS call runs without the slot lock (D4). Entered
 * and left with the slot lock held. stamp (a decay step's clock reading, or 0 for a forced
 * purge: D5) goes to purged_ms: a claim of the units within DECAY_BACK_MS of it counts them
 * back. */
static void purge_range(kite_arena_slot_t *s, kite_arena_t *a, uint32_t i, uint32_t j, uint32_t stamp) {
  kite_check(kite_buddy_reserve(a->buddy, i, j - i) == 0);
  for (uint32_t k = i; k < j; k++) {
    a->is_free[k] = 0;
    a->dirty[k] = 0;
    a->purged_ms[k] = stamp;
    dirty_mark(a, k, false);
  }
  a->dirty_free -= j - i;
  _kite_arena_avail_update(a);
  uint32_t ui, uj; /* granules whose huge-page advice is taken back (thp.c) */
  _kite_thp_purged(a, i, j, &ui, &uj);
  _kite_unlock(&s->lock);
  _kite_os_decommit(_kite_page_start(arena_pages(a) + i), (size_t)(j - i) << KITE_UNIT_SHIFT);
  if (ui < uj) _kite_os_advise_small(_kite_page_start(arena_pages(a) + ui), (size_t)(uj - ui) << KITE_UNIT_SHIFT);
  _kite_lock(&s->lock);
  kite_check(kite_buddy_unreserve(a->buddy, i, j - i) == 0);
  for (uint32_t k = i; k < j; k++) a->is_free[k] = 1;
  _kite_arena_avail_update(a);
}

/* What a step purges of an arena: every dirty free unit at least min_age old, then, of those
 * at least part_age old, at most part units (top down). */
typedef struct {
  uint32_t min_age, part_age;
  uint64_t part;
} decay_cut_t;

/* The decay curve with delay d > 0 over a's dirty free units (see the file's comment), or
 * without the curve (!curve) every unit at least d old, and at least `need` of them (oldest
 * first: the bound, see decay_policy). Slot
 * lock held. false: nothing to purge. The ages come from dirty_map's set bits, so a step
 * costs the arena's dirty free units, not all its units. */
static bool decay_cut(kite_arena_t *a, uint64_t now, int64_t d, bool curve, uint64_t need, decay_cut_t *c) {
  uint32_t band = (uint32_t)(d / DECAY_BANDS) ? (uint32_t)(d / DECAY_BANDS) : 1;
  uint32_t hist[DECAY_BANDS + 1] = {0};
  for (uint32_t w = 0; w < KITE_ARENA_UNITS / 64; w++) {
    for (uint64_t m = a->dirty_map[w]; m; m &= m - 1) {
      uint32_t u = w * 64 + (uint32_t)__builtin_ctzll(m);
      uint32_t b = unit_age(now, a->freed_ms[u]) / band;
      hist[b < DECAY_BANDS ? b : DECAY_BANDS]++;
    }
  }
  /* kept units allowed, in 32nds: band b (ages [b, b+1) bands) weighs 1 - (b + 1/2)/16 */
  uint64_t allowed32 = 0, total = 0;
  for (uint32_t b = 0; b < DECAY_BANDS; b++) allowed32 += (uint64_t)hist[b] * (2 * DECAY_BANDS - 1 - 2 * b);
  for (uint32_t b = 0; b <= DECAY_BANDS; b++) total += hist[b];
  /* without the curve only what is older than d must go */
  uint64_t allowed = curve ? allowed32 / (2 * DECAY_BANDS) : total - hist[DECAY_BANDS];
  if (need > total) need = total;
  if (total <= allowed && need == 0) return false;
  uint64_t excess = total > allowed ? total - allowed : 0, acc = 0;
  bool exact = excess < need; /* the bound's share is purged as asked, not rounded up */
  if (exact) excess = need;
  uint32_t b = DECAY_BANDS + 1;
  while (b > 0 && acc < excess) acc += hist[--b];
  /* the bands older than b go whole; of band b only what the excess still asks for
   * (rounded up to 2 MiB, a huge page), in address order: purging all of the youngest band
   * purged would purge a fresh free at once when it is alone in its band */
  c->min_age = (b + 1) * band;
  c->part_age = b * band;
  c->part = excess - (acc - hist[b]);
  if (!exact) c->part = (c->part + THP_UNITS - 1) & ~(uint64_t)(THP_UNITS - 1);
  return true;
}

/* The first unit at or after u whose dirty_map bit is set (free and committed), or
 * KITE_ARENA_UNITS; and one past the last such unit before u, or 0. Slot lock held. */
static uint32_t dirty_next(const kite_arena_t *a, uint32_t u) {
  while (u < KITE_ARENA_UNITS) {
    uint64_t m = a->dirty_map[u >> 6] >> (u & 63);
    if (m) return u + (uint32_t)__builtin_ctzll(m);
    u = (u | 63) + 1;
  }
  return KITE_ARENA_UNITS;
}
static uint32_t dirty_prev(const kite_arena_t *a, uint32_t u) {
  while (u > 0) {
    uint32_t top = (u - 1) & 63, w = (u - 1) >> 6;
    uint64_t m = a->dirty_map[w] & (top == 63 ? ~(uint64_t)0 : ((uint64_t)2 << top) - 1);
    if (m) return w * 64 + 64 - (uint32_t)__builtin_clzll(m);
    u = w * 64;
  }
  return 0;
}

/* One decay step with delay d (or, force, a full purge) of the arena in slot s, along the
 * curve or (!curve) only what is at least d old; *need: units the step still owes the
 * bound (decay_policy), lowered by what this arena purges. Returns units purged; *empty tells whether the arena is
 * now all free and all purged. */
static size_t arena_decay(kite_arena_slot_t *s, bool force, uint64_t now, int64_t d, bool curve, uint64_t *need, bool *empty) {
  size_t purged = 0;
  uint32_t stamp = force ? 0 : ((uint32_t)now | 1); /* 0 means "not purged by a step" (D5) */
  *empty = false;
  _kite_lock(&s->lock);
  kite_arena_t *a = s->arena; /* D1: NULL when it was unmapped before this lock */
  if (!a) { _kite_unlock(&s->lock); return 0; }
  decay_cut_t c = {0, 0, 0};
  if (!a->dirty_free) goto done;
  if (!force && (d <= 0 || !decay_cut(a, now, d, curve, *need, &c))) goto done;
  /* D4: free and committed (its dirty_map bit), and old enough */
#define PURGEABLE(k, age) (a->is_free[k] && a->dirty[k] && unit_age(now, a->freed_ms[k]) >= (age))
  for (uint32_t i = dirty_next(a, a->meta_units); i < KITE_ARENA_UNITS;) {
    if (!PURGEABLE(i, c.min_age)) { i = dirty_next(a, i + 1); continue; }
    uint32_t j = i;
    while (j < KITE_ARENA_UNITS && PURGEABLE(j, c.min_age)) j++;
    purge_range(s, a, i, j, stamp);
    purged += j - i;
    i = j;
  }
  /* the part, from the top down: runs are reused from their start (the recently freed
   * runs) and carved lowest first, so the top of free memory is the least likely reused */
  for (uint32_t j = KITE_ARENA_UNITS; j > a->meta_units && c.part;) {
    if (!PURGEABLE(j - 1, c.part_age)) { j = dirty_prev(a, j - 1); continue; }
    uint32_t i = j;
    while (i > a->meta_units && PURGEABLE(i - 1, c.part_age) && j - i < c.part) i--;
    c.part -= j - i;
    purge_range(s, a, i, j, stamp);
    purged += j - i;
    j = i;
  }
#undef PURGEABLE
done:
  /* D6: all free, all purged, not growing (the unmap looks again, arena.c I4) */
  *empty = a->dirty_free == 0 && !a->growing && kite_buddy_free_units(a->buddy) == a->mapped_units - a->meta_units;
  _kite_unlock(&s->lock);
  if (purged) __atomic_fetch_sub(&_kite_arena_dirty_units, purged, __ATOMIC_RELAXED); /* D4 */
  *need = *need > purged ? *need - purged : 0;
  return purged;
}

/* The demand windows and the stretch, read by a step at `now` with the option's delay d > 0
 * (purge_lock held: D2): returns the delay the step uses. *curve: the plain decay curve (a
 * program that is not claiming memory); else the step purges only what is older than the
 * delay, and *need units more, oldest first, so that the committed total comes down to the
 * ceiling (the most in use that the steps of the demand windows saw). */
static int64_t decay_policy(uint64_t now, int64_t d, bool *curve, uint64_t *need) {
  uint64_t w = (uint64_t)d * DEMAND_WINDOWS, total = __atomic_load_n(&_kite_decay_demand, __ATOMIC_RELAXED);
  if (now - demand_epoch_ms >= w) {
    bool gap = now - demand_epoch_ms >= 2 * w;
    demand_prev = gap ? 0 : total - demand_mark;
    used_peak_prev = gap ? 0 : used_peak_cur;
    used_peak_cur = 0;
    demand_mark = total;
    demand_epoch_ms = now;
  }
  uint64_t dirty = __atomic_load_n(&_kite_arena_dirty_units, __ATOMIC_RELAXED);
  uint64_t committed = __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED) >> KITE_UNIT_SHIFT;
  uint64_t used = committed > dirty ? committed - dirty : 0;
  /* the peak of use between this step and the last: the claims' mark, not only this
   * step's reading (a program claims between steps, and it frees before the next one): D3 */
  uint64_t hi = __atomic_exchange_n(&used_hi, 0, __ATOMIC_RELAXED);
  if (hi > used) used = hi;
  if (used > used_peak_cur) used_peak_cur = used;
  uint64_t demand = demand_prev + (total - demand_mark);
  uint64_t ceiling = used_peak_prev > used_peak_cur ? used_peak_prev : used_peak_cur;
  if (now - judge_epoch_ms >= DECAY_JUDGE_MS) {
    uint64_t back = __atomic_load_n(&_kite_decay_back, __ATOMIC_RELAXED);
    /* A unit comes back when the program claims it again, often a period or more after the
     * step that purged it (a program working in rounds purges in one period and claims in
     * the next): the ledgers carry half of each period into the next, so those claims are
     * weighed against the purges they undo, not against a period with nothing purged. */
    judge_back += back - judge_back_mark;
    unsigned s = _kite_decay_next_stretch(stretch, judge_purged, judge_back, d);
    __atomic_store_n(&stretch, s, __ATOMIC_RELAXED);
    judge_back_mark = back;
    judge_purged /= 2;
    judge_back /= 2;
    judge_epoch_ms = now;
  }
  *curve = demand * 4 < dirty;
  if (*curve) return d; /* not claiming: the plain decay */
  /* Claiming: young free units stay (the curve purged a share of them at every step, and the
   * next claims faulted most of it in again); over the ceiling only the excess goes. */
  int64_t ds = stretched_delay(d, stretch);
  if (ds < (int64_t)w) ds = (int64_t)w; /* the ceiling, not the delay, bounds what stays */
  *need = committed > ceiling ? committed - ceiling : 0;
  return ds;
}

static size_t purge_all(bool force, uint64_t now) {
  size_t purged = 0, unmapped = 0;
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  bool curve = true;
  uint64_t need = 0;
  int64_t d = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (!force && d > 0) d = decay_policy(now, d, &curve, &need);
  for (uint32_t i = 0; i < hi; i++) {
    if (!__atomic_load_n(&_kite_arena_slots[i].arena, __ATOMIC_ACQUIRE)) continue;
    bool empty;
    purged += arena_decay(&_kite_arena_slots[i], force, now, d, curve, &need, &empty);
    /* a decay step keeps one arena mapped (the next run would map it again): D6 */
    if (empty && (force || __atomic_load_n(&_kite_arenas_mapped, __ATOMIC_RELAXED) > 1)) unmapped += _kite_arena_unmap(i);
  }
  if (!force) judge_purged += purged;
  purged <<= KITE_UNIT_SHIFT;
  if (purged) { /* D6 */
    _kite_stat_commit(-(int64_t)purged);
    __atomic_fetch_add(&_kite_stats.purged, purged, __ATOMIC_RELAXED);
  }
  return purged + unmapped;
}

size_t _kite_arena_purge(bool force) {
  if (force) _kite_lock(&_kite_arena_purge_lock);
  else if (!_kite_trylock(&_kite_arena_purge_lock)) return 0; /* someone else purges (D1) */
  uint64_t now = _kite_os_now_ms();
  __atomic_store_n(&last_purge_ms, now, __ATOMIC_RELAXED);
  size_t r = purge_all(force, now);
  _kite_unlock(&_kite_arena_purge_lock);
  return r;
}

#ifdef KITE_TEST_HOOKS
/* Tests: a decay step (not forced) as if the clock read `now`. */
size_t _kite_test_arena_decay_at(uint64_t now) {
  _kite_lock(&_kite_arena_purge_lock);
  size_t r = purge_all(false, now);
  _kite_unlock(&_kite_arena_purge_lock);
  return r;
}
#endif

size_t _kite_arena_committed_bytes(void) { return (size_t)__atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED); }

/* Both counters only grow (D3: the units claimed, ever; the clock of the last step), so
 * their sum changes when either does. Relaxed (D3): a stale reading moves the idle
 * thread's step by a look, or lets it step beside a free's, which only tries purge_lock
 * too (D1). */
uint64_t _kite_arena_activity(void) {
  return __atomic_load_n(&_kite_decay_demand, __ATOMIC_RELAXED) + __atomic_load_n(&last_purge_ms, __ATOMIC_RELAXED);
}

size_t _kite_arena_dirty_bytes(void) {
  return __atomic_load_n(&_kite_arena_dirty_units, __ATOMIC_SEQ_CST) << KITE_UNIT_SHIFT;
}
