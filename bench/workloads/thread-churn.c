/* bench/workloads/thread-churn.c -- many short-lived threads.
 *
 * N threads in all are started in waves of THREADS. Each allocates BLOCKS blocks of
 * 16..2048 bytes, frees half of them itself and leaves the other half on a shared list
 * (a mutex-protected stack) before it exits. After each wave the main thread frees the
 * blocks the dead threads left. What it measures: per-thread heap set-up and tear-down,
 * reclaiming the heaps of exited threads, and frees of blocks whose owner has died.
 *
 * Self-check: every block's stamp is checked before its free; the checksum counts blocks
 * and bytes, which do not depend on the allocator.
 */
#include "wl.h"

typedef struct left_s {
  struct left_s *next;
  uint64_t tag;
  size_t n;
} left_t;

static left_t *g_left;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static long g_blocks;
static uint64_t g_seed;

typedef struct thr_s {
  long id;
  uint64_t bytes;
  long bad;
} thr_t;

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)t->id);
  void **p = (void **)wl_malloc((size_t)g_blocks * sizeof *p);
  size_t *n = (size_t *)wl_malloc((size_t)g_blocks * sizeof *n);
  for (long i = 0; i < g_blocks; i++) {
    n[i] = (size_t)wl_rng_range(&r, sizeof(left_t), 2048);
    p[i] = wl_malloc(n[i]);
    wl_stamp(p[i], n[i], (uint64_t)t->id * 100003 + (uint64_t)i);
    t->bytes += n[i];
  }
  left_t *mine = NULL;
  for (long i = 0; i < g_blocks; i++) {
    if (!wl_stamp_ok(p[i], n[i], (uint64_t)t->id * 100003 + (uint64_t)i)) t->bad++;
    if (i & 1) {
      free(p[i]);
    } else {
      left_t *l = (left_t *)p[i]; /* reuse the block itself as the list node */
      l->tag = (uint64_t)t->id;
      l->n = n[i];
      l->next = mine;
      mine = l;
    }
  }
  free(p);
  free(n);
  if (mine) {
    left_t *last = mine;
    while (last->next) last = last->next;
    pthread_mutex_lock(&g_mu);
    last->next = g_left;
    g_left = mine;
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-thread-churn [-h] [-t THREADS] [-n TOTAL] [-b BLOCKS] [-s SEED]\n"
    "  TOTAL short-lived threads in waves of THREADS; each allocates BLOCKS blocks of\n"
    "  16..2048 bytes, frees half and leaves half for the main thread to free after it\n"
    "  exits. Defaults: -t 4 -n 2000 -b 200 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 2000, .seed = 1};
  o.extra['b'] = 200;
  wl_parse(argc, argv, &o, "b", usage);
  g_blocks = o.extra['b'];
  g_seed = o.seed;
  long total = o.size;
  thr_t *ts = (thr_t *)calloc((size_t)(total ? total : 1), sizeof *ts);
  if (!ts) wl_oom(0);
  long bad = 0, left = 0;
  uint64_t bytes = 0;
  double t0 = wl_now();
  for (long start = 0; start < total; start += o.threads) {
    long wave = total - start < o.threads ? total - start : o.threads;
    for (long i = 0; i < wave; i++) ts[start + i].id = start + i;
    wl_run_threads(wave, run, ts + start, sizeof *ts);
    pthread_mutex_lock(&g_mu);
    left_t *l = g_left;
    g_left = NULL;
    pthread_mutex_unlock(&g_mu);
    while (l) {
      left_t *next = l->next;
      if (l->tag >= (uint64_t)total || l->n < sizeof(left_t) || l->n > 2048) bad++;
      left++;
      free(l);
      l = next;
    }
  }
  double t1 = wl_now();
  for (long i = 0; i < total; i++) {
    bad += ts[i].bad;
    bytes += ts[i].bytes;
  }
  if (left != total * (g_blocks / 2)) bad++;
  printf("threads: %ld, blocks left to main: %ld\n", total, left);
  free(ts);
  return wl_finish(t1 - t0, wl_mix((uint64_t)left, bytes), bad,
                   "blocks lost or with a broken stamp");
}
