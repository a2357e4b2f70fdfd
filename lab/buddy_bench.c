/* lab/buddy_bench.c -- build/kite-buddy-bench: benchmark of the buddy page heap (seed 003's experiment).
 *
 *   kite-buddy-bench [-h] [--variant NAME|all] [--reps N] [--ops N] [--list]
 *
 * Tests (units are 4 KiB pages, so 1 GiB = 262,144 units), one line each:
 *   seq-alloc-1GiB     262,144 order-0 allocations on an empty heap (the seed's headline)
 *   seq-free-1GiB      freeing them all again, in allocation order
 *   churn-1GiB         random alloc/free of mixed orders (order k with probability 2^-(k+1),
 *                      k <= 9) at ~50% occupancy, after filling to 50%
 *   churn-16GiB        the same over 4,194,304 units
 * Each line reads `NAME: X ns/op, Y GiB/s`: X is the best (lowest) over --reps runs of the
 * average time per call in a run (the machine may be shared: the best run is the one least
 * disturbed), Y the bytes handed out (or given back) per second at 4 KiB a unit in that run.
 * Churn ns/op includes the driver's random numbers and its live-block array (~2 ns).
 *
 * Without --variant the tests call kite_buddy_* directly. --variant NAME runs one lab
 * variant (lab/buddy_policy.h) through its function pointers, --variant all runs every one
 * and ends with the seed's table. The naive list variants scan their lists (O(blocks) per
 * call), so they run on 64 MiB instead of 1 GiB and skip the 16 GiB test; the output says so.
 * --seed-size adds, for them, the seed's own figure: allocating the whole 1 GiB (one run, no
 * timed frees; minutes).
 * Any wrong result (an index handed out twice, a failed free, a wrong free-unit count) prints
 * FAILED and makes the exit status 1: a broken run is never reported as a time.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buddy_policy.h"
#include "kite/buddy.h"

#define UNIT_BYTES 4096.0
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- the heap under test: kite directly, or a lab variant -------------------------------- */

static const lab_buddy_policy_t *pol; /* NULL: kite_buddy directly */
static kite_buddy_t *kb;
static void *meta;
static int failed;

static inline int h_alloc(unsigned order, uint64_t *idx) {
  return pol ? pol->alloc(order, idx) : kite_buddy_alloc(kb, order, idx);
}
static inline int h_free(uint64_t idx) {
  return pol ? pol->free(idx) : kite_buddy_free(kb, idx, NULL);
}
static uint64_t h_free_units(void) {
  return pol ? pol->free_units() : kite_buddy_free_units(kb);
}

static int h_open(uint64_t units) {
  size_t sz = pol ? pol->meta_size(units) : kite_buddy_meta_size(units);
  if (!sz) return -1;
  meta = aligned_alloc(16, (sz + 15) & ~(size_t)15);
  if (!meta) return -1;
  memset(meta, 0, sz); /* fault the pages in outside the timed region */
  return pol ? pol->init(meta, units) : kite_buddy_init(&kb, meta, sz, units);
}
static void h_close(void) {
  if (pol) pol->fini();
  free(meta);
  meta = NULL;
  kb = NULL;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd(void) {
  rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}

static void fail(const char *test, const char *what) {
  printf("%s: FAILED (%s)\n", test, what);
  failed = 1;
}

/* ---- tests -------------------------------------------------------------------------------- */

typedef struct {
  double ns_per_op, gib_per_s;
  int ok;
} result_t;

/* Fill an empty heap of `units` with order-0 blocks, then free them all. */
static void run_seq(uint64_t units, result_t *ra, result_t *rf, uint64_t *idx) {
  ra->ok = rf->ok = 0;
  if (h_open(units) != 0) return;
  double t0 = now_ns();
  for (uint64_t i = 0; i < units; i++)
    if (h_alloc(0, &idx[i]) != 0) { h_close(); return; }
  double t1 = now_ns();
  /* every unit exactly once */
  unsigned char *seen = calloc(units, 1);
  int good = seen != NULL && h_free_units() == 0;
  for (uint64_t i = 0; good && i < units; i++) {
    if (idx[i] >= units || seen[idx[i]]) good = 0;
    else seen[idx[i]] = 1;
  }
  free(seen);
  if (!good) { h_close(); return; }
  double t2 = now_ns();
  for (uint64_t i = 0; i < units; i++)
    if (h_free(idx[i]) != 0) { h_close(); return; }
  double t3 = now_ns();
  good = h_free_units() == units;
  h_close();
  if (!good) return;
  double bytes = units * UNIT_BYTES;
  ra->ns_per_op = (t1 - t0) / units;
  ra->gib_per_s = bytes / GIB / ((t1 - t0) * 1e-9);
  rf->ns_per_op = (t3 - t2) / units;
  rf->gib_per_s = bytes / GIB / ((t3 - t2) * 1e-9);
  ra->ok = rf->ok = 1;
}

/* The seed's headline alone: fill an empty heap of `units` with order-0 blocks, timed; check
 * every unit came out once; drop the heap without freeing (for the naive list variants at the
 * seed's 1 GiB, whose frees alone would take a quarter of an hour). */
static void run_alloc_only(uint64_t units, result_t *ra, uint64_t *idx) {
  ra->ok = 0;
  if (h_open(units) != 0) return;
  double t0 = now_ns();
  for (uint64_t i = 0; i < units; i++)
    if (h_alloc(0, &idx[i]) != 0) { h_close(); return; }
  double t1 = now_ns();
  unsigned char *seen = calloc(units, 1);
  int good = seen != NULL && h_free_units() == 0;
  for (uint64_t i = 0; good && i < units; i++) {
    if (idx[i] >= units || seen[idx[i]]) good = 0;
    else seen[idx[i]] = 1;
  }
  free(seen);
  h_close();
  if (!good) return;
  ra->ns_per_op = (t1 - t0) / units;
  ra->gib_per_s = units * UNIT_BYTES / GIB / ((t1 - t0) * 1e-9);
  ra->ok = 1;
}

static inline unsigned churn_order(void) {
  return (unsigned)__builtin_ctzll(rnd() | ((uint64_t)1 << 9));
}

/* Random mixed-order churn around 50% occupancy; `live` holds up to `units` entries. */
static void run_churn(uint64_t units, uint64_t ops, result_t *r, uint64_t *live,
                      unsigned char *ord) {
  r->ok = 0;
  if (h_open(units) != 0) return;
  uint64_t nlive = 0, used = 0, idx;
  while (used < units / 2) {
    unsigned k = churn_order();
    if (h_alloc(k, &idx) != 0) continue;
    live[nlive] = idx;
    ord[nlive++] = (unsigned char)k;
    used += (uint64_t)1 << k;
  }
  uint64_t moved = 0, nomem = 0;
  double t0 = now_ns();
  for (uint64_t i = 0; i < ops; i++) {
    uint64_t x = rnd();
    int do_alloc = used < units / 2 ? (x & 3) != 0 : (x & 3) == 0;
    if (do_alloc || nlive == 0) {
      unsigned k = (unsigned)__builtin_ctzll((x >> 8) | ((uint64_t)1 << 9));
      if (h_alloc(k, &idx) != 0) { nomem++; continue; }
      live[nlive] = idx;
      ord[nlive++] = (unsigned char)k;
      used += (uint64_t)1 << k;
      moved += (uint64_t)1 << k;
    } else {
      uint64_t j = (x >> 16) % nlive;
      if (h_free(live[j]) != 0) { h_close(); return; }
      used -= (uint64_t)1 << ord[j];
      moved += (uint64_t)1 << ord[j];
      live[j] = live[--nlive];
      ord[j] = ord[nlive];
    }
  }
  double t1 = now_ns();
  int good = h_free_units() == units - used;
  for (uint64_t j = 0; good && j < nlive; j++) good = h_free(live[j]) == 0;
  good = good && h_free_units() == units;
  h_close();
  if (!good) return;
  (void)nomem;
  r->ns_per_op = (t1 - t0) / ops;
  r->gib_per_s = moved * UNIT_BYTES / GIB / ((t1 - t0) * 1e-9);
  r->ok = 1;
}

/* ---- driver ------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Best of reps of one test; prints its line. Returns the best result. */
typedef void (*rep_fn)(void *ctx, result_t *out);

static result_t report(const char *name, unsigned reps, rep_fn fn, void *ctx) {
  double ns[64], gs[64];
  result_t r = {0, 0, 0};
  if (reps > 64) reps = 64;
  for (unsigned i = 0; i < reps; i++) {
    fn(ctx, &r);
    if (!r.ok) { fail(name, "wrong result or out of memory"); return r; }
    ns[i] = r.ns_per_op;
    gs[i] = r.gib_per_s;
  }
  qsort(ns, reps, sizeof *ns, cmp_double);
  qsort(gs, reps, sizeof *gs, cmp_double);
  r.ns_per_op = ns[0];
  r.gib_per_s = gs[reps - 1];
  printf("%s: %.2f ns/op, %.3g GiB/s\n", name, r.ns_per_op, r.gib_per_s);
  fflush(stdout);
  return r;
}

typedef struct {
  uint64_t units, ops;
  uint64_t *buf;
  unsigned char *ord;
  result_t seq_free; /* second output of run_seq */
  int want_free;
} ctx_t;

static void rep_seq_alloc(void *c, result_t *out) {
  ctx_t *x = c;
  run_seq(x->units, out, &x->seq_free, x->buf);
}
static void rep_seq_free(void *c, result_t *out) {
  ctx_t *x = c;
  result_t a;
  run_seq(x->units, &a, out, x->buf);
}
static void rep_churn(void *c, result_t *out) {
  ctx_t *x = c;
  rng = 0x9e3779b97f4a7c15ull; /* same sequence every rep */
  run_churn(x->units, x->ops, out, x->buf, x->ord);
}

static const char *size_name(uint64_t units, char *buf, size_t n) {
  double bytes = units * UNIT_BYTES;
  if (bytes >= GIB) snprintf(buf, n, "%.0fGiB", bytes / GIB);
  else snprintf(buf, n, "%.0fMiB", bytes / (1024.0 * 1024.0));
  return buf;
}

typedef struct {
  result_t seq_alloc, seq_free, churn, churn16;
  uint64_t seq_units;
  result_t seed_alloc; /* --seed-size: a naive variant's 1 GiB allocation, one run */
} row_t;

static int seed_size; /* --seed-size */

static row_t run_all(const char *prefix, int slow, unsigned reps, uint64_t ops) {
  row_t row;
  memset(&row, 0, sizeof row);
  uint64_t seq_units = slow ? (uint64_t)1 << 14 : (uint64_t)1 << 18;
  uint64_t big = (uint64_t)1 << 22;
  ctx_t c = {0};
  c.buf = malloc(big * sizeof(uint64_t));
  c.ord = malloc(big);
  if (!c.buf || !c.ord) { fail(prefix, "out of memory"); free(c.buf); free(c.ord); return row; }
  char name[128], sz[32];
  if (slow)
    printf("# %s scans its lists (O(blocks) per call): 64 MiB instead of 1 GiB, "
           "%" PRIu64 " churn ops, no 16 GiB test\n", prefix[0] ? prefix : "this variant",
           ops / 100);
  c.units = seq_units;
  row.seq_units = seq_units;
  snprintf(name, sizeof name, "%sseq-alloc-%s", prefix, size_name(seq_units, sz, sizeof sz));
  row.seq_alloc = report(name, reps, rep_seq_alloc, &c);
  snprintf(name, sizeof name, "%sseq-free-%s", prefix, size_name(seq_units, sz, sizeof sz));
  row.seq_free = report(name, reps, rep_seq_free, &c);
  c.ops = slow ? ops / 100 : ops;
  snprintf(name, sizeof name, "%schurn-%s", prefix, size_name(seq_units, sz, sizeof sz));
  row.churn = report(name, reps, rep_churn, &c);
  if (!slow) {
    c.units = big;
    snprintf(name, sizeof name, "%schurn-%s", prefix, size_name(big, sz, sizeof sz));
    row.churn16 = report(name, reps, rep_churn, &c);
  } else if (seed_size) {
    uint64_t units = (uint64_t)1 << 18;
    snprintf(name, sizeof name, "%sseq-alloc-%s", prefix, size_name(units, sz, sizeof sz));
    run_alloc_only(units, &row.seed_alloc, c.buf);
    if (row.seed_alloc.ok)
      printf("%s: %.2f ns/op, %.3g GiB/s (one run, the seed's size; %.3g s in all)\n", name,
             row.seed_alloc.ns_per_op, row.seed_alloc.gib_per_s,
             row.seed_alloc.ns_per_op * (double)units * 1e-9);
    else
      fail(name, "wrong result");
    fflush(stdout);
  }
  free(c.buf);
  free(c.ord);
  return row;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: kite-buddy-bench [-h] [--variant NAME|all] [--reps N] [--ops N] [--list]\n"
          "  Benchmarks the buddy page heap with 4 KiB units; prints `NAME: X ns/op, Y GiB/s`.\n"
          "  seq-alloc-1GiB / seq-free-1GiB: 262,144 order-0 allocations, then their frees\n"
          "  churn-1GiB / churn-16GiB: random mixed orders at ~50%% occupancy (--ops calls)\n"
          "  --variant NAME   run a lab variant (see --list); `all` prints the seed's table\n"
          "  --reps N         repetitions per test, the best is printed (default 5)\n"
          "  --ops N          churn calls per repetition (default 2000000)\n"
          "  --list           print the variant names, one a line\n"
          "  --seed-size      also time the naive list variants allocating the seed's full\n"
          "                   1 GiB (one run, minutes: their cost grows with the blocks)\n");
}

int main(int argc, char **argv) {
  const char *variant = NULL;
  unsigned reps = 5;
  uint64_t ops = 2000000;
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},     {"variant", required_argument, NULL, 'v'},
      {"reps", required_argument, NULL, 'r'}, {"ops", required_argument, NULL, 'o'},
      {"list", no_argument, NULL, 'l'},     {"seed-size", no_argument, NULL, 's'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    char *end = NULL;
    switch (c) {
      case 'h': usage(stdout); return 0;
      case 'v': variant = optarg; break;
      case 's': seed_size = 1; break;
      case 'r': reps = (unsigned)strtoul(optarg, &end, 0); break;
      case 'o': ops = strtoull(optarg, &end, 0); break;
      case 'l':
        for (const lab_buddy_policy_t *const *p = lab_buddy_policies(); *p; p++) puts((*p)->name);
        return 0;
      default: usage(stderr); return 2;
    }
    if (end && (end == optarg || *end)) {
      fprintf(stderr, "kite-buddy-bench: '%s' is not a number\n", optarg);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) { usage(stderr); return 2; }
  if (reps == 0) reps = 1;
  if (ops < 100) ops = 100;

  if (!variant) {
    run_all("", 0, reps, ops);
    return failed;
  }
  const lab_buddy_policy_t *one = NULL;
  if (strcmp(variant, "all") != 0) {
    one = lab_buddy_policy_find(variant);
    if (!one) { fprintf(stderr, "kite-buddy-bench: no variant named '%s' (try --list)\n", variant); return 2; }
  }
  row_t rows[16];
  const lab_buddy_policy_t *ran[16];
  unsigned nrows = 0;
  for (const lab_buddy_policy_t *const *p = lab_buddy_policies(); *p && nrows < 16; p++) {
    if (one && *p != one) continue;
    pol = *p;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s/", pol->name);
    ran[nrows] = pol;
    rows[nrows++] = run_all(prefix, pol->slow, reps, ops);
  }
  pol = NULL;
  if (!one) {
    printf("\n| Implementation | Range | Alloc time | Throughput | ns/alloc | ns/free | churn 1 GiB ns/op | churn 16 GiB ns/op |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (unsigned i = 0; i < nrows; i++) {
      row_t *r = &rows[i];
      char sz[32], c1[32] = "-", c16[32] = "-";
      if (r->churn.ok && !ran[i]->slow) snprintf(c1, sizeof c1, "%.1f", r->churn.ns_per_op);
      if (r->churn.ok && ran[i]->slow) snprintf(c1, sizeof c1, "(64 MiB) %.1f", r->churn.ns_per_op);
      if (r->churn16.ok) snprintf(c16, sizeof c16, "%.1f", r->churn16.ns_per_op);
      if (!r->seq_alloc.ok) {
        printf("| %s | - | FAILED | - | - | - | %s | %s |\n", ran[i]->description, c1, c16);
        continue;
      }
      if (r->seed_alloc.ok)
        printf("| %s | 1 GiB (alloc only, one run) | %.3g s | %.3g GiB/s | %.1f | - | - | - |\n",
               ran[i]->description, r->seed_alloc.ns_per_op * (double)((uint64_t)1 << 18) * 1e-9,
               r->seed_alloc.gib_per_s, r->seed_alloc.ns_per_op);
      printf("| %s | %s | %.3g s | %.3g GiB/s | %.1f | %.1f | %s | %s |\n", ran[i]->description,
             size_name(r->seq_units, sz, sizeof sz), r->seq_alloc.ns_per_op * r->seq_units * 1e-9,
             r->seq_alloc.gib_per_s, r->seq_alloc.ns_per_op, r->seq_free.ns_per_op, c1, c16);
    }
  }
  return failed;
}
