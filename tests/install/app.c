/* tests/install/app.c -- a C program built against an installed kite: a linked list of
 * strings and a growing array, checked, then consumer.h's proof that kite served them. */
#include "consumer.h"

typedef struct node_s { struct node_s *next; char *text; } node_t;

int main(int argc, char **argv) {
  node_t *head = NULL;
  for (int i = 0; i < 20000; i++) {
    node_t *n = malloc(sizeof *n);
    n->text = malloc(16 + (size_t)(i % 200));
    snprintf(n->text, 16, "%d", i);
    n->next = head;
    head = n;
  }
  long *v = NULL;
  size_t len = 0;
  for (long i = 1; i <= 100000; i++) {
    if ((len & (len - 1)) == 0) v = realloc(v, (len ? 2 * len : 1) * sizeof *v);
    v[len++] = i;
  }
  long long sum = 0, count = 0;
  for (node_t *n = head; n;) {
    sum += atoi(n->text);
    count++;
    node_t *next = n->next;
    free(n->text);
    free(n);
    n = next;
  }
  for (size_t i = 0; i < len; i++) sum += v[i];
  free(v);
  /* 0+..+19999 and 1+..+100000 */
  CONSUMER_CHECK(count == 20000);
  CONSUMER_CHECK(sum == 19999LL * 20000 / 2 + 100000LL * 100001 / 2);
  consumer_check_kite(argc, argv, "app_c");
  return consumer_fails ? 1 : 0;
}
