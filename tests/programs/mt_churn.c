/* tests/programs/mt_churn.c -- a multi-threaded C program: 8 threads allocate, fill and
 * hand blocks to each other through a locked ring; every block is verified by the thread
 * that frees it. Prints a checksum that does not depend on the allocator. run.sh builds it
 * three ways (plain, linked statically with libkite.a, and runs the plain one preloaded) and
 * compares the outputs.
 * If kite is linked in (built with -DMT_CHURN_KITE, or kite_owns resolves through the weak
 * reference), it reports on stderr whether malloc's blocks are kite's: "mt_churn: malloc served by kite: yes". */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MT_CHURN_KITE
/* linked with kite: a strong reference, so a static link pulls kite_owns in */
#include "kite.h"
#define KITE_LINKED 1
#else
#define KITE_LINKED (kite_owns != NULL)
extern bool kite_owns(const void *p) __attribute__((weak));
#endif

#define THREADS 8
#define RING 256
static void *ring[RING];
static size_t ring_n[RING];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int bad;

static void fill(unsigned char *p, size_t n) { for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(n + i * 13); }
static int check(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) if (p[i] != (unsigned char)(n + i * 13)) return 0;
  return 1;
}

static void *work(void *arg) {
  uint64_t x = (uintptr_t)arg + 1, sum = 0;
  for (int i = 0; i < 10000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = (x >> 33) % 100 < 95 ? 1 + (x >> 40) % 700 : 1 + (x >> 40) % 200000;
    unsigned char *p = malloc(n);
    if (!p) { bad = 1; break; }
    fill(p, n);
    int slot = (int)((x >> 20) % RING);
    pthread_mutex_lock(&mu);
    void *old = ring[slot];
    size_t on = ring_n[slot];
    ring[slot] = p;
    ring_n[slot] = n;
    pthread_mutex_unlock(&mu);
    if (old) {
      if (!check(old, on)) bad = 1;
      sum += on;
      free(old);
    }
  }
  return (void *)(uintptr_t)sum;
}

int main(void) {
  pthread_t t[THREADS];
  uint64_t total = 0;
  for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, work, (void *)i);
  for (int i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    total += (uintptr_t)r;
  }
  for (int i = 0; i < RING; i++) {
    if (ring[i]) {
      if (!check(ring[i], ring_n[i])) bad = 1;
      total += ring_n[i];
      free(ring[i]);
    }
  }
  /* every block's size is counted once, whoever freed it: the total is fixed */
  printf("mt_churn total %llu %s\n", (unsigned long long)total, bad ? "CORRUPT" : "ok");
  if (KITE_LINKED) {
    void *p = malloc(24);
    fprintf(stderr, "mt_churn: malloc served by kite: %s\n", kite_owns(p) ? "yes" : "no");
    free(p);
  }
  return bad;
}
