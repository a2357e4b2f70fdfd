/* src/links.c -- the link arrays of small pages (contract in links.h).
 *
 * Chunks of KITE_LINKS_CHUNK bytes are mapped with a guard page on each side; arrays are cut
 * from the current chunk in 64-byte steps (bump) and, once given back, kept on their
 * bucket's free list (linked through their first word) for the next array of that bucket.
 * When the OS refuses a mapping (RLIMIT_AS), a chunk is one unit of an arena with its
 * guards inside. Chunks are never unmapped: the arrays of a program's pages at its peak stay reserved, and
 * malloc_trim decommits the whole OS pages of free arrays. Statistics count an array as
 * committed from the moment it is first cut from a chunk (a chunk's untouched tail costs no
 * memory); a trim takes off what it decommits (remembered in the free array's header) and
 * a reuse puts it back.
 *
 * Invariants (bucket_free, cur, end and cur_in_arena change only under links_lock):
 *   L1 Every free array is on exactly one bucket list, that of its size (linked through its
 *      first word); its second word is the bytes malloc_trim decommitted of it (whole OS
 *      pages past those two words), counted back as committed when it is reused.
 *   L2 cur <= end, and [cur, end) of the current chunk was never handed out and reads zero
 *      (fresh from the OS, or an arena unit zeroed between its guards).
 *   L3 An array handed out is zero filled and has cap >= n entries with bucket_bytes(cap)
 *      its bucket's bytes, so that the free of (array, cap) puts it on the list it came
 *      from (L1).
 *   L4 Lock order: links_lock, then an arena's locks (the arena fallback); nothing that
 *      holds an arena lock takes links_lock. Held across fork, re-made in the child.
 *   L5 Chunks are never given back (an arena unit used as one stays kind META). An array
 *      cut from a mapped chunk counts as committed from its cut, an arena unit used as a
 *      chunk is counted whole by the arena; a trim takes off what it decommits, a reuse
 *      puts it back.
 */
#include "links.h"
#include "arena.h"
#include "os.h"
#include "message.h"
#include "stats.h"
#include <errno.h>
#include <string.h>

#define LINKS_STEP 64
#define LINKS_BUCKETS ((KITE_PAGE_MAX_BLOCKS + 1) * 2 / LINKS_STEP + 2)
#define KITE_LINKS_CHUNK ((size_t)256 << 10)
#define LINKS_GUARD ((size_t)KITE_OS_PAGE)

typedef struct links_free_s {
  struct links_free_s *next;
  size_t decommitted; /* bytes of this array malloc_trim gave back (recommitted on reuse) */
} links_free_t;

const size_t _kite_link_remote_word = KITE_LINK_REMOTE; /* links.h */

static kite_lock_t links_lock = KITE_LOCK_INIT; /* lock: the free link arrays (bucket_free[]) and the current chunk */
static links_free_t *bucket_free[LINKS_BUCKETS];
static uint8_t *cur, *end;
static bool cur_in_arena; /* the current chunk is an arena unit: the arena counts it committed */

static inline size_t bucket_bytes(uint32_t n) { return ((size_t)n * 2 + LINKS_STEP - 1) & ~(size_t)(LINKS_STEP - 1); }

/* Pop a free array of bucket b or, with any, of the smallest larger bucket that has one;
 * zero filled; *cap = its entries (L3). Called and returns with links_lock held. */
static uint16_t *pop_free(size_t b, bool any, uint32_t *cap) {
  for (size_t k = b; k < LINKS_BUCKETS; k++) {
    links_free_t *f = bucket_free[k];
    if (f) {
      bucket_free[k] = f->next;
      *cap = (uint32_t)(k * LINKS_STEP / 2);
      if (f->decommitted) _kite_stat_commit((int64_t)f->decommitted); /* L1, L5 */
      memset(f, 0, k * LINKS_STEP); /* recommits what malloc_trim gave back */
      return (uint16_t *)f;
    }
    if (!any) break;
  }
  return NULL;
}

/* Map a chunk of `size` usable bytes between two guard pages; NULL if the OS refuses. */
static uint8_t *map_chunk(size_t size) {
  uint8_t *m = _kite_os_map_aligned(size + 2 * LINKS_GUARD, KITE_OS_PAGE, NULL);
  if (!m) return NULL;
  _kite_os_protect(m, LINKS_GUARD, false);
  _kite_os_protect(m + LINKS_GUARD + size, LINKS_GUARD, false);
  return m + LINKS_GUARD;
}

uint16_t *_kite_links_alloc(uint32_t n, uint32_t *cap) {
  kite_assert(n >= 1 && n <= KITE_PAGE_MAX_BLOCKS + 1);
  size_t bytes = bucket_bytes(n), b = bytes / LINKS_STEP;
  _kite_lock(&links_lock);
  uint16_t *a = pop_free(b, false, cap);
  if (!a && (cur == NULL || (size_t)(end - cur) < bytes)) {
    /* a new chunk (the old one's tail, under one array, goes unused). The OS is called
     * under links_lock: chunks are rare, and nothing that holds an arena lock takes it
     * (L4) */
    size_t size = KITE_LINKS_CHUNK;
    uint8_t *m = map_chunk(size);
    if (!m) { size = (bytes + KITE_OS_PAGE - 1) & ~(size_t)(KITE_OS_PAGE - 1); m = map_chunk(size); }
    if (!m) {
      /* the address space is exhausted (RLIMIT_AS): one unit of an arena, guards inside
       * it; it stays kite's metadata (kind META) for good */
      bool zero;
      kite_page_t *run = _kite_arena_alloc_run(0, &zero);
      if (run) {
        uint8_t *u = _kite_page_start(run);
        if (!zero) memset(u + LINKS_GUARD, 0, KITE_UNIT_SIZE - 2 * LINKS_GUARD);
        _kite_os_protect(u, LINKS_GUARD, false);
        _kite_os_protect(u + KITE_UNIT_SIZE - LINKS_GUARD, LINKS_GUARD, false);
        m = u + LINKS_GUARD;
        size = KITE_UNIT_SIZE - 2 * LINKS_GUARD;
        cur_in_arena = true;
      }
    } else {
      cur_in_arena = false;
    }
    if (m) {
      cur = m;
      end = m + size;
    }
  }
  if (!a && cur != NULL && (size_t)(end - cur) >= bytes) {
    a = (uint16_t *)cur; /* fresh from the OS: zero (L2) */
    cur += bytes;
    *cap = (uint32_t)(bytes / 2);
    if (!cur_in_arena) _kite_stat_commit((int64_t)bytes);
  }
  if (!a) a = pop_free(b, true, cap); /* out of memory: a larger free array will do */
  _kite_unlock(&links_lock);
  if (!a) errno = ENOMEM;
  return a;
}

void _kite_links_free(uint16_t *a, uint32_t cap) {
  if (!a) return;
  size_t bytes = bucket_bytes(cap), b = bytes / LINKS_STEP;
  links_free_t *f = (links_free_t *)a;
  _kite_lock(&links_lock);
  f->decommitted = 0; /* L1: its bucket's list (L3's cap) */
  f->next = bucket_free[b];
  bucket_free[b] = f;
  _kite_unlock(&links_lock);
}

size_t _kite_links_trim(void) {
  size_t given = 0;
  _kite_lock(&links_lock);
  for (size_t b = 0; b < LINKS_BUCKETS; b++) {
    size_t bytes = b * LINKS_STEP;
    if (bytes < 2 * KITE_OS_PAGE) continue; /* no whole OS page beyond the link word */
    for (links_free_t *f = bucket_free[b]; f; f = f->next) {
      uintptr_t lo = ((uintptr_t)f + sizeof *f + KITE_OS_PAGE - 1) & ~(uintptr_t)(KITE_OS_PAGE - 1);
      uintptr_t hi = ((uintptr_t)f + bytes) & ~(uintptr_t)(KITE_OS_PAGE - 1);
      if (hi > lo && !f->decommitted) {
        _kite_os_decommit((void *)lo, hi - lo);
        f->decommitted = hi - lo; /* L1 */
        _kite_stat_commit(-(int64_t)(hi - lo));
        given += hi - lo;
      }
    }
  }
  _kite_unlock(&links_lock);
  _kite_stat_add(&_kite_stats.purged, given);
  return given;
}

/* L4 */
void _kite_links_fork_prepare(void) { _kite_lock(&links_lock); }
void _kite_links_fork_parent(void) { _kite_unlock(&links_lock); }
void _kite_links_fork_child(void) { _kite_lock_fork_child(&links_lock); }
