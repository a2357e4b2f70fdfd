/* src/arena.c -- arenas, runs, purge, and huge allocations (contract in arena.h).
 *
 * Arena layout (KITE_ARENA_SIZE bytes, aligned to its size):
 *   [0, 128 KiB)            kite_page_t pages[1024], one descriptor per unit
 *   [128 KiB, +256)         kite_arena_t header
 *   [.., ..)                the buddy heap's metadata
 *   meta_units units are reserved in the buddy heap so they are never handed out.
 * Every unit's descriptor says what it is: META, FREE, SMALL/LARGE head, or a non-head
 * unit of a run (head_off != 0). The descriptors of a free run are rewritten when it is
 * allocated. The arena header keeps, per unit, what only the lock holder reads: is_free,
 * dirty (touched since the last purge) and freed_ms.
 *
 * Invariant: is_free[u] iff u is free in the buddy heap (then its descriptor says FREE).
 * All of this is guarded by arena_lock.
 */
#include "arena.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#include <kite/buddy.h>

#define KITE_ARENA_MAGIC 0x6b69746561726e61ull /* "kitearna" */
#define KITE_HUGE_MAGIC 0x6b69746568756765ull  /* "kitehuge" */

/* Per-unit state owned by the arena lock lives here, not in the descriptors (which the
 * page owners write without the lock). */
typedef struct kite_arena_s {
  uint64_t magic;
  struct kite_arena_s *next;
  kite_buddy_t *buddy;
  uint32_t meta_units;
  uint8_t is_free[KITE_ARENA_UNITS];   /* free in the buddy heap */
  uint8_t dirty[KITE_ARENA_UNITS];     /* touched since the last purge */
  uint32_t freed_ms[KITE_ARENA_UNITS]; /* when it was freed (for the purge delay) */
} kite_arena_t;

#define ARENA_HDR_OFF ((size_t)KITE_ARENA_UNITS * sizeof(kite_page_t))
#define ARENA_BUDDY_OFF ((ARENA_HDR_OFF + sizeof(kite_arena_t) + 63) & ~(size_t)63)

uint8_t _kite_pagemap[KITE_PAGEMAP_SIZE];

static kite_lock_t arena_lock = KITE_LOCK_INIT;
static kite_arena_t *arena_list;
static uintptr_t arena_hint;
static uint64_t last_purge_ms;
static size_t dirty_free_units;
static size_t huge_cache_bytes; /* the huge cache (below); written under arena_lock */
static size_t huge_cache_expire(bool force, uint64_t now);

static inline kite_arena_t *arena_of_page(kite_page_t *pg) {
  return (kite_arena_t *)(((uintptr_t)pg & ~(uintptr_t)KITE_ARENA_MASK) + ARENA_HDR_OFF);
}
static inline kite_page_t *arena_pages(kite_arena_t *a) {
  return (kite_page_t *)((uintptr_t)a - ARENA_HDR_OFF);
}

static void pagemap_set(uintptr_t start, size_t size, uint8_t v) {
  for (uintptr_t i = start >> KITE_ARENA_SHIFT; i <= (start + size - 1) >> KITE_ARENA_SHIFT; i++)
    if (i < KITE_PAGEMAP_SIZE) __atomic_store_n(&_kite_pagemap[i], v, __ATOMIC_RELEASE);
}

/* Map and initialize a new arena. Caller holds arena_lock. NULL + ENOMEM on failure. */
static kite_arena_t *arena_new(void) {
  size_t meta = kite_buddy_meta_size(KITE_ARENA_UNITS);
  void *base = _kite_os_map_aligned(KITE_ARENA_SIZE, KITE_ARENA_SIZE, (void *)arena_hint);
  if (!base) return NULL;
  if ((uintptr_t)base >> KITE_ADDR_BITS) { /* outside the page map: cannot be ours */
    _kite_os_unmap(base, KITE_ARENA_SIZE);
    errno = ENOMEM;
    return NULL;
  }
  if (_kite_options.hugepages) _kite_os_advise_huge(base, KITE_ARENA_SIZE);
  kite_arena_t *a = (kite_arena_t *)((uint8_t *)base + ARENA_HDR_OFF);
  a->magic = KITE_ARENA_MAGIC;
  a->meta_units = (uint32_t)((ARENA_BUDDY_OFF + meta + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
  kite_check(kite_buddy_init(&a->buddy, (uint8_t *)base + ARENA_BUDDY_OFF, meta, KITE_ARENA_UNITS) == 0);
  kite_check(kite_buddy_reserve(a->buddy, 0, a->meta_units) == 0);
  kite_page_t *pages = arena_pages(a);
  for (uint32_t i = 0; i < a->meta_units; i++) pages[i].kind = KITE_KIND_META;
  for (uint32_t i = a->meta_units; i < KITE_ARENA_UNITS; i++) a->is_free[i] = 1;
  a->next = arena_list;
  arena_list = a;
  arena_hint = (uintptr_t)base + KITE_ARENA_SIZE;
  pagemap_set((uintptr_t)base, KITE_ARENA_SIZE, KITE_PM_ARENA);
  _kite_stat_commit((int64_t)(a->meta_units * KITE_UNIT_SIZE));
  __atomic_fetch_add(&_kite_stats.arenas, 1, __ATOMIC_RELAXED);
  return a;
}

kite_page_t *_kite_arena_alloc_run(unsigned order, bool *zero) {
  uint64_t idx = 0;
  kite_arena_t *a;
  _kite_lock(&arena_lock);
  for (a = arena_list; a; a = a->next)
    if (kite_buddy_largest_free_order(a->buddy) >= (int)order && kite_buddy_alloc(a->buddy, order, &idx) == 0) break;
  if (!a) {
    a = arena_new();
    if (!a && huge_cache_bytes) { /* the OS refused: give back cached huge maps, retry */
      huge_cache_expire(true, 0);
      a = arena_new();
    }
    if (!a || kite_buddy_alloc(a->buddy, order, &idx) != 0) {
      _kite_unlock(&arena_lock);
      errno = ENOMEM;
      return NULL;
    }
  }
  kite_page_t *head = arena_pages(a) + idx;
  uint32_t n = 1u << order;
  bool clean = true;
  size_t newly = 0;
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    kite_assert(a->is_free[idx + i]);
    a->is_free[idx + i] = 0;
    if (a->dirty[idx + i]) { clean = false; dirty_free_units--; } else newly++;
    a->dirty[idx + i] = 1;
    d->head_off = i;
    /* META until the caller says what the run is: never FREE, or a purge could take it */
    d->kind = KITE_KIND_META;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
  }
  _kite_unlock(&arena_lock);
  if (newly) _kite_stat_commit((int64_t)(newly * KITE_UNIT_SIZE));
  head->order = (uint8_t)order;
  head->free = head->local_free = NULL;
  head->thread_free = 0;
  head->used = 0;
  head->next = head->prev = NULL;
  head->owned.owner = NULL;
  *zero = clean;
  return head;
}

/* Decommit free dirty units of one arena freed before `cutoff` ms. Caller holds the lock. */
static size_t arena_purge_one(kite_arena_t *a, bool force, uint32_t cutoff) {
  size_t purged = 0;
  uint32_t i = a->meta_units;
#define PURGEABLE(k) (a->is_free[k] && a->dirty[k] && (force || (int32_t)(cutoff - a->freed_ms[k]) >= 0))
  while (i < KITE_ARENA_UNITS) {
    if (!PURGEABLE(i)) { i++; continue; }
    uint32_t j = i;
    while (j < KITE_ARENA_UNITS && PURGEABLE(j)) a->dirty[j++] = 0;
#undef PURGEABLE
    _kite_os_decommit(_kite_page_start(arena_pages(a) + i), (size_t)(j - i) << KITE_UNIT_SHIFT);
    purged += (size_t)(j - i) << KITE_UNIT_SHIFT;
    dirty_free_units -= j - i;
    i = j;
  }
  return purged;
}

static size_t purge_locked(bool force, uint64_t now) {
  size_t purged = 0;
  uint32_t cutoff = (uint32_t)(now - (uint64_t)(_kite_options.purge_delay_ms > 0 ? _kite_options.purge_delay_ms : 0));
  for (kite_arena_t *a = arena_list; a; a = a->next) purged += arena_purge_one(a, force, cutoff);
  size_t unmapped = huge_cache_bytes ? huge_cache_expire(force, now) : 0; /* counted by huge_unmap */
  if (unmapped) __atomic_fetch_add(&_kite_stats.purged, unmapped, __ATOMIC_RELAXED);
  last_purge_ms = now;
  if (purged) {
    _kite_stat_commit(-(int64_t)purged);
    __atomic_fetch_add(&_kite_stats.purged, purged, __ATOMIC_RELAXED);
  }
  return purged + unmapped;
}

void _kite_arena_free_run(kite_page_t *head) {
  unsigned order = head->order;
  uint32_t n = 1u << order;
  kite_arena_t *a = arena_of_page(head);
  uint32_t idx = (uint32_t)(head - arena_pages(a));
  int64_t delay = _kite_options.purge_delay_ms;
  uint64_t now = delay > 0 ? _kite_os_now_ms() : 0;
  if (delay == 0) _kite_os_decommit(_kite_page_start(head), (size_t)n << KITE_UNIT_SHIFT);
  _kite_lock(&arena_lock);
  for (uint32_t i = 0; i < n; i++) {
    kite_page_t *d = head + i;
    __atomic_store_n(&d->heap, NULL, __ATOMIC_RELAXED);
    d->kind = KITE_KIND_FREE;
    d->head_off = 0;
    d->block_size = 0;
    a->is_free[idx + i] = 1;
    a->freed_ms[idx + i] = (uint32_t)now;
    if (delay == 0) a->dirty[idx + i] = 0; else { a->dirty[idx + i] = 1; dirty_free_units++; }
  }
  int rc = kite_buddy_free(a->buddy, idx, NULL);
  kite_check(rc == 0);
  if (delay > 0 && dirty_free_units && now - last_purge_ms >= (uint64_t)delay) purge_locked(false, now);
  _kite_unlock(&arena_lock);
  if (delay == 0) {
    _kite_stat_commit(-(int64_t)((size_t)n << KITE_UNIT_SHIFT));
    __atomic_fetch_add(&_kite_stats.purged, (size_t)n << KITE_UNIT_SHIFT, __ATOMIC_RELAXED);
  }
}

size_t _kite_arena_purge(bool force) {
  _kite_lock(&arena_lock);
  size_t r = purge_locked(force, _kite_os_now_ms());
  _kite_unlock(&arena_lock);
  return r;
}

void _kite_arena_fork_prepare(void) { _kite_lock(&arena_lock); }
void _kite_arena_fork_parent(void) { _kite_unlock(&arena_lock); }
void _kite_arena_fork_child(void) { _kite_lock_reinit(&arena_lock); }

/* ---- huge allocations ----
 * base (64 MiB aligned): header page; user block at base + off, off = 4 KiB for
 * align <= 4 KiB, else min(align, 64 MiB). When off > 4 KiB the gap after the header page
 * is unmapped. Every 64 MiB slot the region touches is marked KITE_PM_HUGE; the header of
 * a huge block p is at align_down(p - 1, 64 MiB). */
typedef struct kite_huge_s {
  uint64_t magic;
  void *user;
  size_t user_len; /* mapped bytes at user (multiple of 4 KiB) */
  size_t off;
  kite_owned_t owned;
} kite_huge_t;

static kite_huge_t *huge_header(const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (u < KITE_OS_PAGE || (u & (KITE_OS_PAGE - 1))) return NULL;
  uintptr_t base = (u - 1) & ~(uintptr_t)KITE_ARENA_MASK;
  if (_kite_pagemap_kind(base) != KITE_PM_HUGE) return NULL;
  kite_huge_t *h = (kite_huge_t *)base;
  if (h->magic != KITE_HUGE_MAGIC || h->user != p) return NULL;
  return h;
}

/* ---- huge cache ----
 * Freed huge maps without an alignment gap wait here (still mapped, still committed, header
 * magic cleared) for KITE_PURGE_DELAY_MS, so that programs that free and allocate big buffers
 * in turn do not fault every page again. A reuse trims the map to the new size. Guarded by
 * arena_lock; at most HUGE_CACHE_SLOTS maps and HUGE_CACHE_BYTES bytes. */
#define HUGE_CACHE_SLOTS 8
#define HUGE_CACHE_BYTES ((size_t)256 << 20)
typedef struct { kite_huge_t *h; uint64_t freed_ms; } huge_cached_t;
static huge_cached_t huge_cache[HUGE_CACHE_SLOTS];

static void huge_unmap(kite_huge_t *h) {
  uintptr_t base = (uintptr_t)h;
  size_t len = h->user_len, off = h->off;
  void *p = h->user;
  h->magic = 0;
  pagemap_set(base, off + len, KITE_PM_NONE);
  if (off > KITE_OS_PAGE) {
    _kite_os_unmap((void *)base, KITE_OS_PAGE);
    _kite_os_unmap(p, len);
  } else {
    _kite_os_unmap((void *)base, off + len);
  }
  _kite_stat_commit(-(int64_t)(len + KITE_OS_PAGE));
}

/* Unmap cached maps freed before now - delay (all of them if force). Returns bytes. Caller
 * holds arena_lock; unmapping under it is fine: nothing else in the cache is touched. */
static size_t huge_cache_expire(bool force, uint64_t now) {
  size_t r = 0;
  int64_t delay = _kite_options.purge_delay_ms;
  for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
    kite_huge_t *h = huge_cache[i].h;
    if (!h || !(force || (delay >= 0 && now - huge_cache[i].freed_ms >= (uint64_t)delay))) continue;
    huge_cache[i].h = NULL;
    __atomic_store_n(&huge_cache_bytes, huge_cache_bytes - h->user_len, __ATOMIC_RELAXED);
    r += h->user_len + KITE_OS_PAGE;
    huge_unmap(h);
  }
  return r;
}

/* Trim the user part of h to len bytes (len <= user_len, multiples of 4 KiB). */
static void huge_trim(kite_huge_t *h, size_t len) {
  uintptr_t base = (uintptr_t)h;
  size_t old = h->user_len;
  if (len == old) return;
  _kite_os_unmap((uint8_t *)h->user + len, old - len);
  h->user_len = len;
  uintptr_t first_gone = ((base + h->off + len - 1) >> KITE_ARENA_SHIFT) + 1;
  uintptr_t last = (base + h->off + old - 1) >> KITE_ARENA_SHIFT;
  for (uintptr_t i = first_gone; i <= last; i++)
    if (i < KITE_PAGEMAP_SIZE) __atomic_store_n(&_kite_pagemap[i], KITE_PM_NONE, __ATOMIC_RELEASE);
  _kite_stat_commit(-(int64_t)(old - len));
}

static kite_huge_t *huge_cache_take(size_t len) {
  int best = -1;
  _kite_lock(&arena_lock);
  for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
    kite_huge_t *h = huge_cache[i].h;
    if (h && h->user_len >= len && (best < 0 || h->user_len < huge_cache[best].h->user_len)) best = i;
  }
  kite_huge_t *h = NULL;
  if (best >= 0) {
    h = huge_cache[best].h;
    huge_cache[best].h = NULL;
    __atomic_store_n(&huge_cache_bytes, huge_cache_bytes - h->user_len, __ATOMIC_RELAXED);
  }
  _kite_unlock(&arena_lock);
  return h;
}

void *_kite_huge_alloc(size_t size, size_t align, bool *zero) {
  if (align < KITE_OS_PAGE) align = KITE_OS_PAGE;
  size_t len = (size + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (len < size || len > ((size_t)1 << KITE_ADDR_BITS)) { errno = ENOMEM; return NULL; }
  *zero = true;
  if (align == KITE_OS_PAGE && __atomic_load_n(&huge_cache_bytes, __ATOMIC_RELAXED)) {
    kite_huge_t *c = huge_cache_take(len);
    if (c) {
      huge_trim(c, len);
      c->magic = KITE_HUGE_MAGIC;
      *zero = false;
      __atomic_fetch_add(&_kite_stats.huge_allocs, 1, __ATOMIC_RELAXED);
      return c->user;
    }
  }
  size_t off = align > KITE_OS_PAGE ? (align < KITE_ARENA_SIZE ? align : KITE_ARENA_SIZE) : KITE_OS_PAGE;
  size_t extra = align > KITE_ARENA_SIZE ? align - KITE_ARENA_SIZE : 0;
  if (extra >= ((size_t)1 << KITE_ADDR_BITS)) { errno = ENOMEM; return NULL; }
  size_t total = off + len + extra;
  uint8_t *raw = _kite_os_map_aligned(total, KITE_ARENA_SIZE, NULL);
  if (!raw && __atomic_load_n(&huge_cache_bytes, __ATOMIC_RELAXED)) { /* the OS refused: give back cached huge maps, retry */
    _kite_lock(&arena_lock);
    huge_cache_expire(true, 0);
    _kite_unlock(&arena_lock);
    raw = _kite_os_map_aligned(total, KITE_ARENA_SIZE, NULL);
  }
  if (!raw) return NULL;
  uintptr_t p = ((uintptr_t)raw + off + align - 1) & ~(uintptr_t)(align - 1);
  uintptr_t base = p - off;
  if ((uintptr_t)raw + total > ((uintptr_t)1 << KITE_ADDR_BITS)) {
    _kite_os_unmap(raw, total);
    errno = ENOMEM;
    return NULL;
  }
  if (base > (uintptr_t)raw) _kite_os_unmap(raw, base - (uintptr_t)raw);
  if ((uintptr_t)raw + total > p + len) _kite_os_unmap((void *)(p + len), (uintptr_t)raw + total - (p + len));
  if (off > KITE_OS_PAGE) _kite_os_unmap((void *)(base + KITE_OS_PAGE), off - KITE_OS_PAGE);
  kite_huge_t *h = (kite_huge_t *)base;
  h->magic = KITE_HUGE_MAGIC;
  h->user = (void *)p;
  h->user_len = len;
  h->off = off;
  pagemap_set(base, off + len, KITE_PM_HUGE);
  _kite_stat_commit((int64_t)(len + KITE_OS_PAGE));
  __atomic_fetch_add(&_kite_stats.huge_allocs, 1, __ATOMIC_RELAXED);
  return (void *)p;
}

kite_owned_t *_kite_huge_owned(const void *p) {
  kite_huge_t *h = huge_header(p);
  return h ? &h->owned : NULL;
}

size_t _kite_huge_usable(const void *p) {
  kite_huge_t *h = huge_header(p);
  return h ? h->user_len : 0;
}

bool _kite_huge_free(void *p) {
  kite_huge_t *h = huge_header(p);
  if (!h) return false;
  h->magic = 0; /* a second free is reported; the cache keeps it mapped for a while */
  int64_t delay = _kite_options.purge_delay_ms;
  if (h->off == KITE_OS_PAGE && delay != 0 && h->user_len <= HUGE_CACHE_BYTES / 2) {
    uint64_t now = _kite_os_now_ms();
    _kite_lock(&arena_lock);
    huge_cache_expire(false, now);
    int slot = -1;
    for (int i = 0; i < HUGE_CACHE_SLOTS && slot < 0; i++) if (!huge_cache[i].h) slot = i;
    if (slot >= 0 && huge_cache_bytes + h->user_len <= HUGE_CACHE_BYTES) {
      huge_cache[slot].h = h;
      huge_cache[slot].freed_ms = now;
      __atomic_store_n(&huge_cache_bytes, huge_cache_bytes + h->user_len, __ATOMIC_RELAXED);
      h = NULL;
    }
    _kite_unlock(&arena_lock);
    if (!h) return true;
  }
  huge_unmap(h);
  return true;
}

bool _kite_huge_resize(void *p, size_t new_size) {
  kite_huge_t *h = huge_header(p);
  if (!h) return false;
  size_t len = (new_size + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (len < new_size || len == 0) return false;
  if (len == h->user_len) return true;
  if (len < h->user_len) {
    huge_trim(h, len);
    return true;
  }
  if ((uintptr_t)p + len > ((uintptr_t)1 << KITE_ADDR_BITS)) return false;
  void *q = _kite_os_remap(p, h->user_len, len, false);
  if (q != p) return false;
  _kite_stat_commit((int64_t)(len - h->user_len));
  pagemap_set((uintptr_t)p, len, KITE_PM_HUGE);
  h->user_len = len;
  return true;
}
