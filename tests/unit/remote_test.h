/* tests/unit/remote_test.h -- what the remote-free protocol's tests share (test_remote.c:
 * R1-R4, the claim, push and take; test_remote_abandon.c: R5, abandoned pages, their settle
 * and fork): misuse reports counted through _kite_report_invalid_hook, bounded waits and a
 * watchdog, threads parked at the protocol's test hooks (remote.h), page helpers.
 * Each test uses a size class of its own (in both files), so its blocks share one page that
 * no other test touches. */
#ifndef KITE_TEST_REMOTE_TEST_H
#define KITE_TEST_REMOTE_TEST_H
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include "types.h"
#include "page.h"
#include "remote.h"
#include "heap.h"

extern void (*_kite_report_invalid_hook)(const char *what, const void *p); /* message.h */
void _kite_test_owner_free_store(void *p); /* free.c, test builds */

/* ---- misuse reports ---- */
static int reports;
static const void *report_ptr;
static inline void count_report(const char *what, const void *p) {
  (void)what;
  __atomic_store_n(&report_ptr, p, __ATOMIC_RELAXED);
  __atomic_fetch_add(&reports, 1, __ATOMIC_SEQ_CST);
}
static inline void reports_reset(void) {
  __atomic_store_n(&reports, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&report_ptr, NULL, __ATOMIC_RELAXED);
}
static inline int reports_now(void) { return __atomic_load_n(&reports, __ATOMIC_SEQ_CST); }

/* ---- bounded waits ---- */
enum { WAIT_S = 20, TEST_S = 60 };
static const char *test_now = "";
/* SIGALRM: the running test did not end (async-signal-safe: write and _exit only) */
static inline void watchdog(int sig) {
  (void)sig;
  static const char a[] = "FAIL: test ", b[] = " did not end within 60 s (a hang: the protocol looped or lost a thread)\n";
  if (write(2, a, sizeof a - 1) < 0 || write(2, test_now, strlen(test_now)) < 0 || write(2, b, sizeof b - 1) < 0) _exit(2);
  _exit(2);
}
static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
/* Wait until *flag is set, WAIT_S seconds at most; false (with a message): it never was. */
static inline bool wait_flag(const int *flag, const char *what) {
  double end = now_s() + WAIT_S;
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST)) {
    if (now_s() > end) {
      fprintf(stderr, "%s: %s did not happen within %d s\n", test_now, what, WAIT_S);
      return false;
    }
    sched_yield();
  }
  return true;
}

/* ---- parking a thread at a hook ---- */
static __thread int park_here; /* set by the thread that is to park at its next hooks: how many */
static int parks, releases;       /* stops made, and releases given */
static int parked;                /* the flag wait_parked watches */
static inline void park(void *p) {
  (void)p;
  if (!park_here) return;
  park_here--;
  int me = __atomic_add_fetch(&parks, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&parked, 1, __ATOMIC_SEQ_CST);
  double end = now_s() + WAIT_S;
  while (__atomic_load_n(&releases, __ATOMIC_SEQ_CST) < me) {
    if (now_s() > end) {
      fprintf(stderr, "%s: a parked thread was not released within %d s\n", test_now, WAIT_S);
      abort();
    }
    sched_yield();
  }
}
/* false: the thread never reached the hook (the test fails: the path it tests was not taken) */
static inline bool wait_parked(void) {
  bool ok = wait_flag(&parked, "a freeing thread's stop at the hook");
  __atomic_store_n(&parked, 0, __ATOMIC_SEQ_CST); /* for the next stop */
  return ok;
}
static inline void unpark(void) { __atomic_add_fetch(&releases, 1, __ATOMIC_SEQ_CST); }
static inline void park_reset(void) {
  __atomic_store_n(&parks, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&releases, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&parked, 0, __ATOMIC_SEQ_CST);
}

/* ---- threads ---- */
static inline void *free_body(void *p) {
  kite_free(p);
  return NULL;
}
static inline void *free_parked2_body(void *p) { /* parks at two hooks, or at one twice */
  park_here = 2;
  kite_free(p);
  return NULL;
}
static inline void *free_parked_body(void *p) {
  park_here = 1;
  kite_free(p);
  return NULL;
}
static inline pthread_t spawn(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) abort();
  return t;
}
static inline void free_on_thread(void *p) { pthread_join(spawn(free_body, p), NULL); }

static inline kite_page_t *page_of(const void *p) { return _kite_page_head(_kite_unit_of((uintptr_t)p)); }
static inline uint32_t index_of(const kite_page_t *pg, const void *p) {
  return (uint32_t)(((const uint8_t *)p - _kite_page_block(pg, 0)) / pg->block_size);
}
static inline uint64_t tf_of(const kite_page_t *pg) { return __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE); }
static inline uint16_t entry(const kite_page_t *pg, uint32_t i) { return __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED); }
/* Blocks on pg's allocation list equal to i (owner only). */
static inline int on_free_list(const kite_page_t *pg, uint32_t i) {
  int n = 0, guard = 0;
  for (uint32_t k = pg->free; k != KITE_LINK_END && guard < KITE_PAGE_MAX_BLOCKS; k = pg->links[k], guard++) n += k == i;
  return n;
}
static inline void collect(kite_page_t *pg, uint32_t *remote) { _kite_page_collect(pg, true, false, remote); }

/* Allocate two pages' worth of blocks of size n: a and b (b may be NULL) must each come
 * back exactly once; then free them all. */
static inline void expect_handed_out_once(size_t n, const void *a, const void *b, uint32_t reserved) {
  enum { MAX = 2 * KITE_PAGE_MAX_BLOCKS };
  static void *got[MAX];
  int seen_a = 0, seen_b = 0;
  uint32_t k = 0;
  for (; k < MAX && k < 2 * reserved; k++) {
    got[k] = kite_malloc(n);
    seen_a += got[k] == a;
    seen_b += got[k] == b;
  }
  expect_int_eq(seen_a, 1);
  if (b) expect_int_eq(seen_b, 1);
  for (uint32_t j = 0; j < k; j++) kite_free(got[j]);
}

#define RUN_CHECKED(name)                 \
  do {                                    \
    test_now = #name;                     \
    alarm(TEST_S);                        \
    RUN(name);                            \
    alarm(0);                             \
    expect_int_eq((kite_check)(), 1);     \
  } while (0)


/* main's set-up: the seed, the watchdog, the report counter */
static inline void remote_test_init(void) {
  test_rng_init(1);
  signal(SIGALRM, watchdog);
  __atomic_store_n(&_kite_report_invalid_hook, count_report, __ATOMIC_RELEASE);
}

#endif
