/* bench/workloads/collatz-ivec.c -- collatz with growable-vector sequences (seeds 001, 002).
 *
 * A sequence is an ivec: a 24-byte header {data, size, cap} plus an array of longs that
 * starts at 4 elements (32 bytes) and doubles by realloc when full. Copying pushes every
 * element into a fresh ivec, so the array walks up the realloc ladder 32, 64, 128, ...
 * bytes each time: small headers, mid-size arrays and many reallocs under cross-thread
 * frees. The driver, options and self-check are in collatz.h.
 */
#define WL_NAME "kite-wl-collatz-ivec"
#define WL_SHAPE "a 24-byte header plus an array of longs grown by realloc doubling"
#include <stdlib.h>

typedef struct ivec_s {
  long *data;
  long size, cap;
} ivec_t;

static void *seq_start(long n);
static void *seq_copy(const void *s, long len, long *bad);
static void *seq_extend(void *s, long *len, int *at_one);
static void seq_free(void *s);

#include "collatz.h"

static ivec_t *ivec_new(void) {
  ivec_t *v = (ivec_t *)wl_malloc(sizeof *v);
  v->size = 0;
  v->cap = 4;
  v->data = (long *)wl_malloc((size_t)v->cap * sizeof(long));
  return v;
}

static void ivec_push(ivec_t *v, long x) {
  if (v->size == v->cap) {
    v->cap *= 2;
    v->data = (long *)wl_realloc(v->data, (size_t)v->cap * sizeof(long));
  }
  v->data[v->size++] = x;
}

static void *seq_start(long n) {
  ivec_t *v = ivec_new();
  ivec_push(v, n);
  return v;
}

static void *seq_copy(const void *s, long len, long *bad) {
  const ivec_t *o = (const ivec_t *)s;
  ivec_t *v = ivec_new();
  if (o->size != len) (*bad)++;
  for (long i = 0; i < o->size; i++) {
    if (i > 0 && o->data[i] != collatz_next(o->data[i - 1])) (*bad)++;
    ivec_push(v, o->data[i]);
  }
  return v;
}

static void *seq_extend(void *s, long *len, int *at_one) {
  ivec_t *v = (ivec_t *)s;
  for (int i = 0; i < CHUNK && v->data[v->size - 1] != 1; i++)
    ivec_push(v, collatz_next(v->data[v->size - 1]));
  *len = v->size;
  *at_one = (v->data[v->size - 1] == 1);
  return v;
}

static void seq_free(void *s) {
  ivec_t *v = (ivec_t *)s;
  free(v->data);
  free(v);
}
