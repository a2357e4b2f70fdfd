/* src/pagemap.h -- the page map: one byte per 64 MiB of the 47-bit address space saying
 * whether that slot is an arena of kite's, (part of) a huge block of kite's, the region of
 * sampled guarded allocations (guarded.h), or not kite's.
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

extern uint8_t _kite_pagemap[KITE_PAGEMAP_SIZE];

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
