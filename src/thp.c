/* src/thp.c -- the huge-page modes of the arenas (KITE_HUGEPAGES): which 2 MiB granules of
 * an arena are advised, collapsed or kept on 4 KiB pages (contract in arena.h; the units'
 * state and the locks are arena.c's). The whole 2 MiB pieces of the bytes a large block was
 * asked for (runs of 2 MiB or more are 2 MiB aligned) are advised as transparent huge pages
 * in every mode: a big buffer is faulted in 2 MiB at a time, not 4 KiB at a time, and a
 * small request in a big (aligned) run is not.
 *
 * Invariants (advised[] below; the modes' rules in the comments that follow it):
 *   T1 advised[] is read and written only under the arena's slot lock (every function here
 *      takes it or is called with it). The state is decided under the lock; the system
 *      call that acts on it (advice, mincore, collapse) comes after the lock is let go.
 *   T2 A granule's state is the entry of its first unit. THP_ADVISED, THP_SMALL and THP_RUN
 *      are written over whole granules; THP_LOOKING, THP_PENDING and THP_COLLAPSED at the
 *      first unit only (dense mode, never the arena's first granule).
 *   T3 The picks start from THP_UNDECIDED only: a granule left THP_SMALL is never advised
 *      for small pages or collapsed again; only a large run of a granule or more claimed
 *      over it advises it (THP_RUN, _kite_arena_advise_run).
 *   T4 THP_LOOKING has one looker, who alone moves it on: a claim (set from UNDECIDED in
 *      _kite_thp_dense_pick; _kite_thp_dense_check ends it) or the collapse pass (set from
 *      PENDING in dense_collapse, which holds purge_lock until it ends it). A fork's child
 *      has no looker: it takes THP_LOOKING back to UNDECIDED (only a claim's look can be
 *      in flight: fork_prepare takes purge_lock first).
 *   T5 Every granule marked THP_PENDING was counted in dense_pending after the mark
 *      (seq_cst; a fork's child counts its marks again); the pass takes the count to 0
 *      before it reads the marks: a mark is found by the pass running or counted for the
 *      next, whose thread the count wakes (purger.c BG2).
 *   T6 A collapse holds purge_lock from its look to its final state: no purge decommits
 *      part of the granule and no arena is unmapped meanwhile (decay.c D1); it reads a's
 *      marks only after finding a still in its slot (the pass's walk held no purge_lock).
 */
#include "arena_int.h"
#include "options.h"
#include "stats.h"
#include "os.h"
#include <string.h>

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
                      * would fault in a whole 2 MiB page at its first touch; and when a
                      * run claimed over it asks for less than the granule's bytes (its
                      * untouched tail would be resident whole). */
  THP_PENDING = 6,   /* dense: found dense by a claim, waiting for the collapse pass */
};
/* No huge page for a program with less than this committed (a huge page is resident
 * whole, and such a program's TLB misses cost little): neither auto's nor dense's granules
 * nor the large runs advised in every mode. KITE_HUGEPAGES=1 (whole arenas) is the one
 * mode that advises a small program's memory. */
#ifndef THP_MIN_COMMITTED
#define THP_MIN_COMMITTED ((uint64_t)16 << 20)
#endif
#ifdef KITE_TEST_HOOKS
uint64_t _kite_test_thp_min_committed = THP_MIN_COMMITTED;
#define THP_FLOOR _kite_test_thp_min_committed
#else
#define THP_FLOOR THP_MIN_COMMITTED
#endif
static bool thp_program_big(void) {
  return __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED) >= THP_FLOOR;
}
/* KITE_HUGEPAGES=auto: a 2 MiB granule (THP_UNITS aligned units) of an arena is advised,
 * or not, once and for all when a run smaller than a granule is first claimed in it, before
 * anything in it is touched (a granule touched with 4 KiB pages keeps its page table: advice
 * given later would not make its faults huge). It is advised when it will probably be used
 * densely: the process has at least THP_MIN_COMMITTED bytes committed (a small program
 * gets no huge page, which would be resident whole) and the granule below it in the arena has
 * every unit in use or committed (small pages are carved lowest first, dirty_claim: the next
 * granule up is where the carving goes on). A granule the decay purges, in whole or in part,
 * goes back to 4 KiB pages for good (MADV_NOHUGEPAGE, _kite_thp_purged): memory that comes and goes
 * is not worth a huge page. Runs of a granule or more are advised by
 * _kite_arena_advise_run over the part the program asked for, as in every mode. */
/* KITE_HUGEPAGES=dense uses the same rule while the process has one live heap (a
 * single-threaded program that made no first-class heap, _kite_thp_heaps): one heap's claims
 * fill an arena's granules lowest first and alone, so a granule above a full one is where
 * that heap's carving goes on, and its faults are huge from the first touch (no 4 KiB
 * fault, no collapse to pay). With two heaps or more their claims interleave in the
 * granules, each heap's pages carved lazily and its page cache keeping units free, and
 * advice made untouched memory resident (auto's peak RSS on the 8-thread rows): dense's
 * collapse alone then. Heaps are counted, not threads: a first-class heap (kite_heap_new)
 * is a second heap even on the one thread that uses both, whose claims interleave the same
 * way (a page of each heap's own for a class, each heap's own page cache). In dense mode only a
 * granule none of whose units has been touched since its last purge is advised (its first
 * claim); one not advised stays THP_UNDECIDED, for the collapse to find dense later. */
/* live heaps, thread and first-class (heap_pool.c: counted as linked into, and unlinked
 * from, the list of all heaps) */
uint32_t _kite_thp_heaps;

/* KITE_HUGEPAGES=auto (see THP_MIN_COMMITTED): decides the granule of a run of order
 * `order` starting at unit u that is being claimed, if that is the granule's first claim.
 * Returns the granule's first unit when it is to be advised (the caller advises it after
 * dropping the lock, before the run is handed out), else 0. Slot lock held. */
uint32_t _kite_thp_auto_pick(kite_arena_t *a, uint32_t u, unsigned order) {
  int mode = _kite_opt(KITE_OPT_HUGEPAGES);
  if ((1u << order) >= THP_UNITS) return 0;
  if (mode == KITE_HUGEPAGES_DENSE && __atomic_load_n(&_kite_thp_heaps, __ATOMIC_RELAXED) == 1 &&
      _kite_opt(KITE_OPT_PURGE_DELAY_MS) != 0) {
    uint32_t g = u & ~(THP_UNITS - 1);
    if (a->advised[g] != THP_UNDECIDED || g < THP_UNITS || g + THP_UNITS > a->mapped_units ||
        !thp_program_big())
      return 0;
    for (uint32_t v = g; v < g + THP_UNITS; v++)
      if (!a->is_free[v] || a->dirty[v]) return 0; /* not its first claim */
    for (uint32_t v = g - THP_UNITS; v < g; v++)
      if (a->is_free[v] && !a->dirty[v]) return 0;
    memset(&a->advised[g], THP_ADVISED, THP_UNITS);
    return g;
  }
  if (mode != KITE_HUGEPAGES_AUTO) return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  if (a->advised[g] != THP_UNDECIDED) return 0; /* decided */
  bool dense = g >= THP_UNITS && g + THP_UNITS <= a->mapped_units && thp_program_big();
  for (uint32_t v = g - THP_UNITS; dense && v < g; v++) dense = !a->is_free[v] || a->dirty[v];
  memset(&a->advised[g], dense ? THP_ADVISED : THP_SMALL, THP_UNITS);
  return dense ? g : 0;
}

/* KITE_HUGEPAGES=dense: a granule is put on a transparent huge page only once it is dense,
 * so that the huge page costs no memory the program had not touched: when a run smaller
 * than a granule is claimed in the granule above it (the carving has moved on), the process
 * has THP_MIN_COMMITTED committed, every unit of the granule is in use (small pages,
 * large runs, or the arena's metadata) and all of its 4 KiB pages are resident (mincore, by
 * the claiming thread, in growing pieces that stop at the first page missing past
 * THP_DENSE_MAX_MISSING: os.h's _kite_os_resident_whole), the granule
 * is marked THP_PENDING and the background thread (purger.c, started for it even when
 * KITE_BACKGROUND is off) is woken. That thread's collapse pass (_kite_arena_collapse_run)
 * looks again and, if the granule is still all in use and resident, rebuilds it in place
 * (MADV_COLLAPSE: the kernel copies the resident pages into a huge page, milliseconds of
 * system time a granule, which no request waits for). Nothing is advised: faults stay 4 KiB,
 * khugepaged leaves the arena alone and a later purge of part of the granule splits the
 * huge page back, after which the granule is never collapsed again (THP_SMALL). A granule
 * not dense enough yet goes back to THP_UNDECIDED and is looked at again at a later claim
 * above it. Each collapse holds purge_lock, so no purge decommits part of the granule
 * meanwhile; with KITE_PURGE_DELAY_MS=0 (frees decommit at once, without that lock) the
 * mode does nothing. advised[g] for a granule's first unit g: THP_UNDECIDED, THP_LOOKING
 * (the claiming thread or the pass is looking at it), THP_PENDING, THP_COLLAPSED,
 * THP_SMALL (never again); a large run of a granule or more sets THP_RUN (advise_run). */
#ifndef THP_DENSE_MAX_MISSING
/* 4 KiB pages of a granule that may be missing (zero filled by the collapse: more resident
 * memory). 0: only a granule that is resident whole, so the huge page costs no memory. */
#define THP_DENSE_MAX_MISSING 0u
#endif

/* Granules marked THP_PENDING since the last collapse pass began (atomic); the pass takes
 * it to 0 first, so a granule marked during a pass is found by it or makes the next one
 * (T5). */
static uint32_t dense_pending;
void (*_kite_arena_collapse_hook)(void);

/* Granule c (its first unit; c + THP_UNITS <= KITE_ARENA_UNITS, as every granule the pick
 * and the pass name) has no free unit. The loop counts from 0 so that it has no bound
 * c + THP_UNITS to wrap: with one, the compiler saw a path on which c was within THP_UNITS
 * of UINT32_MAX (the loop not run, the granule taken as in use) and warned of the store to
 * advised[c] that follows on it (gcc 13's -Wstringop-overflow in dense_collapse). */
static bool granule_in_use(const kite_arena_t *a, uint32_t c) {
  for (uint32_t v = 0; v < THP_UNITS; v++)
    if (a->is_free[c + v]) return false;
  return true;
}

/* A run of order `order` is being claimed at unit u: the granule below u's, when it is
 * undecided and all in use, is to be looked at (THP_LOOKING); returns its first unit, else
 * 0. Slot lock held; the caller then calls _kite_thp_dense_check without it. */
uint32_t _kite_thp_dense_pick(kite_arena_t *a, uint32_t u, unsigned order) {
  if (_kite_opt(KITE_OPT_HUGEPAGES) != KITE_HUGEPAGES_DENSE ||
      _kite_opt(KITE_OPT_PURGE_DELAY_MS) == 0 || (1u << order) >= THP_UNITS)
    return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  /* never the arena's first granule: its guard pages (arena.c) are never resident, and a
   * first unit of 0 would read as "none" to the caller, which would leave it THP_LOOKING */
  if (g < 2 * THP_UNITS) return 0;
  uint32_t c = g - THP_UNITS;
  if (a->advised[c] != THP_UNDECIDED || !granule_in_use(a, c) || !thp_program_big()) return 0;
  a->advised[c] = THP_LOOKING; /* T4: this claim looks */
  return c;
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_thp_looking)(void *granule);
#endif
/* Granule c of a, picked by _kite_thp_dense_pick, is marked for the collapse pass if all of
 * it is resident (mincore: one system call, the one cost the request pays), else it goes
 * back to THP_UNDECIDED (looked at again at a later claim). No lock held; the caller holds a
 * run in a, so a stays mapped. */
void _kite_thp_dense_check(kite_arena_slot_t *s, kite_arena_t *a, uint32_t c) {
  void *p = _kite_page_start(&arena_pages(a)[c]);
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_thp_looking) _kite_test_hook_thp_looking(p);
#endif
  size_t len = (size_t)THP_UNITS << KITE_UNIT_SHIFT;
  bool resident = _kite_os_resident_whole(p, len, THP_DENSE_MAX_MISSING);
  _kite_lock(&s->lock);
  a->advised[c] = resident ? THP_PENDING : THP_UNDECIDED; /* T4: the look ends */
  _kite_unlock(&s->lock);
  if (resident) __atomic_fetch_add(&dense_pending, 1, __ATOMIC_SEQ_CST); /* T5 */
}

bool _kite_arena_collapse_pending(void) {
  return __atomic_load_n(&dense_pending, __ATOMIC_SEQ_CST) != 0;
}

/* Collapse granule c of the arena in slot s (marked THP_PENDING when a was there) if it is
 * still in that arena, all in use and resident. Takes purge_lock (no purge decommits part
 * of the granule meanwhile, no arena is unmapped: T6), then the slot lock; none held on
 * entry. */
static void dense_collapse(kite_arena_slot_t *s, kite_arena_t *a, uint32_t c) {
  _kite_lock(&_kite_arena_purge_lock);
  _kite_lock(&s->lock);
  bool go = __atomic_load_n(&s->arena, __ATOMIC_RELAXED) == a && a->advised[c] == THP_PENDING;
  if (go) a->advised[c] = granule_in_use(a, c) ? THP_LOOKING : THP_UNDECIDED;
  go = go && a->advised[c] == THP_LOOKING;
  _kite_unlock(&s->lock);
  if (go) {
    uint8_t state = THP_UNDECIDED; /* not resident whole any more: looked at again later */
    void *p = _kite_page_start(&arena_pages(a)[c]);
    size_t len = (size_t)THP_UNITS << KITE_UNIT_SHIFT;
    if (_kite_os_resident_whole(p, len, THP_DENSE_MAX_MISSING))
      state = _kite_os_collapse_huge(p, len) ? THP_COLLAPSED : THP_SMALL;
    _kite_lock(&s->lock);
    a->advised[c] = state;
    _kite_unlock(&s->lock);
  }
  _kite_unlock(&_kite_arena_purge_lock);
}

/* Fork child, slot lock held (fork_prepare): a granule a thread of the parent was looking
 * at has no looker here, and would stay THP_LOOKING for good (never looked at nor collapsed
 * again); it goes back to THP_UNDECIDED, looked at again at the next claim above it. Only
 * a claim's look can be in flight at a fork: the collapse pass holds purge_lock, which
 * fork_prepare takes first, for as long as it holds a granule THP_LOOKING. A granule
 * marked THP_PENDING counts in dense_pending again: the parent's pass may have taken the
 * count to 0 before the fork and not reached the granule yet, and the child's thread
 * (started at its next claim, _kite_run_alloc) would not look for it. T4, T5. */
void _kite_thp_fork_child(kite_arena_t *a) {
  for (uint32_t c = THP_UNITS; c + THP_UNITS <= KITE_ARENA_UNITS; c += THP_UNITS) {
    if (a->advised[c] == THP_LOOKING) a->advised[c] = THP_UNDECIDED;
    if (a->advised[c] == THP_PENDING) __atomic_fetch_add(&dense_pending, 1, __ATOMIC_RELAXED);
  }
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_collapse_taken)(void);
uint64_t _kite_test_collapse_taken; /* tests: granules the collapse passes took (atomic) */
#endif

size_t _kite_arena_collapse_run(void) {
  if (!__atomic_exchange_n(&dense_pending, 0, __ATOMIC_SEQ_CST)) return 0; /* T5 */
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_collapse_taken) _kite_test_hook_collapse_taken();
#endif
  size_t done = 0;
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    kite_arena_slot_t *s = &_kite_arena_slots[i];
    uint32_t marked[KITE_ARENA_UNITS / THP_UNITS], n = 0;
    /* the marks are read under the slot lock alone (an arena leaves its slot under that
     * lock before it is unmapped); purge_lock is taken for each collapse only, so decay
     * steps, which try it, are not kept out by the walk */
    _kite_lock(&s->lock);
    kite_arena_t *a = s->arena;
    for (uint32_t c = THP_UNITS; a && c + THP_UNITS <= KITE_ARENA_UNITS; c += THP_UNITS)
      if (a->advised[c] == THP_PENDING) marked[n++] = c;
    _kite_unlock(&s->lock);
    for (uint32_t k = 0; k < n; k++) dense_collapse(s, a, marked[k]);
    done += n;
#ifdef KITE_TEST_HOOKS
    __atomic_fetch_add(&_kite_test_collapse_taken, n, __ATOMIC_RELAXED);
#endif
  }
  return done;
}

/* A run of order `order` smaller than a granule is being claimed at unit u: if its granule
 * still has the advice of a large run that was there (THP_RUN), the granule goes back to 4
 * KiB pages (THP_SMALL). Returns the granule's first unit + 1 when the caller is to give
 * MADV_NOHUGEPAGE (after dropping the lock, before the run is handed out), else 0. Slot lock
 * held. */
uint32_t _kite_thp_run_unadvise(kite_arena_t *a, uint32_t u, unsigned order) {
  if ((1u << order) >= THP_UNITS || _kite_opt(KITE_OPT_HUGEPAGES) == KITE_HUGEPAGES_ARENAS)
    return 0;
  uint32_t g = u & ~(THP_UNITS - 1);
  if (a->advised[g] != THP_RUN) return 0; /* advise_run advises whole granules (T2) */
  memset(&a->advised[g], THP_SMALL, THP_UNITS);
  return g + 1;
}

/* Units [i, j) of a are being purged (slot lock held). KITE_HUGEPAGES=auto: a granule the
 * decay purges (any of it) is given back to 4 KiB pages for good: a huge page purged whole
 * would come back whole at the first touch of any unit in it (2 MiB resident for 64 KiB
 * used), and one purged in part is split anyway. dense: a collapsed granule purged in part
 * is split, and never collapsed again. */
void _kite_thp_purged(kite_arena_t *a, uint32_t i, uint32_t j, uint32_t *ui, uint32_t *uj) {
  uint32_t gi = i & ~(THP_UNITS - 1), gj = (j + THP_UNITS - 1) & ~(THP_UNITS - 1);
  *ui = gj;
  *uj = gi;
  for (uint32_t g = gi; g < gj; g += THP_UNITS) {
    if (a->advised[g] == THP_COLLAPSED) {
      a->advised[g] = THP_SMALL;
    } else if (a->advised[g] == THP_ADVISED &&
               _kite_opt(KITE_OPT_HUGEPAGES) != KITE_HUGEPAGES_ARENAS) {
      memset(&a->advised[g], THP_SMALL, THP_UNITS);
      if (g < *ui) *ui = g;
      *uj = g + THP_UNITS;
    }
  }
}

void _kite_arena_advise_run(kite_page_t *head, size_t bytes) {
  uint32_t n = (uint32_t)(bytes >> KITE_UNIT_SHIFT) & ~(THP_UNITS - 1), units = 1u << head->order;
  if (units < THP_UNITS || (n << KITE_UNIT_SHIFT) > (KITE_UNIT_SIZE << head->order)) return;
  if (!thp_program_big()) n = 0; /* none of it; what an earlier run left advised is taken back */
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a)), first = n, last = 0, ti = units, tj = 0;
  kite_arena_slot_t *s = &_kite_arena_slots[a->slot];
  _kite_lock(&s->lock);
  for (uint32_t i = 0; i < n; i++)
    /* (auto's advice stays auto's; a THP_SMALL granule is advised again: T3) */
    if (a->advised[idx + i] != THP_RUN && a->advised[idx + i] != THP_ADVISED) {
      a->advised[idx + i] = THP_RUN;
      if (i < first) first = i;
      last = i + 1;
    }
  /* the granules past the asked bytes that a freed run left advised (#19 defect 7): their
   * first touch would fault a whole 2 MiB page for the part of it this run uses */
  for (uint32_t g = n; g < units && _kite_opt(KITE_OPT_HUGEPAGES) != KITE_HUGEPAGES_ARENAS;
       g += THP_UNITS)
    if (a->advised[idx + g] == THP_RUN) {
      memset(&a->advised[idx + g], THP_SMALL, THP_UNITS);
      if (g < ti) ti = g;
      tj = g + THP_UNITS;
    }
  _kite_unlock(&s->lock);
  if (first < last)
    _kite_os_advise_huge(_kite_page_start(head + first), (size_t)(last - first) << KITE_UNIT_SHIFT);
  if (ti < tj)
    _kite_os_advise_small(_kite_page_start(head + ti), (size_t)(tj - ti) << KITE_UNIT_SHIFT);
}

#ifdef KITE_TEST_HOOKS
/* Tests: whether huge-page advice is in force on unit d, by advised[] (given for small
 * pages, for a large run, or a collapsed granule). */
bool _kite_test_arena_unit_huge(kite_page_t *d) {
  kite_arena_t *a = arena_of_page(d);
  uint32_t u = (uint32_t)(d - arena_pages(a));
  _kite_lock(&_kite_arena_slots[a->slot].lock);
  uint8_t v = a->advised[u];
  _kite_unlock(&_kite_arena_slots[a->slot].lock);
  return v == THP_ADVISED || v == THP_RUN || v == THP_COLLAPSED;
}
/* Tests: whether any granule of any arena is marked THP_LOOKING (or THP_PENDING). */
static bool thp_any(uint8_t state) {
  bool r = false;
  uint32_t hi = __atomic_load_n(&_kite_arena_slots_hi, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < hi; i++) {
    kite_arena_slot_t *s = &_kite_arena_slots[i];
    _kite_lock(&s->lock);
    for (uint32_t c = 0; s->arena && c < KITE_ARENA_UNITS; c += THP_UNITS)
      r |= s->arena->advised[c] == state;
    _kite_unlock(&s->lock);
  }
  return r;
}
bool _kite_test_thp_any_looking(void) { return thp_any(THP_LOOKING); }
bool _kite_test_thp_any_pending(void) { return thp_any(THP_PENDING); }
#endif
