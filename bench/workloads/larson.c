/* bench/workloads/larson.c -- server-like churn with cross-thread frees (larson-like).
 *
 * Modelled on the published description of Larson and Krishnan's benchmark: each of
 * THREADS threads owns an array of SLOTS blocks of random sizes; every operation replaces
 * a random slot (free the old block, allocate a new one of random size in [MIN, MAX]).
 * After each of EPOCHS epochs of OPS operations the threads meet at a barrier and hand
 * their arrays on (thread t takes array t+1), as a server hands connections to a new
 * worker: from then on they free blocks other threads allocated.
 *
 * Every block carries a stamp (tag, size) checked before it is freed; the checksum mixes
 * the sizes each thread allocated, in a deterministic order. Prints ops/s.
 */
#include "wl.h"

typedef struct slot_s {
  void *p;
  uint32_t n;
  uint32_t tag;
} slot_t;

typedef struct thr_s {
  long id;
  uint64_t sum;
  long bad;
} thr_t;

static slot_t **g_arrays;
static long g_threads, g_slots, g_epochs, g_ops, g_min, g_max;
static uint64_t g_seed;
static pthread_barrier_t g_bar;

static void refill(slot_t *s, wl_rng_t *r, uint32_t tag, uint64_t *sum) {
  size_t n = (size_t)wl_rng_range(r, (uint64_t)g_min, (uint64_t)g_max);
  s->p = wl_malloc(n);
  s->n = (uint32_t)n;
  s->tag = tag;
  wl_stamp(s->p, n, tag);
  *sum = wl_mix(*sum, n);
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)t->id);
  slot_t *mine = g_arrays[t->id];
  for (long k = 0; k < g_slots; k++) refill(&mine[k], &r, (uint32_t)k, &t->sum);
  pthread_barrier_wait(&g_bar);
  for (long e = 0; e < g_epochs; e++) {
    slot_t *a = g_arrays[(t->id + e) % g_threads];
    for (long i = 0; i < g_ops; i++) {
      long k = (long)wl_rng_below(&r, (uint64_t)g_slots);
      if (!wl_stamp_ok(a[k].p, a[k].n, a[k].tag)) t->bad++;
      free(a[k].p);
      refill(&a[k], &r, (uint32_t)(i ^ k), &t->sum);
    }
    pthread_barrier_wait(&g_bar);
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-larson [-h] [-t THREADS] [-n SLOTS] [-e EPOCHS] [-i OPS] [-a MIN] [-b MAX]"
    " [-s SEED]\n"
    "  Server-like churn: each thread replaces random slots of its array with new blocks of\n"
    "  MIN..MAX bytes, OPS times per epoch; between epochs the arrays move to the next\n"
    "  thread, so blocks are freed by threads that did not allocate them. Prints ops/s.\n"
    "  Defaults: -t 4 -n 1000 -e 10 -i 100000 -a 8 -b 512 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 1000, .seed = 1};
  o.extra['e'] = 10;
  o.extra['i'] = 100000;
  o.extra['a'] = 8;
  o.extra['b'] = 512;
  wl_parse(argc, argv, &o, "eiab", usage);
  g_threads = o.threads;
  g_slots = o.size < 1 ? 1 : o.size;
  g_epochs = o.extra['e'];
  g_ops = o.extra['i'];
  g_min = o.extra['a'] < 1 ? 1 : o.extra['a'];
  g_max = o.extra['b'] < g_min ? g_min : o.extra['b'];
  g_seed = o.seed;
  pthread_barrier_init(&g_bar, NULL, (unsigned)g_threads);
  g_arrays = (slot_t **)wl_malloc((size_t)g_threads * sizeof *g_arrays);
  for (long i = 0; i < g_threads; i++)
    g_arrays[i] = (slot_t *)wl_malloc((size_t)g_slots * sizeof(slot_t));
  thr_t *ts = (thr_t *)calloc((size_t)g_threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < g_threads; i++) ts[i].id = i;
  double t0 = wl_now();
  wl_run_threads(g_threads, run, ts, sizeof *ts);
  long bad = 0;
  uint64_t sum = 0;
  for (long i = 0; i < g_threads; i++) {
    for (long k = 0; k < g_slots; k++) {
      slot_t *s = &g_arrays[i][k];
      if (!wl_stamp_ok(s->p, s->n, s->tag)) bad++;
      free(s->p);
    }
    free(g_arrays[i]);
    bad += ts[i].bad;
    sum = wl_mix(sum, ts[i].sum);
  }
  double t1 = wl_now();
  double ops = (double)g_threads * (double)g_epochs * (double)g_ops;
  printf("ops: %.0f, %.3f Mops/s\n", ops, ops / (t1 - t0) / 1e6);
  free(g_arrays);
  free(ts);
  pthread_barrier_destroy(&g_bar);
  return wl_finish(t1 - t0, sum, bad, "blocks with a broken stamp");
}
