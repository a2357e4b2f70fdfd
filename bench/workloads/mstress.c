/* bench/workloads/mstress.c -- pools of random blocks, replaced at random and passed between
 * threads, by threads re-created every round (after the published description of the
 * "mstress" memory-stress benchmark).
 *
 * ROUNDS times, THREADS threads start, each with a pool of POOL slots (10 x SCALE), and
 * make OPS (100 x SCALE) random steps each: pick a slot; 10% of the steps swap its block
 * with a random slot of one shared transfer array (an atomic exchange: the block goes to
 * whichever thread takes it next, possibly in a later round); 40% free the slot's block; the
 * rest free it and put a new block there. Sizes: 16 B..1 KiB mostly, 1..64 KiB at 5%,
 * 64 KiB..1 MiB at 0.1% (every page of a block is touched). A thread frees its pool when its
 * round ends; main frees what is left in the transfer array at the end. What it measures:
 * small and large blocks freed by other threads and by later threads, and memory that is
 * freed and needed again soon (what a purge policy must not give back too early).
 *
 * Self-check: every block carries its size and serial (wl.h's wl_sb_*); the bytes freed
 * (checked) equal the bytes allocated. The checksum folds the sizes each thread drew, so
 * it depends on (threads, scale, rounds, seed) only, never on the scheduling.
 */
#include "wl.h"
#include <stdatomic.h>

#define TRANSFER 1024

static _Atomic(void *) g_transfer[TRANSFER];

typedef struct thr_s {
  long id, round, pool, ops;
  uint64_t seed, sum, alloc_bytes, freed_bytes;
  long bad;
} thr_t;

static size_t draw_size(wl_rng_t *r) {
  uint64_t u = wl_rng_below(r, 1000);
  if (u == 0) return (size_t)wl_rng_range(r, 64u << 10, 1u << 20);
  if (u < 50) {
    uint64_t sh = wl_rng_range(r, 10, 15);
    return (size_t)((1ull << sh) + wl_rng_below(r, 1ull << sh));
  }
  uint64_t sh = wl_rng_range(r, 4, 9);
  return (size_t)((1ull << sh) + wl_rng_below(r, 1ull << sh));
}

static void release(thr_t *t, void *p) {
  if (!p) return;
  size_t n = wl_sb_check(p);
  if (n)
    t->freed_bytes += n;
  else
    t->bad++;
  free(p);
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)(t->round * 1024 + t->id));
  void **pool = (void **)calloc((size_t)t->pool, sizeof *pool);
  if (!pool) wl_oom(0);
  uint64_t serial = (uint64_t)(t->round * 1024 + t->id) << 24;
  for (long i = 0; i < t->ops; i++) {
    uint64_t what = wl_rng_below(&r, 100);
    long k = (long)wl_rng_below(&r, (uint64_t)t->pool);
    if (what < 10) {
      long j = (long)wl_rng_below(&r, TRANSFER);
      pool[k] = atomic_exchange(&g_transfer[j], pool[k]);
      continue;
    }
    release(t, pool[k]);
    pool[k] = NULL;
    if (what < 50) continue;
    size_t n = draw_size(&r);
    pool[k] = wl_malloc(n);
    wl_sb_fill(pool[k], n, serial++);
    t->alloc_bytes += n;
    t->sum = wl_mix(t->sum, n);
  }
  for (long k = 0; k < t->pool; k++) release(t, pool[k]);
  free(pool);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-mstress [-h] [-t THREADS] [-n SCALE] [-r ROUNDS] [-s SEED]\n"
    "  ROUNDS times, THREADS new threads each keep a pool of 10 x SCALE blocks and make\n"
    "  100 x SCALE random steps: replace a block (16 B..1 MiB), free one, or swap one with\n"
    "  a shared transfer array that passes blocks between threads and rounds.\n"
    "  Defaults: -t 8 -n 50 -r 10 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 8, .size = 50, .seed = 1};
  o.extra['r'] = 10;
  wl_parse(argc, argv, &o, "r", usage);
  long scale = o.size < 1 ? 1 : o.size, rounds = o.extra['r'] < 1 ? 1 : o.extra['r'];
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  uint64_t sum = 0, alloc = 0, freed = 0;
  long bad = 0;
  double t0 = wl_now();
  for (long round = 0; round < rounds; round++) {
    for (long i = 0; i < o.threads; i++)
      ts[i] = (thr_t){.id = i, .round = round, .pool = 10 * scale, .ops = 100 * scale,
                      .seed = o.seed};
    wl_run_threads(o.threads, run, ts, sizeof *ts);
    for (long i = 0; i < o.threads; i++) {
      sum = wl_mix(sum, ts[i].sum);
      alloc += ts[i].alloc_bytes;
      freed += ts[i].freed_bytes;
      bad += ts[i].bad;
    }
  }
  thr_t rest = {.id = -1};
  for (long j = 0; j < TRANSFER; j++) release(&rest, atomic_exchange(&g_transfer[j], NULL));
  double t1 = wl_now();
  free(ts);
  freed += rest.freed_bytes;
  bad += rest.bad;
  printf("mstress: %ld threads x %ld rounds, %ld steps each; %" PRIu64 " bytes allocated\n",
         o.threads, rounds, 100 * scale, alloc);
  if (!bad && freed != alloc) bad = 1;
  return wl_finish(t1 - t0, sum, bad, "blocks with a wrong stamp, or bytes freed != allocated");
}
