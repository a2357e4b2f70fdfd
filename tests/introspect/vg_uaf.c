/* tests/introspect/vg_uaf.c -- a planted use after free: a byte 40 bytes into a freed block
 * of 64 is read (memcheck must report an invalid read inside a block free'd in main). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(64);
  memset(p, 'x', 64);
  free(p);
  volatile char c = p[40]; /* the planted bug */
  printf("%d\n", c == 'x');
  return 0;
}
