/* lab/pow2.c -- seed 002's arena allocator, one arena: power-of-two bins with split and
 * coalesce.
 *
 * Design, as seed 002 has it (its per-thread arenas and global arena reduced to the one
 * arena a single-threaded lab heap needs):
 *  - 9 bins of blocks of 16, 32, ..., 4096 bytes, each a singly linked list sorted by address;
 *  - a request gets 8 bytes of header added and takes the smallest bin whose blocks hold
 *    it (64 bytes -> 72 -> the 128-byte bin); an empty bin borrows from the next bin up,
 *    split in halves down to the size wanted, the spare halves going to the lower bins;
 *    when every bin up to 4096 is empty, a new 4 KiB page is mapped;
 *  - free puts the block into its bin (sorted insert) and coalesces it unconditionally with
 *    the list neighbour before or after it when they touch: the pair leaves the list and goes
 *    one bin up (again coalescing there). Not buddies: any two touching blocks of a size
 *    merge, the fragmentation seed 002 regrets. 4096-byte blocks are never coalesced;
 *  - a larger request (over 4096 with its header) gets a mapping of its own, unmapped on
 *    free (seed 002 sends those to mmap too);
 *  - realloc keeps a block that fits, else malloc, copy, free.
 * Pages and mappings come from the region through ds/pages.h.
 *
 * Blocks: [header: size | ALLOC | BIG][payload]; header_size 8, 8-byte aligned payloads;
 * a free block is {header, next}. Invariants (validate): every bin sorted by address, its
 * blocks free, of the bin's size, found by the linear scan of the mapped pages; no free
 * block in two bins; the scan tiles [lo, brk) with blocks, mappings and holes.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"
#include "ds/pages.h"

#define P2_HDR ((size_t)8)
#define P2_BINS 9
#define P2_ALLOC ((size_t)1)
#define P2_BIG ((size_t)2)
#define P2_FLAGS ((size_t)15)

typedef struct p2_free_s {
  size_t hdr;
  struct p2_free_s *next;
} p2_free_t;

static p2_free_t *p2_bin[P2_BINS];

#define P2_FAIL(...)                             \
  do {                                           \
    fprintf(stderr, "lab pow2: invalid heap: "); \
    fprintf(stderr, __VA_ARGS__);                \
    fputc('\n', stderr);                         \
    return false;                                \
  } while (0)

static inline size_t p2_size(const void *blk) { return *(const size_t *)blk & ~P2_FLAGS; }
static inline size_t p2_bin_size(unsigned k) { return (size_t)16 << k; }

static void p2_unlink(unsigned k, p2_free_t *x) {
  p2_free_t **pp = &p2_bin[k];
  while (*pp != x) pp = &(*pp)->next;
  *pp = x->next;
}

/* Put free block x (header written) into bin k, coalescing with a touching list neighbour. */
static void p2_insert(unsigned k, p2_free_t *x) {
  for (;;) {
    size_t sz = p2_bin_size(k);
    x->hdr = sz;
    p2_free_t *prev = NULL, **pp = &p2_bin[k];
    while (*pp && *pp < x) prev = *pp, pp = &(*pp)->next;
    p2_free_t *next = *pp;
    if (k + 1 < P2_BINS) {
      if (prev && (char *)prev + sz == (char *)x) {
        p2_unlink(k, prev);
        x = prev;
        k++;
        continue;
      }
      if (next && (char *)x + sz == (char *)next) {
        *pp = next->next;
        k++;
        continue;
      }
    }
    x->next = next;
    *pp = x;
    return;
  }
}

static void *p2_malloc(size_t n) {
  if (n > (SIZE_MAX >> 2)) return NULL;
  size_t need = n + P2_HDR;
  if (need > LAB_PAGE) {
    size_t bytes = (need + LAB_PAGE - 1) & ~(LAB_PAGE - 1);
    char *m = lab_pages_map(bytes);
    if (!m) return NULL;
    *(size_t *)m = bytes | P2_ALLOC | P2_BIG;
    return m + P2_HDR;
  }
  unsigned k = 0;
  while (p2_bin_size(k) < need) k++;
  unsigned j = k;
  while (j < P2_BINS && !p2_bin[j]) j++;
  p2_free_t *x;
  if (j == P2_BINS) {
    x = (p2_free_t *)lab_pages_map(LAB_PAGE);
    if (!x) return NULL;
    j = P2_BINS - 1;
  } else {
    x = p2_bin[j];
    p2_bin[j] = x->next;
  }
  while (j > k) { /* split: the upper half goes to the bin below */
    j--;
    p2_free_t *half = (p2_free_t *)((char *)x + p2_bin_size(j));
    p2_insert(j, half);
  }
  x->hdr = p2_bin_size(k) | P2_ALLOC;
  return (char *)x + P2_HDR;
}

static void p2_free(void *p) {
  if (!p) return;
  char *blk = (char *)p - P2_HDR;
  size_t w = *(size_t *)blk, sz = w & ~P2_FLAGS;
  if (w & P2_BIG) {
    lab_pages_unmap(blk, sz);
    return;
  }
  unsigned k = (unsigned)__builtin_ctzll(sz) - 4;
  p2_insert(k, (p2_free_t *)blk);
}

static size_t p2_usable(void *p) { return p2_size((char *)p - P2_HDR) - P2_HDR; }

static void *p2_realloc(void *p, size_t n) {
  if (!p) return p2_malloc(n);
  if (n == 0) {
    p2_free(p);
    return NULL;
  }
  size_t cap = p2_usable(p);
  if (n <= cap) return p;
  void *q = p2_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, cap);
  p2_free(p);
  return q;
}

static bool p2_init(void *start, size_t size) {
  uintptr_t s = (uintptr_t)start, e = s + size;
  if (!start || e < s) return false;
  uintptr_t lo = (s + 7) & ~(uintptr_t)7;
  if (lo >= e || e - lo < 16) return false;
  lab_pages_init((char *)lo, (char *)lo + ((e - lo) & ~(uintptr_t)7));
  memset(p2_bin, 0, sizeof p2_bin);
  return true;
}

static size_t p2_walk(lab_walk_fn cb, void *ctx) {
  lab_pages_walker_t w = {cb, ctx, 0, NULL};
  lab_hole_t *h = lab_pg.holes;
  for (char *x = lab_pg.lo; x < lab_pg.brk;) {
    if ((char *)h == x) {
      lab_pages_emit(&w, x, x + h->bytes, true, P2_HDR);
      x += h->bytes;
      h = h->next;
      continue;
    }
    size_t size = p2_size(x);
    lab_pages_emit(&w, x, x + size, !(*(size_t *)x & P2_ALLOC), P2_HDR);
    x += size;
  }
  return lab_pages_walk_end(&w, P2_HDR);
}

static bool p2_validate(void) {
  if (!lab_pg.lo) P2_FAIL("not initialised");
  if (!lab_pages_check("pow2")) return false;
  size_t limit = (size_t)(lab_pg.end - lab_pg.lo) / 16 + 1, listed = 0;
  for (unsigned k = 0; k < P2_BINS; k++) {
    size_t n = 0;
    for (p2_free_t *f = p2_bin[k]; f; f = f->next) {
      if ((char *)f < lab_pg.lo || (char *)f >= lab_pg.brk) P2_FAIL("bin %u holds %p, outside the heap", k, (void *)f);
      if (f->hdr != p2_bin_size(k)) P2_FAIL("bin %u holds %p with header %zx", k, (void *)f, f->hdr);
      if (f->next && f->next <= f) P2_FAIL("bin %u out of address order at %p", k, (void *)f);
      if (++n > limit) P2_FAIL("bin %u has a cycle", k);
    }
    listed += n;
  }
  size_t found = 0;
  lab_hole_t *h = lab_pg.holes;
  for (char *x = lab_pg.lo; x < lab_pg.brk;) {
    if ((char *)h == x) {
      x += h->bytes;
      h = h->next;
      continue;
    }
    size_t w = *(size_t *)x, size = w & ~P2_FLAGS;
    bool big = w & P2_BIG;
    if (size < 16 || size > (size_t)(lab_pg.brk - x) || (big ? size % LAB_PAGE || !(w & P2_ALLOC)
                                                              : size > LAB_PAGE || (size & (size - 1))))
      P2_FAIL("block %p has header %zx", (void *)x, w);
    if (!(w & P2_ALLOC)) {
      unsigned k = (unsigned)__builtin_ctzll(size) - 4;
      p2_free_t *f = p2_bin[k];
      while (f && (char *)f < x) f = f->next;
      if ((char *)f != x) P2_FAIL("free block %p of %zu bytes is not in its bin", (void *)x, size);
      found++;
    }
    x += size;
  }
  if (h) P2_FAIL("hole %p not reached by the scan", (void *)h);
  if (found != listed) P2_FAIL("%zu blocks in the bins, %zu free blocks in the heap", listed, found);
  return true;
}

const lab_policy_t lab_pow2_policy_def = {
    "pow2", "seed 002's arena: power-of-two bins 16..4096, split, coalesce touching neighbours, 4 KiB pages",
    8, P2_HDR, p2_init, p2_malloc, p2_free, p2_realloc, p2_validate, p2_walk, p2_usable};

const lab_policy_t *lab_pow2_policy(void) { return &lab_pow2_policy_def; }
