/* bench/workloads/collatz-list.c -- collatz with linked-list sequences (seeds 001, 002).
 *
 * A sequence is a singly linked list of 16-byte cells {value, next}, newest value first, so
 * extending is a push at the head; copying walks the list and rebuilds it in the same order.
 * Almost every allocation is one 16-byte cell: the small-object path under cross-thread
 * frees. The driver, options and self-check are in collatz.h.
 */
#define WL_NAME "kite-wl-collatz-list"
#define WL_SHAPE "a linked list of 16-byte cells"
#include <stdlib.h>

typedef struct cell_s {
  long v;
  struct cell_s *next;
} cell_t;

static void *seq_start(long n);
static void *seq_copy(const void *s, long len, long *bad);
static void *seq_extend(void *s, long *len, int *at_one);
static void seq_free(void *s);

#include "collatz.h"

static cell_t *cell_new(long v, cell_t *next) {
  cell_t *c = (cell_t *)wl_malloc(sizeof *c);
  c->v = v;
  c->next = next;
  return c;
}

static void *seq_start(long n) { return cell_new(n, NULL); }

/* Copy in order; the newest-first invariant means each cell's value is the collatz
 * successor of its next cell's value: count the cells where that fails. */
static void *seq_copy(const void *s, long len, long *bad) {
  cell_t *head = NULL, **tail = &head;
  long n = 0;
  for (const cell_t *c = (const cell_t *)s; c; c = c->next, n++) {
    if (c->next && c->v != collatz_next(c->next->v)) (*bad)++;
    *tail = cell_new(c->v, NULL);
    tail = &(*tail)->next;
  }
  if (n != len) (*bad)++;
  return head;
}

static void *seq_extend(void *s, long *len, int *at_one) {
  cell_t *h = (cell_t *)s;
  for (int i = 0; i < CHUNK && h->v != 1; i++) {
    h = cell_new(collatz_next(h->v), h);
    (*len)++;
  }
  *at_one = (h->v == 1);
  return h;
}

static void seq_free(void *s) {
  cell_t *c = (cell_t *)s;
  while (c) {
    cell_t *n = c->next;
    free(c);
    c = n;
  }
}
