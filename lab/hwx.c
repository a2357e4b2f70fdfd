/* lab/hwx.c -- the seeds' hwx (seeds 001/002): the simple list allocator they time against.
 *
 * Design, as the seeds have it:
 *  - one global mutex around every call;
 *  - one singly linked free list sorted by address; malloc takes the first fit from the head,
 *    cutting the request off the front of the block (the rest stays on the list in place);
 *  - a request of up to 4 KiB including its 8-byte size header is cut from 4 KiB pages, which
 *    are mapped one at a time: when no free block fits, one more page is mapped, freed into
 *    the list, and the search runs again;
 *  - a larger request gets a mapping of its own (whole pages), unmapped on free;
 *  - free inserts the block at its address position (a walk from the head), then coalesces by
 *    walking the whole list, restarting from the head after every merge;
 *  - realloc is malloc, copy, free (a block that already fits is kept).
 *
 * The lab's heap is a region handed to init, so "mapping" is done by the page pool of
 * ds/pages.h over it (holes that unmapped mappings leave are reused first fit, as mmap
 * would). Small pages are never given back, as in the seeds.
 *
 * Blocks: [size word][payload]; header_size 8, 8-byte aligned payloads (the seeds' granule),
 * sizes in 8-byte steps, smallest block 16 bytes (size + the free list's next pointer).
 * The size word of a mapping's block carries HWX_BIG (bit 0). A free block is
 * {size, next}.
 *
 * Invariants (validate): the free list is strictly increasing in address, every element a
 * small block found by the linear scan, no two free blocks touch; holes increasing, page
 * multiples, never touching each other or the break; blocks, big blocks and holes tile
 * [lo, brk) exactly.
 * The walk reports each maximal run of free space (free blocks, holes, the unused tail) as one
 * free block, so the walk tiles the whole region like the other policies' walks.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"
#include "ds/pages.h"

#define HWX_PAGE LAB_PAGE
#define HWX_HDR ((size_t)8)
#define HWX_MIN ((size_t)16)
#define HWX_BIG ((size_t)1)

typedef struct hwx_free_s {
  size_t size; /* the block's size word (header) */
  struct hwx_free_s *next;
} hwx_free_t;

static pthread_mutex_t hwx_lock = PTHREAD_MUTEX_INITIALIZER;
static hwx_free_t *hwx_head;  /* free list, address order */

#define HWX_FAIL(...)                           \
  do {                                          \
    fprintf(stderr, "lab hwx: invalid heap: "); \
    fprintf(stderr, __VA_ARGS__);               \
    fputc('\n', stderr);                        \
    return false;                               \
  } while (0)

static inline size_t hwx_size(const void *blk) { return *(const size_t *)blk & ~HWX_BIG; }

/* ---- the free list ---- */

/* Insert blk in address order, then coalesce as the seeds do: walk the whole list from the
 * head, merging touching neighbours and starting over after every merge. */
static void hwx_insert(hwx_free_t *blk) {
  hwx_free_t **pp = &hwx_head;
  while (*pp && *pp < blk) pp = &(*pp)->next;
  blk->next = *pp;
  *pp = blk;
  for (hwx_free_t *f = hwx_head; f && f->next;) {
    if ((char *)f + f->size == (char *)f->next) {
      f->size += f->next->size;
      f->next = f->next->next;
      f = hwx_head; /* restart from the head */
    } else {
      f = f->next;
    }
  }
}

static void *hwx_take(size_t need) {
  for (hwx_free_t **pp = &hwx_head; *pp; pp = &(*pp)->next) {
    hwx_free_t *f = *pp;
    if (f->size < need) continue;
    if (f->size - need >= HWX_MIN) { /* cut the front; the rest stays in place */
      hwx_free_t *rest = (hwx_free_t *)((char *)f + need);
      rest->size = f->size - need;
      rest->next = f->next;
      *pp = rest;
      f->size = need;
    } else {
      *pp = f->next;
    }
    return (char *)f + HWX_HDR;
  }
  return NULL;
}

static void *hwx_malloc_locked(size_t n) {
  if (n > (SIZE_MAX >> 2)) return NULL;
  size_t need = (n + HWX_HDR + 7) & ~(size_t)7;
  if (need < HWX_MIN) need = HWX_MIN;
  if (need > HWX_PAGE) { /* a mapping of its own */
    size_t bytes = (need + HWX_PAGE - 1) & ~(HWX_PAGE - 1);
    char *m = lab_pages_map(bytes);
    if (!m) return NULL;
    *(size_t *)m = bytes | HWX_BIG;
    return m + HWX_HDR;
  }
  for (;;) {
    void *p = hwx_take(need);
    if (p) return p;
    hwx_free_t *page = (hwx_free_t *)lab_pages_map(HWX_PAGE);
    if (!page) return NULL;
    page->size = HWX_PAGE;
    hwx_insert(page);
  }
}

static void hwx_free_locked(void *p) {
  char *blk = (char *)p - HWX_HDR;
  size_t w = *(size_t *)blk;
  if (w & HWX_BIG) lab_pages_unmap(blk, w & ~HWX_BIG);
  else hwx_insert((hwx_free_t *)blk);
}

static size_t hwx_usable(void *p) { return hwx_size((char *)p - HWX_HDR) - HWX_HDR; }

static void *hwx_malloc(size_t n) {
  pthread_mutex_lock(&hwx_lock);
  void *p = hwx_malloc_locked(n);
  pthread_mutex_unlock(&hwx_lock);
  return p;
}

static void hwx_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&hwx_lock);
  hwx_free_locked(p);
  pthread_mutex_unlock(&hwx_lock);
}

static void *hwx_realloc(void *p, size_t n) {
  if (!p) return hwx_malloc(n);
  if (n == 0) {
    hwx_free(p);
    return NULL;
  }
  pthread_mutex_lock(&hwx_lock);
  size_t cap = hwx_usable(p);
  void *q = p;
  if (n > cap) {
    q = hwx_malloc_locked(n);
    if (q) {
      memcpy(q, p, cap);
      hwx_free_locked(p);
    }
  }
  pthread_mutex_unlock(&hwx_lock);
  return q;
}

static bool hwx_init(void *start, size_t size) {
  uintptr_t s = (uintptr_t)start, e = s + size;
  if (!start || e < s) return false;
  uintptr_t lo = (s + 7) & ~(uintptr_t)7;
  if (lo >= e || e - lo < HWX_MIN) return false;
  lab_pages_init((char *)lo, (char *)lo + ((e - lo) & ~(uintptr_t)7));
  hwx_head = NULL;
  return true;
}

/* ---- walk and validate: one linear scan of [lo, brk) ---- */

static size_t hwx_walk(lab_walk_fn cb, void *ctx) {
  lab_pages_walker_t w = {cb, ctx, 0, NULL};
  hwx_free_t *f = hwx_head;
  lab_hole_t *h = lab_pg.holes;
  for (char *x = lab_pg.lo; x < lab_pg.brk;) {
    if ((char *)h == x) {
      lab_pages_emit(&w, x, x + h->bytes, true, HWX_HDR);
      x += h->bytes;
      h = h->next;
      continue;
    }
    size_t size = hwx_size(x);
    while (f && (char *)f < x) f = f->next;
    lab_pages_emit(&w, x, x + size, (char *)f == x, HWX_HDR);
    x += size;
  }
  return lab_pages_walk_end(&w, HWX_HDR);
}

static bool hwx_validate(void) {
  if (!lab_pg.lo) HWX_FAIL("not initialised");
  if (!lab_pages_check("hwx")) return false;
  size_t limit = (size_t)(lab_pg.end - lab_pg.lo) / HWX_MIN + 1;
  size_t listed = 0;
  for (hwx_free_t *f = hwx_head; f; f = f->next) {
    if ((char *)f < lab_pg.lo || (char *)f >= lab_pg.brk) HWX_FAIL("free list holds %p, outside the heap", (void *)f);
    if (f->size & HWX_BIG || f->size < HWX_MIN || f->size & 7) HWX_FAIL("free block %p has size %zu", (void *)f, f->size);
    if (f->next && f->next <= f) HWX_FAIL("free list out of address order at %p", (void *)f);
    if (f->next && (char *)f + f->size == (char *)f->next)
      HWX_FAIL("free blocks %p and %p touch (missed coalescing)", (void *)f, (void *)f->next);
    if (++listed > limit) HWX_FAIL("free list has a cycle");
  }
  size_t found = 0;
  hwx_free_t *f = hwx_head;
  lab_hole_t *h = lab_pg.holes;
  for (char *x = lab_pg.lo; x < lab_pg.brk;) {
    if ((char *)h == x) {
      x += h->bytes;
      h = h->next;
      continue;
    }
    size_t w = *(size_t *)x, size = w & ~HWX_BIG;
    if (size < HWX_MIN || (size & 7) || size > (size_t)(lab_pg.brk - x) || ((w & HWX_BIG) && size % HWX_PAGE))
      HWX_FAIL("block %p has size word %zx", (void *)x, w);
    while (f && (char *)f < x) f = f->next;
    if ((char *)f == x) {
      if (w & HWX_BIG) HWX_FAIL("mapped block %p is on the free list", (void *)x);
      found++;
    }
    x += size;
  }
  if (h) HWX_FAIL("hole %p not reached by the scan", (void *)h);
  if (found != listed) HWX_FAIL("%zu listed free blocks, %zu found in the heap", listed, found);
  return true;
}

const lab_policy_t lab_hwx_policy_def = {
    "hwx", "the seeds' hwx: global lock, one address-ordered list, first fit, 4 KiB pages, coalescing rescans",
    8, HWX_HDR, hwx_init, hwx_malloc, hwx_free, hwx_realloc, hwx_validate, hwx_walk, hwx_usable};

const lab_policy_t *lab_hwx_policy(void) { return &lab_hwx_policy_def; }
