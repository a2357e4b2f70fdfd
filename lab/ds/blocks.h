/* lab/ds/blocks.h -- the boundary-tag heap layer shared by the seglist, red-black and splay
 * policies (every lab policy but the page-mapping hwx and pow2, and hwx_kr).
 *
 * A policy file defines LAB_POLICY_NAME (and LAB_MIN_BLOCK if its free-block node needs more
 * or less than 48 bytes, LAB_ALIGN 8 for the seed's 8-byte granule), includes this header, defines the five index functions declared
 * below (its free-block data structure), and ends with LAB_DEFINE_POLICY(name, description).
 * Every policy therefore has its own copy of this code and its own static heap state.
 *
 * Block layout (all addresses are payload addresses p; the header is the word before p):
 *
 *     allocated:  [hdr: size|flags][payload ............................]
 *     free:       [hdr: size|flags][index node ....][unused .....][footer: size]
 *
 *   size      total bytes of the block, header included; a multiple of LAB_ALIGN (16, or 8
 *             in the policies that keep the seed's granule), >= LAB_MIN_BLOCK
 *   flags     bit 0 ALLOC       the block is allocated
 *             bit 1 PREV_ALLOC  the block to the left (lower address) is allocated (or absent)
 *             bit 2 RED         red-black colour of a free tree node (index-owned)
 *   header_size is 8 bytes; payloads are LAB_ALIGN-aligned (headers sit LAB_HDR below);
 *   the usable capacity of a block is size - 8.
 *   Free blocks carry a footer (the size, last word of the block) so free() can find the left
 *   neighbour; allocated blocks do not, the PREV_ALLOC bit of the right neighbour says so.
 *   Footer bit 0 (DUP, index-owned) marks a free block kept on a duplicate list, not in a
 *   tree: the header has only three flag bits when sizes are multiples of 8.
 *
 * Invariants (lab_heap_validate checks all of them, then the index's own):
 *   - blocks tile [lo - 8, end) exactly: sizes add up to the managed span;
 *   - no two free blocks are adjacent (free and realloc coalesce left and right);
 *   - PREV_ALLOC of every block equals the ALLOC bit of its left neighbour (set on the first);
 *   - every free block has footer == size and is in the index exactly once (the index's count
 *     and byte total equal the heap's).
 * The managed span is the region minus < 16 bytes at each end for alignment.
 */
#ifndef LAB_DS_BLOCKS_H
#define LAB_DS_BLOCKS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"

#ifndef LAB_POLICY_NAME
#error "define LAB_POLICY_NAME before including ds/blocks.h"
#endif
/* Smallest block: header + the index node + footer, rounded to 16. */
#ifndef LAB_MIN_BLOCK
#define LAB_MIN_BLOCK 48
#endif

/* Payload alignment and block-size granule: 16 by default; a policy may define 8 (the seed's
 * own granule, which lets a 40-byte node block exist). */
#ifndef LAB_ALIGN
#define LAB_ALIGN 16
#endif
#if LAB_ALIGN != 8 && LAB_ALIGN != 16
#error "LAB_ALIGN is 8 or 16"
#endif
#define LAB_HDR 8
#define LAB_F_ALLOC ((size_t)1)
#define LAB_F_PREV_ALLOC ((size_t)2)
#define LAB_F_RED ((size_t)4)
#define LAB_F_MASK ((size_t)7)
/* Footer flag (free blocks only): the block sits on a duplicate list (ds/dups.h). */
#define LAB_FT_DUP ((size_t)1)

#define LAB_FAIL(...)                                         \
  do {                                                        \
    fprintf(stderr, "lab %s: invalid heap: ", LAB_POLICY_NAME); \
    fprintf(stderr, __VA_ARGS__);                             \
    fputc('\n', stderr);                                      \
    return false;                                             \
  } while (0)

static inline size_t *lab_hdr(const void *p) { return (size_t *)p - 1; }
static inline size_t lab_size(const void *p) { return *lab_hdr(p) & ~LAB_F_MASK; }
static inline bool lab_is_alloc(const void *p) { return (*lab_hdr(p) & LAB_F_ALLOC) != 0; }
static inline size_t *lab_footer(void *p, size_t size) { return (size_t *)((char *)p + size) - 2; }
/* The size in the footer of the block left of p (valid when that block is free). */
static inline size_t lab_left_size(const void *p) { return ((const size_t *)p)[-2] & ~LAB_F_MASK; }

/* The heap: payload of the first block and the end of the last block. */
static struct {
  char *lo;
  char *end;
} lab_heap;

/* ---- the index: each policy defines these ---------------------------------------------- */
/* Forget every free block (init). */
static void lab_idx_reset(void);
/* Add the free block p (header and footer written, index bits clear). */
static void lab_idx_insert(void *p);
/* Remove the free block p, which is in the index. */
static void lab_idx_remove(void *p);
/* Remove and return a free block of size >= need (the policy's fit), or NULL. */
static void *lab_idx_take(size_t need);
/* Check the index; report its number of blocks and their total size. */
static bool lab_idx_check(size_t *count, size_t *bytes);

/* ---- block helpers ------------------------------------------------------------------------ */
/* The block right of p, or NULL at the end of the heap. */
static inline char *lab_next(void *p) {
  char *n = (char *)p + lab_size(p);
  return n - LAB_HDR < lab_heap.end ? n : NULL;
}

/* Block size for a request of n bytes; 0 if n is too large to ever fit. */
static inline size_t lab_need(size_t n) {
  if (n > (SIZE_MAX >> 2)) return 0;
  size_t need = (n + LAB_HDR + LAB_ALIGN - 1) & ~(size_t)(LAB_ALIGN - 1);
  return need < LAB_MIN_BLOCK ? LAB_MIN_BLOCK : need;
}

/* Write p as a free block of `size` (index bits clear) and tell its right neighbour. */
static inline void lab_write_free(void *p, size_t size, size_t prev_alloc) {
  *lab_hdr(p) = size | prev_alloc;
  *lab_footer(p, size) = size;
  char *n = lab_next(p);
  if (n) *lab_hdr(n) &= ~LAB_F_PREV_ALLOC;
}

/* Is p plausibly a free block of this heap? (for the index checkers; never dereferences
 * outside the heap) */
static inline bool lab_is_free_block(const void *p) {
  const char *c = (const char *)p;
  if (c < lab_heap.lo || c >= lab_heap.end || ((uintptr_t)c & (LAB_ALIGN - 1))) return false;
  size_t size = lab_size(p);
  if (lab_is_alloc(p) || size < LAB_MIN_BLOCK || (size & (LAB_ALIGN - 1))) return false;
  if ((size_t)(lab_heap.end - (c - LAB_HDR)) < size) return false;
  return (*lab_footer((void *)p, size) & ~LAB_F_MASK) == size;
}

/* Cut p (allocated, size >= need) down to need bytes; the tail becomes a free block that
 * coalesces with a free right neighbour. */
static void lab_trim(void *p, size_t need) {
  size_t size = lab_size(p);
  if (size - need < LAB_MIN_BLOCK) return;
  *lab_hdr(p) = need | (*lab_hdr(p) & LAB_F_MASK);
  char *r = (char *)p + need;
  size_t rsize = size - need;
  *lab_hdr(r) = rsize | LAB_F_PREV_ALLOC;
  char *n = lab_next(r);
  if (n && !lab_is_alloc(n)) {
    lab_idx_remove(n);
    rsize += lab_size(n);
  }
  lab_write_free(r, rsize, LAB_F_PREV_ALLOC);
  lab_idx_insert(r);
}

/* ---- the policy methods --------------------------------------------------------------------- */
static bool lab_heap_init(void *start, size_t size) {
  uintptr_t s = (uintptr_t)start, e = s + size;
  if (!start || e < s) return false;
  uintptr_t lo = (s + LAB_HDR + LAB_ALIGN - 1) & ~(uintptr_t)(LAB_ALIGN - 1);
  if (lo > e) return false;
  size_t span = (size_t)(e - (lo - LAB_HDR)) & ~(size_t)(LAB_ALIGN - 1);
  if (span < LAB_MIN_BLOCK) return false;
  lab_heap.lo = (char *)lo;
  lab_heap.end = (char *)lo - LAB_HDR + span;
  lab_idx_reset();
  lab_write_free(lab_heap.lo, span, LAB_F_PREV_ALLOC);
  lab_idx_insert(lab_heap.lo);
  return true;
}

static void *lab_heap_malloc(size_t n) {
  size_t need = lab_need(n);
  if (!need) return NULL;
  char *p = (char *)lab_idx_take(need);
  if (!p) return NULL;
  *lab_hdr(p) = (*lab_hdr(p) & (~LAB_F_MASK | LAB_F_PREV_ALLOC)) | LAB_F_ALLOC;
  char *n2 = lab_next(p);
  if (n2) *lab_hdr(n2) |= LAB_F_PREV_ALLOC;
  lab_trim(p, need);
  return p;
}

static void lab_heap_free(void *p) {
  if (!p) return;
  size_t size = lab_size(p);
  size_t prev = *lab_hdr(p) & LAB_F_PREV_ALLOC;
  char *n = lab_next(p);
  if (n && !lab_is_alloc(n)) {
    lab_idx_remove(n);
    size += lab_size(n);
  }
  if (!prev) {
    size_t lsize = lab_left_size(p);
    char *l = (char *)p - lsize;
    lab_idx_remove(l);
    size += lsize;
    p = l;
    prev = *lab_hdr(l) & LAB_F_PREV_ALLOC;
  }
  lab_write_free(p, size, prev);
  lab_idx_insert(p);
}

static void *lab_heap_realloc(void *p, size_t n) {
  if (!p) return lab_heap_malloc(n);
  if (n == 0) {
    lab_heap_free(p);
    return NULL;
  }
  size_t need = lab_need(n);
  if (!need) return NULL;
  size_t size = lab_size(p);
  if (need <= size) {
    lab_trim(p, need);
    return p;
  }
  char *r = lab_next(p);
  if (r && !lab_is_alloc(r) && size + lab_size(r) >= need) {
    lab_idx_remove(r);
    size += lab_size(r);
    *lab_hdr(p) = size | (*lab_hdr(p) & LAB_F_MASK);
    char *n2 = lab_next(p);
    if (n2) *lab_hdr(n2) |= LAB_F_PREV_ALLOC;
    lab_trim(p, need);
    return p;
  }
  /* Not enough on the right alone: coalesce with the free left neighbour too (and the right
   * one when free), sliding the payload down, as the seed's allocators do. */
  if (!(*lab_hdr(p) & LAB_F_PREV_ALLOC)) {
    size_t lsize = lab_left_size(p);
    size_t rsize = (r && !lab_is_alloc(r)) ? lab_size(r) : 0;
    if (lsize + size + rsize >= need) {
      char *l = (char *)p - lsize;
      size_t lprev = *lab_hdr(l) & LAB_F_PREV_ALLOC;
      lab_idx_remove(l);
      if (rsize) lab_idx_remove(r);
      memmove(l, p, size - LAB_HDR);
      *lab_hdr(l) = (lsize + size + rsize) | lprev | LAB_F_ALLOC;
      char *n2 = lab_next(l);
      if (n2) *lab_hdr(n2) |= LAB_F_PREV_ALLOC;
      lab_trim(l, need);
      return l;
    }
  }
  void *q = lab_heap_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, size - LAB_HDR);
  lab_heap_free(p);
  return q;
}

static size_t lab_heap_usable(void *p) { return lab_size(p) - LAB_HDR; }

static size_t lab_heap_walk(lab_walk_fn cb, void *ctx) {
  size_t count = 0;
  for (char *p = lab_heap.lo; p && p - LAB_HDR < lab_heap.end; p = lab_next(p), count++)
    if (cb) cb(ctx, p, lab_size(p) - LAB_HDR, !lab_is_alloc(p));
  return count;
}

static bool lab_heap_validate(void) {
  if (!lab_heap.lo) LAB_FAIL("not initialised");
  size_t total = 0, nfree = 0, free_bytes = 0;
  bool prev_alloc = true, prev_free = false;
  char *p = lab_heap.lo;
  while (p - LAB_HDR < lab_heap.end) {
    size_t size = lab_size(p);
    if (size < LAB_MIN_BLOCK || (size & (LAB_ALIGN - 1)) ||
        (size_t)(lab_heap.end - (p - LAB_HDR)) < size)
      LAB_FAIL("block %p has bad size %zu", (void *)p, size);
    if (((*lab_hdr(p) & LAB_F_PREV_ALLOC) != 0) != prev_alloc)
      LAB_FAIL("block %p: PREV_ALLOC bit disagrees with its left neighbour", (void *)p);
    if (!lab_is_alloc(p)) {
      if (prev_free) LAB_FAIL("block %p: two adjacent free blocks (missed coalescing)", (void *)p);
      if ((*lab_footer(p, size) & ~LAB_F_MASK) != size)
        LAB_FAIL("free block %p: footer %zu != size %zu", (void *)p, *lab_footer(p, size), size);
      nfree++;
      free_bytes += size;
    } else if (*lab_hdr(p) & LAB_F_RED) {
      LAB_FAIL("allocated block %p carries index bits", (void *)p);
    }
    prev_alloc = lab_is_alloc(p);
    prev_free = !prev_alloc;
    total += size;
    p += size;
  }
  if (total != (size_t)(lab_heap.end - (lab_heap.lo - LAB_HDR)))
    LAB_FAIL("block sizes add up to %zu, heap span is %zu", total,
             (size_t)(lab_heap.end - (lab_heap.lo - LAB_HDR)));
  size_t icount = 0, ibytes = 0;
  if (!lab_idx_check(&icount, &ibytes)) return false;
  if (icount != nfree || ibytes != free_bytes)
    LAB_FAIL("index holds %zu blocks / %zu bytes, heap has %zu free blocks / %zu bytes", icount,
             ibytes, nfree, free_bytes);
  return true;
}

/* The policy's method table: lab_<ident>_policy_def (for the registry's static table) and
 * the accessor lab_<ident>_policy(). */
#define LAB_DEFINE_POLICY(ident, desc)                                                     \
  const lab_policy_t lab_##ident##_policy_def = {                                         \
      LAB_POLICY_NAME, desc,          LAB_ALIGN,      LAB_HDR,         lab_heap_init,      \
      lab_heap_malloc, lab_heap_free, lab_heap_realloc, lab_heap_validate, lab_heap_walk, \
      lab_heap_usable};                                                                    \
  const lab_policy_t *lab_##ident##_policy(void) { return &lab_##ident##_policy_def; }

#endif
