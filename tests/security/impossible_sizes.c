/* Case 9: sizes no machine can back must fail with NULL and errno ENOMEM, as glibc's do:
 * malloc(2^46), calloc(2^23, 2^23), realloc(p, 2^46), posix_memalign(&p, 2^40, 8),
 * aligned_alloc(2^40, 2^40). */
#include "sec.h"

int main(void) {
  size_t big = (size_t)1 << 46;
  errno = 0;
  void *p = malloc(big);
  if (p || errno != ENOMEM) return sec_result("WRONG");
  errno = 0;
  p = calloc((size_t)1 << 23, (size_t)1 << 23);
  if (p || errno != ENOMEM) return sec_result("WRONG");
  void *q = malloc(64);
  errno = 0;
  p = realloc(q, big);
  if (p || errno != ENOMEM) return sec_result("WRONG");
  free(q);
  p = NULL;
  int rc = posix_memalign(&p, (size_t)1 << 40, 8);
  if (rc != ENOMEM || p) return sec_result("WRONG");
  errno = 0;
  /* through a volatile: Clang warns at compile time of a constant alignment above 2^32 */
  static volatile size_t tera = (size_t)1 << 40;
  p = aligned_alloc(tera, tera);
  if (p || errno != ENOMEM) return sec_result("WRONG");
  return sec_result("SAFE");
}
