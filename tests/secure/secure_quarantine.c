/* secure-quarantine: what statistics and heap walks report of blocks that wait in a
 * quarantine (freed by the program, not yet given back to the core).
 *   - kite_visit_all never reports them (they hold their freed mark);
 *   - the calling thread's own quarantine is emptied before statistics and walks, so its
 *     frees never count as live;
 *   - another running thread's quarantined blocks (at most 64 per thread) still count in
 *     the live figures of the statistics (kite_stats_print_json's "small" live_blocks),
 *     until that thread frees 64 more blocks or exits: the test checks the difference
 *     between the statistics and the walk is exactly the blocks that thread holds;
 *   - a thread whose first frees come in the last round of its thread-specific destructors
 *     (a key destructor that sets its value again each round, PTHREAD_DESTRUCTOR_ITERATIONS
 *     rounds) leaves none behind: a quarantine registered that late would never be emptied;
 *   - a thread whose first call of all is a free in that last round (so its heap is made
 *     there, and no exit destructor will retire it) fills its quarantine (64 blocks held, 6
 *     more freed through it): its blocks stay held until the next thread on its stack (the
 *     same thread pointer) retires the heap left behind, and are released then, though the
 *     C library wiped the dead thread's thread-local storage for that thread;
 *   - the same for large runs: such a thread's frees of large blocks keep their runs (at most
 *     4, guards in place) in the heap it left behind, and the next thread on its stack
 *     gives them back to the core; over 16 rounds of it the arenas' committed bytes stay
 *     bounded (runs kept for good, as once in thread-local storage, grew them by every
 *     round's runs).
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-quarantine */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { K = 10, SIZE = 3000 };
static int failures;

typedef bool (*visitor_t)(void *block, size_t usable, void *arg);
static bool (*visit_all)(visitor_t fn, void *arg);
static void (*stats_json)(int fd);

static bool count_block(void *block, size_t usable, void *arg) {
  (void)block; (void)usable;
  ++*(long *)arg;
  return true;
}

/* The statistics' JSON, read into buf (a string). */
static void stats_read(char *buf, size_t size) {
  FILE *f = tmpfile();
  if (!f) { perror("tmpfile"); exit(2); }
  stats_json(fileno(f));
  size_t n = (size_t)pread(fileno(f), buf, size - 1, 0);
  fclose(f);
  buf[n < size ? n : 0] = 0;
}

/* Live blocks of one kind by the statistics (JSON "small": {"live_blocks": N}, or
 * "large"). */
static long stats_kind_live(const char *kind) {
  char buf[8192];
  stats_read(buf, sizeof buf);
  char key[64];
  snprintf(key, sizeof key, "\"%s\": {", kind);
  char *s = strstr(buf, key);
  if (s) s = strstr(s, "\"live_blocks\": ");
  if (!s) { printf("FAIL no %s live_blocks in the statistics\n", kind); exit(1); }
  return strtol(s + strlen("\"live_blocks\": "), NULL, 10);
}
static long stats_live(void) { return stats_kind_live("small"); }

/* Bytes the arenas hold committed by the statistics (JSON "committed": N): a large run a
 * thread keeps is not live (it is held) but stays committed. */
static long stats_committed(void) {
  char buf[8192];
  stats_read(buf, sizeof buf);
  char *s = strstr(buf, "\"committed\": ");
  if (!s) { printf("FAIL no committed bytes in the statistics\n"); exit(1); }
  return strtol(s + strlen("\"committed\": "), NULL, 10);
}

static long walk_live(void) {
  long n = 0;
  visit_all(count_block, &n);
  return n;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int phase; /* 1: the thread freed its blocks; 2: it may exit */

static void *holder(void *arg) {
  (void)arg;
  void *b[K];
  for (int i = 0; i < K; i++) b[i] = malloc(SIZE);
  for (int i = 0; i < K; i++) free(b[i]); /* all K wait in this thread's quarantine */
  pthread_mutex_lock(&mu);
  phase = 1;
  pthread_cond_broadcast(&cv);
  while (phase != 2) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return NULL; /* the quarantine is emptied at thread exit */
}

/* The last-round case: blocks this thread allocated, freed only by its key destructor in
 * the last round the C library runs. */
static pthread_key_t late_key;
static void *late_blocks[K];
static int late_round;
static void late_destructor(void *v) {
  if (++late_round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(late_key, v); /* called again next round */
    return;
  }
  for (int i = 0; i < K; i++) free(late_blocks[i]);
}
static void *late_freer(void *arg) {
  (void)arg;
  for (int i = 0; i < K; i++) late_blocks[i] = malloc(SIZE);
  pthread_setspecific(late_key, late_blocks);
  return NULL;
}

/* The first-call-is-a-free case: blocks main allocated, freed by a thread that made no
 * kite call before its key destructor's last round. */
enum { FIRST_N = 70, HELD = 64 };
static pthread_key_t first_key;
static void *first_blocks[FIRST_N];
static int first_round;
static pthread_t first_self;
static void first_destructor(void *v) {
  if (++first_round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(first_key, v);
    return;
  }
  for (int i = 0; i < FIRST_N; i++) free(first_blocks[i]);
}
static void *first_freer(void *arg) {
  (void)arg;
  first_self = pthread_self();
  pthread_setspecific(first_key, (void *)1); /* no kite call before its exit */
  return NULL;
}
/* The next thread: on the first one's stack (the same pthread_self, the thread pointer),
 * its first malloc retires the heap left behind; on another, no kite call. */
static void *next_on_stack(void *arg) {
  if (!pthread_equal(pthread_self(), first_self)) return NULL;
  *(int *)arg = 1;
  free(malloc(SIZE));
  return NULL;
}

/* The kept-runs case: large blocks main allocated, freed by a thread whose first kite call
 * is that free, in its key destructor's last round. */
enum { KEPT_N = 3, KEPT_SIZE = 100000, KEPT_ROUNDS = 16 };
static pthread_key_t kept_key;
static void *kept_blocks[KEPT_N];
static int kept_round;
static void kept_destructor(void *v) {
  if (++kept_round % PTHREAD_DESTRUCTOR_ITERATIONS != 0) {
    pthread_setspecific(kept_key, v);
    return;
  }
  for (int i = 0; i < KEPT_N; i++) free(kept_blocks[i]); /* kept: small enough, the thread's own kind */
}
static void *kept_freer(void *arg) {
  (void)arg;
  first_self = pthread_self();
  pthread_setspecific(kept_key, (void *)1);
  return NULL;
}

static void expect(const char *what, long got, long want) {
  if (got == want) printf("ok   %s: %ld\n", what, got);
  else { printf("FAIL %s: %ld, want %ld\n", what, got, want); failures++; }
}

int main(void) {
  visit_all = (bool (*)(visitor_t, void *))dlsym(RTLD_DEFAULT, "kite_visit_all");
  stats_json = (void (*)(int))dlsym(RTLD_DEFAULT, "kite_stats_print_json");
  if (!visit_all || !stats_json) { printf("FAIL kite's introspection is not loaded\n"); return 1; }
  setvbuf(stdout, NULL, _IONBF, 0);

  /* stats_live's own FILE is live while the statistics are taken, not while the walk is:
   * the difference is measured against this start */
  long base = stats_live() - walk_live();

  /* this thread's frees: emptied before the statistics and the walk */
  void *mine[K];
  for (int i = 0; i < K; i++) mine[i] = malloc(SIZE);
  long w0 = walk_live();
  for (int i = 0; i < K; i++) free(mine[i]);
  expect("blocks the walk lost after this thread freed its own", w0 - walk_live(), K);
  expect("statistics minus walk after this thread's frees", stats_live() - walk_live() - base, 0);

  /* another thread's quarantine, while it runs */
  pthread_t t;
  if (pthread_create(&t, NULL, holder, NULL) != 0) { perror("pthread_create"); return 2; }
  pthread_mutex_lock(&mu);
  while (phase != 1) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  long walk = walk_live(), stats = stats_live();
  expect("another thread's quarantined blocks: statistics minus walk", stats - walk - base, K);
  pthread_mutex_lock(&mu);
  phase = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(t, NULL);
  expect("statistics minus walk after that thread exited", stats_live() - walk_live() - base, 0);

  /* frees in the last destructor round of an exiting thread */
  if (pthread_key_create(&late_key, late_destructor) != 0 || pthread_create(&t, NULL, late_freer, NULL) != 0) {
    perror("pthread_key_create/pthread_create");
    return 2;
  }
  pthread_join(t, NULL);
  expect("destructor rounds run", late_round, PTHREAD_DESTRUCTOR_ITERATIONS);
  expect("statistics minus walk after frees in the last destructor round", stats_live() - walk_live() - base, 0);

  /* a thread whose first call is a free, in the last destructor round */
  for (int i = 0; i < FIRST_N; i++) first_blocks[i] = malloc(SIZE);
  if (pthread_key_create(&first_key, first_destructor) != 0 || pthread_create(&t, NULL, first_freer, NULL) != 0) {
    perror("pthread_key_create/pthread_create");
    return 2;
  }
  pthread_join(t, NULL);
  expect("destructor rounds run (first call a free)", first_round, PTHREAD_DESTRUCTOR_ITERATIONS);
  expect("blocks held by the heap left behind by a last-round first free", stats_live() - walk_live() - base, HELD);
  int on_stack = 0;
  for (int tries = 0; tries < 8 && !on_stack; tries++) {
    if (pthread_create(&t, NULL, next_on_stack, &on_stack) != 0) { perror("pthread_create"); return 2; }
    pthread_join(t, NULL);
  }
  expect("a later thread got the dead thread's stack", on_stack, 1);
  expect("blocks held after the next thread on that stack retired the heap", stats_live() - walk_live() - base, 0);

  /* large runs freed by a thread's first call, in its last destructor round, round after
   * round: each round's runs are the core's again once the next thread on the dead thread's
   * stack retired its heap, so later rounds' mallocs take them again, and the committed
   * bytes stay bounded (kept for good, they would grow by a round's runs, KEPT_N * 128 KiB,
   * every round) */
  long large_base = stats_kind_live("large"), committed_first = 0;
  if (pthread_key_create(&kept_key, kept_destructor) != 0) { perror("pthread_key_create"); return 2; }
  int reached = 0;
  for (int r = 0; r < KEPT_ROUNDS; r++) {
    for (int i = 0; i < KEPT_N; i++) memset(kept_blocks[i] = malloc(KEPT_SIZE), 1, KEPT_SIZE);
    if (pthread_create(&t, NULL, kept_freer, NULL) != 0) { perror("pthread_create"); return 2; }
    pthread_join(t, NULL);
    on_stack = 0;
    for (int tries = 0; tries < 8 && !on_stack; tries++) {
      if (pthread_create(&t, NULL, next_on_stack, &on_stack) != 0) { perror("pthread_create"); return 2; }
      pthread_join(t, NULL);
    }
    reached += on_stack;
    if (r == 0) committed_first = stats_committed();
  }
  expect("destructor rounds run (large frees)", kept_round, KEPT_ROUNDS * PTHREAD_DESTRUCTOR_ITERATIONS);
  expect("rounds whose next thread got the dead thread's stack", reached, KEPT_ROUNDS);
  expect("large blocks live after the rounds", stats_kind_live("large") - large_base, 0);
  /* a fresh run is a random one of the lowest 4 free blocks of its order (secure_layout.h),
   * so runs given back may wait while others are carved: at most 4 rounds' worth, against
   * the 15 rounds' worth that runs kept for good would add */
  long grown = stats_committed() - committed_first, bound = 4L * KEPT_N * (128 << 10);
  printf("%s committed bytes grown after the first of %d rounds: %ld (at most %ld)\n", grown <= bound ? "ok  " : "FAIL",
         KEPT_ROUNDS, grown, bound);
  failures += grown > bound;
  if (failures) printf("FAIL: %d check(s) failed\n", failures);
  else printf("PASS\n");
  return failures ? 1 : 0;
}
