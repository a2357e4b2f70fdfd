/* src/page.c -- small pages (contract and invariants in page.h). */
#include "page.h"
#include "message.h"
#include "os.h"
#include <string.h>
#include "tool.h"
#include "secure.h"

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
#if KITE_SECURE /* secure build (secure.h): zeroed, linked in a random order */
  _kite_secure_carve(pg, start, n);
#else
  for (uint32_t i = 0; i + 1 < n; i++) {
    kite_block_t *b = (kite_block_t *)(start + (size_t)i * bs);
    b->next = (kite_block_t *)(start + (size_t)(i + 1) * bs);
    b->key = (uintptr_t)pg;
  }
  ((kite_block_t *)(start + (size_t)(n - 1) * bs))->next = pg->free;
  ((kite_block_t *)(start + (size_t)(n - 1) * bs))->key = (uintptr_t)pg;
  if (KITE_DEBUG >= 3) for (uint32_t i = 0; i < n; i++) _kite_block_fill_free(pg, start + (size_t)i * bs);
  pg->free = (kite_block_t *)start;
#endif
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
  kite_assert_internal(_kite_page_check(pg, true, -1));
  return issued;
}

void _kite_page_free_remote(kite_page_t *pg, kite_block_t *b) {
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
  KITE_TOOL_BLOCK_FREE(b, pg->block_size); /* before the push: the owner may pop it at once */
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


/* ---- validators (contracts in page.h) ---- */

/* Walk free list l of pg, marking each node in seen[] (one bit per block). False on a node
 * that is not a carved block start of pg (checked before it is read), lacks the key, or was
 * seen before (two lists share it, or a cycle). *n = its length. */
static bool check_list(const kite_page_t *pg, const kite_block_t *l, uint64_t *seen, uint32_t *n) {
  uintptr_t start = (uintptr_t)_kite_page_start(pg);
  uint32_t k = 0;
  for (; l; l = l->next) {
    uintptr_t u = (uintptr_t)l;
    if (u < start || u - start >= pg->carved_end || !_kite_is_block_offset(pg, u - start))
      return _kite_check_failed("page: free-list node is not a carved block of its page", u);
    uint32_t i = (uint32_t)((u - start) / pg->block_size);
    if ((seen[i >> 6] >> (i & 63)) & 1) return _kite_check_failed("page: block twice on the free lists", u);
    seen[i >> 6] |= (uint64_t)1 << (i & 63);
    if (l->key != (uintptr_t)pg) return _kite_check_failed("page: free block without its key", u);
    k++;
  }
  *n = k;
  return true;
}

bool _kite_page_check(const kite_page_t *pg, bool lists, int bias) {
  if (pg->kind != KITE_KIND_SMALL || pg->head_off != 0) return _kite_check_failed("page: not a small page head", (uintptr_t)pg);
  unsigned cls = pg->cls;
  if (cls >= KITE_CLASSES) return _kite_check_failed("page: class", cls);
  uint32_t bs = _kite_class_size_[cls];
  if (pg->block_size != bs) return _kite_check_failed("page: block size of its class", pg->block_size);
  if (pg->order != _kite_class_order_[cls]) return _kite_check_failed("page: order of its class", pg->order);
  if (pg->div_magic != (uint64_t)(~(uint64_t)0 / bs) + 1) return _kite_check_failed("page: div_magic", cls);
  if (pg->reserved != (uint32_t)((KITE_UNIT_SIZE << pg->order) / bs)) return _kite_check_failed("page: reserved", pg->reserved);
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  if (cap > pg->reserved) return _kite_check_failed("page: capacity > reserved", cap);
  if (!lists) return true;
  if (pg->carved_end != cap * bs) return _kite_check_failed("page: carved_end != capacity * block_size", pg->carved_end);
  uint64_t seen[KITE_UNIT_SIZE / 16 / 64] = {0}; /* reserved <= 4096 blocks */
  uint32_t nfree, nlocal, nthread;
  if (!check_list(pg, pg->free, seen, &nfree) || !check_list(pg, pg->local_free, seen, &nlocal)) return false;
  /* a snapshot: pushes after it do not change used, and its nodes stay put until the
   * owner (the caller, or nobody while the page is abandoned) collects them */
  uintptr_t tf = __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE);
  if (!check_list(pg, KITE_TF_PTR(tf), seen, &nthread)) return false;
  if ((int32_t)nthread != KITE_TF_COUNT(tf)) return _kite_check_failed("page: thread_free count", (uint64_t)KITE_TF_COUNT(tf));
  int32_t used = pg->used & ~KITE_PAGE_IN_FULL, out = (int32_t)(cap - nfree - nlocal);
  if (!(bias >= 0 ? used == out + bias : (used == out || used == out + 1)))
    return _kite_check_failed("page: used != carved - free - local_free (+1 when pinned)", (uint64_t)used);
  if (out < (int32_t)nthread) return _kite_check_failed("page: thread_free longer than the blocks out", nthread);
  return true;
}

void _kite_block_fill_free(const kite_page_t *pg, void *b) {
  if (pg->block_size > 2 * sizeof(void *)) memset((uint8_t *)b + 16, KITE_FILL_FREE, pg->block_size - 16);
}

void _kite_block_check_fresh(const kite_page_t *pg, void *b) {
  const uint64_t *w = (const uint64_t *)b;
  const uint64_t pat = 0x0101010101010101ull * KITE_FILL_FREE;
  for (uint32_t i = 2; i < pg->block_size / 8; i++)
    if (w[i] != pat) {
      _kite_check_failed("write after free: a free block changed at byte offset", (uint64_t)i * 8);
      _kite_check_failed("write after free: the block's address", (uintptr_t)b);
      _kite_os_abort();
    }
  memset(b, KITE_FILL_FRESH, pg->block_size);
}
