/* lab/ds/list.h -- intrusive doubly linked list of free blocks (the seglist's size classes).
 *
 * A list is a head pointer; each node lives in the payload of a free block:
 *     node->prev == NULL for the head, node->next == NULL for the tail,
 *     node->next->prev == node for every node but the tail.
 * push is LIFO (O(1)), remove is O(1) given the node. lab_list_check walks a list and checks
 * the links, stopping with an error after `limit` nodes (a cycle).
 */
#ifndef LAB_DS_LIST_H
#define LAB_DS_LIST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct lab_lnode_s {
  struct lab_lnode_s *prev, *next;
} lab_lnode_t;

static inline void lab_list_push(lab_lnode_t **head, lab_lnode_t *n) {
  n->prev = NULL;
  n->next = *head;
  if (*head) (*head)->prev = n;
  *head = n;
}

static inline void lab_list_remove(lab_lnode_t **head, lab_lnode_t *n) {
  if (n->prev) n->prev->next = n->next;
  else *head = n->next;
  if (n->next) n->next->prev = n->prev;
}

/* Check the links of one list; calls visit(node, ctx) on every node (it returns false to
 * stop with an error of its own). Returns false and prints on the first violation. */
static inline bool lab_list_check(const char *what, lab_lnode_t *head, size_t limit,
                                  bool (*visit)(lab_lnode_t *, void *), void *ctx) {
  lab_lnode_t *prev = NULL;
  size_t n = 0;
  for (lab_lnode_t *x = head; x; prev = x, x = x->next) {
    if (++n > limit) {
      fprintf(stderr, "lab %s: list longer than the heap allows (a cycle?)\n", what);
      return false;
    }
    if (visit && !visit(x, ctx)) return false; /* first: it checks x is a real block */
    if (x->prev != prev) {
      fprintf(stderr, "lab %s: node %p has prev %p, expected %p\n", what, (void *)x,
              (void *)x->prev, (void *)prev);
      return false;
    }
  }
  return true;
}
#endif
