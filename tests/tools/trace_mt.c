/* tests/tools/trace_mt.c -- a program for the capture tests to trace: 4 threads allocate
 * blocks of distinctive sizes, free half of them and hand the other half to the main thread
 * (cross-thread frees); every malloc-family function is called once a thread with a size no
 * library uses; then the process forks and the child allocates and frees an inherited block.
 * test_replay.py counts exactly these ops in the captured traces.
 *
 *   per worker: malloc 7000+k (k < 500), calloc(3, 333), posix_memalign(64, 777),
 *               aligned_alloc(128, 1280), realloc(.., 9999), memalign(256, 2560)
 *   child:      10 x malloc 4242 + free, free of a block the parent allocated (size 4343)
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NTHREADS 4
#define PER 500

static void *handoff[NTHREADS][PER];

static void *worker(void *arg) {
  long t = (long)arg;
  void *mine[PER];
  for (int k = 0; k < PER; k++) {
    mine[k] = malloc(7000 + (size_t)k);
    if (!mine[k]) abort();
    memset(mine[k], (int)k, 16);
  }
  for (int k = 0; k < PER; k++) {
    if (k % 2) free(mine[k]);
    else handoff[t][k] = mine[k];
  }
  void *c = calloc(3, 333);
  void *a = NULL;
  if (posix_memalign(&a, 64, 777) != 0) abort();
  void *b = aligned_alloc(128, 1280);
  void *m = memalign(256, 2560);
  void *r = malloc(10);
  r = realloc(r, 9999);
  if (!c || !b || !m || !r) abort();
  free(c);
  free(a);
  free(b);
  free(m);
  free(r);
  return NULL;
}

int main(void) {
  pthread_t th[NTHREADS];
  void *inherited = malloc(4343);
  for (long t = 0; t < NTHREADS; t++)
    if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) return 1;
  for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < NTHREADS; t++)
    for (int k = 0; k < PER; k += 2) free(handoff[t][k]);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 10; i++) free(malloc(4242));
    free(inherited);
    exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  free(inherited);
  printf("trace_mt ok\n");
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
