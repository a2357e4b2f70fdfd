/* bench/workloads/cache-scratch.c -- passive false sharing (cache-scratch-like).
 *
 * After the published description of Hoard's cache-scratch: the main thread allocates one
 * small object per thread (so they likely sit on one cache line) and hands one to each
 * thread. Each thread frees its object, then N times allocates an object of the same size,
 * writes it WRITES times, checks it and frees it. An allocator that gives the freed slot
 * back to the thread that freed it keeps the threads writing into one shared cache line;
 * one that returns remote frees to their owner does not.
 *
 * Self-check as in cache-thrash: bytes verified before each free, checksum of reads.
 */
#include "wl.h"

typedef struct thr_s {
  long id, iters, writes, objsize;
  void *handed;
  uint64_t sum;
  long bad;
  char pad[64];
} thr_t;

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  if (!wl_stamp_ok(t->handed, (size_t)t->objsize, (uint64_t)t->id)) t->bad++;
  free(t->handed);
  for (long i = 0; i < t->iters; i++) {
    wl_scribble(t->objsize, t->writes, t->id, &t->sum, &t->bad);
  }
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-cache-scratch [-h] [-t THREADS] [-n ITERS] [-w WRITES] [-o OBJSIZE]"
    " [-s SEED]\n"
    "  Passive false sharing: main allocates one OBJSIZE-byte object per thread and hands\n"
    "  them out; each thread frees it, then ITERS times allocates, writes WRITES times and\n"
    "  frees its own. Defaults: -t 4 -n 1000 -w 20000 -o 8.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 4, .size = 1000, .seed = 1};
  o.extra['w'] = 20000;
  o.extra['o'] = 8;
  wl_parse(argc, argv, &o, "wo", usage);
  long objsize = o.extra['o'] < 1 ? 1 : o.extra['o'];
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++) {
    ts[i] = (thr_t){.id = i, .iters = o.size, .writes = o.extra['w'], .objsize = objsize};
    ts[i].handed = wl_malloc((size_t)objsize);
    wl_stamp(ts[i].handed, (size_t)objsize, (uint64_t)i);
  }
  return WL_RUN_AND_FINISH(ts, o.threads, run, "objects that did not keep their bytes");
}
