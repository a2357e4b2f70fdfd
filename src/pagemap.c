/* src/pagemap.c -- the page map (contract in pagemap.h). */
#include "pagemap.h"
#include "message.h"

uint8_t _kite_pagemap[KITE_PAGEMAP_SIZE];
kite_pagemap_desc_t _kite_pagemap_desc;

void _kite_pagemap_set(uintptr_t start, size_t size, uint8_t v) {
  for (uintptr_t i = start >> KITE_ARENA_SHIFT; i <= (start + size - 1) >> KITE_ARENA_SHIFT; i++) {
    if (i >= KITE_PAGEMAP_SIZE) continue;
    /* M1: the table's distance first when it becomes an arena, cleared with the byte */
    uintptr_t d = 0;
    if (v == KITE_PM_ARENA) d = (i << KITE_ARENA_SHIFT) + KITE_ARENA_GUARD - (uintptr_t)_kite_pagemap_desc.none;
    __atomic_store_n(&_kite_pagemap_desc.desc[i], d, __ATOMIC_RELEASE);
    __atomic_store_n(&_kite_pagemap[i], v, __ATOMIC_RELEASE);
  }
}

bool _kite_pagemap_check(size_t *arenas, size_t *huge) {
  size_t a = 0, h = 0;
  for (size_t i = 0; i < KITE_PAGEMAP_SIZE; i++) {
    uint8_t v = __atomic_load_n(&_kite_pagemap[i], __ATOMIC_RELAXED);
    if (v == KITE_PM_ARENA) a++;
    else if (v == KITE_PM_HUGE) h++;
    else if (v != KITE_PM_NONE && v != KITE_PM_GUARDED) return _kite_check_failed("page map entry", i);
    uintptr_t d = __atomic_load_n(&_kite_pagemap_desc.desc[i], __ATOMIC_RELAXED);
    if (d != (v == KITE_PM_ARENA ? (i << KITE_ARENA_SHIFT) + KITE_ARENA_GUARD - (uintptr_t)_kite_pagemap_desc.none : 0))
      return _kite_check_failed("page map: descriptor table", i);
  }
  if (arenas) *arenas = a;
  if (huge) *huge = h;
  return true;
}
