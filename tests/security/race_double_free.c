/* Case 1: two threads free the same small block at the same moment.
 * usage: race_double_free [ITERATIONS] [remote|owner]
 *   remote (default): two other threads free the main thread's block together;
 *   owner: the main thread and one other thread free it together.
 * After each race the program allocates 8 blocks of the same size and checks they are
 * distinct; at the end 4000 more (a looping free list returns one address again and again). */
#include "sec.h"
#include <sched.h>
#include <stdatomic.h>

static atomic_int go, done;
static void *volatile victim;
static int iterations = 100000;

static void spin_until(atomic_int *v, int want) {
  for (unsigned n = 0; atomic_load(v) < want; n++)
    if (n > 64) sched_yield(); /* 2 cores, 3 threads: let the others run */
}

static void *racer(void *arg) {
  (void)arg;
  for (int i = 1; i <= iterations; i++) {
    spin_until(&go, i);
    free(victim);
    atomic_fetch_add(&done, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) iterations = atoi(argv[1]);
  int owner = argc > 2 && strcmp(argv[2], "owner") == 0;
  int nthreads = owner ? 1 : 2;
  pthread_t t[2];
  for (int k = 0; k < nthreads; k++) pthread_create(&t[k], NULL, racer, NULL);
  const char *v = "SAFE";
  for (int i = 1; i <= iterations && v[0] == 'S'; i++) {
    victim = malloc(48);
    memset(victim, 1, 48);
    atomic_store(&go, i);
    if (owner) free(victim);
    spin_until(&done, i * nthreads);
    void *a[8];
    for (int k = 0; k < 8; k++) a[k] = malloc(48);
    if (!sec_distinct(a, 8)) v = "DUPLICATE";
    for (int k = 0; k < 8; k++) free(a[k]);
  }
  if (v[0] == 'S') v = sec_drain(4000, 48);
  _exit(sec_result(v)); /* after an early stop the racers are still spinning: do not join */
}
