/* Case 2: one 8-byte write after free into a freed small block:
 *   p = malloc(32); free(p); *(uintptr_t *)p = (uintptr_t)&target;
 * then malloc(32) many times: does one return &target? */
#include "sec.h"

int main(void) {
  char *p = malloc(32);
  memset(p, 1, 32);
  free(p);
  *(volatile uintptr_t *)p = (uintptr_t)sec_target; /* the bug */
  return sec_result(sec_drain(1000, 32));
}
