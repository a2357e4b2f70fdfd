/* bench/workloads/churn.c -- quick multi-thread churn with ~20% remote frees.
 *
 * The allocator core's yardstick: THREADS threads, each with SLOTS slots; each of N
 * operations picks a random slot, frees the block in it (if any) and allocates a new one of
 * a uniformly random size in 8..MAX bytes (MAX = 1024 by default; -m 16000 gives the
 * 8..16000 B random-size churn of the classic cross-thread benchmarks). REMOTE percent (default 20) of those frees are
 * not done locally: the block goes into a batch for the next thread (t+1 mod THREADS), and
 * full batches of 64 are pushed on that thread's inbox (a mutex-protected stack), which
 * each thread drains and frees every 256 operations (and keeps draining after its own
 * loop until every thread has finished). So about a fifth of all frees are cross-thread,
 * in bulk, as in a pipeline or a server with worker hand-offs.
 *
 * Self-check: every block carries a stamp (tag, size) checked at its free, whichever
 * thread frees it; the checksum is the number of blocks and bytes allocated, and every
 * block allocated must have been freed exactly once by the end.
 */
#include "wl.h"
#include <stdatomic.h>

#define BATCH 64

typedef struct item_s {
  void *p;
  uint32_t n;
  uint32_t tag;
} item_t;

typedef struct batch_s {
  struct batch_s *next;
  int count;
  item_t it[BATCH];
} batch_t;

typedef struct thr_s {
  long id;
  pthread_mutex_t mu;
  batch_t *inbox;
  uint64_t allocs, frees, remote, bytes;
  long bad;
  char pad[64];
} thr_t;

static thr_t *g_thr;
static long g_threads, g_slots, g_ops, g_remote_pct, g_max;
static uint64_t g_seed;
static pthread_barrier_t g_bar;
static atomic_long g_running; /* threads still in their main loop */

static void drain(thr_t *t) {
  pthread_mutex_lock(&t->mu);
  batch_t *b = t->inbox;
  t->inbox = NULL;
  pthread_mutex_unlock(&t->mu);
  while (b) {
    batch_t *next = b->next;
    for (int i = 0; i < b->count; i++) {
      if (!wl_stamp_ok(b->it[i].p, b->it[i].n, b->it[i].tag)) t->bad++;
      free(b->it[i].p);
      t->frees++;
    }
    free(b);
    b = next;
  }
}

static void send(batch_t *b, long to) {
  thr_t *d = &g_thr[to];
  pthread_mutex_lock(&d->mu);
  b->next = d->inbox;
  d->inbox = b;
  pthread_mutex_unlock(&d->mu);
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)t->id);
  item_t *slot = (item_t *)calloc((size_t)g_slots, sizeof *slot);
  if (!slot) wl_oom(0);
  long to = (t->id + 1) % g_threads;
  batch_t *out = NULL;
  for (long i = 0; i < g_ops; i++) {
    item_t *s = &slot[wl_rng_below(&r, (uint64_t)g_slots)];
    if (s->p) {
      if ((long)wl_rng_below(&r, 100) < g_remote_pct) {
        if (!out) {
          out = (batch_t *)wl_malloc(sizeof *out);
          out->count = 0;
        }
        out->it[out->count++] = *s;
        t->remote++;
        if (out->count == BATCH) {
          send(out, to);
          out = NULL;
        }
      } else {
        if (!wl_stamp_ok(s->p, s->n, s->tag)) t->bad++;
        free(s->p);
        t->frees++;
      }
    }
    s->n = (uint32_t)wl_rng_range(&r, 8, (uint64_t)g_max);
    s->tag = (uint32_t)(t->id << 24) ^ (uint32_t)i;
    s->p = wl_malloc(s->n);
    wl_stamp(s->p, s->n, s->tag);
    t->allocs++;
    t->bytes += s->n;
    if ((i & 255) == 255) drain(t);
  }
  if (out) send(out, to);
  /* keep freeing what the others still send, so that a thread finishing early does not
   * leave its peers' remote frees piling up (that would measure the workload, not the
   * allocator) */
  atomic_fetch_sub(&g_running, 1);
  while (atomic_load(&g_running) > 0) {
    drain(t);
    usleep(50);
  }
  for (long k = 0; k < g_slots; k++)
    if (slot[k].p) {
      if (!wl_stamp_ok(slot[k].p, slot[k].n, slot[k].tag)) t->bad++;
      free(slot[k].p);
      t->frees++;
    }
  free(slot);
  pthread_barrier_wait(&g_bar); /* every batch has been sent */
  drain(t);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-churn [-h] [-t THREADS] [-n OPS] [-k SLOTS] [-r REMOTE%] [-m MAX]\n"
    "                     [-s SEED]\n"
    "  Each thread OPS times replaces a random one of SLOTS blocks by a new one of 8..MAX\n"
    "  bytes; REMOTE% of the frees are handed to the next thread, in batches of 64.\n"
    "  Defaults: -t 2 -n 1000000 -k 4096 -r 20 -m 1024 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 2, .size = 1000000, .seed = 1};
  o.extra['k'] = 4096;
  o.extra['r'] = 20;
  o.extra['m'] = 1024;
  wl_parse(argc, argv, &o, "krm", usage);
  g_max = o.extra['m'] < 8 ? 8 : o.extra['m'] > (1l << 30) ? (1l << 30) : o.extra['m'];
  g_threads = o.threads;
  g_ops = o.size;
  g_slots = o.extra['k'] < 1 ? 1 : o.extra['k'];
  g_remote_pct = o.extra['r'] > 100 ? 100 : o.extra['r'];
  g_seed = o.seed;
  pthread_barrier_init(&g_bar, NULL, (unsigned)g_threads);
  atomic_init(&g_running, g_threads);
  g_thr = (thr_t *)calloc((size_t)g_threads, sizeof *g_thr);
  if (!g_thr) wl_oom(0);
  for (long i = 0; i < g_threads; i++) {
    g_thr[i].id = i;
    pthread_mutex_init(&g_thr[i].mu, NULL);
  }
  double t0 = wl_now();
  wl_run_threads(g_threads, run, g_thr, sizeof *g_thr);
  double t1 = wl_now();
  uint64_t allocs = 0, frees = 0, remote = 0, bytes = 0;
  long bad = 0;
  for (long i = 0; i < g_threads; i++) {
    allocs += g_thr[i].allocs;
    frees += g_thr[i].frees;
    remote += g_thr[i].remote;
    bytes += g_thr[i].bytes;
    bad += g_thr[i].bad;
    if (g_thr[i].inbox) bad++;
    pthread_mutex_destroy(&g_thr[i].mu);
  }
  if (allocs != frees) bad++;
  printf("ops: %" PRIu64 ", remote frees: %.1f%%, %.3f Mops/s\n", allocs,
         frees ? 100.0 * (double)remote / (double)frees : 0.0,
         (double)allocs / (t1 - t0) / 1e6);
  free(g_thr);
  pthread_barrier_destroy(&g_bar);
  return wl_finish(t1 - t0, wl_mix(allocs, bytes), bad, "blocks lost, freed twice or broken");
}
