/* src/purger.c -- the background purger (contract in purger.h).
 *
 * state: 0 no thread, 1 a thread is running (or being created), 2 creation failed (never
 * retried: a free must not pay for pthread_create again and again), 3 the thread is parked
 * (idle, waiting on the state word for at most PURGER_IDLE_MS). A free that left memory
 * behind calls wake(): if state is 0 it claims the start (0 -> 1) and creates the thread;
 * if it is 3 it claims the thread back (3 -> 1) and wakes it. The thread, when it finds
 * nothing to do, stores 3, then looks once more: if something arrived in between it
 * claims itself back (3 -> 1) and goes on, else it waits. When its wait has lasted
 * PURGER_IDLE_MS it leaves (3 -> 0) and exits, unless a waker claimed it first (then it
 * goes on). All these accesses are sequentially consistent (the free's update of the dirty
 * counter or of the huge cache bytes, its load of state; the thread's store of 3 and its
 * second look, through _kite_arena_dirty_bytes / _kite_huge_cache_bytes), so either the
 * free sees 3 (or 0) and wakes (or starts) a thread, or the thread sees the new memory:
 * nothing is left without a purger. The same holds for a claim that marks a granule for
 * the dense mode's collapse pass (its increment of the pending count, then its load of
 * state; wake_collapse), the one job the thread has when KITE_BACKGROUND is off. The wait
 * keeps a program whose work comes in bursts from starting a thread for each; its bound
 * keeps an idle program from holding one for good.
 *
 * KITE_BACKGROUND=idle (the default) is the same thread with two differences. It is
 * started (or woken) only by a free that leaves at least IDLE_MIN_DIRTY bytes free and
 * committed in a process with at least IDLE_MIN_COMMITTED committed, so a small program
 * never gets one. And it steps only once the program has gone quiet: no decay step of
 * anyone else's (a free of a run steps every delay/16) and no claim for IDLE_QUIET_DELAYS
 * purge delays (a program that claims reuses the free units: purged under it, they would
 * be faulted in again; one that works inside its pages claims and frees runs now and then,
 * and the period is the decay's demand window, the span its claims are weighed over).
 * While the program is busy the thread only looks, less often each time (IDLE_TICK_MS,
 * doubling up to 4 times that: each look is a wakeup). Steps run from frees and
 * claims alone left a program that stopped calling malloc after a burst holding what the
 * decay's claiming mode kept (decay.c): no step came after the last free. The thread's
 * steps roll the demand windows on, so a quiet program leaves the claiming mode within two
 * windows and its free units go along the plain curve.
 *
 * Invariants:
 *   BG1 Who moves state: 0 -> 1 a waker's CAS (purger_start), which then creates the
 *       thread; 1 -> 2 that same waker when the creation fails (2 stays, in a fork's child
 *       too); 1 -> 3 the thread (park); 3 -> 1 a waker's CAS (then a futex wake) or the
 *       thread's own; 3 -> 0 the thread's CAS when its wait ran out, after which it exits;
 *       1, 3 -> 0 a fork's child, which has no thread. So one thread at most is in its
 *       loop, but for an exiting one that already stored 0 (it only returns).
 *   BG2 No work is left without a thread: a producer's update of its work word (the
 *       dirty units, arena.c; the cache bytes, huge.c U5; the pending granules, thp.c) and
 *       its later load of state are seq_cst, as are the thread's store of 3 and its later
 *       loads of the work words (pending). In the single order of those accesses either
 *       the producer's load comes after the store of 3 (it sees 3, or 0, and wakes or
 *       starts a thread) or the thread's loads come after the update (it sees the work).
 *       In the idle mode the producer wakes only past the bounds (wake_idle), read after
 *       its update: work below them may wait for the next free that passes them.
 *   BG3 The hooks are stored with release (enable) and loaded with acquire by the
 *       producers, and are called with no lock of kite's held (arena.h's free_run_held /
 *       _done split is for a caller that holds one): wake may create the thread, and
 *       pthread_create may call malloc.
 *   BG4 The thread holds no lock of kite's between its steps; each step takes the locks
 *       the foreground takes (purge_lock tried by its decay step, huge_lock, slot locks).
 */
#define _GNU_SOURCE
#include "purger.h"
#include "arena.h"
#include "huge.h"
#include "options.h"
#include "os.h"
#include <pthread.h>
#include <signal.h>
#include <time.h>

static int state; /* atomic: see above */
static int mode;  /* atomic: KITE_BACKGROUND (KITE_BACKGROUND_*) */

#ifndef IDLE_MIN_COMMITTED
/* The idle mode starts no thread in a process with less committed (a small program). */
#define IDLE_MIN_COMMITTED ((size_t)16 << 20)
#endif
#ifndef IDLE_MIN_DIRTY
/* ... nor for less free and committed memory than this (little to give back). */
#define IDLE_MIN_DIRTY ((size_t)4 << 20)
#endif
#ifndef IDLE_TICK_MS
/* The idle mode's shortest sleep between two looks. */
#define IDLE_TICK_MS 10u
#endif
#ifndef IDLE_QUIET_DELAYS
/* Purge delays (at least IDLE_TICK_MS each) with no claim and no other step before the idle
 * mode steps: decay.c's DEMAND_WINDOWS. */
#define IDLE_QUIET_DELAYS 8u
#endif

/* The purge is the thread's job only with KITE_BACKGROUND on or idle and a positive delay;
 * the dense mode's collapse pass (arena.h) always is. */
static bool purge_on(void) {
  return __atomic_load_n(&mode, __ATOMIC_SEQ_CST) != KITE_BACKGROUND_OFF && _kite_opt(KITE_OPT_PURGE_DELAY_MS) > 0;
}

static bool pending(void) {
  return (purge_on() && (_kite_arena_dirty_bytes() != 0 || _kite_huge_cache_bytes() != 0)) ||
         _kite_arena_collapse_pending();
}

#ifndef PURGER_IDLE_MS
/* How long the thread waits for more work before it exits. */
#define PURGER_IDLE_MS 1000u
#endif

/* Nothing to do: wait for a waker (true: go on) or leave after PURGER_IDLE_MS (false: the
 * state is 0, the thread exits). */
static bool park(void) {
  uint64_t start = _kite_os_now_ms();
  __atomic_store_n(&state, 3, __ATOMIC_SEQ_CST); /* BG1; BG2: before pending()'s loads */
  for (;;) {
    int expected = 3;
    if (pending()) {
      __atomic_compare_exchange_n(&state, &expected, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      return true; /* (a failed exchange: a waker took it to 1 already: BG1) */
    }
    uint64_t waited = _kite_os_now_ms() - start;
    if (waited >= PURGER_IDLE_MS) /* 3 -> 0 and exit, unless a waker came first (BG1) */
      return !__atomic_compare_exchange_n(&state, &expected, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    _kite_os_wait(&state, 3, (uint32_t)(PURGER_IDLE_MS - waited));
    if (__atomic_load_n(&state, __ATOMIC_SEQ_CST) == 1) return true; /* woken */
  }
}

static void *purger_main(void *arg) {
  (void)arg;
  /* the idle mode: the activity reading at the last look that saw it change, when that
   * was, and the looks in a row that saw it change */
  uint64_t seen = 0, since = 0;
  unsigned busy = 0;
  for (;;) {
    if (!pending() && !park()) break;
    int64_t d = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
    bool idle = __atomic_load_n(&mode, __ATOMIC_SEQ_CST) == KITE_BACKGROUND_IDLE;
    uint64_t tick = d > 0 ? (uint64_t)d / 8 : 0;
    if (tick < 5) tick = 5;
    uint64_t look = d > IDLE_TICK_MS ? (uint64_t)d : IDLE_TICK_MS, sleep = tick;
    if (idle && !_kite_arena_collapse_pending()) sleep = IDLE_TICK_MS << busy; /* a collapse waits no longer */
    struct timespec ts = {.tv_sec = (time_t)(sleep / 1000), .tv_nsec = (long)(sleep % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    bool quiet = true;
    if (idle) { /* see above */
      uint64_t act = _kite_arena_activity(), now = _kite_os_now_ms();
      if (act != seen) {
        seen = act;
        since = now;
        busy = busy < 2 ? busy + 1 : 2;
      } else {
        busy = 0;
      }
      quiet = now - since >= look * IDLE_QUIET_DELAYS;
    }
    if (purge_on() && quiet) {
      _kite_arena_purge(false);
      _kite_huge_cache_release(false);
      if (idle) seen = _kite_arena_activity(); /* its own step is no sign of work */
    }
    _kite_arena_collapse_run();
  }
  return NULL;
}

static void purger_start(void) {
  int expected = 0;
  if (!__atomic_compare_exchange_n(&state, &expected, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
  pthread_attr_t attr;
  pthread_t t;
  int rc = pthread_attr_init(&attr);
  if (rc == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024); /* little address space under ulimit -v */
    /* the thread takes no signal meant for the program: it inherits a full mask */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&t, &attr, purger_main, NULL); /* may call malloc/free: no lock held */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
  }
  if (rc != 0) __atomic_store_n(&state, 2, __ATOMIC_SEQ_CST); /* BG1: never retried */
}

/* Start the thread, or wake it from its wait (see above; BG1). */
static void start_or_wake(void) {
  int st = __atomic_load_n(&state, __ATOMIC_SEQ_CST);
  if (st == 0) {
    purger_start();
  } else if (st == 3 && __atomic_compare_exchange_n(&state, &st, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    _kite_os_wake(&state);
  }
}

/* The hook: a free left committed free memory behind. Its load of state follows the
 * free's seq_cst update of the dirty units or the cache bytes (BG2); no lock held (BG3). */
static void wake(void) {
  int st = __atomic_load_n(&state, __ATOMIC_SEQ_CST);
  if ((st == 0 || st == 3) && _kite_opt(KITE_OPT_PURGE_DELAY_MS) > 0) start_or_wake();
}

/* The idle mode's hook: as wake, once the process is past both bounds (its loads of the
 * work words follow the free's update: BG2). */
static void wake_idle(void) {
  int st = __atomic_load_n(&state, __ATOMIC_SEQ_CST);
  if ((st == 0 || st == 3) && _kite_opt(KITE_OPT_PURGE_DELAY_MS) > 0 &&
      _kite_arena_dirty_bytes() + _kite_huge_cache_bytes() >= IDLE_MIN_DIRTY &&
      _kite_arena_committed_bytes() >= IDLE_MIN_COMMITTED)
    start_or_wake();
}

/* The hook: a claim marked a granule for the collapse pass (BG2: after the pending count's
 * seq_cst increment; BG3). */
static void wake_collapse(void) {
  int st = __atomic_load_n(&state, __ATOMIC_SEQ_CST);
  if (st == 0 || st == 3) start_or_wake();
}

void _kite_purger_enable(int m) {
  __atomic_store_n(&mode, m, __ATOMIC_SEQ_CST);
  void (*hook)(void) = m == KITE_BACKGROUND_ON ? wake : m == KITE_BACKGROUND_IDLE ? wake_idle : (void (*)(void))0;
  __atomic_store_n(&_kite_arena_dirty_hook, hook, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_arena_collapse_hook, wake_collapse, __ATOMIC_RELEASE);
}

/* The child has no thread, running or parked: the next wake starts one (BG1). */
void _kite_purger_fork_child(void) {
  int st = __atomic_load_n(&state, __ATOMIC_RELAXED);
  if (st == 1 || st == 3) __atomic_store_n(&state, 0, __ATOMIC_RELAXED);
}
