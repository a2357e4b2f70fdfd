/* bench/workloads/exit-rss.c -- cross-thread churn, then every thread exits: what stays resident?
 *
 * THREADS threads run ROUNDS rounds each. A round allocates a batch of BATCH blocks of
 * 16..1024 bytes (the batch record itself is a malloc'd block too), sends it to another
 * thread's inbox (a mutex-protected list), then empties its own inbox: every received block
 * goes into a ring of KEEP slots, and the block it displaces is freed (so most frees are
 * remote, and blocks outlive the round that made them). A thread that has done its rounds
 * empties its inbox once more, hands its ring to the main thread and exits; batches sent to
 * a thread that has already exited wait in its inbox. After joining every thread, the main
 * thread frees everything left (blocks of exited threads: the case an allocator must handle
 * without their owner) and reports VmHWM and VmRSS of /proc/self/status:
 *   rss_peak_mib: X    the high-water mark of the whole run
 *   rss_exit_mib: X    right after the last block is freed
 *   rss_idle_mib: X    after IDLE ms more without any allocator call
 * Those lines are measurements for bench/exit_rss.py, not part of the self-check.
 *
 * Self-check: every block's stamp is checked at its free; the count and bytes freed equal
 * those allocated (the checksum depends only on the options).
 */
#include "wl.h"

typedef struct item_s {
  void *p;
  uint32_t n;
  uint64_t tag;
} item_t;

typedef struct batch_s {
  struct batch_s *next;
  long count;
  item_t item[];
} batch_t;

typedef struct inbox_s {
  pthread_mutex_t mu;
  batch_t *first;
} inbox_t;

typedef struct thr_s {
  long id;
  uint64_t made, made_bytes, freed, freed_bytes;
  long bad;
} thr_t;

static long g_threads, g_rounds, g_batch, g_keep;
static uint64_t g_seed;
static inbox_t *g_inbox;
static inbox_t g_left = {PTHREAD_MUTEX_INITIALIZER, NULL};

static void post(inbox_t *box, batch_t *b) {
  pthread_mutex_lock(&box->mu);
  b->next = box->first;
  box->first = b;
  pthread_mutex_unlock(&box->mu);
}

static batch_t *take_all(inbox_t *box) {
  pthread_mutex_lock(&box->mu);
  batch_t *b = box->first;
  box->first = NULL;
  pthread_mutex_unlock(&box->mu);
  return b;
}

static void drop(thr_t *t, item_t *it) {
  if (!wl_stamp_ok(it->p, it->n, it->tag)) t->bad++;
  t->freed++;
  t->freed_bytes += it->n;
  free(it->p);
}

/* Frees every block of the batches in list (or keeps them in ring, displacing older ones). */
static void consume(thr_t *t, batch_t *list, item_t *ring, long *pos) {
  while (list) {
    batch_t *next = list->next;
    for (long i = 0; i < list->count; i++) {
      if (ring) {
        item_t *slot = &ring[*pos];
        if (slot->p) drop(t, slot);
        *slot = list->item[i];
        *pos = (*pos + 1) % g_keep;
      } else {
        drop(t, &list->item[i]);
      }
    }
    free(list);
    list = next;
  }
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, g_seed, (uint64_t)t->id);
  item_t *ring = g_keep ? (item_t *)calloc((size_t)g_keep, sizeof *ring) : NULL;
  if (g_keep && !ring) wl_oom(0);
  long pos = 0;
  for (long round = 0; round < g_rounds; round++) {
    batch_t *b = (batch_t *)wl_malloc(sizeof *b + (size_t)g_batch * sizeof(item_t));
    b->count = g_batch;
    for (long i = 0; i < g_batch; i++) {
      uint32_t n = (uint32_t)wl_rng_range(&r, 16, 1024);
      uint64_t tag = ((uint64_t)t->id << 40) ^ ((uint64_t)round << 20) ^ (uint64_t)i;
      b->item[i] = (item_t){wl_malloc(n), n, tag};
      wl_stamp(b->item[i].p, n, tag);
      t->made++;
      t->made_bytes += n;
    }
    long to = g_threads > 1 ? (t->id + 1 + (long)wl_rng_below(&r, (uint64_t)g_threads - 1)) % g_threads
                            : t->id;
    post(&g_inbox[to], b);
    consume(t, take_all(&g_inbox[t->id]), ring, &pos);
  }
  consume(t, take_all(&g_inbox[t->id]), ring, &pos);
  /* the ring's blocks outlive this thread: the main thread frees them */
  long live = 0;
  for (long i = 0; i < g_keep; i++) live += ring[i].p != NULL;
  if (live) {
    batch_t *b = (batch_t *)wl_malloc(sizeof *b + (size_t)live * sizeof(item_t));
    b->count = 0;
    for (long i = 0; i < g_keep; i++)
      if (ring[i].p) b->item[b->count++] = ring[i];
    post(&g_left, b);
  }
  free(ring);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-exit-rss [-h] [-t THREADS] [-n ROUNDS] [-b BATCH] [-k KEEP] [-i IDLE_MS] [-s SEED]\n"
    "  THREADS threads each send ROUNDS batches of BATCH blocks (16..1024 bytes) to other\n"
    "  threads, which keep the last KEEP blocks they received and free the rest; then all\n"
    "  threads exit, the main thread frees what is left and prints VmHWM (rss_peak_mib),\n"
    "  VmRSS at once (rss_exit_mib) and after IDLE_MS ms of idling (rss_idle_mib).\n"
    "  Defaults: -t 32 -n 200 -b 256 -k 4096 -i 1000 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 32, .size = 200, .seed = 1};
  o.extra['b'] = 256;
  o.extra['k'] = 4096;
  o.extra['i'] = 1000;
  wl_parse(argc, argv, &o, "bki", usage);
  g_threads = o.threads;
  g_rounds = o.size;
  g_batch = o.extra['b'] ? o.extra['b'] : 1;
  g_keep = o.extra['k'];
  g_seed = o.seed;
  long idle_ms = o.extra['i'];
  g_inbox = (inbox_t *)calloc((size_t)g_threads, sizeof *g_inbox);
  thr_t *ts = (thr_t *)calloc((size_t)g_threads, sizeof *ts);
  if (!g_inbox || !ts) wl_oom(0);
  for (long i = 0; i < g_threads; i++) {
    pthread_mutex_init(&g_inbox[i].mu, NULL);
    ts[i].id = i;
  }
  double t0 = wl_now();
  wl_run_threads(g_threads, run, ts, sizeof *ts);
  thr_t rest = {.id = -1};
  for (long i = 0; i < g_threads; i++) consume(&rest, take_all(&g_inbox[i]), NULL, NULL);
  consume(&rest, take_all(&g_left), NULL, NULL);
  double t1 = wl_now();
  uint64_t made = 0, made_bytes = 0, freed = rest.freed, freed_bytes = rest.freed_bytes;
  long bad = rest.bad;
  for (long i = 0; i < g_threads; i++) {
    made += ts[i].made;
    made_bytes += ts[i].made_bytes;
    freed += ts[i].freed;
    freed_bytes += ts[i].freed_bytes;
    bad += ts[i].bad;
  }
  if (made != freed || made_bytes != freed_bytes) bad++;
  free(ts);
  free(g_inbox);
  /* read before printing anything (stdio's buffer is memory too); the peak last, so it
   * covers both readings */
  double at_exit = wl_proc_mib("/proc/self/status", "VmRSS");
  struct timespec idle = {idle_ms / 1000, (idle_ms % 1000) * 1000000l};
  while (nanosleep(&idle, &idle) != 0 && errno == EINTR) {
  }
  double at_idle = wl_proc_mib("/proc/self/status", "VmRSS");
  printf("rss_peak_mib: %.1f\n", wl_proc_mib("/proc/self/status", "VmHWM"));
  printf("rss_exit_mib: %.1f\nrss_idle_mib: %.1f\n", at_exit, at_idle);
  printf("blocks: %" PRIu64 ", bytes: %" PRIu64 "\n", made, made_bytes);
  return wl_finish(t1 - t0, wl_mix(made, made_bytes), bad, "blocks lost or with a broken stamp");
}
