/* tests/integration/test_stack.c -- the stack capture (src/stack.h) through frames of
 * another object: a comparator called by glibc's qsort, so the stack runs through libc's
 * own frames (their FDEs and CIEs) between the test's functions. The walk of the unwind
 * tables must give the frames libgcc's unwinder gives (S4) on a cold cache, on a warm one,
 * and from several threads filling the caches at once (S2: TSan runs this too).
 * test_guarded.c checks the walk through the test's own frames, and its guard cases.
 */
#define _GNU_SOURCE
#include "test.h"
#include "stack.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define STACK_WALKS 1
#else
#define STACK_WALKS 0
#endif

static __thread volatile int sink; /* (per thread: the racers write it too) */

typedef struct {
  kite_stack_t walked, slow; /* the capture, and libgcc's unwinder's from the same frame */
  bool done;
} pair_t;
static __thread pair_t *current;

/* Both captures from the comparator, the first time qsort calls it. */
static int capturing_cmp(const void *a, const void *b) {
  pair_t *p = current;
  if (p && !p->done) {
    p->done = true;
    _kite_stack_capture(&p->walked, 0);
    _kite_stack_capture_libgcc(&p->slow, 0);
  }
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* qsort's caller: its return address must be in the stacks, past libc's frames. */
__attribute__((noinline)) static void sort_some(pair_t *p) {
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  current = p;
  qsort(v, 64, sizeof v[0], capturing_cmp);
  current = NULL;
  sink = v[0];
}

/* The two stacks agree past their first frame (each capture's own call site), hold a frame
 * in libc and then one in sort_some. */
static void expect_same(const pair_t *p) {
  assert_true(p->done);
  expect_uint_eq(p->walked.depth, p->slow.depth);
  assert_true(p->walked.depth >= 4);
  for (uint32_t i = 1; i < p->walked.depth && i < p->slow.depth; i++)
    if (p->walked.pc[i] != p->slow.pc[i]) {
      printf("frame %u: walk %p, libgcc %p\n", i, p->walked.pc[i], p->slow.pc[i]);
      expect_true(p->walked.pc[i] == p->slow.pc[i]);
      return;
    }
  uintptr_t qs = (uintptr_t)dlsym(RTLD_DEFAULT, "qsort");
  Dl_info libc, here;
  assert_true(qs != 0 && dladdr((void *)qs, &libc) && dladdr((void *)sort_some, &here));
  uint32_t in_libc = 0, in_sort = 0;
  for (uint32_t i = 1; i < p->walked.depth; i++) {
    Dl_info d;
    if (!dladdr((void *)((uintptr_t)p->walked.pc[i] - 1), &d)) continue;
    if (d.dli_fbase == libc.dli_fbase) in_libc++;
    uintptr_t pc = (uintptr_t)p->walked.pc[i];
    /* (2048: ASan makes sort_some long) */
    if (!in_sort && pc > (uintptr_t)sort_some && pc < (uintptr_t)sort_some + 2048) in_sort = i;
  }
  expect_true(in_libc >= 1);
  expect_true(in_sort > 1); /* after the comparator's frame and libc's */
}

static uint64_t by_libgcc(void) { return __atomic_load_n(&_kite_stack_by_libgcc, __ATOMIC_RELAXED); }

/* ---- several threads, the caches cold: run first ---- */

#define RACERS 4
static pthread_barrier_t start;
static void *racer(void *arg) {
  pair_t *p = arg;
  pthread_barrier_wait(&start);
  for (int round = 0; round < 3; round++) {
    p[round].done = false;
    sort_some(&p[round]);
  }
  return NULL;
}
TEST(stack_walk_libc_threads_cold) {
  static pair_t pairs[RACERS][3];
  pthread_t t[RACERS];
  uint64_t slow0 = by_libgcc();
  pthread_barrier_init(&start, NULL, RACERS);
  for (int i = 0; i < RACERS; i++) assert_int_eq(pthread_create(&t[i], NULL, racer, pairs[i]), 0);
  for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < RACERS; i++)
    for (int r = 0; r < 3; r++) expect_same(&pairs[i][r]);
  /* the walk made every capture itself (none went to libgcc), where it walks */
  expect_uint_eq(by_libgcc(), slow0 + (STACK_WALKS ? 0 : RACERS * 3));
}

/* ---- the main thread: its first capture through the comparator, then again ---- */

TEST(stack_walk_libc_main) {
  uint64_t slow0 = by_libgcc();
  for (int round = 0; round < 3; round++) {
    pair_t p = {0};
    sort_some(&p);
    expect_same(&p);
  }
  expect_uint_eq(by_libgcc(), slow0 + (STACK_WALKS ? 0 : 3));
}

int main(void) {
  RUN(stack_walk_libc_threads_cold);
  RUN(stack_walk_libc_main);
  expect_uint_eq(_kite_stack_reentered, 0);
  return test_main_end();
}
