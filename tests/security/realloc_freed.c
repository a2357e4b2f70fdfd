/* Case 11: realloc of a freed pointer (usage: realloc_freed [realloc|usable]).
 *   realloc: p = malloc(32); free(p); q = realloc(p, 64): an allocator that accepts it hands
 *            out a block it still considers free (DUPLICATE shows when it does), or returns
 *            a new block leaving the freed one alone (SAFE). NULL is SAFE.
 *   usable:  malloc_usable_size of a freed block and of a stack address: SAFE if the
 *            program survives (the allocator's report, if any, is on stderr). */
#include "sec.h"

int main(int argc, char **argv) {
  int usable = argc > 1 && strcmp(argv[1], "usable") == 0;
  char *p = malloc(32);
  memset(p, 5, 32);
  free(p);
  if (usable) {
    int local[8];
    volatile size_t a = malloc_usable_size(p);
    volatile size_t b = malloc_usable_size(local);
    (void)a; (void)b;
    return sec_result(sec_drain(256, 32));
  }
  char *q = realloc(p, 64);
  if (q) {
    void *a[64];
    for (int i = 0; i < 64; i++) a[i] = malloc(32);
    for (int i = 0; i < 64; i++)
      if ((char *)a[i] < q + 64 && q < (char *)a[i] + 32) return sec_result("DUPLICATE");
    if (!sec_distinct(a, 64)) return sec_result("DUPLICATE");
    for (int i = 0; i < 64; i++) free(a[i]);
    free(q);
  }
  return sec_result("SAFE");
}
