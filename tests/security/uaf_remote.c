/* Case 5: a use-after-free write into a block that another thread freed (so the block sits
 * in a cross-thread free list): its first word gets an attacker's address. */
#include "sec.h"

static void *do_free(void *p) { free(p); return NULL; }

int main(void) {
  char *blocks[16];
  for (int i = 0; i < 16; i++) { blocks[i] = malloc(32); memset(blocks[i], 4, 32); }
  pthread_t t;
  pthread_create(&t, NULL, do_free, blocks[7]);
  pthread_join(t, NULL);
  *(volatile uintptr_t *)blocks[7] = (uintptr_t)sec_target; /* the bug */
  return sec_result(sec_drain(2000, 32));
}
