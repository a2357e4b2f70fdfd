/* bench/workloads/tlb.c -- random pointer chasing over a large heap of small blocks.
 *
 * The workload of address translation: MIB MiB of BLOCK-byte nodes are allocated one by one
 * (so they lie wherever the allocator puts them, densely for a size-class allocator), linked
 * into one cycle in a random order (Sattolo's shuffle of the node array), and the cycle is
 * followed for STEPS million steps. Each step loads a node that is almost never in the
 * caches, on a page that is almost never in the TLB when pages are 4 KiB (1 GiB is 262,144
 * of them); with 2 MiB pages the same heap is 512 pages. bench/hugepages.py runs it under
 * kite with KITE_HUGEPAGES=0 and 1.
 *
 * Printed besides the usual lines: `build: S s` (allocating and linking), `chase: S s` (the
 * walk alone), `rss_mib: X` (VmRSS) and `anon_huge_mib: X` (AnonHugePages of
 * /proc/self/smaps_rollup, -1 where the kernel has no such file), read after the walk.
 *
 * Self-check: every node visited carries its own index and a tag derived from it; the
 * checksum (the sum of the indices visited) depends only on the options; the tear-down
 * checks every node once more before freeing it.
 */
#include "wl.h"

typedef struct node_s {
  uint64_t id; /* first: written at the allocation, where a stray write would land */
  uint64_t tag;
  struct node_s *next;
} node_t;

#define TAG(id) ((id) * 0x9e3779b97f4a7c15ull ^ 0x5bd1e995u)

static const char usage[] =
    "usage: kite-wl-tlb [-h] [-n MIB] [-b BLOCK] [-r STEPS] [-s SEED]\n"
    "  Allocates MIB MiB of BLOCK-byte nodes (BLOCK >= 24), links them into one random cycle\n"
    "  and follows it for STEPS million steps; prints the build and chase times, VmRSS and\n"
    "  AnonHugePages. -t is accepted and ignored. Defaults: -n 1024 -b 64 -r 20 -s 1.\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 1, .size = 1024, .seed = 1};
  o.extra['b'] = 64;
  o.extra['r'] = 20;
  wl_parse(argc, argv, &o, "br", usage);
  size_t block = (size_t)o.extra['b'];
  if (block < sizeof(node_t)) {
    fprintf(stderr, "%s: -b must be at least %zu\n", argv[0], sizeof(node_t));
    fputs(usage, stderr);
    return 2;
  }
  size_t n = ((size_t)o.size << 20) / block;
  if (n < 2) n = 2;
  uint64_t steps = (uint64_t)o.extra['r'] * 1000000u;
  wl_rng_t r;
  wl_rng_seed(&r, o.seed, 0);
  double t0 = wl_now();
  node_t **v = (node_t **)wl_malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    v[i] = (node_t *)wl_malloc(block);
    v[i]->id = i;
    v[i]->tag = TAG(i);
  }
  /* Sattolo: a uniformly random single cycle through all n nodes */
  size_t *order = (size_t *)wl_malloc(n * sizeof *order);
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)wl_rng_below(&r, i);
    size_t x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  for (size_t i = 0; i < n; i++) v[order[i]]->next = v[order[(i + 1) % n]];
  free(order);
  double t1 = wl_now();
  uint64_t sum = 0;
  long bad = 0;
  const node_t *p = v[0];
  for (uint64_t s = 0; s < steps; s++) {
    sum += p->id;
    if (p->tag != TAG(p->id)) bad++;
    p = p->next;
  }
  double t2 = wl_now();
  printf("build: %.6f s\nchase: %.6f s\n", t1 - t0, t2 - t1);
  printf("rss_mib: %.1f\nanon_huge_mib: %.1f\n", wl_proc_mib("/proc/self/smaps_rollup", "Rss"), wl_proc_mib("/proc/self/smaps_rollup", "AnonHugePages"));
  for (size_t i = 0; i < n; i++) {
    if (v[i]->id != i || v[i]->tag != TAG(i)) bad++;
    free(v[i]);
  }
  free(v);
  return wl_finish(t2 - t0, wl_mix(sum, (uint64_t)n), bad, "nodes with a broken stamp");
}
