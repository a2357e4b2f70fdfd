/* bench/workloads/phases.c -- a program whose memory use changes phase, for RSS over time.
 *
 * bench/rss_timeline.py samples this program's resident set every 10 ms under each
 * allocator. The phases (each announced on stdout as `phase NAME T` with T the seconds since
 * start, flushed at once, so the sampler can mark them):
 *   build     the main thread allocates MIB MiB of small blocks (16..256 bytes)
 *   free      it frees 90% of them, in random order (the survivors pin scattered pages)
 *   idle      it sleeps IDLE ms (memory an allocator returns only from inside malloc or
 *             free stays resident here)
 *   rebuild   it allocates MIB/2 MiB of medium blocks (512..8192 bytes): another size mix
 *   threads   THREADS threads each allocate MIB/(2*THREADS) MiB of 32..1024-byte blocks,
 *             free half and leave the other half to main, and exit; main frees those
 *   idle2     it sleeps IDLE ms
 *   teardown  it frees everything left, then sleeps IDLE ms before exiting
 * Self-check: every block carries a stamp checked before its free; the checksum counts the
 * blocks and bytes, which depend only on the options.
 */
#include "wl.h"

typedef struct blk_s {
  void *p;
  uint32_t n;
  uint32_t tag;
} blk_t;

typedef struct vec_s {
  blk_t *b;
  size_t n, cap;
} vec_t;

typedef struct thr_s {
  long id;
  size_t bytes;
  vec_t left;
  uint64_t sum;
  long bad;
} thr_t;

static double g_t0;
static uint64_t g_seed;

static void phase(const char *name) {
  printf("phase %s %.4f\n", name, wl_now() - g_t0);
  fflush(stdout);
}

static void push(vec_t *v, blk_t b) {
  if (v->n == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 1024;
    v->b = (blk_t *)wl_realloc(v->b, v->cap * sizeof *v->b);
  }
  v->b[v->n++] = b;
}

static blk_t make(wl_rng_t *r, uint32_t lo, uint32_t hi, uint32_t tag) {
  uint32_t n = (uint32_t)wl_rng_range(r, lo, hi);
  blk_t b = {wl_malloc(n), n, tag};
  wl_stamp(b.p, n, tag);
  return b;
}

static long drop(blk_t *b) {
  long bad = !wl_stamp_ok(b->p, b->n, b->tag);
  free(b->p);
  b->p = NULL;
  return bad;
}

static void fill(vec_t *v, wl_rng_t *r, size_t bytes, uint32_t lo, uint32_t hi, uint64_t *sum) {
  size_t got = 0;
  while (got < bytes) {
    blk_t b = make(r, lo, hi, (uint32_t)(v->n * 2654435761u));
    got += b.n;
    *sum = wl_mix(*sum, b.n);
    push(v, b);
  }
}

static void *thread_phase(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)t->id + 100);
  vec_t mine = {0};
  fill(&mine, &r, t->bytes, 32, 1024, &t->sum);
  for (size_t i = 0; i < mine.n; i++) {
    if (i & 1) push(&t->left, mine.b[i]);
    else t->bad += drop(&mine.b[i]);
  }
  free(mine.b);
  return NULL;
}

static void idle(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000l};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static const char usage[] =
    "usage: kite-wl-phases [-h] [-n MIB] [-t THREADS] [-i IDLE_MS] [-s SEED]\n"
    "  Phases, each announced as `phase NAME SECONDS`: build MIB MiB of 16..256-byte blocks,\n"
    "  free 90%, idle, rebuild MIB/2 MiB of 512..8192-byte blocks, THREADS threads that\n"
    "  allocate and exit, idle, tear down, idle. For bench/rss_timeline.py.\n"
    "  Defaults: -n 256 -t 16 -i 300 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 16, .size = 256, .seed = 1};
  o.extra['i'] = 300;
  wl_parse(argc, argv, &o, "i", usage);
  size_t mib = (size_t)(o.size < 1 ? 1 : o.size) << 20;
  long idle_ms = o.extra['i'];
  g_seed = o.seed;
  wl_rng_t r;
  wl_rng_seed(&r, o.seed, 0);
  uint64_t sum = 0;
  long bad = 0;
  vec_t a = {0}, b = {0};
  g_t0 = wl_now();
  phase("build");
  fill(&a, &r, mib, 16, 256, &sum);
  phase("free");
  for (size_t i = 0; i < a.n; i++) { /* 90% go, in an order unrelated to allocation */
    blk_t *x = &a.b[(i * 7919) % a.n];
    if (x->p && wl_rng_below(&r, 10)) bad += drop(x);
  }
  phase("idle");
  idle(idle_ms);
  phase("rebuild");
  fill(&b, &r, mib / 2, 512, 8192, &sum);
  phase("threads");
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++) {
    ts[i].id = i;
    ts[i].bytes = mib / 2 / (size_t)o.threads;
  }
  wl_run_threads(o.threads, thread_phase, ts, sizeof *ts);
  for (long i = 0; i < o.threads; i++) {
    for (size_t k = 0; k < ts[i].left.n; k++) bad += drop(&ts[i].left.b[k]);
    free(ts[i].left.b);
    sum = wl_mix(sum, ts[i].sum);
    bad += ts[i].bad;
  }
  free(ts);
  phase("idle2");
  idle(idle_ms);
  phase("teardown");
  for (size_t i = 0; i < a.n; i++)
    if (a.b[i].p) bad += drop(&a.b[i]);
  for (size_t i = 0; i < b.n; i++) bad += drop(&b.b[i]);
  free(a.b);
  free(b.b);
  idle(idle_ms);
  phase("end");
  return wl_finish(wl_now() - g_t0, sum, bad, "blocks with a broken stamp");
}
