/* bench/workloads/large.c -- large objects, 64 KiB .. 32 MiB.
 *
 * Each of THREADS threads keeps a window of LIVE large blocks; N times it replaces a random
 * one with a block whose size is log-uniform in [64 KiB, MAX] (default 32 MiB), or, with
 * -a MIN, uniform in [MIN, MAX] (-a 5242880 -m 26214400 -l 20 -t 1: the classic "5..25 MiB,
 * up to 20 live" large-block benchmark), writing a
 * stamp at the start of every 4 KiB page (so the pages are really touched, as a program
 * filling a buffer would) and checking all of them before the free. What it measures: how
 * the allocator gets big blocks (mmap per block, cached page runs, purging) and what that
 * costs in page faults and resident memory.
 */
#include "wl.h"

#define PAGE 4096

typedef struct blk_s {
  unsigned char *p;
  size_t n;
  uint64_t tag;
} blk_t;

typedef struct thr_s {
  long id, iters, live, maxsz, minsz;
  uint64_t seed, sum;
  long bad;
} thr_t;

/* The last byte carries a tag too, unless it falls inside the last page's stamp. */
static int tail_free(const blk_t *b) { return (b->n - 1) % PAGE >= 8; }

static void stamp_pages(blk_t *b) {
  for (size_t off = 0; off + 8 <= b->n; off += PAGE) {
    uint64_t v = b->tag ^ off;
    memcpy(b->p + off, &v, 8);
  }
  if (tail_free(b)) b->p[b->n - 1] = (unsigned char)b->tag;
}
static long check_pages(const blk_t *b) {
  long bad = 0;
  for (size_t off = 0; off + 8 <= b->n; off += PAGE) {
    uint64_t v;
    memcpy(&v, b->p + off, 8);
    if (v != (b->tag ^ off)) bad++;
  }
  if (tail_free(b) && b->p[b->n - 1] != (unsigned char)b->tag) bad++;
  return bad;
}

static void *run(void *arg) {
  thr_t *t = (thr_t *)arg;
  wl_rng_t r;
  wl_rng_seed(&r, t->seed, (uint64_t)t->id);
  blk_t *w = (blk_t *)calloc((size_t)t->live, sizeof *w);
  if (!w) wl_oom(0);
  int lo = 16, hi = 16;
  while (hi < 62 && (1l << (hi + 1)) <= t->maxsz) hi++;
  for (long i = 0; i < t->iters; i++) {
    long k = (long)wl_rng_below(&r, (uint64_t)t->live);
    if (w[k].p) {
      t->bad += check_pages(&w[k]);
      free(w[k].p);
    }
    int sh = (int)wl_rng_range(&r, (uint64_t)lo, (uint64_t)hi);
    size_t n = ((size_t)1 << sh) + (size_t)wl_rng_below(&r, (uint64_t)1 << sh);
    if (t->minsz) n = (size_t)wl_rng_range(&r, (uint64_t)t->minsz, (uint64_t)t->maxsz);
    if (n > (size_t)t->maxsz) n = (size_t)t->maxsz;
    if (n < (1u << 16)) n = 1u << 16;
    w[k].p = (unsigned char *)wl_malloc(n);
    w[k].n = n;
    w[k].tag = ((uint64_t)t->id << 48) ^ (uint64_t)i * 0x9e3779b97f4a7c15ull;
    stamp_pages(&w[k]);
    t->sum = wl_mix(t->sum, n);
  }
  for (long k = 0; k < t->live; k++)
    if (w[k].p) {
      t->bad += check_pages(&w[k]);
      free(w[k].p);
    }
  free(w);
  return NULL;
}

static const char usage[] =
    "usage: kite-wl-large [-h] [-t THREADS] [-n ITERS] [-l LIVE] [-m MAXBYTES] [-a MINBYTES]\n"
    "                     [-s SEED]\n"
    "  Each thread replaces ITERS times a random one of LIVE blocks by a new one of\n"
    "  64 KiB..MAXBYTES (log-uniform), touching every page. With -a: MINBYTES..MAXBYTES,\n"
    "  uniform. Defaults: -t 2 -n 400 -l 8 -m 33554432 -a 0 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 2, .size = 400, .seed = 1};
  o.extra['l'] = 8;
  o.extra['m'] = 32l << 20;
  wl_parse(argc, argv, &o, "lma", usage);
  thr_t *ts = (thr_t *)calloc((size_t)o.threads, sizeof *ts);
  if (!ts) wl_oom(0);
  for (long i = 0; i < o.threads; i++)
    ts[i] = (thr_t){.id = i, .iters = o.size, .live = o.extra['l'] < 1 ? 1 : o.extra['l'],
                    .maxsz = o.extra['m'] < (1l << 16) ? (1l << 16) : o.extra['m'],
                    .minsz = o.extra['a'] > o.extra['m'] ? o.extra['m'] : o.extra['a'],
                    .seed = o.seed};
  return WL_RUN_AND_FINISH_MIXED(ts, o.threads, run, "pages that lost their stamp");
}
