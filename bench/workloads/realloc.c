/* bench/workloads/realloc.c -- realloc growth of many vectors.
 *
 * Each of THREADS threads grows VECTORS vectors of 32-bit elements side by side, round
 * robin, each append adding 1..16 elements and calling realloc to the exact new length
 * (the pattern of string builders and naive dynamic arrays, not capacity doubling), until
 * every vector holds LEN elements; then it checks every element and frees them all. ROUNDS
 * times. Interleaving the vectors keeps neighbours from growing in place for free, so the
 * allocator's in-place growth, size-class slack and copy cost all show.
 *
 * Self-check: element i of vector v holds a function of (thread, v, i); checksum of sums.
 */
#include "wl.h"

typedef struct thr_s {
  long id, vectors, len, rounds;
  uint64_t seed, sum;
  long bad;
} thr_t;

static inline uint32_t elem(long t, long v, long i) {
  return (uint32_t)(t * 2654435761u) ^ (uint32_t)(v * 40503u) ^ (uint32_t)i;
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)t->id);
  uint32_t **vec = (uint32_t **)wl_malloc((size_t)t->vectors * sizeof *vec);
  long *len = (long *)wl_malloc((size_t)t->vectors * sizeof *len);
  for (long round = 0; round < t->rounds; round++) {
    for (long v = 0; v < t->vectors; v++) {
      vec[v] = NULL;
      len[v] = 0;
    }
    long growing = t->vectors;
    while (growing) {
      growing = 0;
      for (long v = 0; v < t->vectors; v++) {
        if (len[v] >= t->len) continue;
        long add = (long)wl_rng_range(&r, 1, 16);
        if (len[v] + add > t->len) add = t->len - len[v];
        vec[v] = (uint32_t *)wl_realloc(vec[v], (size_t)(len[v] + add) * sizeof(uint32_t));
        for (long i = len[v]; i < len[v] + add; i++) vec[v][i] = elem(t->id, v, i);
        len[v] += add;
        if (len[v] < t->len) growing++;
      }
    }
    for (long v = 0; v < t->vectors; v++) {
      for (long i = 0; i < t->len; i++) {
        if (vec[v][i] != elem(t->id, v, i)) t->bad++;
        t->sum += vec[v][i];
      }
      free(vec[v]);
    }
  }
  free(vec);
  free(len);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-realloc [-h] [-t THREADS] [-n VECTORS] [-l LEN] [-r ROUNDS] [-s SEED]\n"
    "  Each thread grows VECTORS vectors round robin by realloc (1..16 elements at a time)\n"
    "  to LEN 4-byte elements, checks and frees them; ROUNDS times.\n"
    "  Defaults: -t 2 -n 1000 -l 2000 -r 4 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 2, .size = 1000, .seed = 1};
  o.extra['l'] = 2000;
  o.extra['r'] = 4;
  wl_parse(argc, argv, &o, "lr", usage);
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++)
    ts[i] = (thr_t){.id = i, .vectors = o.size < 1 ? 1 : o.size, .len = o.extra['l'] < 1 ? 1 : o.extra['l'],
                    .rounds = o.extra['r'], .seed = o.seed};
  return WL_RUN_AND_FINISH(ts, o.threads, run, "vector elements lost by realloc");
}
