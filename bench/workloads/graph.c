/* bench/workloads/graph.c -- single-thread object-graph build and tear-down.
 *
 * What a compiler or an interpreter does with its syntax trees and object graphs: build N
 * nodes, each a header plus a payload of 0..96 bytes, a name string of 4..40 bytes and an
 * edge array (1..6 edges to earlier nodes, grown by realloc as edges are added), then walk
 * the graph from the root along edges with an explicit stack, summing what it finds, then
 * free everything in an order unrelated to the allocation order (a random permutation of
 * the nodes). ROUNDS times. Single-threaded on purpose (-t is accepted and ignored): it
 * measures the allocator's single-thread speed and locality on mixed small sizes.
 *
 * -w 0 leaves the walk out: build and random-order tear-down only, the shape of a program
 * dropping a large pointer graph (the frees then touch blocks allocated long before, out of
 * cache); the tear-down checks every node's payload stamp and name instead.
 *
 * Self-check: the walk recomputes every node's payload stamp, name and edge list; the
 * checksum (sum of reachable node ids and edge targets) is the same for every allocator.
 *
 * -p 1 also prints, on stderr, the seconds spent in each phase summed over the rounds
 * (build, walk, shuffle, tear-down): where an allocator gains or loses on this program.
 * Standard output stays the same.
 */
#include "wl.h"

typedef struct node_s {
  uint64_t id;
  char *name;
  struct node_s **edge;
  uint32_t nedge, payload;
  int mark;
  unsigned char data[];
} node_t;

static const char usage[] =
    "usage: kite-wl-graph [-h] [-n NODES] [-r ROUNDS] [-w WALK] [-p PHASES] [-s SEED]\n"
    "  Single thread: build a graph of NODES nodes (payload, name, edge array grown by\n"
    "  realloc), walk it from the root, free it in random order; ROUNDS times.\n"
    "  -w 0: no walk (build and random-order tear-down only; the tear-down checks the nodes).\n"
    "  -p 1: also print each phase's seconds (summed over rounds) on stderr.\n"
    "  Defaults: -n 200000 -r 3 -w 1 -p 0 -s 1. (-t is accepted and ignored.)\n";

int main(int argc, char **argv) {
  wl_opts_t o = {.threads = 1, .size = 200000, .seed = 1};
  o.extra['r'] = 3;
  o.extra['w'] = 1;
  o.extra['p'] = 0;
  wl_parse(argc, argv, &o, "rwp", usage);
  long n = o.size < 1 ? 1 : o.size;
  wl_rng_t r;
  wl_rng_seed(&r, o.seed, 0);
  node_t **nodes = (node_t **)wl_malloc((size_t)n * sizeof *nodes);
  node_t **stack = (node_t **)wl_malloc((size_t)n * 7 * sizeof *stack);
  long *perm = (long *)wl_malloc((size_t)n * sizeof *perm);
  uint64_t sum = 0;
  long bad = 0;
  double phase[4] = {0, 0, 0, 0}; /* build, walk, shuffle, tear-down (-p) */
  double t0 = wl_now();
  for (long round = 0; round < o.extra['r']; round++) {
    double ta = wl_now();
    for (long i = 0; i < n; i++) {
      uint32_t pl = (uint32_t)wl_rng_below(&r, 97);
      node_t *x = (node_t *)wl_malloc(sizeof(node_t) + pl);
      x->id = (uint64_t)i;
      x->payload = pl;
      x->mark = 0;
      wl_stamp(x->data, pl, x->id);
      size_t nl = (size_t)wl_rng_range(&r, 4, 40);
      x->name = (char *)wl_malloc(nl);
      char buf[48];
      size_t bl = (size_t)snprintf(buf, sizeof buf, "n%ld_%ld", i, round);
      if (bl > nl - 1) bl = nl - 1; /* names are cut to their block, on purpose */
      memcpy(x->name, buf, bl);
      x->name[bl] = 0;
      x->nedge = 0;
      x->edge = NULL;
      long ne = i ? (long)wl_rng_range(&r, 1, 6) : 0;
      for (long e = 0; e < ne; e++) {
        x->edge = (node_t **)wl_realloc(x->edge, (x->nedge + 1) * sizeof(node_t *));
        x->edge[x->nedge++] = nodes[wl_rng_below(&r, (uint64_t)i)];
      }
      nodes[i] = x;
      /* node i is reachable from the root: link it from a random earlier node */
      if (i) {
        node_t *p = nodes[wl_rng_below(&r, (uint64_t)i)];
        p->edge = (node_t **)wl_realloc(p->edge, (p->nedge + 1) * sizeof(node_t *));
        p->edge[p->nedge++] = x;
      }
    }
    double tb = wl_now();
    long sp = 0, seen = o.extra['w'] ? 0 : n;
    char want[48];
    if (o.extra['w']) stack[sp++] = nodes[0];
    nodes[0]->mark = 1;
    while (sp) {
      node_t *x = stack[--sp];
      seen++;
      sum += x->id;
      if (!wl_stamp_ok(x->data, x->payload, x->id)) bad++;
      snprintf(want, sizeof want, "n%" PRIu64 "_%ld", x->id, round);
      if (strncmp(x->name, want, strlen(x->name)) != 0) bad++;
      for (uint32_t e = 0; e < x->nedge; e++) {
        node_t *y = x->edge[e];
        sum += y->id;
        if (!y->mark) {
          y->mark = 1;
          stack[sp++] = y;
        }
      }
    }
    if (seen != n) bad++;
    double tc = wl_now();
    for (long i = 0; i < n; i++) perm[i] = i;
    for (long i = n - 1; i > 0; i--) {
      long j = (long)wl_rng_below(&r, (uint64_t)i + 1), tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
    }
    double td = wl_now();
    for (long i = 0; i < n; i++) {
      node_t *x = nodes[perm[i]];
      if (!o.extra['w']) { /* no walk: check each node as it goes */
        sum += x->id + x->nedge;
        if (!wl_stamp_ok(x->data, x->payload, x->id)) bad++;
        snprintf(want, sizeof want, "n%" PRIu64 "_%ld", x->id, round);
        if (strncmp(x->name, want, strlen(x->name)) != 0) bad++;
      }
      free(x->name);
      free(x->edge);
      free(x);
    }
    double te = wl_now();
    phase[0] += tb - ta;
    phase[1] += tc - tb;
    phase[2] += td - tc;
    phase[3] += te - td;
  }
  double t1 = wl_now();
  if (o.extra['p'])
    fprintf(stderr, "phases: build %.6f s, walk %.6f s, shuffle %.6f s, tear-down %.6f s\n", phase[0], phase[1],
            phase[2], phase[3]);
  free(nodes);
  free(stack);
  free(perm);
  printf("nodes: %ld x %ld rounds\n", n, o.extra['r']);
  return wl_finish(t1 - t0, sum, bad, "nodes unreachable or with broken contents");
}
