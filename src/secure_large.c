/* src/secure_large.c -- the secure build's large runs and huge blocks (secure.h): the guard
 * page after each (PROT_NONE from round_up(request, 4 KiB) on), and the large runs a thread
 * keeps for reuse with their guards in place (K1-K3 below). secure.c's wrappers call in
 * here for every request above the small classes and every free that is not a small block.
 * Layer: entry (the secure module, with secure.c).
 */
#define KITE_SECURE_WRAPPERS 1
#include "alloc.h"
#include "secure.h"
#include "heap.h"
#include "page.h"
#include "huge.h"
#include "classify.h"
#include "message.h"
#include "prof.h"
#include "os.h"
#include <errno.h>
#include <string.h>

/* Only the secure build compiles the rest (kite-sys builds every file of src/). */
#if KITE_SECURE
#define PAGE_DOWN KITE_SECURE_PAGE_DOWN
#define secure_error _kite_secure_error

/* ---- guard pages after large runs and huge blocks ---- */

size_t _kite_secure_guarded_usable(const void *p) {
  return PAGE_DOWN(_kite_core_malloc_usable_size(p)) - KITE_SECURE_GUARD;
}

/* Bytes of the run whose head is pg (a large run: 2^order units). */
static inline size_t run_bytes(const kite_page_t *pg) { return KITE_UNIT_SIZE << pg->order; }

/* The guard of live large or huge block p: PROT_NONE from the end of its usable bytes
 * (round_up(request, 4 KiB)) to the end of its run for a large run (the run's tail the
 * block does not use: a kept run's guard then moves with one mprotect, see "large runs
 * kept" below), one page for a huge block. */
typedef struct { uint8_t *at; size_t len; } guard_t;
static guard_t guard_of(void *p) {
  kite_ptr_t c;
  guard_t g = {(uint8_t *)p + _kite_secure_guarded_usable(p), KITE_SECURE_GUARD};
  if (_kite_classify(p, &c) == KITE_PTR_LARGE) g.len = (uint8_t *)p + run_bytes(c.page) - g.at;
  return g;
}

static void *kept_take(size_t m);

/* (secure.h) The kernel refuses a guard when the process has too many mappings. */
void *_kite_secure_guarded(void *p) {
  if (!p || KITE_SECURE_FLOOR) return p; /* the floor keeps the page, not protected */
  guard_t g = guard_of(p);
  if (likely(_kite_os_protect(g.at, g.len, false))) return p;
  _kite_core_free(p);
  errno = ENOMEM;
  return NULL;
}

/* A large run or huge block for n bytes (aligned to align when not 0; zeroed when zero),
 * with a guard page after round_up(n, 4 KiB). NULL + ENOMEM (also when the kernel refuses
 * the guard: too many mappings). */
void *_kite_secure_large_alloc(size_t n, size_t align, bool zero) {
  if (n > KITE_MAX_REQUEST - 2 * KITE_SECURE_GUARD) { errno = ENOMEM; return NULL; }
  if (n == 0) n = 1; /* a usable size of 0 would read as "not a block" */
  size_t m = PAGE_DOWN(n + KITE_OS_PAGE - 1) + KITE_SECURE_GUARD;
  void *p = align || zero ? NULL : kept_take(m); /* a kept run holds old bytes: not for calloc */
  if (p) return p;
  p = align ? _kite_core_memalign(align, m) : zero ? _kite_core_calloc(1, m) : _kite_core_malloc(m);
  if (p && align && zero) memset(p, 0, n);
  return _kite_secure_guarded(p);
}

void _kite_secure_unguard(void *p) {
  guard_t g = guard_of(p);
  _kite_os_protect(g.at, g.len, true);
}

static void large_free(void *p) {
  if (KITE_SECURE_FLOOR) { _kite_core_free(p); return; }
  guard_t g = guard_of(p);
  if (unlikely(!_kite_os_protect(g.at, g.len, true))) secure_error("free(): the guard page could not be lifted", p);
  _kite_core_free(p);
}

bool _kite_secure_is_large(const void *p) {
  kite_ptr_t c;
  unsigned k = _kite_classify(p, &c);
  return k == KITE_PTR_LARGE || (k == KITE_PTR_HUGE && _kite_huge_usable(p) != 0);
}

/* A core "small" block that is no small page's: the heap profiler serves a sampled small
 * request with a large run of its own, with room for a guard page (prof.h, alloc.c), which
 * gets its guard here as a large block does, and its head zeroed (calloc counts on a small
 * block's first KITE_SECURE_ZERO_MAX bytes being zero). Anything else means a free list led
 * outside kite's blocks: never handed out. False: not handed out. */
KITE_COLD bool _kite_secure_sampled_ready(void *p) {
  if (!KITE_LOAD_RELAXED(_kite_prof_enabled) || !_kite_secure_is_large(p)) {
    _kite_report_corruption("malloc found a free-list link outside kite's blocks", p);
    return false;
  }
  memset(p, 0, KITE_SECURE_ZERO_MAX);
  if (KITE_SECURE_FLOOR || _kite_os_protect((uint8_t *)p + _kite_secure_guarded_usable(p), KITE_SECURE_GUARD, false)) return true;
  _kite_core_free(p);
  return false;
}

/* ---- large runs kept with their guards ----
 * A thread keeps up to KEPT_RUNS large runs it freed (KEPT_BYTES at most), guards in place,
 * and hands one out again for a request of the same order, bypassing the arena: with no
 * system call for the same page count, else with its guard moved (two mprotect calls).
 * Invariants:
 *   K1. A kept run was claimed as the core's free claims a large run (one compare-and-swap
 *       of its kind, LARGE -> HELD): of two frees of one block one proceeds, the other is
 *       reported; a free, realloc or malloc_usable_size of a kept run finds no block.
 *   K2. A kept run's page at large_size - KITE_SECURE_GUARD is PROT_NONE, as while it was
 *       live; handed out again, its large_size is the new request's round_up + guard, and
 *       its guard sits right after round_up(request, 4 KiB), as a fresh run's does.
 *   K3. Only a thread's own kind of run is kept: none of a first-class heap (kite_heap_destroy
 *       frees those whole), none sampled by the heap profiler (its free is prof.h's), none
 *       while the thread is exiting; the retirement of the thread's heap (its exit, or
 *       heap_pool.c I-H4's), malloc_trim and the statistics and walks (visit.h's flush)
 *       give them back to the core, guard lifted first. */
#define KEPT_RUNS KITE_SECURE_KEPT_RUNS
#define KEPT_BYTES ((size_t)32 << 20)
typedef kite_secure_kept_t kept_t; /* in the thread's heap struct (secure_layout.h) */

/* Where kept run pg's guard starts (K2: it ends at the run's end). */
static inline uint8_t *run_guard(kite_page_t *pg) {
  return (uint8_t *)_kite_page_start(pg) + pg->large_size - KITE_SECURE_GUARD;
}
static inline size_t run_guard_len(kite_page_t *pg) { return run_bytes(pg) - pg->large_size + KITE_SECURE_GUARD; }

/* Kept run pg (HELD, K1) goes to the core: guard lifted, then freed as any large block. */
static void kept_release(kite_page_t *pg) {
  void *p = _kite_page_start(pg);
  if (unlikely(!_kite_os_protect(run_guard(pg), run_guard_len(pg), true))) {
    secure_error("free(): the guard page could not be lifted", p);
    return; /* (test hook) kept out of use */
  }
  __atomic_store_n(&pg->kind, KITE_KIND_LARGE, __ATOMIC_RELEASE);
  _kite_core_free(p);
}

static void kept_remove(kept_t *k, uint32_t i) {
  k->bytes -= run_bytes(k->run[i]);
  k->n--;
  memmove(&k->run[i], &k->run[i + 1], (k->n - i) * sizeof k->run[0]);
}

void _kite_secure_kept_flush(kite_heap_t *h) {
  kept_t *k = &h->secure.kept;
  while (k->n) {
    kite_page_t *pg = k->run[0];
    kept_remove(k, 0);
    kept_release(pg);
  }
}

/* free(p) of live large run pg (its head): kept (K3 allowing), else as before. */
static void large_free_run(void *p, kite_page_t *pg) {
  kite_heap_t *h = NULL;
  if (KITE_SECURE_FLOOR || pg->owned.owner != NULL || pg->sampled || run_bytes(pg) > KEPT_BYTES ||
      (h = _kite_secure_heap()) == NULL) {
    large_free(p);
    return;
  }
  uint8_t want = KITE_KIND_LARGE; /* K1 */
  if (!__atomic_compare_exchange_n(&pg->kind, &want, (uint8_t)KITE_KIND_HELD, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED)) {
    secure_error("free(): invalid pointer or double free", p);
    return;
  }
  kept_t *k = &h->secure.kept;
  while (k->n && (k->n == KEPT_RUNS || k->bytes + run_bytes(pg) > KEPT_BYTES)) {
    kite_page_t *old = k->run[0];
    kept_remove(k, 0);
    kept_release(old);
  }
  k->run[k->n++] = pg;
  k->bytes += run_bytes(pg);
}

/* A kept run for a large request of m bytes (its round_up and the guard), or NULL: one of
 * exactly m bytes if kept (no system call), else the smallest of the order the core would
 * take or the next (the core's own runs are up to twice the request; the unused tail is
 * guard, address space unless an earlier block touched it). */
static void *kept_take(size_t m) {
  kept_t *k = &_kite_heap_tls->secure.kept; /* (the static empty heap's: none) */
  if (k->n == 0 || m > KITE_LARGE_MAX) return NULL;
  unsigned order = _kite_ceil_log2((m + KITE_UNIT_SIZE - 1) >> KITE_UNIT_SHIFT);
  int best = -1;
  for (uint32_t i = 0; i < k->n; i++) {
    kite_page_t *r = k->run[i];
    if (r->order < order || r->order > order + 1) continue;
    if (r->order == order && r->large_size == m) { best = (int)i; break; }
    if (best < 0 || r->order < k->run[best]->order) best = (int)i;
  }
  if (best < 0) return NULL;
  kite_page_t *pg = k->run[best];
  kept_remove(k, (uint32_t)best);
  uint8_t *p = _kite_page_start(pg);
  /* K2: the guard's start moves to right after the new round_up, one mprotect: the pages
   * between the old and the new start change, the rest of the run's tail stays PROT_NONE */
  uint8_t *old = run_guard(pg), *at = p + m - KITE_SECURE_GUARD;
  if (at != old && unlikely(!_kite_os_protect(at < old ? at : old, at < old ? (size_t)(old - at) : (size_t)(at - old), at > old))) {
    __atomic_store_n(&pg->kind, KITE_KIND_LARGE, __ATOMIC_RELEASE); /* the guard as it was */
    large_free(p); /* back to the core; the caller asks it for a fresh run */
    return NULL;
  }
  pg->large_size = m;
  __atomic_store_n(&pg->kind, KITE_KIND_LARGE, __ATOMIC_RELEASE); /* a block again (K1) */
  return p;
}

/* free(p) that is not a small block. */
KITE_NOINLINE void _kite_secure_free_other(void *p) {
  if (p == NULL) return;
  kite_ptr_t c;
  unsigned k = _kite_classify(p, &c);
  if (k == KITE_PTR_LARGE) large_free_run(p, c.page);
  else if (k == KITE_PTR_HUGE && _kite_huge_usable(p) != 0) large_free(p);
  else secure_error("free(): invalid pointer or double free", p);
}
#endif /* KITE_SECURE */
