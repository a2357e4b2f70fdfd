/* src/sizeclass.h -- size classes: sizes, page orders, and the size -> class map.
 *
 * 16..128 in steps of 16 (classes 0..7), then 8 classes per power of two up to 64 KiB
 * (classes 8..79): above 128 bytes a block wastes less than 12.5% of the request; at or
 * below 128 bytes, less than 16 bytes. Every block is 16-byte aligned.
 *   size(c)  = 16 (c + 1)                                          c < 8
 *            = 2^(7 + (c-8)/8) + ((c-8) mod 8 + 1) 2^((c-8)/8 + 4)  c >= 8
 *   order(c) = 0 up to 16 KiB blocks (4 to 64 blocks a page), above: the smallest k
 *              with 8 blocks in 2^k units
 * The tables are constants (sizeclass.c): nothing to initialize at start-up;
 * _kite_sizeclass_check() recomputes them from the formulas.
 * Layer: bottom (used by page, heap, alloc); includes only types.h.
 */
#ifndef KITE_SIZECLASS_H
#define KITE_SIZECLASS_H
#include "types.h"

#define KITE_CLASSES 80
#define KITE_DIRECT_MAX 1024                          /* malloc fast path: n <= this */
#define KITE_DIRECT_SLOTS (KITE_DIRECT_MAX + 1)       /* heap->direct[n]: one per size */
#define KITE_DIRECT_CLASSES 32                          /* classes reachable from direct[] */
/* Classes up to 16 KiB live in single-unit pages (at least 4 blocks): one page order for
 * all of them, so a page one class empties serves any other again (docs/design.md, Size
 * classes). Larger classes keep 8 blocks a page. */
#define KITE_SINGLE_UNIT_MAX ((size_t)16384)

extern const uint32_t _kite_class_size_[KITE_CLASSES] KITE_HIDDEN; /* block size per class */
extern const uint8_t _kite_class_order_[KITE_CLASSES] KITE_HIDDEN; /* page order (log2 units) per class */
/* direct[] slots of class c (c < KITE_DIRECT_CLASSES): the sizes it serves */
static inline unsigned _kite_class_direct_lo(unsigned c) { return c ? _kite_class_size_[c - 1] + 1 : 0; }
static inline unsigned _kite_class_direct_hi(unsigned c) { return _kite_class_size_[c]; }

static inline unsigned _kite_class_of(size_t n) { /* n <= KITE_SMALL_MAX */
  if (n <= 128) return n ? (unsigned)((n - 1) >> 4) : 0;
  size_t m = n - 1;
  unsigned b = 63 - (unsigned)__builtin_clzll(m);
  return 8 + (b - 7) * 8 + (unsigned)((m >> (b - 3)) & 7);
}

/* Recompute every table from the formulas above; false (with a message) on a mismatch. */
bool _kite_sizeclass_check(void);
#endif
