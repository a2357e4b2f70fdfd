/* bench/workloads/thread-rounds.c -- threads re-created every round, blocks outliving them.
 *
 * ROUNDS rounds; each round starts THREADS fresh threads and joins them. A global array of
 * THREADS x SLOTS slots holds blocks across rounds: in round r, thread i works on the slot
 * partition (i + r) mod THREADS, whose blocks were allocated by another thread of an earlier
 * round (one that has exited). Each thread does ITERS operations, each picking a random slot
 * of its partition, freeing the block there (if any) and allocating a new one (8..1024
 * bytes; one in 64 is 1..16 KiB), and leaves its partition full when it exits. What it
 * measures: heap set-up for new threads, frees of blocks whose owning thread is dead, and
 * how the allocator reclaims and reuses the memory of exited threads.
 *
 * Self-check: every block's stamp is checked before its free (by a thread of a later round
 * or by main at the end); the checksum counts blocks and bytes, which depend only on the seed.
 */
#include "wl.h"

typedef struct slot_s {
  void *p;
  uint32_t n;
  uint32_t tag;
} slot_t;

typedef struct thr_s {
  long id, round;
  uint64_t sum;
  long bad;
} thr_t;

static slot_t *g_slots;
static long g_threads, g_nslots, g_iters;
static uint64_t g_seed;

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)(t->round * 1024 + t->id));
  slot_t *part = g_slots + ((t->id + t->round) % g_threads) * g_nslots;
  for (long i = 0; i < g_iters; i++) {
    slot_t *s = &part[wl_rng_below(&r, (uint64_t)g_nslots)];
    if (s->p) {
      if (!wl_stamp_ok(s->p, s->n, s->tag)) t->bad++;
      free(s->p);
    }
    uint32_t n = wl_rng_below(&r, 64) ? (uint32_t)wl_rng_range(&r, 8, 1024)
                                       : (uint32_t)wl_rng_range(&r, 1024, 16384);
    s->p = wl_malloc(n);
    s->n = n;
    s->tag = (uint32_t)(t->round << 20) ^ (uint32_t)(t->id << 12) ^ (uint32_t)i;
    wl_stamp(s->p, n, s->tag);
    t->sum = wl_mix(t->sum, n);
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-thread-rounds [-h] [-t THREADS] [-n ROUNDS] [-k SLOTS] [-i ITERS] [-s SEED]\n"
    "  ROUNDS rounds of THREADS new threads; each replaces ITERS times a random block of\n"
    "  a slot partition (SLOTS slots) that threads of earlier rounds filled, and exits.\n"
    "  Defaults: -t 8 -n 50 -k 2000 -i 10000 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 8, .size = 50, .seed = 1};
  o.extra['k'] = 2000;
  o.extra['i'] = 10000;
  wl_parse(argc, argv, &o, "ki", usage);
  g_threads = o.threads;
  g_nslots = o.extra['k'] < 1 ? 1 : o.extra['k'];
  g_iters = o.extra['i'];
  g_seed = o.seed;
  g_slots = (slot_t *)calloc((size_t)(g_threads * g_nslots), sizeof *g_slots);
  thr_t *ts = (thr_t *)calloc((size_t)g_threads, sizeof *ts);
  if (!g_slots || !ts) wl_oom(0);
  uint64_t sum = 0;
  long bad = 0;
  double t0 = wl_now();
  for (long round = 0; round < o.size; round++) {
    for (long i = 0; i < g_threads; i++) ts[i] = (thr_t){.id = i, .round = round};
    wl_run_threads(g_threads, run, ts, sizeof *ts);
    WL_FOLD(ts, g_threads, &sum, &bad);
  }
  for (long k = 0; k < g_threads * g_nslots; k++)
    if (g_slots[k].p) {
      if (!wl_stamp_ok(g_slots[k].p, g_slots[k].n, g_slots[k].tag)) bad++;
      free(g_slots[k].p);
    }
  double t1 = wl_now();
  printf("rounds: %ld x %ld threads x %ld ops\n", o.size, g_threads, g_iters);
  free(g_slots);
  free(ts);
  return wl_finish(t1 - t0, sum, bad, "blocks with a broken stamp");
}
