/* bench/workloads/rptest.c -- per-thread loops of allocations with cross-thread frees
 * (after the published description of rpmalloc's benchmark program).
 *
 * Each of THREADS threads keeps OPS slots and makes LOOPS passes over them: at every slot
 * it releases the block allocated there in the previous pass and allocates a new one of a
 * size drawn log-uniform in [MIN, MAX] (default 32..16000 bytes). One release in CROSS
 * (default 8) is not a free: the block is pushed onto the inbox of the next thread (a
 * lock-free list linked through the blocks), which frees it at the end of its own pass. At
 * the end every thread releases its slots, waits for the others, and empties its inbox.
 * What it measures: the allocator's thread-local paths with a steady stream of remote frees
 * arriving at every thread, and the reuse of memory between passes.
 *
 * Self-check: every block carries its size and serial (wl.h's wl_sb_*), checked at its
 * free by whichever thread frees it; the bytes freed equal the bytes allocated. The
 * checksum folds the sizes each thread drew: it depends on the options and the seed only.
 */
#include "wl.h"
#include <stdatomic.h>

#define LINK_OFF 16 /* the inbox link sits after the 16-byte head of wl_sb_fill */
#define MIN_BLOCK 32

typedef struct inbox_s {
  _Atomic(unsigned char *) head;
  char pad[64 - sizeof(void *)];
} inbox_t;

static inbox_t *g_inbox;
static pthread_barrier_t g_barrier;

typedef struct thr_s {
  long id, threads, loops, ops, cross, minsz, maxsz;
  uint64_t seed, sum, alloc_bytes, freed_bytes;
  long bad;
} thr_t;

static size_t draw_size(wl_rng_t *r, long lo, long hi) {
  int a = 63 - __builtin_clzll((unsigned long long)lo);
  int b = 63 - __builtin_clzll((unsigned long long)hi);
  uint64_t sh = wl_rng_range(r, (uint64_t)a, (uint64_t)b);
  long n = (long)((1ull << sh) + wl_rng_below(r, 1ull << sh));
  return (size_t)(n < lo ? lo : n > hi ? hi : n);
}

static void release(thr_t *t, unsigned char *p) {
  size_t n = wl_sb_check(p);
  if (n)
    t->freed_bytes += n;
  else
    t->bad++;
  free(p);
}

/* Pushes p onto thread dst's inbox (many producers, one consumer that takes all at once,
 * so the list never sees a node removed under it). */
static void push(long dst, unsigned char *p) {
  unsigned char *head = atomic_load_explicit(&g_inbox[dst].head, memory_order_relaxed);
  do memcpy(p + LINK_OFF, &head, sizeof head);
  while (!atomic_compare_exchange_weak_explicit(&g_inbox[dst].head, &head, p,
                                                memory_order_release, memory_order_relaxed));
}

static void drain(thr_t *t) {
  unsigned char *p = atomic_exchange_explicit(&g_inbox[t->id].head, NULL, memory_order_acquire);
  while (p) {
    unsigned char *next;
    memcpy(&next, p + LINK_OFF, sizeof next);
    release(t, p);
    p = next;
  }
}

/* Releases a block: to the next thread's inbox one time in CROSS, else a local free. */
static void retire(thr_t *t, wl_rng_t *r, unsigned char *p) {
  if (t->threads > 1 && wl_rng_below(r, (uint64_t)t->cross) == 0)
    push((t->id + 1) % t->threads, p);
  else
    release(t, p);
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)t->id);
  unsigned char **slot = (unsigned char **)calloc((size_t)t->ops, sizeof *slot);
  if (!slot) wl_oom(0);
  uint64_t serial = (uint64_t)t->id << 32;
  for (long loop = 0; loop < t->loops; loop++) {
    for (long i = 0; i < t->ops; i++) {
      if (slot[i]) retire(t, &r, slot[i]);
      size_t n = draw_size(&r, t->minsz, t->maxsz);
      slot[i] = (unsigned char *)wl_malloc(n);
      wl_sb_fill(slot[i], n, serial++);
      t->alloc_bytes += n;
      t->sum = wl_mix(t->sum, n);
    }
    drain(t);
  }
  for (long i = 0; i < t->ops; i++)
    if (slot[i]) retire(t, &r, slot[i]);
  free(slot);
  pthread_barrier_wait(&g_barrier); /* every push is done: the inboxes only shrink now */
  drain(t);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-rptest [-h] [-t THREADS] [-n LOOPS] [-o OPS] [-c CROSS] [-a MIN]\n"
    "                      [-m MAX] [-s SEED]\n"
    "  Each thread makes LOOPS passes over OPS slots, replacing each slot's block by one\n"
    "  of MIN..MAX bytes (log-uniform; MIN at least 32); one old block in CROSS goes to the\n"
    "  next thread, which frees it.\n"
    "  Defaults: -t 8 -n 100 -o 1000 -c 8 -a 32 -m 16000 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 8, .size = 100, .seed = 1};
  o.extra['o'] = 1000;
  o.extra['c'] = 8;
  o.extra['a'] = 32;
  o.extra['m'] = 16000;
  wl_parse(argc, argv, &o, "ocam", usage);
  long lo = o.extra['a'] < MIN_BLOCK ? MIN_BLOCK : o.extra['a'];
  long hi = o.extra['m'] < lo ? lo : o.extra['m'] > (long)WL_SB_MAX ? (long)WL_SB_MAX : o.extra['m'];
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  g_inbox = (inbox_t *)aligned_alloc(64, (size_t)o.threads * sizeof *g_inbox);
  if (!ts || !g_inbox) wl_oom(0);
  for (long i = 0; i < o.threads; i++) {
    atomic_init(&g_inbox[i].head, NULL);
    ts[i] = (thr_t){.id = i, .threads = o.threads, .loops = o.size,
                    .ops = o.extra['o'] < 1 ? 1 : o.extra['o'],
                    .cross = o.extra['c'] < 1 ? 1 : o.extra['c'], .minsz = lo, .maxsz = hi,
                    .seed = o.seed};
  }
  pthread_barrier_init(&g_barrier, NULL, (unsigned)o.threads);
  double t0 = wl_now();
  wl_run_threads(o.threads, run, ts, sizeof *ts);
  double t1 = wl_now();
  uint64_t sum = 0, alloc = 0, freed = 0;
  long bad = 0;
  for (long i = 0; i < o.threads; i++) {
    sum = wl_mix(sum, ts[i].sum);
    alloc += ts[i].alloc_bytes;
    freed += ts[i].freed_bytes;
    bad += ts[i].bad;
  }
  pthread_barrier_destroy(&g_barrier);
  free(g_inbox);
  free(ts);
  printf("rptest: %ld threads x %ld passes over %ld slots, %ld..%ld bytes, 1 in %ld remote\n",
         o.threads, o.size, o.extra['o'] < 1 ? 1 : o.extra['o'], lo, hi,
         o.extra['c'] < 1 ? 1 : o.extra['c']);
  if (!bad && freed != alloc) bad = 1;
  return wl_finish(t1 - t0, sum, bad, "blocks with a wrong stamp, or bytes freed != allocated");
}
