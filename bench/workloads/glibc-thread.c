/* bench/workloads/glibc-thread.c -- the shape of glibc's multi-thread malloc benchmark
 * (after the published description of benchtests' bench-malloc-thread).
 *
 * Each of THREADS threads owns a working set of SET slots (default 1024) and makes N
 * steps: pick a random slot, free its block, allocate a new one of a random size in
 * [4, 32768] bytes drawn with probability falling as 1/size (log-uniform: small blocks
 * dominate, as in most programs). Blocks never leave their thread. glibc's program runs for
 * a fixed time and reports iterations per second; this one makes a fixed number of steps,
 * so that its output can be checked, and the runner times it. What it measures: the
 * thread-local fast paths under THREADS threads, and how the allocator retires pages that
 * empty and makes them again (locks and madvise where it shares page state).
 *
 * Self-check: every block is stamped (wl_stamp) and checked before its free. The checksum
 * folds every size drawn, per thread in thread order: it depends on (threads, N, SET, seed).
 */
#include "wl.h"

#define MIN_SIZE 4
#define MAX_SIZE 32768

typedef struct slot_s {
  void *p;
  size_t n;
  uint64_t tag;
} slot_t;

typedef struct thr_s {
  long id, iters, set;
  uint64_t seed, sum;
  long bad;
} thr_t;

/* log-uniform in [MIN_SIZE, MAX_SIZE]: a power of two, then uniform up to the next one */
static size_t draw_size(wl_rng_t *r) {
  uint64_t sh = wl_rng_range(r, 2, 14);
  size_t n = (size_t)((1ull << sh) + wl_rng_below(r, 1ull << sh));
  return n > MAX_SIZE ? MAX_SIZE : n < MIN_SIZE ? MIN_SIZE : n;
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)t->id);
  slot_t *w = (slot_t *)calloc((size_t)t->set, sizeof *w);
  if (!w) wl_oom(0);
  for (long i = 0; i < t->iters; i++) {
    slot_t *s = &w[wl_rng_below(&r, (uint64_t)t->set)];
    if (s->p) {
      if (!wl_stamp_ok(s->p, s->n, s->tag)) t->bad++;
      free(s->p);
    }
    s->n = draw_size(&r);
    s->tag = ((uint64_t)t->id << 40) ^ (uint64_t)i;
    s->p = wl_malloc(s->n);
    wl_stamp(s->p, s->n, s->tag);
    t->sum = wl_mix(t->sum, s->n);
  }
  for (long k = 0; k < t->set; k++)
    if (w[k].p) {
      if (!wl_stamp_ok(w[k].p, w[k].n, w[k].tag)) t->bad++;
      free(w[k].p);
    }
  free(w);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-glibc-thread [-h] [-t THREADS] [-n STEPS] [-k SET] [-s SEED]\n"
    "  Each thread makes STEPS random replacements in its own working set of SET blocks\n"
    "  of 4..32768 bytes (probability falling as 1/size).\n"
    "  Defaults: -t 8 -n 1000000 -k 1024 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 8, .size = 1000000, .seed = 1};
  o.extra['k'] = 1024;
  wl_parse(argc, argv, &o, "k", usage);
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++)
    ts[i] = (thr_t){.id = i, .iters = o.size, .set = o.extra['k'] < 1 ? 1 : o.extra['k'],
                    .seed = o.seed};
  printf("glibc-thread: %ld threads x %ld steps, working set %ld\n", o.threads, o.size,
         o.extra['k'] < 1 ? 1 : o.extra['k']);
  return WL_RUN_AND_FINISH_MIXED(ts, o.threads, run, "blocks that lost their stamp");
}
