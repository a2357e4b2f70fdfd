/* bench/fastpath.c -- malloc+free pairs in three loop shapes, for counting instructions.
 *
 *   kite-fastpath [-s one|ring|xthread] N [SIZE...]
 *
 * one      (default) N times malloc(SIZE) then free of that block: one block live. Some
 *          allocators treat a page whose last block is freed specially (retire it, or keep
 *          it as the one "full-free" page), so this shape alone can flatter or penalize
 *          them; hence the others.
 * ring     64 blocks live, of 8 sizes (16, 24 ... 72 bytes): each of N iterations frees the
 *          oldest block and allocates one in its place (the size of slot k is 16 + 8*(k%8)).
 *          SIZE arguments are ignored.
 * xthread  two threads: this one allocates batches of 1024 blocks of SIZE, a second one
 *          frees each batch (every free is remote); strict alternation by two semaphores,
 *          so a count is deterministic. N pairs, rounded up to whole batches; the count
 *          covers both threads (callgrind's totals do), synchronization costs one semaphore
 *          pair per 1024 pairs.
 * For each SIZE: a warm-up of 10240 pairs, then N. Run it under `valgrind --tool=callgrind`
 * twice with different N (bench/fastpath.sh does): the difference of the totals divided by
 * the difference of N is the cost of one pair (loop included), with start-up, thread
 * creation and warm-up cancelled. The allocator is whatever malloc the process gets
 * (LD_PRELOAD selects kite, mimalloc ...). Built with -fno-builtin-malloc so the compiler
 * cannot drop the pairs.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

static __attribute__((noinline)) void pairs(size_t n, size_t size) {
  for (size_t i = 0; i < n; i++) {
    void *p = malloc(size);
    sink = p;
    free(p);
  }
}

#define RING 64
static void *g_ring[RING];

static __attribute__((noinline)) void ring(size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t k = i & (RING - 1);
    free(g_ring[k]);
    g_ring[k] = malloc(16 + 8 * (k & 7));
    sink = g_ring[k];
  }
}

#define BATCH 1024
static void *g_batch[BATCH];
static sem_t g_full, g_empty;
static size_t g_batches;

static void *freer(void *arg) {
  (void)arg;
  for (size_t b = 0; b < g_batches; b++) {
    sem_wait(&g_full);
    for (size_t k = 0; k < BATCH; k++) free(g_batch[k]);
    sem_post(&g_empty);
  }
  return NULL;
}

static __attribute__((noinline)) int xthread(size_t n, size_t size) {
  g_batches = (n + BATCH - 1) / BATCH;
  sem_init(&g_full, 0, 0);
  sem_init(&g_empty, 0, 1);
  pthread_t t;
  if (pthread_create(&t, NULL, freer, NULL)) return 1;
  for (size_t b = 0; b < g_batches; b++) {
    sem_wait(&g_empty);
    for (size_t k = 0; k < BATCH; k++) g_batch[k] = malloc(size);
    sem_post(&g_full);
  }
  pthread_join(t, NULL);
  sem_destroy(&g_full);
  sem_destroy(&g_empty);
  return 0;
}

static void usage(FILE *f, const char *prog) {
  fprintf(f, "usage: %s [-s one|ring|xthread] N [SIZE...]\n"
             "  one: N malloc(SIZE)+free pairs, one block live (default)\n"
             "  ring: N iterations keeping 64 blocks of 16..72 bytes live, freeing the oldest\n"
             "  xthread: N pairs, malloc on this thread, free on another (batches of 1024)\n",
          prog);
}

int main(int argc, char **argv) {
  const char *shape = "one";
  int a = 1;
  if (a < argc && (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help"))) {
    usage(stdout, argv[0]);
    return 0;
  }
  if (a + 1 < argc && !strcmp(argv[a], "-s")) {
    shape = argv[a + 1];
    a += 2;
  }
  int is_ring = !strcmp(shape, "ring"), is_x = !strcmp(shape, "xthread");
  if ((!is_ring && !is_x && strcmp(shape, "one")) || a >= argc || (!is_ring && a + 1 >= argc)) {
    usage(stderr, argv[0]);
    return 2;
  }
  size_t n = strtoull(argv[a], NULL, 10);
  if (is_ring) {
    for (size_t k = 0; k < RING; k++) g_ring[k] = malloc(16 + 8 * (k & 7));
    ring(10240);
    ring(n);
    for (size_t k = 0; k < RING; k++) free(g_ring[k]);
    return 0;
  }
  for (int i = a + 1; i < argc; i++) {
    size_t size = strtoull(argv[i], NULL, 10);
    if (is_x) {
      if (xthread(10240, size) || xthread(n, size)) return 1;
    } else {
      pairs(10240, size);
      pairs(n, size);
    }
  }
  return 0;
}
