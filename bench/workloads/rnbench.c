/* bench/workloads/rnbench.c -- random alloc/free over a slot array (seed 004's rnBench).
 *
 * THREADS threads, each with its own array of SLOTS pointers (all empty at the start). Each
 * of ITERS iterations picks a random slot: an empty slot gets a block of a random size from
 * {16, 64, 128, 256, 1024} bytes, a full one is freed. At the end each thread frees what is
 * left. Every block carries a stamp (tag, size) that is checked before it is freed.
 * Output: one timing line per thread and a total, then the self-check.
 * Seed 004's default is 4 threads x 100000 slots x 500000 iterations.
 *
 * -m 1 runs seed 004's own rnBench loop instead, as its text describes it: each iteration
 * draws an operation (alloc or free, even odds), a slot and a size from {16, 64, 128, 256}
 * (the sizes of the seed's published results); an alloc on an empty slot allocates, an
 * alloc on a full slot frees it, a free on a full slot frees it and a free on an empty slot
 * does nothing. So about a third of the slots are full in the steady state (mode 0: half),
 * and the blocks are smaller. Use it with -n 100000 -i 500000 for the seed's parameters.
 */
#include "wl.h"

static const size_t k_sizes[] = {16, 64, 128, 256, 1024};
static const size_t k_seed_sizes[] = {16, 64, 128, 256};

typedef struct thr_s {
  long id, slots, iters, mode;
  uint64_t seed;
  double seconds;
  uint64_t sum;
  long bad, allocs, frees;
} thr_t;

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)t->id);
  void **slot = (void **)calloc((size_t)t->slots, sizeof(void *));
  uint32_t *tagsz = (uint32_t *)calloc((size_t)t->slots, sizeof(uint32_t));
  if (!slot || !tagsz) wl_oom((size_t)t->slots * 12);
  double t0 = wl_now();
  for (long i = 0; i < t->iters; i++) {
    /* mode 1: the seed's operation draw; a free on an empty slot is a no-op */
    int want_alloc = t->mode ? (int)wl_rng_below(&r, 2) : 1;
    long k = (long)wl_rng_below(&r, (uint64_t)t->slots);
    if (!slot[k] && !want_alloc) continue;
    if (!slot[k]) {
      size_t n = t->mode ? k_seed_sizes[wl_rng_below(&r, 4)] : k_sizes[wl_rng_below(&r, 5)];
      slot[k] = wl_malloc(n);
      tagsz[k] = (uint32_t)n;
      wl_stamp(slot[k], n, (uint64_t)k * 7 + (uint64_t)t->id);
      t->allocs++;
      t->sum = wl_mix(t->sum, n);
    } else {
      if (!wl_stamp_ok(slot[k], tagsz[k], (uint64_t)k * 7 + (uint64_t)t->id)) t->bad++;
      free(slot[k]);
      slot[k] = NULL;
      t->frees++;
    }
  }
  for (long k = 0; k < t->slots; k++)
    if (slot[k]) {
      if (!wl_stamp_ok(slot[k], tagsz[k], (uint64_t)k * 7 + (uint64_t)t->id)) t->bad++;
      free(slot[k]);
      t->frees++;
    }
  t->seconds = wl_now() - t0;
  free(slot);
  free(tagsz);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-rnbench [-h] [-t THREADS] [-n SLOTS] [-i ITERS] [-m MODE] [-s SEED]\n"
    "  Each thread: ITERS times pick a random slot; allocate a block of 16/64/128/256/1024\n"
    "  bytes into an empty slot, free a full one. Defaults (seed 004): -t 4 -n 100000\n"
    "  -i 500000 -m 0 -s 1. Prints one line per thread, the total time and a checksum.\n"
    "  -m 1: seed 004's rnBench loop: draw alloc or free at even odds, then a slot and a\n"
    "  size of 16/64/128/256; alloc on a full slot frees it, free on an empty one is a no-op.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 100000, .seed = 1};
  o.extra['i'] = 500000;
  wl_parse(argc, argv, &o, "im", usage);
  if (o.size < 1) o.size = 1;
  if (o.extra['m'] > 1) {
    fprintf(stderr, "kite-wl-rnbench: -m is 0 or 1\n");
    fputs(usage, stderr);
    return 64;
  }
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++)
    ts[i] = (thr_t){.id = i, .slots = o.size, .iters = o.extra['i'],
                    .mode = o.extra['m'], .seed = o.seed};
  double t0 = wl_now();
  wl_run_threads(o.threads, run, ts, sizeof *ts);
  double t1 = wl_now();
  uint64_t sum = 0;
  long bad = 0;
  for (long i = 0; i < o.threads; i++) {
    printf("thread %ld: %.6f s, %ld allocs, %ld frees\n", i, ts[i].seconds, ts[i].allocs,
           ts[i].frees);
    sum = wl_mix(sum, ts[i].sum);
    if (ts[i].allocs != ts[i].frees) bad++;
    bad += ts[i].bad;
  }
  printf("total: %.6f s for %ld threads x %ld slots x %ld iterations (mode %ld)\n", t1 - t0,
         o.threads, o.size, o.extra['i'], o.extra['m']);
  free(ts);
  return wl_finish(t1 - t0, sum, bad, "blocks with a broken stamp or unbalanced counts");
}
