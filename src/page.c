/* src/page.c -- small pages (contract and invariants in page.h). */
#include "page.h"
#include "tool.h"

void _kite_page_init_small(kite_page_t *pg, struct kite_heap_s *h, unsigned cls) {
  uint32_t bs = _kite_class_size_[cls];
  KITE_TOOL_RUN_FRESH(_kite_page_start(pg), KITE_UNIT_SIZE << pg->order);
  pg->kind = KITE_KIND_SMALL;
  pg->cls = (uint8_t)cls;
  pg->block_size = bs;
  pg->div_magic = (uint64_t)(~(uint64_t)0 / bs) + 1;
  pg->reserved = (uint32_t)((KITE_UNIT_SIZE << pg->order) / bs);
  __atomic_store_n(&pg->capacity, 0, __ATOMIC_RELAXED);
  pg->carved_end = 0;
  pg->used = 0;
  pg->free = pg->local_free = NULL;
  pg->thread_free = 0;
  pg->next = pg->prev = NULL;
  pg->owned.owner = NULL;
  __atomic_store_n(&pg->heap, h, __ATOMIC_RELEASE);
}

uint32_t _kite_page_extend(kite_page_t *pg) {
  uint32_t bs = pg->block_size;
  uint32_t n = KITE_EXTEND_BYTES / bs;
  if (n == 0) n = 1;
  if (n > pg->reserved - pg->capacity) n = pg->reserved - pg->capacity;
  uint8_t *start = _kite_page_start(pg) + (size_t)pg->capacity * bs;
  for (uint32_t i = 0; i + 1 < n; i++) {
    kite_block_t *b = (kite_block_t *)(start + (size_t)i * bs);
    b->next = (kite_block_t *)(start + (size_t)(i + 1) * bs);
    b->key = (uintptr_t)pg;
  }
  ((kite_block_t *)(start + (size_t)(n - 1) * bs))->next = pg->free;
  ((kite_block_t *)(start + (size_t)(n - 1) * bs))->key = (uintptr_t)pg;
  pg->free = (kite_block_t *)start;
  __atomic_store_n(&pg->capacity, pg->capacity + n, __ATOMIC_RELAXED); /* read by lookups in other threads */
  pg->carved_end = pg->capacity * bs;
  return n;
}

uint32_t _kite_page_collect(kite_page_t *pg, bool all, bool count_local) {
  uint32_t issued = 0;
  if ((all || pg->free == NULL) && __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) != 0) {
    uintptr_t tf = __atomic_exchange_n(&pg->thread_free, 0, __ATOMIC_ACQUIRE);
    kite_block_t *head = KITE_TF_PTR(tf);
    int32_t n = KITE_TF_COUNT(tf);
    if (head) {
      if (pg->free) {
        kite_block_t *t = head;
        while (t->next) t = t->next;
        t->next = pg->free;
      }
      pg->free = head;
      pg->used -= n;
      issued += (uint32_t)n;
    }
  }
  if (pg->local_free && (all || pg->free == NULL)) {
    if (pg->free || count_local) {
      kite_block_t *t = pg->local_free;
      uint32_t n = 1;
      while (t->next) { t = t->next; n++; }
      if (count_local) issued += n;
      t->next = pg->free;
    }
    pg->free = pg->local_free;
    pg->local_free = NULL;
  }
  return issued;
}

void _kite_page_free_remote(kite_page_t *pg, kite_block_t *b) {
  b->key = (uintptr_t)pg;
  uintptr_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED), nw;
  do {
    b->next = KITE_TF_PTR(old);
    nw = (((old >> KITE_TF_SHIFT) + 1) << KITE_TF_SHIFT) | (uintptr_t)b;
  } while (!__atomic_compare_exchange_n(&pg->thread_free, &old, nw, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

static bool list_has(const kite_block_t *l, const kite_block_t *b) {
  for (; l; l = l->next) if (l == b) return true;
  return false;
}

bool _kite_page_has_free_local(const kite_page_t *pg, const void *b) {
  return list_has(pg->free, b) || list_has(pg->local_free, b);
}

bool _kite_page_has_free_remote(const kite_page_t *pg, const void *b) {
  return list_has(KITE_TF_PTR(__atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE)), b);
}
