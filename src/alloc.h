/* src/alloc.h -- what alloc.c and free.c (the entry-point layer) share. */
#ifndef KITE_ALLOC_H
#define KITE_ALLOC_H
#include "types.h"

#define KITE_MAX_REQUEST ((size_t)PTRDIFF_MAX)

/* Classify p. Returns the head descriptor for arena blocks (small or large), NULL for
 * huge blocks (*huge = usable size) and for invalid pointers (*huge = 0). A small block is
 * valid when p is the start of a block carved so far (it may be free). */
kite_page_t *_kite_lookup(const void *p, size_t *huge);
/* init.c: once per process (idempotent, cheap after the first call): options, the exit
 * statistics' stderr duplicate, fork handlers. */
void _kite_process_init(void);
#endif
