/* Case 4: a double free after the program wrote over the freed block's second word:
 *   free(p); ((uintptr_t *)p)[1] = 0; free(p);
 * usage: double_free_key [thread]   (thread: the second free comes from another thread)
 * then 256 x malloc(32): are two live blocks one address? */
#include "sec.h"

static void *second_free(void *p) { free(p); return NULL; }

int main(int argc, char **argv) {
  int thread = argc > 1 && strcmp(argv[1], "thread") == 0;
  uintptr_t *p = malloc(32);
  memset(p, 3, 32);
  free(p);
  ((volatile uintptr_t *)p)[1] = 0; /* the bug, part 1 */
  if (thread) {
    pthread_t t;
    pthread_create(&t, NULL, second_free, p);
    pthread_join(t, NULL);
  } else {
    free(p); /* part 2 */
  }
  return sec_result(sec_drain(256, 32));
}
