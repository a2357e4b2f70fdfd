/* bench/fastpath.c -- N malloc(size)/free pairs, for counting instructions per pair.
 *
 *   kite-fastpath [-h] N SIZE [SIZE...]
 * For each size: a warm-up of 10000 pairs, then N pairs. Run it under
 * `valgrind --tool=callgrind` twice with different N (bench/fastpath.sh does): the
 * difference of the totals divided by the difference of N is the cost of one pair, with
 * start-up and warm-up cancelled. The allocator is whatever malloc the process gets
 * (LD_PRELOAD selects kite, mimalloc ...). Built with -fno-builtin-malloc so the compiler
 * cannot drop the pairs.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile sink;

static __attribute__((noinline)) void pairs(size_t n, size_t size) {
  for (size_t i = 0; i < n; i++) {
    void *p = malloc(size);
    sink = p;
    free(p);
  }
}

static const char usage[] =
    "usage: kite-fastpath [-h] N SIZE [SIZE...]\n"
    "  For each SIZE: 10000 warm-up malloc/free pairs, then N pairs (count instructions\n"
    "  under callgrind at two N: bench/fastpath.sh).\n";

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    if (c == 'h') {
      fputs(usage, stdout);
      return 0;
    }
    fputs(usage, stderr);
    return 2;
  }
  argv += optind - 1;
  argc -= optind - 1;
  if (argc < 3) {
    fputs(usage, stderr);
    return 2;
  }
  size_t n = strtoull(argv[1], NULL, 10);
  for (int a = 2; a < argc; a++) {
    size_t size = strtoull(argv[a], NULL, 10);
    pairs(10000, size);
    pairs(n, size);
  }
  return 0;
}
