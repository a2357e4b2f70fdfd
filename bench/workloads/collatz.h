/* bench/workloads/collatz.h -- the driver shared by collatz-ivec and collatz-list (seeds 001
 * and 002: the course programs behind their timing tables).
 *
 * TOP task records, one per start value 1..TOP, each with its own mutex, its current
 * sequence (the collatz chain from the start value so far) and a done flag. THREADS threads
 * (4 by default) sweep the tasks from random offsets; a thread that claims a task (trylock)
 * whose sequence has not reached 1 makes a copy of the sequence, extends the copy by up to
 * CHUNK (50) collatz steps and frees the old one. Tasks migrate between threads, so blocks
 * are often freed by another thread than the one that allocated them. A finished task keeps
 * only its step count (its last sequence is freed).
 *
 * The includer defines the sequence type through four functions:
 *   void *seq_start(long n)                       a sequence holding just n
 *   void *seq_copy(const void *s, long len, long *bad)  a copy; counts broken links in *bad
 *   void *seq_extend(void *s, long *len, int *at_one)   up to CHUNK more steps
 *   void  seq_free(void *s)
 * and WL_NAME / WL_SHAPE for the usage text.
 *
 * Self-check: every copy verifies that each element is the collatz successor of the one
 * before it; at the end every task's step count is compared with a direct (allocation-free)
 * computation, and the answers the seeds' tables rely on are checked when TOP matches
 * (100 -> 97: 118, 1000 -> 871: 178, 10000 -> 6171: 261, 500000 -> 410011: 448).
 * Output: `Max steps is at X: S steps` (the smallest X on ties), time, checksum.
 */
#ifndef KITE_BENCH_COLLATZ_H
#define KITE_BENCH_COLLATZ_H
#include "wl.h"
#include <stdatomic.h>

#define CHUNK 50

static inline long collatz_next(long v) { return (v & 1) ? 3 * v + 1 : v / 2; }

typedef struct task_s {
  pthread_mutex_t mu;
  void *seq;         /* NULL until first claimed, and again once done */
  long len;          /* elements in seq */
  long steps;        /* valid once done */
  atomic_int done;
} task_t;

typedef struct worker_s {
  long id;
  long claims;
} worker_t;

static task_t *g_tasks;
static long g_top;
static uint64_t g_seed;
static atomic_long g_done_count;
static atomic_long g_bad;

static void process(task_t *t, long start) {
  void *s;
  if (!t->seq) {
    s = seq_start(start);
    t->len = 1;
  } else {
    long bad = 0;
    s = seq_copy(t->seq, t->len, &bad);
    if (bad) atomic_fetch_add(&g_bad, bad);
    seq_free(t->seq);
  }
  int at_one = (start == 1);
  if (!at_one) s = seq_extend(s, &t->len, &at_one);
  if (at_one) {
    t->steps = t->len - 1;
    seq_free(s);
    t->seq = NULL;
    atomic_store_explicit(&t->done, 1, memory_order_release);
    atomic_fetch_add(&g_done_count, 1);
  } else {
    t->seq = s;
  }
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  wl_rng_t rng;
  wl_rng_seed(&rng, g_seed, (uint64_t)w->id);
  while (atomic_load(&g_done_count) < g_top) {
    long off = (long)wl_rng_below(&rng, (uint64_t)g_top);
    for (long k = 0; k < g_top; k++) {
      long i = off + k;
      if (i >= g_top) i -= g_top;
      task_t *t = &g_tasks[i];
      if (atomic_load_explicit(&t->done, memory_order_acquire)) continue;
      if (pthread_mutex_trylock(&t->mu)) continue;
      if (!atomic_load_explicit(&t->done, memory_order_relaxed)) {
        process(t, i + 1);
        w->claims++;
      }
      pthread_mutex_unlock(&t->mu);
    }
  }
  return NULL;
}

static long direct_steps(long v) {
  long s = 0;
  while (v != 1) {
    v = collatz_next(v);
    s++;
  }
  return s;
}

static const char usage[] =
    "usage: " WL_NAME " [-h] [-n TOP] [-t THREADS] [-s SEED]\n"
    "  TOP task records (start values 1..TOP); THREADS threads (default 4) sweep them from\n"
    "  random offsets, claim a task under its mutex and replace its collatz sequence by a\n"
    "  copy extended by up to 50 steps (" WL_SHAPE ").\n"
    "  Prints 'Max steps is at X: S steps', the time, and a self-checked checksum.\n"
    "  Defaults: -n 10000 -t 4 -s 1. A positional TOP is accepted too (as the seeds' runs).\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 10000, .seed = 1};
  /* the seeds ran `collatz-ivec N`: accept one positional TOP as well */
  if (argc == 2 && argv[1][0] >= '0' && argv[1][0] <= '9') {
    o.size = wl_parse_long(argv[0], 'n', argv[1]);
  } else {
    wl_parse(argc, argv, &o, "", usage);
  }
  if (o.size < 1) {
    fprintf(stderr, "%s: TOP must be >= 1\n", argv[0]);
    return 2;
  }
  g_top = o.size;
  g_seed = o.seed;
  double t0 = wl_now();
  g_tasks = (task_t *)wl_malloc((size_t)g_top * sizeof(task_t));
  for (long i = 0; i < g_top; i++) {
    pthread_mutex_init(&g_tasks[i].mu, NULL);
    g_tasks[i].seq = NULL;
    g_tasks[i].len = 0;
    g_tasks[i].steps = -1;
    atomic_init(&g_tasks[i].done, 0);
  }
  worker_t *ws = (worker_t *)wl_malloc((size_t)o.threads * sizeof *ws);
  for (long i = 0; i < o.threads; i++) ws[i] = (worker_t){.id = i, .claims = 0};
  wl_run_threads(o.threads, worker, ws, sizeof *ws);
  long best = 1, best_steps = -1;
  uint64_t sum = 0;
  for (long i = 0; i < g_top; i++) {
    if (g_tasks[i].steps > best_steps) {
      best_steps = g_tasks[i].steps;
      best = i + 1;
    }
    sum += (uint64_t)g_tasks[i].steps;
    pthread_mutex_destroy(&g_tasks[i].mu);
  }
  double t1 = wl_now();
  printf("Max steps is at %ld: %ld steps\n", best, best_steps);

  long errors = atomic_load(&g_bad);
  for (long i = 0; i < g_top; i++)
    if (g_tasks[i].steps != direct_steps(i + 1) || g_tasks[i].seq) errors++;
  static const long known[][3] = {
      {100, 97, 118}, {1000, 871, 178}, {10000, 6171, 261}, {500000, 410011, 448}};
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
    if (g_top == known[k][0] && (best != known[k][1] || best_steps != known[k][2])) errors++;
  free(ws);
  free(g_tasks);
  return wl_finish(t1 - t0, sum, errors, "tasks with a wrong sequence or step count");
}
#endif
