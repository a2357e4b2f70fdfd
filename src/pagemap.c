/* src/pagemap.c -- the page map (contract in pagemap.h). */
#include "pagemap.h"
#include "message.h"

uint8_t _kite_pagemap[KITE_PAGEMAP_SIZE];

void _kite_pagemap_set(uintptr_t start, size_t size, uint8_t v) {
  for (uintptr_t i = start >> KITE_ARENA_SHIFT; i <= (start + size - 1) >> KITE_ARENA_SHIFT; i++)
    if (i < KITE_PAGEMAP_SIZE) __atomic_store_n(&_kite_pagemap[i], v, __ATOMIC_RELEASE);
}

bool _kite_pagemap_check(size_t *arenas, size_t *huge) {
  size_t a = 0, h = 0;
  for (size_t i = 0; i < KITE_PAGEMAP_SIZE; i++) {
    uint8_t v = __atomic_load_n(&_kite_pagemap[i], __ATOMIC_RELAXED);
    if (v == KITE_PM_ARENA) a++;
    else if (v == KITE_PM_HUGE) h++;
    else if (v != KITE_PM_NONE && v != KITE_PM_GUARDED) return _kite_check_failed("page map entry", i);
  }
  if (arenas) *arenas = a;
  if (huge) *huge = h;
  return true;
}
