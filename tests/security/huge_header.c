/* Case 6: a 4 KiB underflow into the memory before a huge block (where an allocator may
 * keep the block's header): every 8-byte word there that looks like the block's length is
 * replaced by three times that length, then the block is freed. Does a neighbouring live
 * huge block survive, and does a new one overlap it? */
#include "sec.h"
#include <sys/mman.h>

#define MIB ((size_t)1 << 20)

static int mapped(const void *p, size_t n) {
  unsigned char vec[1];
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  for (uintptr_t u = a; u < (uintptr_t)p + n; u += 4096)
    if (mincore((void *)u, 4096, vec) != 0) return 0;
  return 1;
}

int main(void) {
  size_t sz = 32 * MIB;
  char *a = malloc(sz), *b = malloc(sz);
  if (!a || !b) return sec_result("WRONG");
  memset(a, 0x61, sz);
  memset(b, 0x62, sz);
  char *page = b - 4096;
  if (!mapped(page, 4096)) { free(b); free(a); return sec_result("SAFE"); } /* nothing there to overwrite */
  for (int i = 0; i < 512; i++) {
    volatile uint64_t *w = (volatile uint64_t *)page + i;
    if (*w >= sz && *w <= sz + 2 * MIB) *w = 3 * *w; /* the bug: a "length" field grows */
  }
  free(b);
  if (!mapped(a, sz)) return sec_result("CORRUPTION");
  for (size_t i = 0; i < sz; i += 4096)
    if (a[i] != 0x61) return sec_result("CORRUPTION");
  char *c = malloc(sz);
  if (c && c < a + sz && a < c + sz) return sec_result("CORRUPTION");
  free(c);
  free(a);
  return sec_result("SAFE");
}
