/* tests/introspect/asan_uaf.c -- the ASan build poisons freed kite blocks.
 *
 * First a correct phase that reuses memory every way (blocks handed out again, whole pages
 * given back and carved again for another class, runs reused as large blocks, calloc,
 * realloc): ASan must stay silent. Then the planted bug: a byte 40 bytes into a freed block
 * of 64 is read, which ASan must report as use-after-poison (the CTest expects that text).
 */
#include <stdio.h>
#include <string.h>
#include "kite.h"

#define N 5000
static char *b[N];

int main(void) {
  for (int round = 0; round < 4; round++) {
    size_t n = (size_t)32 << round;
    for (int i = 0; i < N; i++) {
      b[i] = (i % 3) ? kite_malloc(n) : kite_calloc(1, n);
      memset(b[i], i, n);
      if (i % 5 == 0) { b[i] = kite_realloc(b[i], n * 2); memset(b[i], 1, n * 2); }
    }
    for (int i = 0; i < N; i++) kite_free(b[i]);
    kite_malloc_trim(0); /* empty pages back to the arenas */
    char *big = kite_malloc(200000); /* a run that may have held small blocks */
    memset(big, 7, 200000);
    kite_free(big);
  }
  char *p = kite_malloc(64);
  memset(p, 'x', 64);
  kite_free(p);
  fprintf(stderr, "correct phase done; now the planted use after free\n");
  volatile char c = p[40]; /* the planted bug */
  printf("not caught: %d\n", c);
  return 0;
}
