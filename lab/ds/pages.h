/* lab/ds/pages.h -- "mmap" and "munmap" of whole 4 KiB pages over a lab policy's region, for
 * the policies that map memory as the seeds' allocators do (hwx, pow2).
 *
 * Pages come from the region's unused tail (the break, which only moves up when needed) or
 * from holes that unmapped runs left below it: first fit in address order, as mmap reuses
 * freed ranges. An unmapped run joins the holes next to it, and a hole that reaches the break
 * lowers the break. A hole keeps {next hole, bytes} in its first 16 bytes.
 * Include once per policy file: the state is static.
 */
#ifndef LAB_DS_PAGES_H
#define LAB_DS_PAGES_H
#include <stddef.h>
#include <stdint.h>

#define LAB_PAGE ((size_t)4096)

typedef struct lab_hole_s {
  struct lab_hole_s *next;
  size_t bytes;
} lab_hole_t;

static struct {
  char *lo, *brk, *end; /* the region (8-aligned), the break, the region's end */
  lab_hole_t *holes;    /* below the break, address order, never touching each other */
} lab_pg;

/* Start over on [lo, end) (both 8-aligned). */
static void lab_pages_init(char *lo, char *end) {
  lab_pg.lo = lab_pg.brk = lo;
  lab_pg.end = end;
  lab_pg.holes = NULL;
}

/* A run of `bytes` (a multiple of LAB_PAGE), or NULL when the region has no room. */
static char *lab_pages_map(size_t bytes) {
  lab_hole_t **pp = &lab_pg.holes;
  for (lab_hole_t *h = lab_pg.holes; h; pp = &h->next, h = h->next) {
    if (h->bytes < bytes) continue;
    if (h->bytes == bytes) {
      *pp = h->next;
    } else {
      lab_hole_t *rest = (lab_hole_t *)((char *)h + bytes);
      rest->next = h->next;
      rest->bytes = h->bytes - bytes;
      *pp = rest;
    }
    return (char *)h;
  }
  if ((size_t)(lab_pg.end - lab_pg.brk) < bytes) return NULL;
  char *p = lab_pg.brk;
  lab_pg.brk += bytes;
  return p;
}

static void lab_pages_unmap(char *p, size_t bytes) {
  lab_hole_t *prev = NULL, *h = lab_pg.holes;
  while (h && (char *)h < p) prev = h, h = h->next;
  lab_hole_t *n = (lab_hole_t *)p;
  n->bytes = bytes;
  n->next = h;
  if (h && p + bytes == (char *)h) { /* join the hole above */
    n->bytes += h->bytes;
    n->next = h->next;
  }
  if (prev && (char *)prev + prev->bytes == p) { /* join the hole below */
    prev->bytes += n->bytes;
    prev->next = n->next;
    n = prev;
  } else if (prev) {
    prev->next = n;
  } else {
    lab_pg.holes = n;
  }
  if ((char *)n + n->bytes == lab_pg.brk) { /* the highest hole: give it back to the break */
    lab_pg.brk = (char *)n;
    lab_hole_t **pp = &lab_pg.holes;
    while (*pp != n) pp = &(*pp)->next;
    *pp = NULL;
  }
}

/* Check the holes; prints the first violation as "lab NAME: invalid heap: ..." */
static bool lab_pages_check(const char *name) {
  if (lab_pg.brk < lab_pg.lo || lab_pg.brk > lab_pg.end || ((uintptr_t)lab_pg.brk & 7)) {
    fprintf(stderr, "lab %s: invalid heap: break %p outside the region\n", name, (void *)lab_pg.brk);
    return false;
  }
  size_t limit = (size_t)(lab_pg.end - lab_pg.lo) / LAB_PAGE + 1, n = 0;
  for (lab_hole_t *h = lab_pg.holes; h; h = h->next) {
    if ((char *)h < lab_pg.lo || (char *)h >= lab_pg.brk || !h->bytes || h->bytes % LAB_PAGE ||
        h->bytes > (size_t)(lab_pg.brk - (char *)h) || (char *)h + h->bytes == lab_pg.brk ||
        (h->next && (char *)h->next <= (char *)h + h->bytes) || ++n > limit) {
      fprintf(stderr, "lab %s: invalid heap: hole %p of %zu bytes (out of order, touching, "
              "or at the break)\n", name, (void *)h, h->bytes);
      return false;
    }
  }
  return true;
}

/* The walk of a page-mapping policy reports each maximal run of free space (free blocks,
 * holes, the unused tail) as one free block, so it tiles the region like the other
 * policies' walks. */
typedef struct {
  lab_walk_fn cb;
  void *ctx;
  size_t count;
  char *run; /* start of the pending free run, or NULL */
} lab_pages_walker_t;

static void lab_pages_emit(lab_pages_walker_t *w, char *start, char *end, bool is_free, size_t hdr) {
  if (is_free) {
    if (!w->run) w->run = start;
    return;
  }
  if (w->run) {
    if (w->cb) w->cb(w->ctx, w->run + hdr, (size_t)(start - w->run) - hdr, true);
    w->count++;
    w->run = NULL;
  }
  if (w->cb) w->cb(w->ctx, start + hdr, (size_t)(end - start) - hdr, false);
  w->count++;
}

static size_t lab_pages_walk_end(lab_pages_walker_t *w, size_t hdr) {
  if (!w->run) w->run = lab_pg.brk;
  if (lab_pg.end - w->run >= (ptrdiff_t)hdr) {
    if (w->cb) w->cb(w->ctx, w->run + hdr, (size_t)(lab_pg.end - w->run) - hdr, true);
    w->count++;
  }
  return w->count;
}
#endif
