/* src/once.h -- a once-initialisation that other threads wait on without a lock, and that
 * a fork cannot leave stuck, whether kite's fork handlers run in the child or not: the
 * process secrets' draw (secret.c), the guarded sampler's region (guarded.c), the fault
 * handler's installation (os/linux.c), the options' read (options.c) and the start-up
 * stderr's recording (message.c). Layer: base (with types.h; it includes nothing of
 * kite's, so every layer may use it).
 *
 * A kite_once_t is one word, zero (KITE_ONCE_INIT) before the first use; its low two bits
 * are the state:
 *   KITE_ONCE_NONE    0  not done, and no thread is doing it
 *   KITE_ONCE_BUSY    1  one thread, the claimer, is doing it; the bits above hold the
 *                        claimer's process id (O6)
 *   KITE_ONCE_DONE    2  done: what the claimer made is published
 *   KITE_ONCE_FAILED  3  the claimer gave up (its user's failure stands: nobody tries again)
 * A use: `if (!_kite_once_done(o)) { if (_kite_once_claim(o, pid, relax)) { make it;
 * _kite_once_end(o, ok); } ... _kite_once_done(o) says whether it is there }`; the atfork
 * child handler of its owner calls _kite_once_fork_child(o, NULL or a check) (an owner done
 * before kite's handlers are registered, the options and the message stream, needs none:
 * only a fork that runs no handler can find it BUSY, O6).
 *
 * Invariants
 *   O1 Only a compare-and-swap moves NONE to BUSY (_kite_once_claim, _kite_once_try), or
 *      another process's BUSY to this one's (O6), so one thread of a process at a time does
 *      the work: the one whose swap succeeded.
 *   O2 Only that claimer ends it: BUSY to DONE or FAILED (_kite_once_end), once. DONE and
 *      FAILED are final in the process (no transition leaves them, a fork's child included).
 *   O3 What the claimer makes is read only after an acquire load that saw DONE
 *      (_kite_once_done, or the load that ends a wait): a reader that sees NONE or BUSY
 *      reads none of it. So at any moment nothing in the process holds or has used a value
 *      that is half made.
 *   O4 A thread that sees BUSY waits (a claim) until the state leaves BUSY; it never does
 *      the work itself while the claimer may still be doing it.
 *   O5 In a forked child, before the child runs anything else (its atfork child handler,
 *      while the thread that forked is the child's only thread), BUSY becomes NONE
 *      (_kite_once_fork_child), or DONE when the owner's check shows the work complete
 *      (an effect the child inherits: a handler already in place, os/linux.c). Correct:
 *      (a) the claimer was another thread of the parent (the work never forks, and the
 *      forking thread was in fork, not in the work), and fork copies only the calling
 *      thread: nobody in the child would ever end it (O2), and every later use would wait
 *      for good (O4); (b) by O3 nothing in the child holds or has used the half-made value,
 *      so dropping it breaks nothing (its owner clears what the claimer had stored, and
 *      what it mapped is its owner's to release or account for); (c) by O2 a DONE or
 *      FAILED word is kept: what it published is the child's copy, whole; (d) the child's
 *      next use claims it again (O1) and makes its own.
 *   O6 A claim that finds BUSY with another process's id takes the word over with a
 *      compare-and-swap, as its own BUSY, and does the work: the claimer is a thread of an
 *      ancestor (the word came with a fork), never of this process (its threads share its
 *      id). This is O5 for a child no handler ran in: forked before kite's handlers were
 *      registered (a constructor that runs before kite's, init.c), or by a fork that does
 *      not run them. Its argument is O5's, and the owner's clean-up is the claimer's own
 *      (what the old claimer stored is overwritten by the new one's work). The bound: an id
 *      of 0 (a test's hand on the word) is taken for this process's; and a descendant that
 *      gets the very id of the ancestor that claimed (ids are reused only after that
 *      process and every id in between are gone) would wait as for one of its own threads.
 *
 * Memory order, each step:
 *   - _kite_once_done / the wait: acquire, pairing with the end's release (O3).
 *   - the claim's swaps (NONE to BUSY, and O6's takeover): acquire, as a failure may read
 *     DONE and its caller then reads the value (C also asks a success order at least as
 *     strong as the failure's). A success needs no release: a thread that sees BUSY reads
 *     nothing the claimer wrote (O3).
 *   - _kite_once_end: release, so every store that made the value is visible to the
 *     acquire load that sees DONE.
 *   - _kite_once_fork_child: relaxed. The child has one thread then, and a thread it starts
 *     later is ordered after the reset by its creation. (What the child's memory holds of
 *     the parent's claimer's stores is irrelevant for NONE, by O3; a check that says DONE
 *     reads the inherited effect itself, and its owner says why the value is whole then.)
 */
#ifndef KITE_ONCE_H
#define KITE_ONCE_H
#include <stdbool.h>

typedef struct { int state; } kite_once_t;
enum { KITE_ONCE_NONE = 0, KITE_ONCE_BUSY = 1, KITE_ONCE_DONE = 2, KITE_ONCE_FAILED = 3 };
#define KITE_ONCE_INIT {KITE_ONCE_NONE}

/* The BUSY word of a claimer in process pid. */
static inline int _kite_once_busy_word(int pid) { return (int)(((unsigned)pid << 2) | KITE_ONCE_BUSY); }

/* The state now (acquire). */
static inline int _kite_once_state(const kite_once_t *o) { return __atomic_load_n(&o->state, __ATOMIC_ACQUIRE) & 3; }

/* Done (O3: the value is visible to the caller); the fast-path test (a DONE word is 2). */
static inline bool _kite_once_done(const kite_once_t *o) { return __atomic_load_n(&o->state, __ATOMIC_ACQUIRE) == KITE_ONCE_DONE; }

/* Claims it for a thread of process pid without waiting: true when this call moved NONE to
 * BUSY (the caller does the work and ends it), false in any other state (O1). */
static inline bool _kite_once_try(kite_once_t *o, int pid) {
  int st = KITE_ONCE_NONE;
  return __atomic_compare_exchange_n(&o->state, &st, _kite_once_busy_word(pid), false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE);
}

/* Claims it for a thread of process pid (the caller's: the os layer's getpid), or waits
 * for the claimer (O4), calling relax (when not NULL) between looks: true when the caller
 * claimed it (it does the work, then _kite_once_end), false once it is DONE or FAILED
 * (_kite_once_done tells which). A BUSY word of another process is taken over (O6). A NONE
 * seen after a wait (only a test's hand on the word makes one in a process with threads)
 * is claimed again. */
static inline bool _kite_once_claim(kite_once_t *o, int pid, void (*relax)(void)) {
  const int mine = _kite_once_busy_word(pid);
  for (;;) {
    int st = KITE_ONCE_NONE;
    if (__atomic_compare_exchange_n(&o->state, &st, mine, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) return true;
    while ((st & 3) == KITE_ONCE_BUSY) {
      if (st != mine && (st >> 2) != 0) { /* O6: an ancestor's claimer */
        if (__atomic_compare_exchange_n(&o->state, &st, mine, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) return true;
        continue; /* (st reloaded: another thread of this process took it, or it ended) */
      }
      if (relax) relax();
      st = __atomic_load_n(&o->state, __ATOMIC_ACQUIRE);
    }
    if (st != KITE_ONCE_NONE) return false;
  }
}

/* The claimer's end (O2): DONE when ok, else FAILED; release (the value is published). */
static inline void _kite_once_end(kite_once_t *o, bool ok) {
  __atomic_store_n(&o->state, ok ? KITE_ONCE_DONE : KITE_ONCE_FAILED, __ATOMIC_RELEASE);
}

/* A forked child's handler (O5): BUSY becomes DONE when finished (not NULL) says the
 * parent's claimer had completed the work, else NONE. true when the word was BUSY (the
 * caller clears what the claimer had stored when it became NONE); false, changing nothing,
 * in any other state. */
static inline bool _kite_once_fork_child(kite_once_t *o, bool (*finished)(void)) {
  if ((__atomic_load_n(&o->state, __ATOMIC_RELAXED) & 3) != KITE_ONCE_BUSY) return false;
  bool done = finished && finished();
  __atomic_store_n(&o->state, done ? KITE_ONCE_DONE : KITE_ONCE_NONE, __ATOMIC_RELAXED);
  return true;
}
#endif
