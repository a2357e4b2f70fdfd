/* bench/workloads/xmalloc.c -- producer/consumer cross-thread frees (xmalloc-like).
 *
 * After the published description of xmalloc-test: producer threads allocate blocks and
 * hand them to consumer threads, which free them; every free is remote. THREADS is split
 * into max(1, THREADS/2) producers and the rest (at least one) consumers. Producers fill
 * batches of BATCH (64) blocks of random sizes in [8, MAX] and push each batch into one
 * bounded queue (mutex + condition variables, QCAP batches); consumers pop batches, check
 * every block's stamp, free the blocks and the batch. N batches per producer.
 *
 * Self-check: the consumers' count and size sum equal the producers'.
 */
#include "wl.h"

#define BATCH 64
#define QCAP 256

typedef struct batch_s {
  uint32_t n[BATCH];
  uint64_t tag[BATCH];
  void *p[BATCH];
} batch_t;

static batch_t *g_q[QCAP];
static long g_head, g_tail, g_count, g_live_producers;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_not_empty = PTHREAD_COND_INITIALIZER;
static long g_batches, g_max;
static uint64_t g_seed;

typedef struct thr_s {
  long id;
  int producer;
  uint64_t blocks, bytes;
  long bad;
} thr_t;

static void push(batch_t *b) {
  pthread_mutex_lock(&g_mu);
  while (g_count == QCAP) pthread_cond_wait(&g_not_full, &g_mu);
  g_q[g_tail] = b;
  g_tail = (g_tail + 1) % QCAP;
  g_count++;
  pthread_cond_signal(&g_not_empty);
  pthread_mutex_unlock(&g_mu);
}

/* Returns NULL once the queue is empty and every producer has finished. */
static batch_t *pop(void) {
  pthread_mutex_lock(&g_mu);
  while (g_count == 0 && g_live_producers > 0) pthread_cond_wait(&g_not_empty, &g_mu);
  batch_t *b = NULL;
  if (g_count) {
    b = g_q[g_head];
    g_head = (g_head + 1) % QCAP;
    g_count--;
    pthread_cond_signal(&g_not_full);
  }
  pthread_mutex_unlock(&g_mu);
  return b;
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  if (t->producer) {
    wl_rng_t r;
    wl_rng_seed(&r, g_seed, (uint64_t)t->id);
    for (long i = 0; i < g_batches; i++) {
      batch_t *b = (batch_t *)wl_malloc(sizeof *b);
      for (int k = 0; k < BATCH; k++) {
        size_t n = (size_t)wl_rng_range(&r, 8, (uint64_t)g_max);
        b->p[k] = wl_malloc(n);
        b->n[k] = (uint32_t)n;
        b->tag[k] = ((uint64_t)t->id << 40) | ((uint64_t)i << 8) | (uint64_t)k;
        wl_stamp(b->p[k], n, b->tag[k]);
        t->blocks++;
        t->bytes += n;
      }
      push(b);
    }
    pthread_mutex_lock(&g_mu);
    g_live_producers--;
    pthread_cond_broadcast(&g_not_empty);
    pthread_mutex_unlock(&g_mu);
  } else {
    batch_t *b;
    while ((b = pop()) != NULL) {
      for (int k = 0; k < BATCH; k++) {
        if (!wl_stamp_ok(b->p[k], b->n[k], b->tag[k])) t->bad++;
        t->blocks++;
        t->bytes += b->n[k];
        free(b->p[k]);
      }
      free(b);
    }
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-xmalloc [-h] [-t THREADS] [-n BATCHES] [-b MAX] [-s SEED]\n"
    "  Producer/consumer: THREADS/2 producers (at least 1) allocate batches of 64 blocks of\n"
    "  8..MAX bytes and queue them; the other threads (at least 1) free them. BATCHES per\n"
    "  producer. Defaults: -t 4 -n 20000 -b 256 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 20000, .seed = 1};
  o.extra['b'] = 256;
  wl_parse(argc, argv, &o, "b", usage);
  long np = o.threads / 2 < 1 ? 1 : o.threads / 2;
  long nc = o.threads - np < 1 ? 1 : o.threads - np;
  g_batches = o.size;
  g_max = o.extra['b'] < 8 ? 8 : o.extra['b'];
  g_seed = o.seed;
  g_live_producers = np;
  thr_t *ts = (thr_t *)calloc((size_t)(np + nc), sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < np + nc; i++) {
    ts[i].id = i;
    ts[i].producer = i < np;
  }
  double t0 = wl_now();
  wl_run_threads(np + nc, run, ts, sizeof *ts);
  double t1 = wl_now();
  uint64_t pb = 0, pbytes = 0, cb = 0, cbytes = 0;
  long bad = 0;
  for (long i = 0; i < np + nc; i++) {
    if (ts[i].producer) {
      pb += ts[i].blocks;
      pbytes += ts[i].bytes;
    } else {
      cb += ts[i].blocks;
      cbytes += ts[i].bytes;
    }
    bad += ts[i].bad;
  }
  if (pb != cb || pbytes != cbytes) bad++;
  printf("producers: %ld, consumers: %ld, blocks: %" PRIu64 ", %.3f Mblocks/s\n", np, nc, pb,
         (double)pb / (t1 - t0) / 1e6);
  free(ts);
  return wl_finish(t1 - t0, wl_mix(pb, pbytes), bad, "blocks lost or with a broken stamp");
}
