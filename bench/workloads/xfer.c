/* bench/workloads/xfer.c -- producer -> consumer, one block at a time: every free is remote.
 *
 * THREADS/2 pairs (at least one) of a producer and a consumer, linked by a single-producer
 * single-consumer ring of RING slots (lock-free: one atomic index each side). The producer
 * allocates N blocks of random sizes in 8..MAX bytes, stamps each and pushes it; the
 * consumer pops each block, checks its stamp and frees it. Unlike xmalloc (batches of 64
 * through one mutex queue) the hand-off costs next to nothing, so the time is the
 * allocator's: a malloc on one thread, a free of that block on another, and whatever the
 * allocator does to get remotely freed memory back to the producer. When a ring is full
 * (empty) the producer (consumer) yields the processor.
 *
 * Self-check: every block's stamp is checked at its free; the consumers' block count and
 * byte sum equal the producers'.
 */
#include "wl.h"
#include <sched.h>
#include <stdatomic.h>

typedef struct item_s {
  void *p;
  uint32_t n;
  uint32_t tag;
} item_t;

typedef struct pair_s {
  _Alignas(64) atomic_ulong head; /* next slot the consumer reads */
  _Alignas(64) atomic_ulong tail; /* next slot the producer writes */
  _Alignas(64) item_t *ring;
  long id;
  uint64_t made, made_bytes, got, got_bytes;
  long bad;
} pair_t;

typedef struct role_s {
  pair_t *pair;
  int producer;
} role_t;

static long g_blocks, g_max, g_ring;
static uint64_t g_seed;

static void *run(void *arg) {
  role_t *ro = (role_t *)arg;
  pair_t *q = ro->pair;
  unsigned long cap = (unsigned long)g_ring;
  if (ro->producer) {
    wl_rng_t r;
    wl_rng_seed(&r, g_seed, (uint64_t)q->id);
    unsigned long tail = 0;
    for (long i = 0; i < g_blocks; i++) {
      uint32_t n = (uint32_t)wl_rng_range(&r, 8, (uint64_t)g_max);
      void *p = wl_malloc(n);
      uint32_t tag = (uint32_t)(q->id << 24) ^ (uint32_t)i;
      wl_stamp(p, n, tag);
      while (tail - atomic_load_explicit(&q->head, memory_order_acquire) == cap) sched_yield();
      q->ring[tail % cap] = (item_t){p, n, tag};
      atomic_store_explicit(&q->tail, ++tail, memory_order_release);
      q->made++;
      q->made_bytes += n;
    }
  } else {
    unsigned long head = 0;
    for (long i = 0; i < g_blocks; i++) {
      while (atomic_load_explicit(&q->tail, memory_order_acquire) == head) sched_yield();
      item_t it = q->ring[head % cap];
      atomic_store_explicit(&q->head, ++head, memory_order_release);
      if (!wl_stamp_ok(it.p, it.n, it.tag)) q->bad++;
      free(it.p);
      q->got++;
      q->got_bytes += it.n;
    }
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-xfer [-h] [-t THREADS] [-n BLOCKS] [-b MAX] [-q RING] [-s SEED]\n"
    "  THREADS/2 producer/consumer pairs (at least one): each producer allocates BLOCKS\n"
    "  blocks of 8..MAX bytes and hands them one by one through a lock-free ring of RING\n"
    "  slots to its consumer, which frees them (every free is remote).\n"
    "  Defaults: -t 2 -n 1000000 -b 256 -q 1024 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 2, .size = 1000000, .seed = 1};
  o.extra['b'] = 256;
  o.extra['q'] = 1024;
  wl_parse(argc, argv, &o, "bq", usage);
  long np = o.threads / 2 < 1 ? 1 : o.threads / 2;
  g_blocks = o.size;
  g_max = o.extra['b'] < 8 ? 8 : o.extra['b'] > (1l << 24) ? (1l << 24) : o.extra['b'];
  g_ring = o.extra['q'] < 1 ? 1 : o.extra['q'];
  g_seed = o.seed;
  pair_t *pairs = (pair_t *)aligned_alloc(64, (size_t)np * sizeof *pairs);
  role_t *roles = (role_t *)calloc((size_t)(2 * np), sizeof *roles);
  if (!pairs || !roles) wl_oom(0);
  for (long i = 0; i < np; i++) {
    memset(&pairs[i], 0, sizeof pairs[i]);
    atomic_init(&pairs[i].head, 0);
    atomic_init(&pairs[i].tail, 0);
    pairs[i].id = i;
    pairs[i].ring = (item_t *)calloc((size_t)g_ring, sizeof(item_t));
    if (!pairs[i].ring) wl_oom(0);
    roles[2 * i] = (role_t){&pairs[i], 1};
    roles[2 * i + 1] = (role_t){&pairs[i], 0};
  }
  double t0 = wl_now();
  wl_run_threads(2 * np, run, roles, sizeof *roles);
  double t1 = wl_now();
  uint64_t made = 0, bytes = 0;
  long bad = 0;
  for (long i = 0; i < np; i++) {
    if (pairs[i].made != pairs[i].got || pairs[i].made_bytes != pairs[i].got_bytes) bad++;
    bad += pairs[i].bad;
    made += pairs[i].made;
    bytes += pairs[i].made_bytes;
    free(pairs[i].ring);
  }
  printf("pairs: %ld, blocks: %" PRIu64 ", %.3f Mblocks/s\n", np, made,
         (double)made / (t1 - t0) / 1e6);
  free(pairs);
  free(roles);
  return wl_finish(t1 - t0, wl_mix(made, bytes), bad, "blocks lost or with a broken stamp");
}
