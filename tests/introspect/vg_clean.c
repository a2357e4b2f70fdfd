/* tests/introspect/vg_clean.c -- a correct program that makes kite recycle memory every way
 * it can (blocks, whole pages to other size classes, large runs carved into small pages,
 * realloc, calloc, aligned, another thread's frees): memcheck must report no error and no
 * leak, so the hooks of the kite-valgrind library raise no false alarm. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 3000
static void *blocks[N];

static void *worker(void *arg) {
  for (int i = 0; i < N; i += 2) { free(blocks[i]); blocks[i] = NULL; }
  return arg;
}

int main(void) {
  uint64_t x = 12345;
  for (int round = 0; round < 6; round++) {
    size_t base = (size_t)16 << (round % 5);
    for (int i = 0; i < N; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      size_t n = base + (size_t)(x >> 58) * 8;
      if (i % 500 == 7) n = 70000 + (size_t)(x >> 50) % 300000; /* large runs */
      blocks[i] = (i % 3 == 0) ? calloc(1, n) : malloc(n);
      memset(blocks[i], i, n);
      if (i % 7 == 0) { blocks[i] = realloc(blocks[i], n * 3); memset(blocks[i], 1, n * 3); }
    }
    if (round % 2) {
      pthread_t t;
      pthread_create(&t, NULL, worker, NULL);
      pthread_join(t, NULL);
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
    void *a = aligned_alloc(4096, 8192), *b;
    if (posix_memalign(&b, 256, 1000) == 0) free(b);
    free(a);
    free(malloc((size_t)20 << 20)); /* huge */
  }
  return 0;
}
