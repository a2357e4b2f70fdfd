/* src/classify.h -- what a pointer is: the one place that answers "is p kite's, which
 * page, is it a block start, which block". free, realloc, malloc_usable_size, kite_owns and
 * the secure build's wrappers all ask here.
 *
 * Steps (types.h's "Finding metadata from a pointer"):
 *   1. page map: p >> 26 says arena, huge mapping, or not kite's;
 *   2. descriptor: the unit's descriptor by masking p, the page's head by head_off;
 *   3. block start and index, for a small page: off = p - first block, one multiply
 *      m = off * div_magic (div_magic = ceil(2^64 / block_size)): the high half is
 *      off / block_size, and off is a multiple of block_size iff the low half is at most
 *      KITE_BLOCK_START_LOW (exact for every off below 2^31, and a page is at most 512 KiB).
 * Invariants a caller may rely on:
 *   C1. _kite_block_index's index of a block start is at most reserved: links[] holds
 *       reserved + 1 entries, and the spare one and every uncarved block's entry read 0
 *       (never LIVE), so a caller that tests the entry for LIVE needs no capacity test.
 *   C2. Only a small page's head descriptor has an owner (heap != NULL, and owner_key !=
 *       0 for a thread's heap: heap.h); the other units' descriptors never match a heap or
 *       a key. So a descriptor found by masking that matches the caller's heap or key is a
 *       head, and p lies in its first unit: off is p's low 16 bits.
 *   C3. _kite_classify reports a small block only when it is a carved block start (it may
 *       be free: the caller reads its entry), a large run only at its first byte.
 * Layer: above page and pagemap; below the entry points.
 */
#ifndef KITE_CLASSIFY_H
#define KITE_CLASSIFY_H
#include "types.h"
#include "page.h"
#include "pagemap.h"

/* Is byte offset off (from the first block, < 2^31) of small page pg a block start? If so,
 * *i = its index (C1: <= reserved, not checked against capacity). Any thread.
 * With d = div_magic = ceil(2^64 / bs) = (2^64 + e) / bs, 0 <= e < bs <= 2^16, and
 * off = q * bs + r: the product's low half is q * e (< off) when r == 0, and at least
 * r * d >= d > 2^47 otherwise, with no carry into the high half either way (q * e + r * d
 * < 2^64); so a constant bound between them decides, and d is read once, by the multiply. */
#define KITE_BLOCK_START_LOW ((uint64_t)0x7fffffff)
static inline bool _kite_block_index(const kite_page_t *pg, uint64_t off, uint64_t *i) {
  unsigned __int128 m = (unsigned __int128)off * pg->div_magic;
  *i = (uint64_t)(m >> 64);
  return (uint64_t)m <= KITE_BLOCK_START_LOW;
}

/* The same for address u of small page pg (its head descriptor), carved blocks only (C3). */
static inline bool _kite_block_of(const kite_page_t *pg, uintptr_t u, uint32_t *i) {
  uint64_t k;
  if (!_kite_block_index(pg, (uint64_t)(u - (uintptr_t)_kite_page_block(pg, 0)), &k)) return false;
  *i = (uint32_t)k;
  return k < __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
}

/* C2 from unit descriptor d alone (pagemap.h M1: any address below the page map's end), any
 * thread: d has an owner, so it is a small page's head and u lies in its first unit; true,
 * with *i (C1: <= reserved, not checked against capacity), when u is a block start. For a
 * caller that tests the block's entry for LIVE (C1: no uncarved block passes that), as
 * free's remote path does. */
static inline bool _kite_owned_index(const kite_page_t *d, uintptr_t u, uint64_t *i) {
  return __atomic_load_n(&d->heap, __ATOMIC_ACQUIRE) != NULL && _kite_block_index(d, u & (KITE_UNIT_SIZE - 1), i);
}

/* The same, true only when u is a carved block start (C3), for a caller that reads the
 * block itself before its entry (the secure build's canary). */
static inline bool _kite_owned_block(const kite_page_t *d, uintptr_t u, uint64_t *i) {
  return _kite_owned_index(d, u, i) && *i < __atomic_load_n(&d->capacity, __ATOMIC_RELAXED);
}

enum { KITE_PTR_INVALID = 0, KITE_PTR_SMALL, KITE_PTR_LARGE, KITE_PTR_HUGE, KITE_PTR_GUARDED };
typedef struct {
  kite_page_t *page; /* SMALL, LARGE: the head descriptor */
  uint32_t index;    /* SMALL: the block's index (carved) */
} kite_ptr_t;

/* Classify p (C3). HUGE and GUARDED mean only that the page map says so (guarded.c checks
 * its slots): huge.c checks the mapping
 * (_kite_huge_usable, _kite_huge_free), in its own order, since a racing free may be
 * unmapping it. Any thread; the answer is as of the reads (a racing free may change it). */
static inline unsigned _kite_classify(const void *p, kite_ptr_t *c) {
  uintptr_t u = (uintptr_t)p;
  unsigned k = _kite_pagemap_kind(u);
  if (unlikely(k != KITE_PM_ARENA)) {
    if (k == KITE_PM_HUGE) return KITE_PTR_HUGE;
    return k == KITE_PM_GUARDED ? KITE_PTR_GUARDED : KITE_PTR_INVALID; /* guarded.c checks the slot itself */
  }
  kite_page_t *pg = _kite_page_head(_kite_unit_of(u));
  c->page = pg;
  uint8_t kind = __atomic_load_n(&pg->kind, __ATOMIC_ACQUIRE);
  if (kind == KITE_KIND_SMALL) return _kite_block_of(pg, u, &c->index) ? KITE_PTR_SMALL : KITE_PTR_INVALID;
  if (kind == KITE_KIND_LARGE && p == _kite_page_start(pg)) return KITE_PTR_LARGE;
  return KITE_PTR_INVALID;
}
#endif
