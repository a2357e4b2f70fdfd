/* advise_busy -- a malloc-heavy program of about 2 seconds for test_advise.py's budget test.
 *
 *   advise_busy [ALLOCATIONS]      (default 1500000)
 *
 * Keeps a ring of 4096 live blocks of 16..1040 bytes (sizes from a fixed LCG), frees the
 * oldest for each new one, fills every block and folds its bytes into a checksum, and does a
 * fixed amount of arithmetic between allocations, so most of its time is its own work and a
 * part is malloc's. Prints "checksum N" (the same on every run and under every malloc). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 4096

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1500000;
  static unsigned char *ring[RING];
  static size_t sizes[RING];
  uint64_t x = 88172645463325252ull, sum = 0;
  for (long i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = (size_t)i % RING, sz = 16 + (size_t)((x >> 33) % 1025);
    if (ring[k]) {
      for (size_t j = 0; j < sizes[k]; j += 64) sum += ring[k][j];
      free(ring[k]);
    }
    ring[k] = malloc(sz);
    if (!ring[k]) return 1;
    memset(ring[k], (int)(x >> 56), sz);
    sizes[k] = sz;
    for (int w = 0; w < 300; w++) sum = sum * 31 + (uint64_t)w;   /* the program's own work */
  }
  for (int k = 0; k < RING; k++) free(ring[k]);
  printf("checksum %llu\n", (unsigned long long)sum);
  return 0;
}
