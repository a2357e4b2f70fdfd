/* bench/workloads/cache-thrash.c -- active false sharing (cache-thrash-like).
 *
 * After the published description of Hoard's cache-thrash: each of THREADS threads, N times,
 * allocates a small object of OBJSIZE bytes, writes every byte of it WRITES times, checks it
 * and frees it. An allocator that hands objects on the same cache line to different threads
 * makes those writes bounce the line between cores; one that keeps each thread's objects
 * apart runs at the speed of a single thread.
 *
 * Self-check: each object's final bytes are verified before the free; the checksum is the
 * sum of what the threads read back, which does not depend on the allocator.
 */
#include "wl.h"

typedef struct thr_s {
  long id, iters, writes, objsize;
  uint64_t sum;
  long bad;
  char pad[64];
} thr_t;

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  for (long i = 0; i < t->iters; i++) {
    wl_scribble(t->objsize, t->writes, t->id, &t->sum, &t->bad);
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-cache-thrash [-h] [-t THREADS] [-n ITERS] [-w WRITES] [-o OBJSIZE]"
    " [-s SEED]\n"
    "  Active false sharing: each thread ITERS times allocates an OBJSIZE-byte object,\n"
    "  writes it WRITES times, frees it. Defaults: -t 4 -n 1000 -w 20000 -o 8.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 1000, .seed = 1};
  o.extra['w'] = 20000;
  o.extra['o'] = 8;
  wl_parse(argc, argv, &o, "wo", usage);
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++)
    ts[i] = (thr_t){.id = i, .iters = o.size, .writes = o.extra['w'],
                    .objsize = o.extra['o'] < 1 ? 1 : o.extra['o']};
  return WL_RUN_AND_FINISH(ts, o.threads, run, "objects that did not keep their bytes");
}
