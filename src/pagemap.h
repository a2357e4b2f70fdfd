/* src/pagemap.h -- the page map: one byte per 64 MiB of the 47-bit address space saying
 * whether that slot is an arena of kite's, (part of) a huge block of kite's, the region of
 * sampled guarded allocations (guarded.h), or not kite's; and beside it, for the free fast
 * path, the descriptor table of each slot (_kite_pagemap_desc).
 *
 * It answers "is this pointer ours?" without following the pointer, so foreign pointers
 * passed to free are recognised and never dereferenced. Entries are written with release
 * stores by the arena and huge layers when they map and before they unmap (a slot must read
 * NONE before its memory can be handed to the OS, or a concurrent mapping of another thread
 * at the same address would be wiped), and read with relaxed loads.
 * Layer: above os, below arena and huge.
 */
#ifndef KITE_PAGEMAP_H
#define KITE_PAGEMAP_H
#include "types.h"

#define KITE_PAGEMAP_SIZE ((size_t)1 << (KITE_ADDR_BITS - KITE_ARENA_SHIFT))
enum { KITE_PM_NONE = 0, KITE_PM_ARENA = 1, KITE_PM_HUGE = 2, KITE_PM_GUARDED = 3 /* guarded.c's region */ };

extern uint8_t _kite_pagemap[KITE_PAGEMAP_SIZE] KITE_HIDDEN;

/* The descriptor tables by slot, for the free fast path: the descriptor of the unit holding
 * u (< 2^KITE_ADDR_BITS) is one load and one add away, with no test of the slot's kind.
 *   M1. desc[i] is the distance from none[] to the descriptor table of slot i when the byte
 *       map says ARENA (written before that byte, cleared with it), else 0: a pointer that is
 *       not in an arena gets a descriptor of none[], which reads zero in every field (no
 *       owner, kind FREE) and is never written.
 * So _kite_pagemap_unit(u) is always a readable descriptor, and an owner found there is an
 * arena's. */
typedef struct {
  kite_page_t none[KITE_ARENA_UNITS];
  uintptr_t desc[KITE_PAGEMAP_SIZE];
} kite_pagemap_desc_t;
extern kite_pagemap_desc_t _kite_pagemap_desc KITE_HIDDEN;

/* u's unit descriptor (M1), u below 2^KITE_ADDR_BITS. Any thread. */
static inline kite_page_t *_kite_pagemap_unit(uintptr_t u) {
  uintptr_t off = (u >> (KITE_UNIT_SHIFT - 7)) & ((uintptr_t)(KITE_ARENA_UNITS - 1) << 7);
  uintptr_t d = KITE_LOAD_RELAXED(_kite_pagemap_desc.desc[u >> KITE_ARENA_SHIFT]);
  return (kite_page_t *)((uintptr_t)_kite_pagemap_desc.none + d + off);
}

static inline unsigned _kite_pagemap_kind(uintptr_t u) {
  uintptr_t i = u >> KITE_ARENA_SHIFT;
  if (unlikely(i >= KITE_PAGEMAP_SIZE)) return KITE_PM_NONE;
  return KITE_LOAD_RELAXED(_kite_pagemap[i]); /* a byte: one atomic read on x86-64 */
}

/* Mark every 64 MiB slot that [start, start+size) touches as v. */
void _kite_pagemap_set(uintptr_t start, size_t size, uint8_t v);
/* Every entry is NONE, ARENA, HUGE or GUARDED; counts of each in *arenas / *huge (may be NULL). */
bool _kite_pagemap_check(size_t *arenas, size_t *huge);
#endif
