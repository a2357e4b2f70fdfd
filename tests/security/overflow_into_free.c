/* Case 3: an 8-byte linear overflow from block a into the free block right after it: the
 * 8 bytes following a's usable end are overwritten with an attacker's address, then
 * malloc(32) many times. */
#include "sec.h"

int main(void) {
  enum { N = 64 };
  char *a[N];
  for (int i = 0; i < N; i++) { a[i] = malloc(32); memset(a[i], 2, 32); }
  /* find two neighbours: a[j] followed in memory by a[k] within 64 bytes */
  int j = -1, k = -1;
  for (int x = 0; x < N && j < 0; x++)
    for (int y = 0; y < N; y++)
      if (a[y] > a[x] && a[y] - a[x] <= 64) { j = x; k = y; break; }
  if (j < 0) return sec_result("SAFE"); /* no neighbours: the overflow cannot reach a block */
  free(a[k]);
  size_t usable = malloc_usable_size(a[j]);
  /* overflow: from a[j]'s end up to and including the first word of a[k] */
  for (char *w = a[j] + usable; w + 8 <= a[k] + 8; w += 8) *(volatile uintptr_t *)w = (uintptr_t)sec_target;
  const char *v = sec_drain(1000, 32);
  return sec_result(v);
}
