/* src/huge.c -- huge blocks (contract in huge.h).
 *
 * Layout of a huge block: base (64 MiB aligned) holds a header page; the user block is at
 * base + off, off = 4 KiB for align <= 4 KiB, else min(align, 64 MiB). When off > 4 KiB the
 * gap after the header page is unmapped. Every 64 MiB slot the region touches is marked
 * KITE_PM_HUGE; the header of a huge block p is at align_down(p - 1, 64 MiB).
 *
 * The header is authenticated: mac is a keyed checksum (secret.h) of the fields that decide
 * what free and realloc unmap (user, user_len, off, and the header's own address). A write
 * into the header page -- an underflow from a neighbour -- cannot produce a matching mac, so
 * a header whose magic and user pointer match but whose mac does not is reported as heap
 * corruption and the process aborts, before anything is unmapped.
 *
 * Invariants:
 *   U1 h = base is 64 MiB aligned, user = base + off, off (4 KiB, or min(align, 64 MiB)) and
 *      user_len are multiples of 4 KiB. Every page-map slot of [base, user + user_len)
 *      reads HUGE while the block is live or cached, and a slot reads NONE before any of
 *      the memory it covers goes back to the OS (huge_unmap, huge_trim, huge_grow's move).
 *   U2 magic == KITE_HUGE_MAGIC iff the block is live: stored before the block is handed
 *      out, taken to 0 by its free's one CAS (of racing frees exactly one wins); cached
 *      maps and maps being unmapped read 0. magic is atomic: a losing free reads it while
 *      the winner clears it.
 *   U3 mac == huge_mac(h) while h is live or cached, except in the code that changes
 *      user, user_len or off on a header it owns (U6), which seals it before letting go;
 *      a header is verified before it is trusted (huge_header, the cache's take, expiry).
 *   U4 A free counts itself in huge_free_readers (seq_cst read-modify-write) before it
 *      reads the page map or the header, and out (release) after its CAS; huge_unmap and
 *      huge_grow's move clear the page map, then wait, on a read-modify-write of the same
 *      word, until no free is counted in, and only then give the header's place up. A
 *      fork's child starts at 0.
 *   U5 huge_cache[] (maps and stamps) and huge_cache_bytes are written only under
 *      huge_lock. A cached map has off == 4 KiB, magic 0, a sealed mac, one slot; the
 *      bytes are the sum of the cached user_len, at most HUGE_CACHE_BYTES. Peeks without
 *      the lock may be stale (they only skip or try the cache); an insertion's store is
 *      seq_cst for purger.c's load (BG2). Stamps are read under huge_lock: none is later
 *      than a later holder's clock.
 *   U6 A header's fields (magic aside, U2) are written only by h's owner: its allocator
 *      before it returns the block, the block's user (resize), its free's CAS winner,
 *      huge_lock's holder while it is cached, the thread that took it from the cache. A
 *      map counts user_len + 4 KiB in the committed total from its map to its unmap.
 */
#include "huge.h"
#include "arena.h"
#include "pagemap.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include "secret.h"
#include "os.h"
#include "tool.h"
#include <errno.h>

#define KITE_HUGE_MAGIC 0x6b69746568756765ull /* "kitehuge" */

static kite_lock_t huge_lock = KITE_LOCK_INIT; /* lock: the huge cache (huge_cache[], writes of huge_cache_bytes) */
static size_t huge_cache_bytes; /* written under huge_lock, peeked without it */

typedef struct kite_huge_s {
  uint64_t magic;
  void *user;
  size_t user_len; /* mapped bytes at user (multiple of 4 KiB) */
  size_t off;
  uint64_t mac;    /* huge_mac(h) while the header is live or cached (U3) */
  kite_owned_t owned;
} kite_huge_t;

static bool huge_check_block(const kite_huge_t *h, bool live);
static uint64_t huge_mac(const kite_huge_t *h) {
  return _kite_mac3((uint64_t)(uintptr_t)h->user ^ ((uint64_t)h->off << 47), h->user_len, (uint64_t)(uintptr_t)h);
}
static void huge_seal(kite_huge_t *h) { h->mac = huge_mac(h); }
/* A header about to be trusted (freed, resized, unmapped from the cache) must verify (U3). */
static void huge_verify(const kite_huge_t *h) {
  if (unlikely(h->mac != huge_mac(h))) _kite_report_corruption("huge block header does not match its checksum", h->user);
}

/* Huge blocks in use now, for statistics and mallinfo2 (hblks, hblkhd). */
static inline void huge_live(int64_t blocks, int64_t bytes) {
  __atomic_fetch_add(&_kite_stats.huge_live_blocks, (uint64_t)blocks, __ATOMIC_RELAXED);
  __atomic_fetch_add(&_kite_stats.huge_live_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

/* Transparent huge pages over the whole 2 MiB pieces of the first `size` bytes asked for:
 * from the header page on when there is no alignment gap (one VMA for the whole map keeps it
 * movable by huge_grow), from the block itself otherwise. */
static void huge_advise(const kite_huge_t *h, size_t size) {
  uintptr_t start = h->off == KITE_OS_PAGE ? (uintptr_t)h : (uintptr_t)h->user;
  uintptr_t end = ((uintptr_t)h->user + size) & ~(uintptr_t)((2u << 20) - 1);
  if (end <= start) return;
  /* the partial 2 MiB piece at the end is never a huge page: advising it too keeps one VMA */
  if (h->off == KITE_OS_PAGE) end = (uintptr_t)h->user + h->user_len;
  _kite_os_advise_huge((void *)start, end - start);
}

static kite_huge_t *huge_header(const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (u < KITE_OS_PAGE || (u & (KITE_OS_PAGE - 1))) return NULL;
  uintptr_t base = (u - 1) & ~(uintptr_t)KITE_ARENA_MASK;
  if (_kite_pagemap_kind(base) != KITE_PM_HUGE) return NULL;
  kite_huge_t *h = (kite_huge_t *)base;
  /* magic is read atomically: a racing free's claim (a CAS) may clear it meanwhile (U2) */
  if (__atomic_load_n(&h->magic, __ATOMIC_RELAXED) != KITE_HUGE_MAGIC || h->user != p) return NULL;
  huge_verify(h);
  return h;
}

/* ---- huge cache ----
 * Freed huge maps without an alignment gap wait here (still mapped, still committed, header
 * magic cleared) for KITE_PURGE_DELAY_MS, so that programs that free and allocate big buffers
 * in turn do not fault every page again. A reuse trims the map to the new size. Guarded by
 * huge_lock; at most HUGE_CACHE_SLOTS maps and HUGE_CACHE_BYTES bytes. */
#define HUGE_CACHE_SLOTS 8
#define HUGE_CACHE_BYTES ((size_t)256 << 20)
typedef struct { kite_huge_t *h; uint64_t freed_ms; } huge_cached_t;
static huge_cached_t huge_cache[HUGE_CACHE_SLOTS];

/* Frees in the middle of reading a header (huge_free_readers, U4): a free of a huge block
 * counts itself in before it reads the page map and the header, and out after its claim (the
 * CAS on magic). huge_unmap clears the page map first, then waits until no free is counted
 * in, and only then unmaps: a free that counted in after the clear sees the page map empty
 * and never reads the header; one that counted in before is waited for. So of two racing
 * frees of one block, the loser reports the double free even when the winner unmaps at
 * once; and a double free of a cached map reads its header safely while an allocation
 * moves the map away (huge_grow waits the same way). (Both sides order by a locked
 * read-modify-write of the counter: its increment before the page-map load, the page-map
 * clear before the counter's read.) Waits last a few instructions unless a free is
 * preempted mid-read; huge frees are rare and each costs a munmap anyway. */
static unsigned huge_free_readers;

/* After the page-map slots of a header's place read NONE, before that place is given up
 * (unmapped or moved away): no free is reading the header any more (U4). */
static void huge_readers_wait(void) {
  /* a read-modify-write, not a load: a full barrier after the page-map clear (a fence would
   * do the same, but TSan builds refuse standalone fences): U1 then U4 */
  while (__atomic_fetch_add(&huge_free_readers, 0, __ATOMIC_SEQ_CST)) _kite_os_yield();
}

static void huge_unmap(kite_huge_t *h) {
  uintptr_t base = (uintptr_t)h;
  size_t len = h->user_len, off = h->off;
  void *p = h->user;
  __atomic_store_n(&h->magic, 0, __ATOMIC_RELAXED); /* atomic: a losing free may read it (U2) */
  _kite_pagemap_set(base, off + len, KITE_PM_NONE);
  huge_readers_wait();
  if (off > KITE_OS_PAGE) {
    _kite_os_unmap((void *)base, KITE_OS_PAGE);
    _kite_os_unmap(p, len);
  } else {
    _kite_os_unmap((void *)base, off + len);
  }
  _kite_stat_commit(-(int64_t)(len + KITE_OS_PAGE));
}

/* Unmap cached maps freed before now - delay (all of them if force). Returns bytes. Caller
 * holds huge_lock; unmapping under it is fine: nothing else in the cache is touched. Callers
 * read the clock under huge_lock, so no stamp is later than now (U5); the difference is signed
 * all the same: a later stamp is a map freed just now, never one older than any delay. */
static size_t huge_cache_expire(bool force, uint64_t now) {
  size_t r = 0;
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
    kite_huge_t *h = huge_cache[i].h;
    if (!h || !(force || (delay >= 0 && (int64_t)(now - huge_cache[i].freed_ms) >= delay))) continue;
    huge_cache[i].h = NULL;
    huge_verify(h);
    __atomic_store_n(&huge_cache_bytes, huge_cache_bytes - h->user_len, __ATOMIC_RELAXED);
    r += h->user_len + KITE_OS_PAGE;
    huge_unmap(h);
  }
  return r;
}

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_huge_trimmed)(void *gone, size_t len);
#endif

/* Trim the user part of h to len bytes (len <= user_len, multiples of 4 KiB). The slots
 * wholly past the new end read NONE before the tail is unmapped (U1): once it is, another
 * thread may map an arena or huge block there and set them. */
static void huge_trim(kite_huge_t *h, size_t len) {
  uintptr_t base = (uintptr_t)h;
  size_t old = h->user_len;
  if (len == old) return;
  h->user_len = len;
  uintptr_t first_gone = ((base + h->off + len - 1) >> KITE_ARENA_SHIFT) + 1;
  uintptr_t last = (base + h->off + old - 1) >> KITE_ARENA_SHIFT;
  for (uintptr_t i = first_gone; i <= last; i++)
    if (i < KITE_PAGEMAP_SIZE) __atomic_store_n(&_kite_pagemap[i], KITE_PM_NONE, __ATOMIC_RELEASE);
  _kite_os_unmap((uint8_t *)h->user + len, old - len);
#ifdef KITE_TEST_HOOKS
  if (_kite_test_hook_huge_trimmed) _kite_test_hook_huge_trimmed((uint8_t *)h->user + len, old - len);
#endif
  _kite_stat_commit(-(int64_t)(old - len));
}

/* Take the cached map that fits len best: the smallest one that holds it, else the largest
 * one (the caller grows it: its pages are reused, only the difference is new). The caller
 * owns the map from then on (U6). */
static kite_huge_t *huge_cache_take(size_t len) {
  int best = -1;
  _kite_lock(&huge_lock);
  for (int i = 0; i < HUGE_CACHE_SLOTS; i++) {
    kite_huge_t *h = huge_cache[i].h;
    if (!h) continue;
    if (best < 0) { best = i; continue; }
    size_t b = huge_cache[best].h->user_len, c = h->user_len;
    if (b >= len ? (c >= len && c < b) : c > b) best = i;
  }
  kite_huge_t *h = NULL;
  if (best >= 0) {
    h = huge_cache[best].h;
    huge_cache[best].h = NULL;
    huge_verify(h);
    __atomic_store_n(&huge_cache_bytes, huge_cache_bytes - h->user_len, __ATOMIC_RELAXED);
  }
  _kite_unlock(&huge_lock);
  return h;
}

/* Grow h (off = 4 KiB, owned by the caller: a live block being resized or a map taken from
 * the cache) to len user bytes: in place when the address space after it is free, else
 * moved, pages and all (mremap: nothing is copied), to a fresh 64 MiB aligned place. The
 * page-map slots of the old place read NONE before it is given up (U1). Returns the header
 * (moved or not; its mac is for the caller to seal, U3), or NULL with h unchanged. */
static kite_huge_t *huge_grow(kite_huge_t *h, size_t len) {
  uintptr_t base = (uintptr_t)h;
  size_t old_total = KITE_OS_PAGE + h->user_len, total = KITE_OS_PAGE + len;
  if (base + total <= ((uintptr_t)1 << KITE_ADDR_BITS) && _kite_os_remap(h, old_total, total, false) == h) {
    _kite_pagemap_set(base, total, KITE_PM_HUGE);
  } else {
    uint8_t *dest = _kite_os_map_backed(total, KITE_ARENA_SIZE);
    if (!dest) return NULL;
    if ((uintptr_t)dest + total > ((uintptr_t)1 << KITE_ADDR_BITS)) {
      _kite_os_unmap(dest, total);
      return NULL;
    }
    _kite_pagemap_set((uintptr_t)dest, total, KITE_PM_HUGE); /* magic 0 there: no block yet */
    _kite_pagemap_set(base, old_total, KITE_PM_NONE);
    huge_readers_wait(); /* a double free of a cached map may be reading its header (U4) */
    if (!_kite_os_remap_to(h, old_total, total, dest)) {
      _kite_pagemap_set(base, old_total, KITE_PM_HUGE);
      _kite_pagemap_set((uintptr_t)dest, total, KITE_PM_NONE);
      _kite_os_unmap(dest, total);
      return NULL;
    }
    h = (kite_huge_t *)dest;
    h->user = dest + KITE_OS_PAGE;
  }
  _kite_stat_commit((int64_t)(len - h->user_len));
  h->user_len = len;
  return h;
}

/* A block of len bytes (page-aligned) from the huge cache, grown or trimmed to len; NULL
 * when the cache has no map for it. Its bytes are not zero. */
static void *huge_alloc_cached(size_t len) {
  kite_huge_t *c = huge_cache_take(len);
  if (c && c->user_len < len) {
    kite_huge_t *g = huge_grow(c, len);
    if (!g) huge_unmap(c); /* a fresh map replaces it */
    c = g;
  }
  if (!c) return NULL;
  huge_trim(c, len);
  __atomic_store_n(&c->magic, KITE_HUGE_MAGIC, __ATOMIC_RELEASE); /* U2 */
  huge_seal(c); /* U3 */
  huge_live(1, (int64_t)c->user_len);
  KITE_TOOL_RUN_FRESH(c->user, c->user_len);
  __atomic_fetch_add(&_kite_stats.huge_allocs, 1, __ATOMIC_RELAXED);
  kite_assert_internal(huge_check_block(c, true));
  kite_assert_expensive(_kite_huge_check());
  return c->user;
}

void *_kite_huge_alloc(size_t size, size_t align, bool *zero) {
  if (align < KITE_OS_PAGE) align = KITE_OS_PAGE;
  size_t len = (size + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (len < size || len > ((size_t)1 << KITE_ADDR_BITS)) { errno = ENOMEM; return NULL; }
  *zero = true;
  if (align == KITE_OS_PAGE && __atomic_load_n(&huge_cache_bytes, __ATOMIC_RELAXED)) {
    void *p = huge_alloc_cached(len);
    if (p) {
      *zero = false;
      return p;
    }
  }
  size_t off = align > KITE_OS_PAGE ? (align < KITE_ARENA_SIZE ? align : KITE_ARENA_SIZE) : KITE_OS_PAGE;
  size_t extra = align > KITE_ARENA_SIZE ? align - KITE_ARENA_SIZE : 0;
  if (extra >= ((size_t)1 << KITE_ADDR_BITS)) { errno = ENOMEM; return NULL; }
  size_t total = off + len + extra;
  uint8_t *raw = _kite_os_map_backed(total, KITE_ARENA_SIZE);
  if (!raw) { /* the OS refused: give back cached huge maps and empty arenas, retry */
    _kite_huge_cache_release(true);
    if (_kite_arena_count() > 0) _kite_arena_purge(true);
    raw = _kite_os_map_backed(total, KITE_ARENA_SIZE);
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
  __atomic_store_n(&h->magic, KITE_HUGE_MAGIC, __ATOMIC_RELEASE); /* U2 */
  h->user = (void *)p;
  h->user_len = len;
  h->off = off;
  huge_seal(h);
  _kite_pagemap_set(base, off + len, KITE_PM_HUGE);
  huge_advise(h, size);
  _kite_stat_commit((int64_t)(len + KITE_OS_PAGE));
  huge_live(1, (int64_t)len);
  KITE_TOOL_RUN_FRESH((void *)p, len); /* ASan: an unmapped arena's shadow may still be poisoned */
  __atomic_fetch_add(&_kite_stats.huge_allocs, 1, __ATOMIC_RELAXED);
  kite_assert_internal(huge_check_block(h, true));
  kite_assert_expensive(_kite_huge_check());
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

bool _kite_huge_free(void *p, void (*disown)(kite_owned_t *o)) {
  /* a second free is reported; the cache keeps it mapped for a while. One CAS: of two
   * racing frees one wins, and the loser's reads are over before the winner may unmap
   * (huge_free_readers, above huge_unmap): U2, U4 */
  __atomic_add_fetch(&huge_free_readers, 1, __ATOMIC_SEQ_CST);
  kite_huge_t *h = huge_header(p);
  uint64_t magic = KITE_HUGE_MAGIC;
  bool won = h && __atomic_compare_exchange_n(&h->magic, &magic, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&huge_free_readers, 1, __ATOMIC_RELEASE);
  if (!won) return false;
  if (disown) disown(&h->owned);
  huge_live(-1, -(int64_t)h->user_len);
  int64_t delay = _kite_opt(KITE_OPT_PURGE_DELAY_MS);
  if (h->off == KITE_OS_PAGE && delay != 0 && h->user_len <= HUGE_CACHE_BYTES / 2) {
    _kite_lock(&huge_lock);
    /* the clock is read under the lock: a reading taken before it could be older than the
     * stamp of a map another thread cached meanwhile (U5) */
    uint64_t now = _kite_os_now_ms();
    huge_cache_expire(false, now);
    int slot = -1;
    for (int i = 0; i < HUGE_CACHE_SLOTS && slot < 0; i++) if (!huge_cache[i].h) slot = i;
    if (slot >= 0 && huge_cache_bytes + h->user_len <= HUGE_CACHE_BYTES) {
      huge_cache[slot].h = h;
      huge_cache[slot].freed_ms = now;
      __atomic_store_n(&huge_cache_bytes, huge_cache_bytes + h->user_len, __ATOMIC_SEQ_CST); /* purger.c */
      h = NULL;
    }
    _kite_unlock(&huge_lock);
    kite_assert_expensive(_kite_huge_check());
    if (!h) {
      void (*hook)(void) = __atomic_load_n(&_kite_arena_dirty_hook, __ATOMIC_ACQUIRE);
      if (hook) hook(); /* the background purger expires it */
      return true;
    }
  }
  huge_unmap(h);
  return true;
}

void *_kite_huge_resize(void *p, size_t new_size, bool may_move) {
  kite_huge_t *h = huge_header(p);
  if (!h) return NULL;
  size_t len = (new_size + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1);
  if (len < new_size || len == 0 || len > ((size_t)1 << KITE_ADDR_BITS)) return NULL;
  size_t old = h->user_len;
  if (len == old) return p;
  if (len < old) {
    huge_trim(h, len);
  } else if ((uintptr_t)p + len <= ((uintptr_t)1 << KITE_ADDR_BITS) && _kite_os_remap(p, old, len, false) == p) {
    _kite_stat_commit((int64_t)(len - old));
    _kite_pagemap_set((uintptr_t)p, len, KITE_PM_HUGE);
    h->user_len = len;
  } else {
    /* a moved header would leave a first-class heap's list pointing at the old place */
    if (!may_move || h->off != KITE_OS_PAGE || h->owned.owner) return NULL;
    kite_huge_t *g = huge_grow(h, len);
    if (!g) return NULL;
    h = g;
  }
  huge_seal(h); /* U3 */
  huge_live(0, (int64_t)h->user_len - (int64_t)old);
  if (h->user_len > old) KITE_TOOL_RUN_FRESH(h->user, h->user_len); /* ASan: see huge_alloc */
  kite_assert_internal(huge_check_block(h, true));
  return h->user;
}

size_t _kite_huge_cache_release(bool force) {
  if (!__atomic_load_n(&huge_cache_bytes, __ATOMIC_RELAXED)) return 0;
  _kite_lock(&huge_lock);
  size_t r = huge_cache_expire(force, _kite_os_now_ms());
  _kite_unlock(&huge_lock);
  if (r) _kite_stat_add(&_kite_stats.purged, r);
  return r;
}

size_t _kite_huge_cache_bytes(void) { return __atomic_load_n(&huge_cache_bytes, __ATOMIC_SEQ_CST); }

kite_page_t *_kite_run_alloc(unsigned order, bool *zero) {
  kite_page_t *pg = _kite_arena_alloc_run(order, zero);
  /* the OS refused a new arena: give back cached huge maps and other empty arenas, retry */
  if (!pg && (_kite_huge_cache_release(true) | _kite_arena_purge(true))) pg = _kite_arena_alloc_run(order, zero);
  if (pg) KITE_TOOL_RUN_FRESH(_kite_page_start(pg), KITE_UNIT_SIZE << order);
  /* a claim marked a dense granule (KITE_HUGEPAGES=dense): wake the thread that collapses
   * it. Here, not in the arena's claim: no lock of kite's is held, and starting the thread
   * may call malloc */
  if (unlikely(_kite_arena_collapse_pending())) {
    void (*hook)(void) = __atomic_load_n(&_kite_arena_collapse_hook, __ATOMIC_ACQUIRE);
    if (hook) hook();
  }
  return pg;
}

void _kite_huge_foreach(bool (*fn)(void *p, size_t len, void *arg), void *arg) {
  for (size_t i = 1; i < KITE_PAGEMAP_SIZE; i++) {
    if (__atomic_load_n(&_kite_pagemap[i], __ATOMIC_RELAXED) != KITE_PM_HUGE) continue;
    kite_huge_t *h = (kite_huge_t *)(i << KITE_ARENA_SHIFT);
    if (__atomic_load_n(&h->magic, __ATOMIC_RELAXED) == KITE_HUGE_MAGIC && (uintptr_t)h->user == (uintptr_t)h + h->off && huge_header(h->user) == h)
      if (!fn(h->user, h->user_len, arg)) return;
  }
}

void _kite_huge_fork_prepare(void) { _kite_lock(&huge_lock); }
void _kite_huge_fork_parent(void) { _kite_unlock(&huge_lock); }
#ifdef KITE_TEST_HOOKS
/* Tests: expire the cache (not forced) as if the clock read `now`. Bytes unmapped. */
size_t _kite_test_huge_cache_expire_at(uint64_t now) {
  _kite_lock(&huge_lock);
  size_t r = huge_cache_expire(false, now);
  _kite_unlock(&huge_lock);
  return r;
}
/* Tests: count a free in (+1) or out (-1) as if it were reading a header right now. */
void _kite_test_huge_readers(int delta) { __atomic_add_fetch(&huge_free_readers, (unsigned)delta, __ATOMIC_SEQ_CST); }
#endif

void _kite_huge_fork_child(void) {
  _kite_lock_fork_child(&huge_lock);
  /* a thread of the parent that was reading a header at the fork does not exist here: its
   * count would make every later unmap wait forever (U4) */
  __atomic_store_n(&huge_free_readers, 0, __ATOMIC_RELAXED);
}


/* ---- validators (contract in huge.h) ---- */

/* Huge block h: header fields (magic when live, 0 when cached), user = base + off, off and
 * user_len multiples of 4 KiB, and every page-map slot of [base, user + user_len) says HUGE
 * (U1, U2). */
static bool huge_check_block(const kite_huge_t *h, bool live) {
  uintptr_t base = (uintptr_t)h;
  if (base & KITE_ARENA_MASK) return _kite_check_failed("huge: header not at a 64 MiB boundary", base);
  if (__atomic_load_n(&h->magic, __ATOMIC_RELAXED) != (live ? KITE_HUGE_MAGIC : 0)) return _kite_check_failed("huge: magic", base);
  if ((uintptr_t)h->user != base + h->off || h->off < KITE_OS_PAGE || (h->off & (KITE_OS_PAGE - 1)) ||
      h->user_len == 0 || (h->user_len & (KITE_OS_PAGE - 1)))
    return _kite_check_failed("huge: layout (user, off, user_len)", base);
  for (uintptr_t u = base; u < base + h->off + h->user_len; u += KITE_ARENA_SIZE)
    if (_kite_pagemap_kind(u) != KITE_PM_HUGE) return _kite_check_failed("huge: page-map slot is not HUGE", u);
  if (_kite_pagemap_kind(base + h->off + h->user_len - 1) != KITE_PM_HUGE) return _kite_check_failed("huge: last page-map slot", base);
  return true;
}

/* U5 */
bool _kite_huge_check(void) {
  bool ok = true;
  size_t bytes = 0;
  _kite_lock(&huge_lock);
  for (int i = 0; i < HUGE_CACHE_SLOTS && ok; i++) {
    kite_huge_t *h = huge_cache[i].h;
    if (!h) continue;
    for (int j = 0; j < i; j++)
      if (huge_cache[j].h == h) ok = _kite_check_failed("huge cache: a map in two slots", (uintptr_t)h);
    if (ok && h->off != KITE_OS_PAGE) ok = _kite_check_failed("huge cache: a map with an alignment gap", (uintptr_t)h);
    if (ok) ok = huge_check_block(h, false);
    bytes += h->user_len;
  }
  if (ok && bytes != huge_cache_bytes) ok = _kite_check_failed("huge cache: bytes total", huge_cache_bytes);
  if (ok && bytes > HUGE_CACHE_BYTES) ok = _kite_check_failed("huge cache: over its byte bound", bytes);
  _kite_unlock(&huge_lock);
  return ok;
}
