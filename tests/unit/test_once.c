/* tests/unit/test_once.c -- the fork-safe once-initialisation (src/once.h), alone: each
 * transition of its word and what it promises (invariants O1-O5 there).
 *   NONE -> BUSY        one claimer among racing threads (O1)
 *   BUSY -> DONE/FAILED only by the claimer's end, final (O2); a waiter sees the value
 *                       whole once it sees DONE (O3: under TSan a missing release/acquire
 *                       is a reported race)
 *   BUSY (waiters)      a claim waits while another thread has it, relaxing between looks,
 *                       and does not do the work itself (O4)
 *   BUSY -> NONE/DONE   a forked child's handler: the child claims and does the work
 *                       itself, or takes it as done when its owner's check says so; DONE,
 *                       FAILED and NONE are left as they are (O5)
 *   BUSY (another process's) -> BUSY (ours)  a child no handler ran in takes the claim
 *                       over from the ancestor's claimer; a claim of its own process's, or
 *                       of an unknown one (id 0), is waited for (O6)
 */
#define _GNU_SOURCE
#include "test.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "once.h"

#define PID ((int)getpid()) /* the caller's process, as kite's callers pass it */

static void nap(void) {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
}

TEST(claim_then_done) {
  kite_once_t o = KITE_ONCE_INIT;
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_NONE);
  expect_true(!_kite_once_done(&o));
  assert_true(_kite_once_try(&o, PID)); /* NONE -> BUSY */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_BUSY);
  expect_true(!_kite_once_try(&o, PID)); /* one claimer */
  expect_true(!_kite_once_done(&o));
  _kite_once_end(&o, true);
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_DONE);
  expect_true(_kite_once_done(&o));
  expect_true(!_kite_once_try(&o, PID)); /* final */
  expect_true(!_kite_once_claim(&o, PID, NULL));
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_DONE);
}

TEST(claim_then_failed) {
  kite_once_t o = KITE_ONCE_INIT;
  assert_true(_kite_once_claim(&o, PID, NULL)); /* NONE: claimed at once */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_BUSY);
  _kite_once_end(&o, false);
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_FAILED);
  expect_true(!_kite_once_done(&o));
  expect_true(!_kite_once_try(&o, PID)); /* final: nobody tries again */
  expect_true(!_kite_once_claim(&o, PID, NULL));
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_FAILED);
}

/* ---- a claim waits for the claimer, and sees its value whole ---- */

enum { WORDS = 64 };
static kite_once_t shared_once;
static uint64_t value[WORDS]; /* written plainly by the claimer, read plainly after DONE */
static int relaxed;           /* relax calls (the waiter's) */
static void count_relax(void) {
  __atomic_fetch_add(&relaxed, 1, __ATOMIC_RELAXED);
  nap();
}
typedef struct { int claimed, state_after; uint64_t sum; } waiter_t;
static uint64_t value_sum(void) {
  uint64_t s = 0;
  for (int i = 0; i < WORDS; i++) s += value[i];
  return s;
}
static void *waiter(void *arg) {
  waiter_t *w = arg;
  w->claimed = _kite_once_claim(&shared_once, PID, count_relax);
  w->state_after = _kite_once_state(&shared_once);
  if (!w->claimed && _kite_once_done(&shared_once)) w->sum = value_sum();
  return NULL;
}

TEST(claim_waits_for_the_claimer) {
  shared_once = (kite_once_t)KITE_ONCE_INIT;
  relaxed = 0;
  assert_true(_kite_once_try(&shared_once, PID)); /* this thread claims */
  waiter_t w = {-1, -1, 0};
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
  /* the waiter looks, sees BUSY, relaxes; it must not return while the claim stands */
  for (int i = 0; i < 10000 && __atomic_load_n(&relaxed, __ATOMIC_RELAXED) < 3; i++) nap();
  expect_true(__atomic_load_n(&relaxed, __ATOMIC_RELAXED) >= 3);
  expect_int_eq(_kite_once_state(&shared_once), KITE_ONCE_BUSY);
  uint64_t want = 0;
  for (int i = 0; i < WORDS; i++) want += value[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  _kite_once_end(&shared_once, true);
  pthread_join(t, NULL);
  expect_int_eq(w.claimed, 0); /* it waited, it did not do the work */
  expect_int_eq(w.state_after, KITE_ONCE_DONE);
  expect_uint_eq(w.sum, want);
}

/* Racing threads: one claims (and makes the value), the others wait and see it whole. */
enum { RACERS = 6 };
static int claimers, racers_go;
static void yield_relax(void) { sched_yield(); }
static void *racer(void *arg) {
  uint64_t *sum = arg;
  while (!__atomic_load_n(&racers_go, __ATOMIC_ACQUIRE)) { /* all start together */ }
  if (_kite_once_claim(&shared_once, PID, yield_relax)) {
    __atomic_fetch_add(&claimers, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < WORDS; i++) value[i] = (uint64_t)(i + 7) * 1000003u;
    _kite_once_end(&shared_once, true);
  }
  *sum = _kite_once_done(&shared_once) ? value_sum() : 0;
  return NULL;
}
TEST(one_claimer_among_racers) {
  uint64_t want = 0;
  for (int i = 0; i < WORDS; i++) want += (uint64_t)(i + 7) * 1000003u;
  for (int round = 0; round < 50; round++) {
    shared_once = (kite_once_t)KITE_ONCE_INIT;
    claimers = 0;
    racers_go = 0;
    for (int i = 0; i < WORDS; i++) value[i] = 0;
    pthread_t t[RACERS];
    uint64_t sum[RACERS];
    for (int i = 0; i < RACERS; i++) assert_int_eq(pthread_create(&t[i], NULL, racer, &sum[i]), 0);
    __atomic_store_n(&racers_go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
    expect_int_eq(claimers, 1);
    for (int i = 0; i < RACERS; i++) expect_uint_eq(sum[i], want);
  }
}

/* ---- a forked child's handler ---- */

static int finished_calls;
static bool finished_yes(void) { finished_calls++; return true; }
static bool finished_no(void) { finished_calls++; return false; }

TEST(fork_child_handler_each_state) {
  kite_once_t o = KITE_ONCE_INIT;
  finished_calls = 0;
  expect_true(!_kite_once_fork_child(&o, finished_yes)); /* NONE: left alone */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_NONE);
  assert_true(_kite_once_try(&o, PID));
  expect_true(_kite_once_fork_child(&o, NULL)); /* BUSY -> NONE */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_NONE);
  assert_true(_kite_once_try(&o, PID)); /* the child's next use claims it */
  expect_true(_kite_once_fork_child(&o, finished_no)); /* BUSY, not finished -> NONE */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_NONE);
  assert_true(_kite_once_try(&o, PID));
  expect_true(_kite_once_fork_child(&o, finished_yes)); /* BUSY, finished -> DONE */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_DONE);
  expect_int_eq(finished_calls, 2); /* asked only for BUSY */
  expect_true(!_kite_once_fork_child(&o, finished_no)); /* DONE: kept */
  expect_int_eq(_kite_once_state(&o), KITE_ONCE_DONE);
  kite_once_t f = KITE_ONCE_INIT;
  assert_true(_kite_once_try(&f, PID));
  _kite_once_end(&f, false);
  expect_true(!_kite_once_fork_child(&f, finished_yes)); /* FAILED: kept */
  expect_int_eq(_kite_once_state(&f), KITE_ONCE_FAILED);
  expect_int_eq(finished_calls, 2);
}

/* A real fork while the once is BUSY (this thread claimed it in the parent: in the child
 * it stands for a thread that is not there). The child's handler, registered as kite's
 * are, takes it back to NONE; the child claims it, makes its own value and ends it, without
 * waiting for anyone (a hang ends as SIGALRM). The parent's claim stands and ends as usual. */
static kite_once_t fork_once = KITE_ONCE_INIT;
static int fork_value;
static void child_handler(void) { _kite_once_fork_child(&fork_once, NULL); }
static int run_child(int (*fn)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    _exit(fn());
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
  if (!WIFEXITED(st)) fprintf(stderr, "  child status 0x%x (SIGALRM %d: it hung)\n", st, SIGALRM);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}
static int child_mid_claim(void) {
  if (_kite_once_state(&fork_once) != KITE_ONCE_NONE) return 1;
  if (!_kite_once_claim(&fork_once, (int)getpid(), NULL)) return 2;
  fork_value = 2;
  _kite_once_end(&fork_once, true);
  return _kite_once_done(&fork_once) && fork_value == 2 ? 0 : 3;
}
static int child_after_done(void) {
  if (_kite_once_claim(&fork_once, (int)getpid(), NULL)) return 1; /* DONE kept: nothing to do again */
  return _kite_once_done(&fork_once) && fork_value == 1 ? 0 : 2;
}
TEST(fork_mid_claim) {
  assert_true(_kite_once_try(&fork_once, (int)getpid())); /* as a parent thread inside the work */
  expect_int_eq(run_child(child_mid_claim), 0);
  expect_int_eq(_kite_once_state(&fork_once), KITE_ONCE_BUSY); /* the parent's claim stands */
  fork_value = 1;
  _kite_once_end(&fork_once, true);
  expect_int_eq(run_child(child_after_done), 0);
  expect_true(_kite_once_done(&fork_once) && fork_value == 1);
}

/* A BUSY word of another process (an ancestor's claimer, the word copied by a fork no
 * handler ran in) is taken over; one of this process's, or of id 0, is waited for. */
static kite_once_t foreign_once;
static int child_takes_over(void) {
  if (!_kite_once_claim(&foreign_once, PID, NULL)) return 1; /* taken over: this caller does the work */
  if (foreign_once.state != _kite_once_busy_word(PID)) return 2;
  _kite_once_end(&foreign_once, true);
  return _kite_once_done(&foreign_once) ? 0 : 3;
}
TEST(claim_takes_over_another_processs_busy) {
  /* as a claimer in another process: process 1's, which the child below never is (its
   * parent's id + 1 may well be its own) */
  assert_true(_kite_once_try(&foreign_once, 1));
  expect_int_eq(_kite_once_state(&foreign_once), KITE_ONCE_BUSY);
  expect_true(!_kite_once_try(&foreign_once, PID)); /* try never takes over */
  expect_int_eq(run_child(child_takes_over), 0); /* (a claim that waited would hang: SIGALRM) */
  expect_true(_kite_once_fork_child(&(kite_once_t){_kite_once_busy_word(1)}, NULL)); /* O5 sees any BUSY */
  /* this process's claim (another thread of it) and id 0 are waited for, not taken over */
  shared_once = (kite_once_t){_kite_once_busy_word(0)};
  relaxed = 0;
  waiter_t w = {-1, -1, 0};
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
  for (int i = 0; i < 10000 && __atomic_load_n(&relaxed, __ATOMIC_RELAXED) < 3; i++) nap();
  expect_int_eq(__atomic_load_n(&shared_once.state, __ATOMIC_RELAXED), _kite_once_busy_word(0)); /* still the unknown claimer's */
  __atomic_store_n(&shared_once.state, _kite_once_busy_word(PID), __ATOMIC_RELAXED);
  for (int i = 0, r = __atomic_load_n(&relaxed, __ATOMIC_RELAXED); i < 10000 && __atomic_load_n(&relaxed, __ATOMIC_RELAXED) < r + 3; i++) nap();
  expect_int_eq(__atomic_load_n(&shared_once.state, __ATOMIC_RELAXED), _kite_once_busy_word(PID)); /* still this process's claimer's */
  for (int i = 0; i < WORDS; i++) value[i] = 5;
  _kite_once_end(&shared_once, true);
  pthread_join(t, NULL);
  expect_int_eq(w.claimed, 0);
  expect_uint_eq(w.sum, 5 * WORDS);
}

int main(void) {
  pthread_atfork(NULL, NULL, child_handler);
  RUN(claim_then_done);
  RUN(claim_then_failed);
  RUN(claim_waits_for_the_claimer);
  RUN(one_claimer_among_racers);
  RUN(fork_child_handler_each_state);
  RUN(fork_mid_claim);
  RUN(claim_takes_over_another_processs_busy);
  return test_main_end();
}
