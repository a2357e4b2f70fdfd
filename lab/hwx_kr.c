/* lab/hwx_kr.c -- the classic K&R allocator (the lab's earlier `hwx`; lab/hwx.c is now the
 * seeds' own hwx design).
 *
 * One circular free list in address order, threaded through a static zero-sized `base`
 * element; `freep` is the rover (next fit: each search starts where the previous one
 * ended). Every block, free or allocated, starts with a 16-byte header:
 *
 *     [next (free blocks only) | units][payload: (units - 1) * 16 bytes]
 *
 * units counts 16-byte units including the header; header_size is 16, payloads are 16-byte
 * aligned. malloc walks the list from the rover and carves the tail off the first block big
 * enough (or unlinks an exact fit); free walks the list to the block's address position (O(n))
 * and coalesces with the free neighbours on both sides. realloc never grows in place (the
 * baseline keeps the block when it already fits, otherwise malloc-copy-free). Kept as a
 * second list baseline: next fit with a rover and coalescing at insertion, where the seeds'
 * hwx (lab/hwx.c) searches from the head and coalesces by rescanning the list.
 *
 * Invariants (validate): the list from base.next back to base is strictly increasing in
 * address, every element is a block of the heap, no free block touches the next one, the
 * blocks tile the heap, and the free blocks of the tiling are exactly the list.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"

typedef struct hwx_hdr_s {
  struct hwx_hdr_s *next;
  size_t units;
} hwx_hdr_t;

#define HWX_UNIT sizeof(hwx_hdr_t)

static hwx_hdr_t hwx_base;
static hwx_hdr_t *hwx_freep;
static hwx_hdr_t *hwx_lo, *hwx_end;

#define HWX_FAIL(...)                                  \
  do {                                                 \
    fprintf(stderr, "lab hwx_kr: invalid heap: ");        \
    fprintf(stderr, __VA_ARGS__);                      \
    fputc('\n', stderr);                               \
    return false;                                      \
  } while (0)

static bool hwx_init(void *start, size_t size) {
  uintptr_t s = (uintptr_t)start, e = s + size;
  if (!start || e < s) return false;
  uintptr_t lo = (s + HWX_UNIT - 1) & ~(uintptr_t)(HWX_UNIT - 1);
  if (lo >= e || (e - lo) / HWX_UNIT < 2) return false;
  size_t units = (e - lo) / HWX_UNIT;
  hwx_lo = (hwx_hdr_t *)lo;
  hwx_end = hwx_lo + units;
  hwx_lo->units = units;
  hwx_lo->next = &hwx_base;
  hwx_base.next = hwx_lo;
  hwx_base.units = 0;
  hwx_freep = &hwx_base;
  return true;
}

static void *hwx_malloc(size_t n) {
  if (n > (SIZE_MAX >> 2)) return NULL;
  size_t nunits = (n + HWX_UNIT - 1) / HWX_UNIT + 1;
  if (nunits < 2) nunits = 2;
  hwx_hdr_t *prevp = hwx_freep;
  for (hwx_hdr_t *p = prevp->next;; prevp = p, p = p->next) {
    if (p->units >= nunits) {
      if (p->units == nunits) {
        prevp->next = p->next;
      } else {
        p->units -= nunits; /* carve the tail: the free block stays where it is */
        p += p->units;
        p->units = nunits;
      }
      hwx_freep = prevp;
      return p + 1;
    }
    if (p == hwx_freep) return NULL; /* wrapped around: nothing fits */
  }
}

static void hwx_free(void *ap) {
  if (!ap) return;
  hwx_hdr_t *bp = (hwx_hdr_t *)ap - 1, *p;
  for (p = hwx_freep; !(bp > p && bp < p->next); p = p->next)
    if (p >= p->next && (bp > p || bp < p->next)) break; /* at the wrap point */
  if (p->next != &hwx_base && bp + bp->units == p->next) { /* join the right neighbour */
    bp->units += p->next->units;
    bp->next = p->next->next;
  } else {
    bp->next = p->next;
  }
  if (p != &hwx_base && p + p->units == bp) { /* join the left neighbour */
    p->units += bp->units;
    p->next = bp->next;
  } else {
    p->next = bp;
  }
  hwx_freep = p;
}

static size_t hwx_usable(void *ap) { return (((hwx_hdr_t *)ap - 1)->units - 1) * HWX_UNIT; }

static void *hwx_realloc(void *ap, size_t n) {
  if (!ap) return hwx_malloc(n);
  if (n == 0) {
    hwx_free(ap);
    return NULL;
  }
  size_t cap = hwx_usable(ap);
  if (n <= cap) return ap;
  void *q = hwx_malloc(n);
  if (!q) return NULL;
  memcpy(q, ap, cap);
  hwx_free(ap);
  return q;
}

/* First free block at or after address p, in list order (the list is address-ordered). */
static size_t hwx_walk(lab_walk_fn cb, void *ctx) {
  size_t count = 0;
  hwx_hdr_t *f = hwx_base.next;
  for (hwx_hdr_t *p = hwx_lo; p < hwx_end && p->units; p += p->units, count++) {
    while (f != &hwx_base && f < p) f = f->next;
    if (cb) cb(ctx, p + 1, (p->units - 1) * HWX_UNIT, f == p);
  }
  return count;
}

static bool hwx_validate(void) {
  if (!hwx_lo) HWX_FAIL("not initialised");
  size_t limit = (size_t)(hwx_end - hwx_lo), listed = 0;
  bool rover_seen = hwx_freep == &hwx_base;
  for (hwx_hdr_t *f = hwx_base.next; f != &hwx_base; f = f->next) {
    if (f < hwx_lo || f >= hwx_end) HWX_FAIL("free list holds %p, outside the heap", (void *)f);
    if (!f->units || f->units > (size_t)(hwx_end - f))
      HWX_FAIL("free block %p has %zu units", (void *)f, f->units);
    if (f->next != &hwx_base && f->next <= f)
      HWX_FAIL("free list out of address order at %p", (void *)f);
    if (f + f->units == f->next) HWX_FAIL("free blocks %p and %p touch", (void *)f, (void *)f->next);
    if (f == hwx_freep) rover_seen = true;
    if (++listed > limit) HWX_FAIL("free list has a cycle");
  }
  if (!rover_seen) HWX_FAIL("rover %p is not on the free list", (void *)hwx_freep);
  size_t total = 0, found = 0;
  hwx_hdr_t *f = hwx_base.next;
  for (hwx_hdr_t *p = hwx_lo; p < hwx_end; p += p->units) {
    if (!p->units || p->units > (size_t)(hwx_end - p))
      HWX_FAIL("block %p has %zu units", (void *)p, p->units);
    while (f != &hwx_base && f < p) f = f->next;
    if (f == p) found++;
    total += p->units;
  }
  if (total != limit) HWX_FAIL("blocks add up to %zu units, heap has %zu", total, limit);
  if (found != listed) HWX_FAIL("%zu listed free blocks, %zu found in the heap", listed, found);
  return true;
}

const lab_policy_t lab_hwx_kr_policy_def = {
    "hwx_kr", "K&R baseline: one address-ordered circular free list, next fit, coalescing",
    16, 16, hwx_init, hwx_malloc, hwx_free, hwx_realloc, hwx_validate, hwx_walk, hwx_usable};

const lab_policy_t *lab_hwx_kr_policy(void) { return &lab_hwx_kr_policy_def; }
