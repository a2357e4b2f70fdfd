/* src/page.c -- small pages (contract and invariants PG1-PG7 in page.h). */
#include "page.h"
#include "links.h"
#include "remote.h"
#include "message.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#include "tool.h"
#include "secure_layout.h"

bool _kite_page_init_small(kite_page_t *pg, struct kite_heap_s *h, unsigned cls) {
  uint32_t bs = _kite_class_size_[cls];
  uint32_t reserved = (uint32_t)((KITE_UNIT_SIZE << pg->order) / bs);
  /* one entry more than blocks: the fast path's index of an offset past the last block
   * (when the page size is not a multiple of bs) lands there, and it is never LIVE */
  uint32_t need = reserved + 1;
  if (pg->links && pg->links_cap >= need && pg->links_cap <= 2 * need + 32) {
    memset(pg->links, 0, (size_t)pg->links_cap * sizeof(uint16_t)); /* a cached page's: PG2 */
  } else {
    _kite_page_fini(pg);
    uint32_t cap;
    uint16_t *l = _kite_links_alloc(need, &cap);
    if (!l) return false; /* errno = ENOMEM */
    pg->links = l;
    pg->links_cap = cap;
  }
  KITE_TOOL_RUN_FRESH(_kite_page_start(pg), KITE_UNIT_SIZE << pg->order);
  pg->kind = KITE_KIND_SMALL;
  pg->cls = (uint8_t)cls;
  pg->block_size = bs;
  pg->div_magic = (uint64_t)(~(uint64_t)0 / bs) + 1;
  pg->reserved = reserved;
  __atomic_store_n(&pg->capacity, 0, __ATOMIC_RELAXED);
  pg->used = 0;
  pg->in_full = 0;
  pg->zero_tail = 0; /* the heap layer sets it for a run it knows zero */
  pg->free = pg->local_free = KITE_LINK_END;
  pg->thread_free = KITE_TF_EMPTY;
  pg->next = pg->prev = NULL;
  pg->owned.owner = NULL;
  /* PG1: heap last, with release; the heap layer sets owner_key (heap.h) */
  __atomic_store_n(&pg->heap, h, __ATOMIC_RELEASE);
  return true;
}

void _kite_page_fini(kite_page_t *pg) {
  if (pg->links) _kite_links_free(pg->links, pg->links_cap);
  pg->links = NULL;
  pg->links_cap = 0;
}

uint32_t _kite_page_extend(kite_page_t *pg) {
  uint32_t bs = pg->block_size;
  uint32_t n = KITE_EXTEND_BYTES / bs;
  if (n == 0) n = 1;
  if (n > pg->reserved - pg->capacity) n = pg->reserved - pg->capacity;
  uint32_t first = pg->capacity;
#if KITE_SECURE /* secure build (secure_layout.h): zeroed, linked in a random order */
  _kite_secure_carve(pg, _kite_page_block(pg, first), first, n);
#else
  uint16_t *l = pg->links;
  for (uint32_t i = first; i + 1 < first + n; i++) l[i] = (uint16_t)(i + 1);
  l[first + n - 1] = pg->free;
  if (KITE_DEBUG >= 3) for (uint32_t i = 0; i < n; i++) _kite_block_fill_free(pg, _kite_page_block(pg, first + i));
  pg->free = (uint16_t)first;
#endif
  /* read by lookups in other threads (PG2) */
  __atomic_store_n(&pg->capacity, first + n, __ATOMIC_RELAXED);
  return n;
}

uint32_t _kite_page_collect(kite_page_t *pg, bool all, bool count_local, uint32_t *remote) {
  uint32_t issued = 0;
  *remote = 0;
  if ((all || pg->free == KITE_LINK_END) && KITE_TF_LIST(__atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED)) != KITE_TF_EMPTY) {
    uint32_t moved = _kite_remote_take(pg); /* PG6 */
    pg->used -= (int32_t)moved; /* PG5: collected, no longer counted */
    issued += moved;
    *remote = moved;
  }
  if (pg->local_free != KITE_LINK_END && (all || pg->free == KITE_LINK_END)) {
    if (pg->free != KITE_LINK_END || count_local) {
      uint16_t *l = pg->links;
      uint32_t t = pg->local_free, n = 1;
      while (l[t] != KITE_LINK_END) { t = l[t]; n++; }
      if (count_local) issued += n;
      l[t] = pg->free;
    }
    pg->free = pg->local_free;
    pg->local_free = KITE_LINK_END;
  }
  kite_assert_internal(_kite_page_check(pg, true, -1));
  return issued;
}

/* ---- validators (contracts in page.h; they check PG2, PG4 and PG5) ---- */

/* Walk the owner list from i, marking each block in seen[] (one bit per block). False on an
 * index that is not carved, or seen before (two lists share it, or a cycle). *n = length. */
static bool check_list(const kite_page_t *pg, uint32_t i, uint64_t *seen, uint32_t *n) {
  uint32_t k = 0;
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  for (; i != KITE_LINK_END; i = pg->links[i]) {
    if (i >= cap) return _kite_check_failed("page: free-list entry is not a carved block of its page", i);
    if ((seen[i >> 6] >> (i & 63)) & 1) return _kite_check_failed("page: block twice on the free lists", i);
    seen[i >> 6] |= (uint64_t)1 << (i & 63);
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
  if (!pg->links || pg->links_cap < pg->reserved + 1) return _kite_check_failed("page: link array", pg->links_cap);
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
  if (cap > pg->reserved) return _kite_check_failed("page: capacity > reserved", cap);
  if (!lists) return true;
  uint64_t seen[KITE_PAGE_MAX_BLOCKS / 64] = {0};
  uint32_t nfree = 0, nlocal = 0;
  if (!check_list(pg, pg->free, seen, &nfree) || !check_list(pg, pg->local_free, seen, &nlocal)) return false;
  /* the other carved blocks: LIVE or REMOTE (other threads may be claiming LIVE ones and
   * pushing them while we look: count REMOTE ones after a snapshot of thread_free's count;
   * what the snapshot counts was REMOTE before it was pushed and stays so until the owner,
   * the caller, collects it) */
  uint64_t tf = __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE);
  uint32_t nremote = 0;
  for (uint32_t i = 0; i < cap; i++) {
    if ((seen[i >> 6] >> (i & 63)) & 1) continue;
    uint32_t v = __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED);
    if (v == KITE_LINK_LIVE) continue;
    if (_kite_link_is_remote(v)) { nremote++; continue; }
    return _kite_check_failed("page: a block neither handed out nor on a list", i);
  }
  for (uint32_t i = cap; i < pg->links_cap; i++)
    if (pg->links[i] != 0) return _kite_check_failed("page: entry of an uncarved block is set", i);
  if (KITE_TF_COUNT(tf) > (int32_t)nremote) return _kite_check_failed("page: thread_free count above the blocks freed remotely", (uint64_t)KITE_TF_COUNT(tf));
  int32_t used = _kite_page_used(pg), out = (int32_t)(cap - nfree - nlocal);
  if (!(bias >= 0 ? used == out + bias : (used == out || used == out + 1)))
    return _kite_check_failed("page: used != carved - free - local_free (+1 when pinned)", (uint64_t)used);
  return true;
}

void _kite_block_fill_free(const kite_page_t *pg, void *b) { memset(b, KITE_FILL_FREE, pg->block_size); }

void _kite_block_check_fresh(const kite_page_t *pg, void *b) {
  const uint64_t *w = (const uint64_t *)b;
  const uint64_t pat = 0x0101010101010101ull * KITE_FILL_FREE;
  for (uint32_t i = 0; i < pg->block_size / 8; i++)
    if (w[i] != pat) {
      _kite_check_failed("write after free: a free block changed at byte offset", (uint64_t)i * 8);
      _kite_check_failed("write after free: the block's address", (uintptr_t)b);
      _kite_os_abort();
    }
  memset(b, KITE_FILL_FRESH, pg->block_size);
}
