/* tests/introspect/vg_leak.c -- a planted leak: 4 blocks of 1000 bytes whose last pointer is
 * dropped (memcheck must report 4000 bytes definitely lost, allocated in leak_some). */
#include <stdlib.h>
#include <string.h>

static void *volatile keep; /* reachable at exit: not a leak */

__attribute__((noinline)) static void leak_some(void) {
  for (int i = 0; i < 4; i++) {
    char *p = malloc(1000);
    memset(p, i, 1000);
    p = NULL; /* lost */
  }
}

int main(void) {
  keep = malloc(500);
  leak_some();
  void *q = malloc(200);
  free(q);
  return 0;
}
