/* tests/tools/advise_leaky.c -- a small program with a known allocation profile for the
 * `kite-lab advise` test (tests/tools/test_advise.py): built with frame pointers so every
 * allocation site has its callers.
 *   - main builds and frees 3000 list nodes of 24..88 bytes (short and long lifetimes),
 *   - a second thread allocates and frees 500 blocks of 200 bytes,
 *   - advise_leak_site() allocates 7 blocks of 48 bytes that are never freed (the known leak),
 *     called from leak_caller() called from main.
 * No stdio (its buffers would be leaks of their own). Exit status 0. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct node {
  struct node *next;
  char payload[];
};

__attribute__((noinline)) static struct node *make_node(size_t extra) {
  struct node *n = malloc(sizeof *n + extra);
  if (n) memset(n->payload, 1, extra);
  return n;
}

__attribute__((noinline)) void *advise_leak_site(void) {
  void *p = malloc(48);
  if (p) memset(p, 2, 48);
  return p;
}

static void *volatile sink;

__attribute__((noinline)) void leak_caller(void) {
  for (int i = 0; i < 7; i++) sink = advise_leak_site();
}

static void *worker(void *arg) {
  for (int i = 0; i < 500; i++) {
    void *p = malloc(200);
    sink = p;
    free(p);
  }
  return arg;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  struct node *head = NULL;
  for (int i = 0; i < 3000; i++) {
    struct node *n = make_node(16 + (size_t)(i % 9) * 8);
    if (!n) return 1;
    if (i % 3 == 0) { /* short-lived */
      free(n);
      continue;
    }
    n->next = head;
    head = n;
  }
  leak_caller();
  while (head) {
    struct node *n = head->next;
    free(head);
    head = n;
  }
  pthread_join(t, NULL);
  return 0;
}
