/* tests/unit/test_core_internals.c -- cases of the core that the public API cannot reach
 * on purpose (clock readings that race, failing C library calls, a thread caught in the
 * middle of a slow path), read and steered through the test hooks of kite-noover-debug
 * (KITE_DEBUG=3, KITE_TEST_HOOKS; declared in the headers that own them). Each test's
 * comment says what it checks; (kite_check)() runs after each.
 *   test_core_internals          every test
 *   test_core_internals NAME...  only those
 *   test_core_internals verbose-child ENTRY   one failing call of ENTRY (the verbose test
 *                                 runs it with KITE_VERBOSE=1 and reads its stderr) */
#define _GNU_SOURCE
#include "test.h"
#include "smaps.h"
#include <kite.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "arena.h"
#include "arena_int.h"
#include "huge.h"
#include "heap.h"
#include "page.h"
#include "stats.h"
#include "visit.h"
#include "os.h"
#include "options.h"
#include "tool.h"
#include "types.h"

/* ---- decay ages ---- */

/* A run freed during a decay step carries a stamp later than the step's clock reading: it
 * is of age 0 for that step, not of age 2^32 - d ms (older than any delay), so it stays
 * committed. Three runs in one arena: one stamped 500 ms after the step's `now`, ballast
 * aged 900 ms of a 1000 ms delay (the decay purges it first), and one aged 100 s (purged by
 * every kind of step: the control that the step did run). */
TEST(decay_keeps_a_unit_stamped_after_now) {
  long saved = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1000);
  bool zero;
  kite_page_t *young = _kite_arena_alloc_run(4, &zero);
  kite_page_t *ballast = _kite_arena_alloc_run(5, &zero);
  kite_page_t *old = _kite_arena_alloc_run(4, &zero);
  assert_true(young && ballast && old);
  uint64_t now = _kite_os_now_ms() + 1000000; /* later than every real stamp */
  _kite_test_arena_free_run_at(young, now + 500);
  _kite_test_arena_free_run_at(ballast, now - 900);
  _kite_test_arena_free_run_at(old, now - 100000);
  expect_true(_kite_test_arena_unit_dirty(young));
  expect_true(_kite_test_arena_unit_dirty(old));
  _kite_test_arena_decay_at(now);
  expect_true(!_kite_test_arena_unit_dirty(old));      /* the step ran */
  expect_true(_kite_test_arena_unit_dirty(young));     /* freed after its clock reading */
  expect_true(_kite_test_arena_unit_dirty(young + 15)); /* every unit of the run */
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, saved);
  kite_malloc_trim(0);
}

/* ---- the purge policy's arithmetic (decay.c) ---- */

/* What counts as "came back": a unit a decay step purged (stamp != 0) claimed less than
 * DECAY_BACK_MS after the step; the window's edge is out; a stamp later than the claim's
 * clock reading (the step read its clock after the claim read its own) is of age 0, so it
 * came back, never "purged 2^32 ms ago"; a unit no step purged (0) never did. */
TEST(decay_came_back_window) {
  uint64_t now = 5000000;
  expect_true(_kite_decay_is_back(now, (uint32_t)now));
  expect_true(_kite_decay_is_back(now, (uint32_t)(now - DECAY_BACK_MS + 1)));
  expect_true(!_kite_decay_is_back(now, (uint32_t)(now - DECAY_BACK_MS)));
  expect_true(!_kite_decay_is_back(now, (uint32_t)(now - 100000)));
  expect_true(_kite_decay_is_back(now, (uint32_t)(now + 500)));
  expect_true(!_kite_decay_is_back(now, 0));
  /* across the 2^32 ms wrap of the stamps */
  uint64_t wrap = (uint64_t)1 << 32;
  expect_true(_kite_decay_is_back(wrap + 10, (uint32_t)(wrap - 10)));
}

/* The stretch: up one step when half or more of what was purged came back, down one when
 * less than an eighth did, unchanged in between and when fewer than 2 MiB (32 units) were
 * purged; never past DECAY_MAX_MS, never below 0. */
TEST(decay_next_stretch) {
  expect_uint_eq(_kite_decay_next_stretch(0, 31, 31, 10), 0);  /* too little to judge */
  expect_uint_eq(_kite_decay_next_stretch(0, 64, 32, 10), 1);
  expect_uint_eq(_kite_decay_next_stretch(0, 64, 31, 10), 0);  /* between */
  expect_uint_eq(_kite_decay_next_stretch(3, 64, 8, 10), 3);   /* exactly an eighth */
  expect_uint_eq(_kite_decay_next_stretch(3, 64, 7, 10), 2);
  expect_uint_eq(_kite_decay_next_stretch(0, 64, 0, 10), 0);
  expect_uint_eq(_kite_decay_next_stretch(5, 64, 64, 10), 6);  /* 640 ms */
  expect_uint_eq(_kite_decay_next_stretch(6, 64, 64, 10), 6);  /* 1280 ms would pass the cap */
  expect_uint_eq(_kite_decay_next_stretch(0, 64, 64, DECAY_MAX_MS), 0);
}

/* A run a decay step purged and claimed again at once is counted back, once, also when the
 * step's stamp is later than the claim's clock reading; a run freed and claimed again while
 * still committed is not. */
TEST(decay_counts_purged_runs_that_come_back) {
  long saved = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1000);
  for (int future = 0; future < 2; future++) {
    bool zero;
    kite_page_t *run = _kite_arena_alloc_run(4, &zero);
    assert_true(run != NULL);
    uint64_t now = _kite_os_now_ms() + (future ? 500000 : 0);
    _kite_test_arena_free_run_at(run, now - 100000);
    _kite_test_arena_decay_at(now);
    expect_true(!_kite_test_arena_unit_dirty(run));
    uint64_t back0 = __atomic_load_n(&_kite_decay_back, __ATOMIC_RELAXED);
    kite_page_t *got[64];
    int n = 0;
    while (n < 64 && (got[n] = _kite_arena_alloc_run(4, &zero)) != NULL && got[n] != run) n++;
    assert_true(n < 64 && got[n] == run);
    expect_true(zero);
    expect_uint_eq(__atomic_load_n(&_kite_decay_back, __ATOMIC_RELAXED) - back0, 16);
    /* freed committed and claimed again: reused, not back */
    _kite_test_arena_free_run_at(run, _kite_os_now_ms());
    kite_page_t *again = _kite_arena_alloc_run(4, &zero);
    expect_true(again == run);
    expect_uint_eq(__atomic_load_n(&_kite_decay_back, __ATOMIC_RELAXED) - back0, 16);
    _kite_arena_free_run(again);
    for (int i = 0; i < n; i++) _kite_arena_free_run(got[i]);
  }
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, saved);
  kite_malloc_trim(0);
}

/* While the program claims memory and the committed total is over the most in use of the
 * last two demand windows, a step purges only the excess, oldest first, and keeps younger
 * runs (the old rule fell back to the plain delay and purged every run older than it, which
 * the next claims faulted in again). The most in use counts the claims made between two
 * steps, not only what the steps read: runs claimed after one step and freed before the
 * next were a peak no step saw, and that step purged them as over the bound (the first
 * expect below failed so). Steps at T, T + w and T + 2w (w: a demand window): the three
 * runs, claimed after T, are the peak of use that the step at T + w takes from the claims
 * (older is freed by then, stamped 40 ms before T + 2w: age 0 at T + w, and under that
 * peak, kept); fresh, claimed before younger is freed, is the claims' mark at T + 2w, so
 * that step's ceiling is the peak of the window before, 16 units under the committed
 * total: of older and younger (40 and 30 ms old, older than the 10 ms delay, younger than a
 * window) the older goes. A step two windows later, with no claim since, purges younger
 * too (an idle program gives memory back). */
TEST(decay_purges_only_the_excess_while_claiming) {
  long saved = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 10);
  kite_malloc_trim(0);
  const uint64_t w = 10 * DEMAND_WINDOWS;
  uint64_t t = _kite_os_now_ms();
  _kite_test_arena_decay_at(t);
  bool zero;
  kite_page_t *ballast = _kite_arena_alloc_run(8, &zero);
  kite_page_t *older = _kite_arena_alloc_run(4, &zero);
  kite_page_t *younger = _kite_arena_alloc_run(4, &zero);
  assert_true(ballast && older && younger);
  _kite_test_arena_free_run_at(older, t + 2 * w - 40);
  _kite_test_arena_decay_at(t + w);
  expect_true(_kite_test_arena_unit_dirty(older)); /* under the peak the claims left */
  kite_page_t *fresh = _kite_arena_alloc_run(4, &zero);
  assert_true(fresh != NULL);
  _kite_test_arena_free_run_at(younger, t + 2 * w - 30);
  _kite_test_arena_decay_at(t + 2 * w);
  expect_true(!_kite_test_arena_unit_dirty(older));
  expect_true(!_kite_test_arena_unit_dirty(older + 15));
  expect_true(_kite_test_arena_unit_dirty(younger));
  _kite_test_arena_decay_at(t + 2 * w + 2000);
  expect_true(!_kite_test_arena_unit_dirty(younger));
  _kite_arena_free_run(fresh);
  _kite_arena_free_run(ballast);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, saved);
  kite_malloc_trim(0);
}

/* A huge map cached by a thread whose clock reading is later than that of a thread now
 * expiring the cache is not expired by it: the difference is not a huge unsigned age. */
TEST(huge_cache_keeps_a_map_cached_after_now) {
  long saved = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1000);
  kite_malloc_trim(0);
  expect_uint_eq(_kite_huge_cache_bytes(), 0);
  size_t n = (size_t)20 << 20;
  char *p = kite_malloc(n);
  assert_true(p != NULL);
  memset(p, 1, 4096);
  uint64_t before = _kite_os_now_ms();
  kite_free(p); /* cached, stamped at a reading >= before */
  expect_uint_eq(_kite_huge_cache_bytes(), n);
  expect_uint_eq(_kite_test_huge_cache_expire_at(before - 5), 0);
  expect_uint_eq(_kite_huge_cache_bytes(), n);
  /* the control: a reading past the delay expires it */
  expect_uint_eq(_kite_test_huge_cache_expire_at(_kite_os_now_ms() + 2000), n + 4096);
  expect_uint_eq(_kite_huge_cache_bytes(), 0);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, saved);
}


/* ---- heap refill ---- */

/* A run of order 2 or more is claimed from a free block of units still committed when the
 * arena has one, also when that block is no longer among the arena's recently freed runs:
 * the lowest free block (what the buddy heap would pick) is purged, and taking it would
 * fault in fresh pages while committed ones wait for the decay. B is freed committed, then
 * pushed out of the recent runs by 8 others that are freed and claimed again; A, below it,
 * was purged by a trim. */
TEST(large_claim_reuses_a_committed_block_not_recent) {
  long saved = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 100000);
  bool zero;
  kite_page_t *a = _kite_arena_alloc_run(2, &zero), *b = _kite_arena_alloc_run(2, &zero), *r[8];
  assert_true(a != NULL && b != NULL);
  for (int i = 0; i < 8; i++) assert_true((r[i] = _kite_arena_alloc_run(2, &zero)) != NULL);
  _kite_arena_free_run(a);
  kite_malloc_trim(0); /* everything free is purged: A too */
  expect_true(!_kite_test_arena_unit_dirty(a));
  uint64_t now = _kite_os_now_ms();
  _kite_test_arena_free_run_at(b, now);
  for (int i = 0; i < 8; i++) _kite_test_arena_free_run_at(r[i], now);
  for (int i = 0; i < 8; i++) assert_true((r[i] = _kite_arena_alloc_run(2, &zero)) != NULL);
  expect_true(_kite_test_arena_unit_dirty(b));
  kite_page_t *x = _kite_arena_alloc_run(2, &zero);
  assert_true(x != NULL);
  expect_ptr_eq(x, b);
  expect_true(!zero);
  _kite_arena_free_run(x);
  for (int i = 0; i < 8; i++) _kite_arena_free_run(r[i]);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, saved);
  kite_malloc_trim(0);
}

/* Blocks up to 16 KiB come from one-unit pages (4 blocks of 16 KiB, 7 of 9 KiB: a page of
 * few blocks empties sooner, sizeclass.h); larger ones from pages of 8 blocks or more. A
 * fresh heap's first blocks of each size: consecutive blocks of one page, as many as the
 * page's reserve, then the next page. */
TEST(pages_of_one_unit_up_to_16_kib_blocks) {
  static const struct { size_t n; unsigned order, blocks; } want[] = {
    {9216, 0, 7}, {13312, 0, 4}, {16384, 0, 4}, {18432, 2, 14}, {32768, 2, 8}};
  for (unsigned w = 0; w < sizeof want / sizeof want[0]; w++) {
    size_t n = want[w].n;
    void *p[20];
    unsigned k = 0;
    kite_page_t *pg0 = NULL;
    for (; k < 20; k++) {
      p[k] = kite_malloc(n);
      assert_true(p[k] != NULL);
      kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)p[k]));
      if (!pg0) pg0 = pg;
      if (pg != pg0) break;
    }
    expect_uint_eq(pg0->order, want[w].order);
    expect_uint_eq(pg0->reserved, want[w].blocks);
    expect_uint_eq(_kite_class_order_[_kite_class_of(n)], want[w].order);
    for (unsigned i = 0; i <= k && i < 20; i++) kite_free(p[i]);
  }
}

/* A page of several units emptied by its owner's frees stays in the owner's page cache
 * (kind CACHED: no arena lock, no purge), and the class's next fresh page is that page. A
 * 32 KiB class (pages of 8 blocks, several units): one page filled and a second begun, then
 * every block of the first freed. */
TEST(emptied_page_of_any_order_stays_in_the_heaps_cache) {
  enum { N = 64 };
  size_t n = 32768;
  unsigned cls = _kite_class_of(n);
  assert_true(_kite_class_order_[cls] >= 1);
  void *p[N];
  kite_page_t *pg0 = NULL;
  int first_n = 0, k = 0;
  for (; k < N; k++) {
    p[k] = kite_malloc(n);
    assert_true(p[k] != NULL);
    kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)p[k]));
    if (k == 0) pg0 = pg;
    if (pg != pg0) break;
    first_n++;
  }
  assert_true(k < N && first_n >= 2);
  kite_heap_t *h = _kite_heap_tls;
  kite_malloc_trim(0); /* an empty cache: room for the page */
  expect_uint_eq(h->cache_count, 0);
  for (int i = 0; i < first_n; i++) kite_free(p[i]);
  expect_uint_eq(pg0->kind, KITE_KIND_CACHED);
  expect_ptr_eq(h->cache, pg0);
  expect_uint_eq(h->cache_count, 1u << pg0->order);
  /* fill the second page; the next one is the cached page */
  void *q[N];
  int nq = 0;
  kite_page_t *next = NULL;
  while (nq < N) {
    q[nq] = kite_malloc(n);
    assert_true(q[nq] != NULL);
    next = _kite_page_head(_kite_unit_of((uintptr_t)q[nq++]));
    if (next != _kite_page_head(_kite_unit_of((uintptr_t)p[first_n]))) break;
  }
  expect_ptr_eq(next, pg0);
  expect_uint_eq(pg0->kind, KITE_KIND_SMALL);
  expect_uint_eq(h->cache_count, 0);
  for (int i = 0; i < nq; i++) kite_free(q[i]);
  for (int i = first_n; i <= k; i++) kite_free(p[i]);
  kite_malloc_trim(0);
}

/* A refill's reclaim pass finds a page of the class on the full list with a block freed by
 * another thread and puts it back on the queue: the refill allocates from it, and takes no
 * fresh run. A first-class heap (its blocks freed by this thread go the cross-thread way),
 * a full list of 9 pages, full_scan's credit at 0 (it looks at the first 2 only), the block
 * freed in the 5th. */
TEST(refill_uses_the_page_its_reclaim_queued) {
  enum { MAXB = 4096 };
  static void *blocks[MAXB];
  kite_heap_t *h = kite_heap_new();
  assert_true(h != NULL);
  size_t n = 8192;
  unsigned cls = _kite_class_of(n);
  size_t nb = 0;
  for (; nb < MAXB; nb++) {
    kite_page_t *cur = h->queue[cls].first;
    if (h->full_count[cls] >= 8 && cur && cur->free == KITE_LINK_END && cur->local_free == KITE_LINK_END &&
        cur->capacity == cur->reserved)
      break;
    blocks[nb] = kite_heap_malloc(h, n);
    assert_true(blocks[nb] != NULL);
  }
  assert_true(nb < MAXB);
  kite_page_t *x = h->full[cls].first;
  for (int i = 0; i < 4 && x; i++) x = x->next;
  assert_true(x != NULL);
  void *b = NULL;
  for (size_t i = 0; i < nb && !b; i++)
    if (_kite_page_head(_kite_unit_of((uintptr_t)blocks[i])) == x) b = blocks[i];
  assert_true(b != NULL);
  kite_free(b); /* not h's thread: onto x's thread_free */
  h->scan_credit[cls] = 0;
  void *p = kite_heap_malloc(h, n);
  expect_ptr_eq(_kite_page_head(_kite_unit_of((uintptr_t)p)), x);
  expect_ptr_eq(p, b);
  kite_heap_destroy(h);
}

/* ---- statistics ---- */

static int live_pages_seen, live_pages_unheld;
static void on_live_page(void) {
  live_pages_seen++;
  if (!_kite_test_arena_unmap_held()) live_pages_unheld++;
}

/* _kite_heap_live follows a heap's page links (another thread's, for the statistics): no
 * arena may be unmapped meanwhile, so every page it reaches is read with the arenas held. */
TEST(heap_live_walk_holds_arenas_mapped) {
  void *p[64];
  for (int i = 0; i < 64; i++) p[i] = kite_malloc(100 + 300 * (size_t)i);
  _kite_test_hook_heap_live_page = on_live_page;
  kite_heap_live_t hv;
  _kite_heap_live(_kite_heap_tls, &hv);
  _kite_test_hook_heap_live_page = NULL;
  expect_true(live_pages_seen > 0);
  expect_int_eq(live_pages_unheld, 0);
  expect_true(!_kite_test_arena_unmap_held());
  for (int i = 0; i < 64; i++) kite_free(p[i]);
}

static uint64_t issued_sum(const kite_gstats_t *s) {
  uint64_t t = 0;
  for (unsigned c = 0; c < KITE_CLASSES; c++) t += s->issued[c];
  return t;
}
static uint64_t issued_at_exit;
static void on_abandon(void) {
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  issued_at_exit = issued_sum(&s);
}
static void *alloc_some(void *arg) {
  (void)arg;
  void *p[200];
  for (int i = 0; i < 200; i++) p[i] = kite_malloc(48);
  for (int i = 0; i < 200; i++) kite_free(p[i]);
  return NULL;
}

/* A thread that exits moves its heap's counters into the process's: statistics collected
 * while it does count them once (not once in the globals and once in the heap). */
TEST(exiting_heap_counted_once) {
  pthread_t t;
  _kite_test_hook_heap_abandon = on_abandon;
  assert_int_eq(pthread_create(&t, NULL, alloc_some, NULL), 0);
  pthread_join(t, NULL);
  _kite_test_hook_heap_abandon = NULL;
  kite_gstats_t after;
  _kite_heap_collect_stats(&after);
  expect_true(issued_at_exit >= 200);
  expect_uint_eq(issued_at_exit, issued_sum(&after));
}

static volatile int counting_done;
static void *count_while_owner_allocates(void *arg) {
  (void)arg;
  uint64_t last = 0;
  while (!__atomic_load_n(&counting_done, __ATOMIC_ACQUIRE)) {
    kite_gstats_t s;
    _kite_heap_collect_stats(&s);
    uint64_t t = issued_sum(&s);
    if (t < last) TEST_FAIL_("issued went down: %llu < %llu", (unsigned long long)t, (unsigned long long)last);
    last = t;
  }
  return NULL;
}

/* Another thread reads a heap's counters while its owner writes them (under TSan this is
 * the check that both sides are atomic): the totals only grow. */
TEST(heap_counters_read_while_owner_writes) {
  pthread_t t;
  counting_done = 0;
  assert_int_eq(pthread_create(&t, NULL, count_while_owner_allocates, NULL), 0);
  for (int r = 0; r < 200; r++) {
    void *p[100];
    for (int i = 0; i < 100; i++) p[i] = kite_malloc(16 + (size_t)(r % 50) * 16);
    for (int i = 0; i < 100; i++) kite_free(p[i]);
  }
  __atomic_store_n(&counting_done, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
}

/* ---- thread exit ---- */

#define EXIT_CLASSES 12
static void *exit_blocks[EXIT_CLASSES];
static void *leave_one_per_class(void *arg) {
  (void)arg;
  for (int c = 0; c < EXIT_CLASSES; c++) {
    exit_blocks[c] = kite_malloc((size_t)(c + 1) * 400); /* 12 classes, one page each */
    if (exit_blocks[c]) memset(exit_blocks[c], c + 1, (size_t)(c + 1) * 400);
  }
  return NULL; /* exits with every block live */
}

/* A thread that exits with live blocks in 12 pages abandons them all in one section of the
 * heap lock (threads that exit together would queue on it once per page otherwise); the
 * blocks keep their contents and are freed from another thread. */
TEST(exit_abandons_its_pages_in_one_lock_section) {
  kite_stats_t s0, s1;
  kite_stats_get(&s0);
  uint64_t sections = __atomic_load_n(&_kite_test_abandon_lock_sections, __ATOMIC_RELAXED);
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, leave_one_per_class, NULL), 0);
  pthread_join(t, NULL);
  kite_stats_get(&s1);
  expect_uint_eq(s1.pages_abandoned, s0.pages_abandoned + EXIT_CLASSES);
  expect_uint_eq(__atomic_load_n(&_kite_test_abandon_lock_sections, __ATOMIC_RELAXED), sections + 1);
  for (int c = 0; c < EXIT_CLASSES; c++) {
    const unsigned char *b = exit_blocks[c];
    assert_true(b != NULL);
    for (size_t k = 0; k < (size_t)(c + 1) * 400; k++)
      if (b[k] != (unsigned char)(c + 1)) { TEST_FAIL_("block %d changed at byte %zu", c, k); break; }
    kite_free(exit_blocks[c]);
  }
}


/* A heap struct is obtained in one section of the heap lock (taken from the pool or carved,
 * reset and put on the live list together): threads that start together queue on it once
 * each. */
static void *one_malloc(void *arg) {
  (void)arg;
  kite_free(kite_malloc(48));
  return NULL;
}
TEST(heap_obtain_takes_the_lock_once) {
  uint64_t sections = __atomic_load_n(&_kite_test_obtain_lock_sections, __ATOMIC_RELAXED);
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, one_malloc, NULL), 0);
  pthread_join(t, NULL);
  expect_uint_eq(__atomic_load_n(&_kite_test_obtain_lock_sections, __ATOMIC_RELAXED), sections + 1);
  kite_heap_t *h = kite_heap_new();
  assert_true(h != NULL);
  expect_uint_eq(__atomic_load_n(&_kite_test_obtain_lock_sections, __ATOMIC_RELAXED), sections + 2);
  expect_true(kite_heap_malloc(h, 24) != NULL);
  kite_heap_destroy(h);
}

/* ---- heap creation ---- */

static int heaps_count_n;
static void heaps_count(kite_heap_t *h, void *arg) { (void)h; (void)arg; heaps_count_n++; }
static int live_heaps(void) {
  heaps_count_n = 0;
  _kite_heap_foreach(heaps_count, NULL);
  return heaps_count_n;
}
static void *setspecific_fails(void *arg) {
  int *ok = arg;
  int before = live_heaps();
  _kite_test_fail_setspecific = true;
  errno = 0;
  void *p = kite_malloc(24);
  int e = errno;
  _kite_test_fail_setspecific = false;
  ok[0] = p == NULL && e == ENOMEM;
  ok[1] = live_heaps() == before; /* the heap went back: no heap nobody will abandon */
  if (p) kite_free(p);
  p = kite_malloc(24); /* registered this time */
  ok[2] = p != NULL && live_heaps() == before + 1;
  kite_free(p);
  return NULL;
}

/* A thread whose heap cannot be registered for its exit (pthread_setspecific fails) gets
 * NULL + ENOMEM, and no heap stays live without a destructor; its next request works. */
TEST(heap_create_fails_cleanly_without_its_key) {
  pthread_t t;
  int ok[3] = {0, 0, 0};
  assert_int_eq(pthread_create(&t, NULL, setspecific_fails, ok), 0);
  pthread_join(t, NULL);
  expect_true(ok[0]);
  expect_true(ok[1]);
  expect_true(ok[2]);
}

/* ---- one pool, one way in and one way out, for both kinds of heap ---- */

/* The struct behind a first-class heap's handle (heap_pool.c, I-H1: the tag is above bit 48). */
static kite_heap_t *struct_of(kite_heap_t *handle) {
  return (kite_heap_t *)((uintptr_t)handle & (((uintptr_t)1 << 48) - 1));
}
static uint32_t tag_of(kite_heap_t *handle) { return (uint32_t)((uintptr_t)handle >> 48); }
static kite_heap_t *thread_heap;
static int thread_heap_user;
static void *note_thread_heap(void *arg) {
  (void)arg;
  void *p = kite_malloc(32); /* the thread's first request obtains its heap */
  thread_heap = _kite_heap_tls;
  thread_heap_user = thread_heap->user;
  kite_free(p);
  return NULL;
}

/* A first-class heap and a thread's heap are obtained from one pool and retired into it by
 * one path: the struct of a destroyed heap is the next thread's heap (reset: no longer
 * first-class, the old handle's tag stale), that thread's exit hands it back, and the next
 * kite_heap_new gets it again with a tag two generations on. Each retire takes the heap off
 * the live list and keeps what it counted. */
TEST(heap_pool_serves_threads_and_first_class_heaps) {
  int live0 = live_heaps();
  kite_gstats_t s0, s1;
  kite_heap_t *a = kite_heap_new();
  assert_true(a != NULL);
  kite_heap_t *sa = struct_of(a);
  expect_int_eq(live_heaps(), live0 + 1);
  expect_true(sa->user);
  void *b[50];
  for (int i = 0; i < 50; i++) b[i] = kite_heap_malloc(a, 40);
  for (int i = 0; i < 50; i++) expect_true(b[i] != NULL);
  _kite_heap_collect_stats(&s0);
  kite_heap_destroy(a); /* frees the 50 blocks with the heap */
  expect_int_eq(live_heaps(), live0);
  _kite_heap_collect_stats(&s1);
  expect_uint_eq(issued_sum(&s1), issued_sum(&s0)); /* moved into the globals, not lost */
  expect_true((__atomic_load_n(&sa->handle_gen, __ATOMIC_RELAXED) & 0xffffu) != tag_of(a));

  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, note_thread_heap, NULL), 0);
  pthread_join(t, NULL);
  expect_ptr_eq(thread_heap, sa);
  expect_int_eq(thread_heap_user, 0);
  expect_int_eq(live_heaps(), live0); /* the thread's exit retired it */

  kite_heap_t *c = kite_heap_new();
  assert_true(c != NULL);
  expect_ptr_eq(struct_of(c), sa);
  expect_uint_eq(tag_of(c), (tag_of(a) + 2) & 0xffffu);
  expect_true(sa->user);
  expect_true(kite_heap_malloc(c, 24) != NULL);
  kite_heap_destroy(c);
  expect_int_eq(live_heaps(), live0);
}

/* heap_pool.c I-H5: a retired heap's direct[] table points at the empty page only (the
 * classes it used cleared at its retire), so that the next heap_obtain need not write the
 * table at all; and the next user of the struct allocates right from it. */
static void *kept_blocks[24];
static void *use_direct_classes(void *arg) {
  (void)arg;
  for (int i = 0; i < 24; i++) {
    size_t n = (size_t)(8 + 43 * i); /* 8 .. 997 bytes: many direct classes */
    void *tmp = kite_malloc(n);
    kept_blocks[i] = kite_malloc(n); /* outlives the thread: its page is abandoned */
    kite_free(tmp);
  }
  thread_heap = _kite_heap_tls;
  return NULL;
}
static int direct_not_empty(const kite_heap_t *h) {
  int n = 0;
  for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++) n += h->direct[s] != &_kite_page_empty;
  return n;
}
TEST(retired_heap_has_an_empty_direct_table) {
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, use_direct_classes, NULL), 0);
  pthread_join(t, NULL);
  for (int i = 0; i < 24; i++) expect_true(kept_blocks[i] != NULL);
  expect_int_eq(direct_not_empty(thread_heap), 0); /* pooled now */

  kite_heap_t *a = kite_heap_new(); /* the pool's last struct: the thread's */
  assert_true(a != NULL);
  expect_ptr_eq(struct_of(a), thread_heap);
  expect_int_eq(direct_not_empty(struct_of(a)), 0);
  for (int i = 0; i < 24; i++) {
    size_t n = (size_t)(8 + 43 * i);
    unsigned char *p = kite_heap_malloc(a, n);
    assert_true(p != NULL);
    memset(p, 0x5a, n);
    expect_uint_eq(kite_malloc_usable_size(p) >= n, 1);
  }
  expect_true(direct_not_empty(struct_of(a)) > 0); /* the classes in use */
  kite_heap_destroy(a);
  expect_int_eq(direct_not_empty(thread_heap), 0);
  for (int i = 0; i < 24; i++) kite_free(kept_blocks[i]);
}

/* ---- fork during an arena's growth ---- */

static int grow_forked, grow_child_status = -1;
static void fork_while_growing(void) {
  _kite_test_hook_arena_growing = NULL;
  grow_forked = 1;
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: the growing thread of the parent is not here */
    int rc = _kite_test_arena_any_growing() ? 1 : 0;
    /* no thread of kite's in this child: its frees below would start the idle purger when
     * the parent's ran at the fork, and a thread started in the child of a threaded fork
     * ends it under TSan (exit 66) and qemu-user; the arenas' state is what is checked */
    kite_option_set(KITE_OPTION_BACKGROUND, 0);
    void *p[32];
    for (int i = 0; i < 32; i++) {
      p[i] = kite_malloc((size_t)4 << 20);
      if (!p[i]) rc |= 2;
      else memset(p[i], i, 4096);
    }
    for (int i = 0; i < 32; i++) kite_free(p[i]);
    if ((kite_check)() != 1) rc |= 4;
    _exit(rc);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) grow_child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* A child forked while another thread maps more of an arena (arena_grow, no lock held) has
 * no thread that will finish it: no arena of the child stays marked growing (which would
 * keep it from growing or being unmapped for good), and the child allocates normally. */
TEST(fork_while_arena_grows) {
  enum { N = 64 };
  void *p[N];
  int k = 0;
  _kite_test_hook_arena_growing = fork_while_growing;
  for (; k < N && !grow_forked; k++) p[k] = kite_malloc((size_t)4 << 20);
  _kite_test_hook_arena_growing = NULL;
  expect_true(grow_forked);
  expect_int_eq(grow_child_status, 0);
  for (int i = 0; i < k; i++) kite_free(p[i]);
}

/* ---- the dense mode's look at a granule ---- */

/* The state the huge-page tests below run in: KITE_HUGEPAGES=mode, no purge delay (no
 * thread of kite's purges under them, and a freed run stays committed), and this small test
 * program looked at as a big one. thp_test_leave puts back what thp_test_enter found. */
typedef struct { long hugepages, delay; uint64_t floor; } thp_saved_t;
static thp_saved_t thp_test_enter(long mode) {
  thp_saved_t s = {kite_option_get(KITE_OPTION_HUGEPAGES), kite_option_get(KITE_OPTION_PURGE_DELAY_MS),
                   _kite_test_thp_min_committed};
  _kite_test_thp_min_committed = 0;
  kite_option_set(KITE_OPTION_HUGEPAGES, mode);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, -1);
  return s;
}
static void thp_test_leave(thp_saved_t s) {
  _kite_test_thp_min_committed = s.floor;
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, s.delay);
  kite_option_set(KITE_OPTION_HUGEPAGES, s.hugepages);
}

/* KITE_HUGEPAGES=dense: every granule a claim looks at is finished with by that claim
 * (marked for the collapse pass, or back to undecided), the arena's first granule (its
 * metadata and the first runs) too: once the claims return, no granule stays THP_LOOKING,
 * where it would never be looked at, nor collapsed, again. */
TEST(claims_leave_no_granule_looking) {
  thp_saved_t saved = thp_test_enter(KITE_HUGEPAGES_DENSE);
  enum { N = 3 * THP_UNITS };
  kite_page_t *runs[N];
  bool zero, looking = false;
  for (int i = 0; i < N; i++) {
    runs[i] = _kite_arena_alloc_run(0, &zero);
    assert_true(runs[i] != NULL);
    looking |= _kite_test_thp_any_looking();
  }
  expect_true(!looking);
  for (int i = 0; i < N; i++) _kite_arena_free_run(runs[i]);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}

/* KITE_HUGEPAGES=dense advises a granule at its first claim while the process has one
 * live heap, and a first-class heap counts as one (thp.c): a thread that also allocates
 * from a kite_heap_new heap interleaves two heaps' claims in the granules, as two threads
 * do. So with this thread's heap alone, the fresh granules above full ones are advised at
 * their first claim; with a first-class heap beside it, none is (the collapse alone); and
 * once that heap is destroyed, they are again. Every run is held to the end, so each
 * phase claims granules of its own, above the last phase's. */
/* Claims n runs of one unit; returns how many granules begun by them (their first unit
 * claimed here) are advised. */
static size_t claim_granules_advised(kite_page_t **runs, int n) {
  size_t advised = 0;
  bool zero;
  for (int i = 0; i < n; i++) {
    runs[i] = _kite_arena_alloc_run(0, &zero);
    expect_true(runs[i] != NULL);
    if (runs[i] && ((uintptr_t)_kite_page_start(runs[i]) & (((size_t)2 << 20) - 1)) == 0)
      advised += _kite_test_arena_unit_huge(runs[i]);
  }
  return advised;
}
TEST(dense_first_claim_counts_first_class_heaps) {
  kite_malloc_trim(0); /* no granule advised earlier is left to reuse: purged, 4 KiB pages */
  thp_saved_t saved = thp_test_enter(KITE_HUGEPAGES_DENSE);
  enum { N = 4 * THP_UNITS };
  static kite_page_t *runs[3][N];
  void *mine = kite_malloc(64); /* this thread's heap, live */
  uint32_t heaps = __atomic_load_n(&_kite_thp_heaps, __ATOMIC_RELAXED);
  expect_int_eq(heaps, 1); /* (no other thread has a heap now) */
  size_t alone = claim_granules_advised(runs[0], N);
  kite_heap_t *second = kite_heap_new();
  assert_true(second != NULL);
  expect_int_eq(__atomic_load_n(&_kite_thp_heaps, __ATOMIC_RELAXED), heaps + 1);
  size_t beside = claim_granules_advised(runs[1], N);
  kite_heap_destroy(second);
  expect_int_eq(__atomic_load_n(&_kite_thp_heaps, __ATOMIC_RELAXED), heaps);
  size_t after = claim_granules_advised(runs[2], N);
  /* (a phase begins 3 or 4 granules, above full ones but perhaps the first) */
  expect_true(alone >= 2);
  expect_uint_eq(beside, 0);
  expect_true(after >= 2);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < N; i++)
      if (runs[k][i]) _kite_arena_free_run(runs[k][i]);
  kite_free(mine);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}

/* ---- fork while the collapse pass is under way (KITE_HUGEPAGES=dense) ---- */

static pthread_t pass_tester;
static int pass_forked, pass_child_status = -1;
static void fork_in_pass(void) {
  if (!pthread_equal(pthread_self(), pass_tester)) return; /* (a purger thread's pass) */
  _kite_test_hook_collapse_taken = NULL;
  pass_forked = 1;
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: the parent's pass took the count to 0 and has not reached its granules;
     * they wait in the child all the same, and its thread collapses them (or gives them
     * up) once a claim starts it. No new granule is marked here (mode off), so only the
     * ones the parent marked can start it. */
    int rc = _kite_test_thp_any_pending() ? 0 : 1;
    rc |= _kite_arena_collapse_pending() ? 0 : 2;
    kite_option_set(KITE_OPTION_HUGEPAGES, 0);
#if !defined(__SANITIZE_THREAD__) /* (TSan cannot start a thread in the child of a threaded fork) */
    bool zero;
    kite_page_t *r = _kite_run_alloc(0, &zero); /* (where a claim wakes the thread) */
    for (int i = 0; i < 1000 && _kite_test_thp_any_pending(); i++) usleep(10000);
    rc |= _kite_test_thp_any_pending() ? 4 : 0;
    rc |= r ? 0 : 8;
#endif
    _exit(rc);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) pass_child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* A child forked while the dense mode's collapse pass runs, after it took the count of
 * marked granules to 0 and before it reached them, still has those granules marked
 * THP_PENDING: the child counts them, and its thread, started by its next claim, takes
 * them off (collapsed, or left on small pages); they do not wait until the child marks a
 * granule of its own. */
TEST(fork_during_the_collapse_pass) {
  if (test_emulator_lacks("fork_during_the_collapse_pass", TEST_EMU_THREAD_AFTER_FORK)) return;
  thp_saved_t saved = thp_test_enter(KITE_HUGEPAGES_DENSE);
  /* counted as a second heap: with one, dense mode advises a granule at its first claim
   * instead of looking at the one below (thp.c) */
  __atomic_fetch_add(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  enum { MAXR = 1024 };
  static kite_page_t *runs[MAXR];
  int nr = 0;
  bool zero;
  pass_tester = pthread_self();
  for (int tries = 0; tries < 4 && !pass_forked; tries++) {
    /* runs touched whole as they are claimed, until a granule of them is marked */
    while (nr < MAXR && !_kite_test_thp_any_pending()) {
      runs[nr] = _kite_arena_alloc_run(0, &zero);
      assert_true(runs[nr] != NULL);
      KITE_TOOL_RUN_FRESH(_kite_page_start(runs[nr]), KITE_UNIT_SIZE); /* (an ASan build holds raw runs poisoned) */
      memset(_kite_page_start(runs[nr]), 0x5a, KITE_UNIT_SIZE);
      nr++;
    }
    _kite_test_hook_collapse_taken = fork_in_pass;
    _kite_arena_collapse_run();
    _kite_test_hook_collapse_taken = NULL;
  }
  expect_true(pass_forked);
  expect_int_eq(pass_child_status, 0);
  for (int i = 0; i < nr; i++) _kite_arena_free_run(runs[i]);
  __atomic_fetch_sub(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}

/* ---- fork while a claim looks at a granule (KITE_HUGEPAGES=dense) ---- */

static void *look_granule, *child_look;
static int look_child_status = -1;
static void child_sees_look(void *granule) {
  if (!child_look) child_look = granule;
}
static void fork_while_looking(void *granule) {
  _kite_test_hook_thp_looking = NULL;
  look_granule = granule;
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: the claiming thread of the parent, which was to finish the look, is not
     * here; the next claim above the granule looks at it again */
    int rc = _kite_test_thp_any_looking() ? 1 : 0;
    _kite_test_hook_thp_looking = child_sees_look;
    bool zero;
    for (int i = 0; i < 64 && !child_look; i++)
      if (!_kite_arena_alloc_run(0, &zero)) rc |= 2;
    if (child_look != granule) rc |= 4;
    _exit(rc);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) look_child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* A child forked while a claim of another thread looks at a granule for the dense mode
 * (THP_LOOKING, between the claim's pick and its residency check, no lock held) has no
 * thread that will finish the look: no granule of the child stays marked THP_LOOKING (it
 * would never be looked at, nor collapsed, again), and the child's next claim above the
 * granule looks at it. */
TEST(fork_while_a_claim_looks_at_a_granule) {
  thp_saved_t saved = thp_test_enter(KITE_HUGEPAGES_DENSE);
  /* counted as a second heap: with one, dense mode advises a granule at its first claim
   * instead of looking at the one below (thp.c) */
  __atomic_fetch_add(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  enum { MAXR = 2048 };
  static kite_page_t *runs[MAXR];
  int nr = 0;
  bool zero;
  _kite_test_hook_thp_looking = fork_while_looking;
  while (nr < MAXR && !look_granule) {
    runs[nr] = _kite_arena_alloc_run(0, &zero);
    assert_true(runs[nr] != NULL);
    nr++;
  }
  _kite_test_hook_thp_looking = NULL;
  expect_true(look_granule != NULL);
  expect_int_eq(look_child_status, 0);
  expect_true(!_kite_test_thp_any_looking()); /* the parent's claim finished its look */
  for (int i = 0; i < nr; i++) _kite_arena_free_run(runs[i]);
  __atomic_fetch_sub(&_kite_thp_heaps, 1, __ATOMIC_RELAXED);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}

/* ---- a purge step between a new arena's entry in the table and its maker's claim ---- */

static int born_trims;
static void trim_at_birth(void) {
  born_trims++;
  kite_malloc_trim(0); /* a forced purge step: it unmaps every empty arena (decay.c) */
}
/* A new arena is in the table, empty, before the thread that made it claims its run there
 * (arena.c I4): a purge step then must not unmap it under that thread. The maker's malloc
 * gets its run, every byte of it writable, and every structure checks. */
TEST(new_arena_survives_a_purge) {
  enum { N = 64, SZ = 4 << 20 };
  void *p[N];
  kite_stats_t s;
  kite_stats_get(&s);
  unsigned long long arenas0 = s.arenas;
  int k = 0;
  born_trims = 0;
  _kite_test_hook_arena_new = trim_at_birth;
  for (; k < N && !born_trims; k++) p[k] = kite_malloc(SZ);
  _kite_test_hook_arena_new = NULL;
  expect_int_eq(born_trims, 1);
  int null = 0;
  for (int i = 0; i < k; i++) null += p[i] == NULL;
  expect_int_eq(null, 0);
  if (k > 0 && p[k - 1]) memset(p[k - 1], 0x5a, SZ);
  kite_stats_get(&s);
  expect_true(s.arenas > arenas0);
  expect_int_eq((kite_check)(), 1);
  for (int i = 0; i < k; i++) kite_free(p[i]);
}

/* ---- thread keys (heap.h) ---- */

/* A child forked while another thread T is alive: a thread the child starts may get T's
 * thread pointer (glibc hands the child's new threads the stacks of the parent's other
 * threads), so T's pages must not keep T's key there. The child's thread frees blocks of
 * T's full page: they go the remote way (T's heap is nobody's in the child), not through
 * the fast path into a page of another heap (which would take it off a full list it is not
 * on). The child checks every structure and exits 0. */
enum { KEY_N = 600 };
static void *key_blocks[KEY_N];
static uintptr_t key_t_tp, key_c_tp;
static pthread_mutex_t key_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t key_cv = PTHREAD_COND_INITIALIZER;
static int key_phase;
static void *key_owner(void *arg) {
  (void)arg;
  for (int k = 0; k < KEY_N; k++) key_blocks[k] = kite_malloc(256); /* fills a page or two */
  key_t_tp = (uintptr_t)__builtin_thread_pointer();
  pthread_mutex_lock(&key_mu);
  key_phase = 1;
  pthread_cond_broadcast(&key_cv);
  while (key_phase != 2) pthread_cond_wait(&key_cv, &key_mu);
  pthread_mutex_unlock(&key_mu);
  for (int k = 0; k < KEY_N; k++) kite_free(key_blocks[k]);
  return NULL;
}
static void *key_child_thread(void *arg) {
  (void)arg;
  key_c_tp = (uintptr_t)__builtin_thread_pointer();
  for (int k = 0; k < KEY_N / 2; k++) kite_free(key_blocks[k]);
  return NULL;
}
TEST(fork_drops_other_threads_keys) {
#if defined(__SANITIZE_THREAD__)
  fprintf(stderr, "(not run under TSan: it cannot start a thread in the child of a threaded fork)\n");
  return;
#endif
  if (test_emulator_lacks("fork_drops_other_threads_keys", TEST_EMU_THREAD_AFTER_FORK)) return;
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, key_owner, NULL), 0);
  pthread_mutex_lock(&key_mu);
  while (key_phase != 1) pthread_cond_wait(&key_cv, &key_mu);
  pthread_mutex_unlock(&key_mu);
  kite_page_t *first = _kite_unit_of((uintptr_t)key_blocks[0]);
  expect_true(first->in_full); /* the case: a fast free would take the slow path */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    pthread_t c;
    if (pthread_create(&c, NULL, key_child_thread, NULL) != 0) _exit(3);
    pthread_join(c, NULL);
    if (key_c_tp != key_t_tp) fprintf(stderr, "(the child's thread got another thread pointer: the key's reuse is not shown)\n");
    _exit((kite_check)() ? 0 : 1);
  }
  int st = 0;
  assert_true(pid > 0 && waitpid(pid, &st, 0) == pid);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  pthread_mutex_lock(&key_mu);
  key_phase = 2;
  pthread_cond_broadcast(&key_cv);
  pthread_mutex_unlock(&key_mu);
  pthread_join(t, NULL);
}

/* A heap made on a thread whose exit already retired its heap (a later key destructor's
 * malloc) may be the last of that thread and never retired: its pages get no key (heap.h),
 * so a thread that later has this thread pointer never frees into them on its fast path.
 * The block freed there goes the remote way and comes back to the heap. */
static pthread_key_t late_key;
static uintptr_t late_owner_key = 1, late_heap_key = 1;
static void late_destructor(void *arg) {
  (void)arg;
  void *p = kite_malloc(64);
  if (!p) return;
  late_owner_key = _kite_unit_of((uintptr_t)p)->owner_key;
  late_heap_key = _kite_heap_tls->key;
  kite_free(p);
}
static void *late_thread(void *arg) {
  (void)arg;
  kite_free(kite_malloc(64)); /* the thread's own heap, retired first at its exit */
  pthread_setspecific(late_key, (void *)1);
  return NULL;
}
TEST(heap_made_during_exit_gets_no_key) {
  kite_free(kite_malloc(16)); /* kite's thread key exists: the destructors run in key order */
  assert_int_eq(pthread_key_create(&late_key, late_destructor), 0);
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, late_thread, NULL), 0);
  pthread_join(t, NULL);
  expect_uint_eq(late_owner_key, 0);
  expect_uint_eq(late_heap_key, 0);
  pthread_key_delete(late_key);
}


/* A thread whose first request comes in the C library's last round of key destructors
 * (a key made after kite's, re-set through every round) gets a heap registered on kite's
 * key in a round after which no destructor runs: nothing retires that heap when the thread
 * exits. Its thread pointer, though, is the key its pages carry (heap.h), and the C library
 * hands a dead thread's cached stack and thread pointer to a later thread. That thread
 * retires the heap left behind (heap_pool.c I-H4) at its first malloc, or at a free the
 * fast path takes into one of the heap's pages (without a thread pointer: its first free
 * that takes the remote path), whichever comes first (a thread that only frees, here the
 * block whose page sits on the full list, has no malloc to wait for): its
 * pages are abandoned like any exited thread's, the live heaps are back to their count. A
 * free before that never puts the page into the static empty heap every heapless thread
 * shares. */
enum { ORPHAN_N = 200, ORPHAN_SIZE = 1024 };
/* What heap_pool.c I-H4 compares: the thread pointer, or pthread_self() without one. */
static uintptr_t orphan_self(void) {
#ifdef KITE_THREAD_KEY
  return KITE_THREAD_KEY();
#else
  return (uintptr_t)pthread_self();
#endif
}
static pthread_key_t orphan_key;
static int orphan_round;
static void *orphan_blocks[ORPHAN_N];
static uintptr_t orphan_tp, orphan_next_tp;
static kite_heap_t *orphan_heap;
static int orphan_full; /* the first block's page sat on the full list */
static void orphan_destructor(void *v) {
  if (++orphan_round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(orphan_key, v); /* called again in the next round */
    return;
  }
  for (int i = 0; i < ORPHAN_N; i++) orphan_blocks[i] = kite_malloc(ORPHAN_SIZE);
  orphan_heap = _kite_heap_tls;
  orphan_full = orphan_blocks[0] ? _kite_unit_of((uintptr_t)orphan_blocks[0])->in_full : 0;
}
static void *orphan_thread(void *arg) {
  (void)arg;
  orphan_tp = orphan_self();
  pthread_setspecific(orphan_key, (void *)1); /* no request to kite before its exit */
  return NULL;
}
static int next_empty_queued, next_live; /* next_live: live heaps once it had its first request */
static void *orphan_next_thread(void *arg) {
  bool malloc_first = arg != NULL;
  orphan_next_tp = orphan_self();
  if (orphan_next_tp != orphan_tp) return NULL;
  if (malloc_first) {
    kite_free(kite_malloc(32)); /* the first malloc: retires the heap left behind first */
    next_live = live_heaps() - 1; /* (its own heap) */
    return NULL;
  }
  unsigned cls = _kite_unit_of((uintptr_t)orphan_blocks[0])->cls;
  kite_free(orphan_blocks[0]); /* the fast path (the page carries this thread's key), or,
                                 * without a thread pointer, the remote path */
  orphan_blocks[0] = NULL;
  next_empty_queued = _kite_heap_empty.queue[cls].first != NULL || _kite_heap_empty.full_count[cls] != 0;
  next_live = live_heaps(); /* no heap of its own: it never allocated */
  return NULL;
}
/* One thread with a last-round heap, then the next one on its stack (checked when that one
 * got the thread pointer). */
static void orphan_scenario(bool malloc_first) {
  kite_free(kite_malloc(16)); /* kite's thread key exists: older than orphan_key */
  int live0 = live_heaps();
  kite_gstats_t s0, s1;
  _kite_heap_collect_stats(&s0);
  orphan_round = 0;
  next_live = next_empty_queued = -1;
  assert_int_eq(pthread_key_create(&orphan_key, orphan_destructor), 0);
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, orphan_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_int_eq(orphan_round, PTHREAD_DESTRUCTOR_ITERATIONS);
  for (int i = 0; i < ORPHAN_N; i++) assert_true(orphan_blocks[i] != NULL);
  assert_true(orphan_heap != &_kite_heap_empty);
  expect_int_eq(orphan_full, 1); /* more blocks than a page holds */
  expect_int_eq(live_heaps(), live0 + 1); /* its destructor never ran */
  assert_int_eq(pthread_create(&t, NULL, orphan_next_thread, malloc_first ? (void *)1 : NULL), 0);
  pthread_join(t, NULL);
  if (orphan_next_tp != orphan_tp) {
    printf("  not checked: the next thread got another thread pointer (no cached stack)\n");
  } else {
    if (!malloc_first) expect_int_eq(next_empty_queued, 0);
    expect_int_eq(next_live, live0); /* the heap left behind retired at once */
    expect_int_eq(live_heaps(), live0); /* and the next thread's own at its exit */
    _kite_heap_collect_stats(&s1);
    expect_true(s1.pages_abandoned > s0.pages_abandoned);
    kite_page_t *pg = _kite_unit_of((uintptr_t)orphan_blocks[1]);
    expect_ptr_eq(__atomic_load_n(&pg->heap, __ATOMIC_RELAXED), NULL); /* abandoned */
    expect_uint_eq(__atomic_load_n(&pg->owner_key, __ATOMIC_RELAXED), 0);
  }
  for (int i = 0; i < ORPHAN_N; i++) kite_free(orphan_blocks[i]);
  pthread_key_delete(orphan_key);
}
TEST(last_round_heap_is_retired_by_the_next_holder_of_its_thread_pointer) {
#ifdef __SANITIZE_THREAD__
  /* TSan tears its per-thread state down in the last destructor round, before a younger
   * key's destructor runs there: a call it intercepts then (kite's mutexes) crashes in TSan */
  printf("  not run under TSan: it cannot run a thread's last-round destructors\n");
  if (orphan_round >= 0) return;
#endif
  orphan_scenario(true);
  /* a thread that only frees (without a thread pointer the pages carry the heap's address:
   * its free of one is remote, and the remote path's look for a heap left with its
   * pthread_self() retires it) */
  orphan_scenario(false);
}

/* ---- huge-page advice of freed runs ---- */

#define THP_GRANULE_UNITS (((size_t)2 << 20) >> KITE_UNIT_SHIFT) /* a 2 MiB granule in units */


/* A freed run of 2 MiB that was advised MADV_HUGEPAGE, then carved for a small page: the
 * granule's advice is taken back (arena.c's record, and the kernel's VmFlags where the
 * kernel has transparent huge pages: no "hg", "nh" instead), so the small page's first
 * touch faults in 4 KiB, not a whole 2 MiB page (AnonHugePages 0). */
TEST(small_run_takes_back_a_freed_runs_huge_advice) {
  thp_saved_t saved = thp_test_enter(0); /* the freed run stays committed: reused first */
  bool thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
  if (thp && test_emulator_lacks("the kernel's VmFlags", TEST_EMU_HUGE_ADVICE)) thp = false;
  bool zero;
  kite_page_t *big = _kite_arena_alloc_run(5, &zero);
  assert_true(big != NULL);
  uint8_t *lo = _kite_page_start(big), *hi = lo + ((size_t)2 << 20);
  _kite_arena_advise_run(big, (size_t)2 << 20);
  expect_true(_kite_test_arena_unit_huge(big)); /* the control: advised */
  if (thp) expect_int_eq(smaps_vma_flag(lo, "hg", NULL), 1);
  _kite_arena_free_run(big);
  enum { MAXR = 2048 };
  static kite_page_t *runs[MAXR];
  int nr = 0;
  kite_page_t *inside = NULL;
  while (nr < MAXR && !inside) {
    kite_page_t *r = _kite_arena_alloc_run(0, &zero);
    assert_true(r != NULL);
    runs[nr++] = r;
    if (_kite_page_start(r) >= lo && _kite_page_start(r) < hi) inside = r;
  }
  assert_true(inside != NULL);
  expect_true(!_kite_test_arena_unit_huge(big));
  expect_true(!_kite_test_arena_unit_huge(inside));
  if (thp) {
    long ahp = -1;
    volatile uint8_t *b = _kite_page_start(inside);
    KITE_TOOL_RUN_FRESH((void *)b, 1); /* a raw run: an ASan build may hold its units poisoned (tool.h) */
    b[0] = 1;
    expect_int_eq(smaps_vma_flag((const void *)b, "hg", NULL), 0);
    expect_int_eq(smaps_vma_flag((const void *)b, "nh", &ahp), 1);
    expect_int_eq(ahp, 0);
  }
  for (int i = 0; i < nr; i++) _kite_arena_free_run(runs[i]);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}

/* A freed run of 4 MiB advised whole, taken again (the same units: the delay keeps them
 * committed, and freed big runs are reused first) for 3 MiB: the upper granule, of which
 * only 1 MiB is asked for, loses the advice the freed run left there (#19 defect 7), so
 * its first touch faults 4 KiB, not a whole 2 MiB page; the lower one keeps it. */
TEST(run_asking_less_takes_back_a_freed_runs_huge_advice) {
  thp_saved_t saved = thp_test_enter(0);
  bool thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
  if (thp && test_emulator_lacks("the kernel's VmFlags", TEST_EMU_HUGE_ADVICE)) thp = false;
  bool zero;
  size_t mib = (size_t)1 << 20;
  kite_page_t *big = _kite_arena_alloc_run(6, &zero);
  assert_true(big != NULL);
  _kite_arena_advise_run(big, 4 * mib);
  expect_true(_kite_test_arena_unit_huge(big + THP_GRANULE_UNITS)); /* the control */
  _kite_arena_free_run(big);
  kite_page_t *again = _kite_arena_alloc_run(6, &zero);
  assert_true(again == big);
  _kite_arena_advise_run(again, 3 * mib);
  expect_true(_kite_test_arena_unit_huge(again));
  expect_true(!_kite_test_arena_unit_huge(again + THP_GRANULE_UNITS));
  if (thp) {
    long ahp = -1;
    volatile uint8_t *b = (uint8_t *)_kite_page_start(again) + 2 * mib;
    KITE_TOOL_RUN_FRESH((void *)b, 1); /* a raw run: an ASan build may hold its units poisoned (tool.h) */
    b[0] = 1;
    expect_int_eq(smaps_vma_flag((const void *)b, "hg", NULL), 0);
    expect_int_eq(smaps_vma_flag((const void *)b, "nh", &ahp), 1);
    expect_int_eq(ahp, 0);
  }
  _kite_arena_free_run(again);
  thp_test_leave(saved);
  kite_malloc_trim(0);
}


/* ---- KITE_VERBOSE: every failing request reported once ---- */

#define HUGE_ASK ((size_t)1 << 62) /* no block can have it */
static void *vp_;
/* One failing call per entry point (run in a child started with KITE_VERBOSE=1). */
static int verbose_call(const char *name) {
  kite_heap_t *h = strncmp(name, "heap_", 5) == 0 ? kite_heap_new() : NULL;
  void *keep = kite_malloc(100);
  if (!strcmp(name, "malloc")) vp_ = kite_malloc(HUGE_ASK);
  else if (!strcmp(name, "calloc")) vp_ = kite_calloc((size_t)1 << 31, (size_t)1 << 31);
  else if (!strcmp(name, "calloc_overflow")) vp_ = kite_calloc(SIZE_MAX, 2);
  else if (!strcmp(name, "realloc")) vp_ = kite_realloc(keep, HUGE_ASK);
  else if (!strcmp(name, "reallocarray")) vp_ = kite_reallocarray(keep, SIZE_MAX, 2);
  else if (!strcmp(name, "posix_memalign")) return kite_posix_memalign(&vp_, 64, HUGE_ASK) == ENOMEM ? 0 : 3;
  else if (!strcmp(name, "aligned_alloc")) vp_ = kite_aligned_alloc(64, HUGE_ASK);
  else if (!strcmp(name, "memalign")) vp_ = kite_memalign(4096, HUGE_ASK);
  else if (!strcmp(name, "valloc")) vp_ = kite_valloc(HUGE_ASK);
  else if (!strcmp(name, "pvalloc")) vp_ = kite_pvalloc(HUGE_ASK);
  else if (!strcmp(name, "heap_malloc")) vp_ = kite_heap_malloc(h, HUGE_ASK);
  else if (!strcmp(name, "heap_calloc")) vp_ = kite_heap_calloc(h, (size_t)1 << 31, (size_t)1 << 31);
  else if (!strcmp(name, "aligned_alloc_einval")) return kite_aligned_alloc(3, 10) == NULL && errno == EINVAL ? 0 : 3;
  else return 4;
  return vp_ == NULL && errno == ENOMEM ? 0 : 3;
}

/* Run `name` in a child with KITE_VERBOSE=1 and compare its whole stderr with `want`. */
static void expect_verbose(const char *name, const char *want) {
  int fd[2];
  assert_int_eq(pipe(fd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    setenv("KITE_VERBOSE", "1", 1);
    test_execl_self("test_core_internals", "verbose-child", (char *)name, (char *)NULL);
    _exit(5);
  }
  close(fd[1]);
  char out[1024];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof out - 1 && (r = read(fd[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)r;
  out[len] = 0;
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) TEST_FAIL_("%s: child status %d", name, st);
  else TEST_PASS_();
  expect_str_eq(out, want);
}

/* Each entry point that fails for lack of memory (here: a size no block can have) says so
 * once with KITE_VERBOSE, in the documented words; a bad alignment (EINVAL) is no memory
 * failure and says nothing. */
TEST(verbose_reports_each_failing_entry_point_once) {
  const char *one = "kite: out of memory: a request of 4611686018427387904 bytes failed (NULL, errno ENOMEM)\n";
  const char *pair = "kite: out of memory: a request of 18446744073709551615 x 2 bytes failed (NULL, errno ENOMEM)\n";
  static const char *const names[] = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc",
                                      "memalign", "valloc", "pvalloc", "heap_malloc", "heap_calloc"};
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) expect_verbose(names[i], one);
  expect_verbose("calloc_overflow", pair);
  expect_verbose("reallocarray", pair);
  expect_verbose("aligned_alloc_einval", "");
}


/* ---- invalid_frees ---- */

/* message.h's hook (message.h itself would redefine kite_check) */
extern void (*_kite_report_invalid_hook)(const char *what, const void *p);
static int misuse_reports;
static void count_misuse(const char *what, const void *p) { (void)what; (void)p; misuse_reports++; }

/* invalid_frees counts what its name says: an invalid pointer given to free; realloc's and
 * malloc_usable_size's reports of an invalid pointer are reported, not counted there. */
TEST(invalid_frees_counts_only_frees) {
  kite_stats_t s0, s1, s2;
  char *p = kite_malloc(64);
  assert_true(p != NULL);
  __atomic_store_n(&_kite_report_invalid_hook, count_misuse, __ATOMIC_RELEASE);
  kite_stats_get(&s0);
  errno = 0;
  expect_ptr_eq(kite_realloc(p + 8, 100), NULL);
  expect_int_eq(errno, EINVAL);
  expect_uint_eq(kite_malloc_usable_size(p + 8), 0);
  kite_stats_get(&s1);
  expect_int_eq(misuse_reports, 2);
  expect_uint_eq(s1.invalid_frees, s0.invalid_frees);
  kite_free(p + 8);
  kite_stats_get(&s2);
  expect_int_eq(misuse_reports, 3);
  expect_uint_eq(s2.invalid_frees, s0.invalid_frees + 1);
  __atomic_store_n(&_kite_report_invalid_hook, NULL, __ATOMIC_RELEASE);
  kite_free(p);
}

#define RUN_CHECKED(name)                                                     \
  do {                                                                        \
    if (test_selected(argc, argv, #name)) {                                   \
      RUN(name);                                                              \
      expect_int_eq((kite_check)(), 1);                                         \
    }                                                                         \
  } while (0)

static int test_selected(int argc, char **argv, const char *name) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "verbose-child") == 0) return verbose_call(argv[2]);
  test_rng_init(1);
  RUN_CHECKED(decay_keeps_a_unit_stamped_after_now);
  RUN_CHECKED(decay_came_back_window);
  RUN_CHECKED(decay_next_stretch);
  RUN_CHECKED(decay_purges_only_the_excess_while_claiming);
  RUN_CHECKED(decay_counts_purged_runs_that_come_back);
  RUN_CHECKED(huge_cache_keeps_a_map_cached_after_now);
  RUN_CHECKED(large_claim_reuses_a_committed_block_not_recent);
  RUN_CHECKED(pages_of_one_unit_up_to_16_kib_blocks);
  RUN_CHECKED(emptied_page_of_any_order_stays_in_the_heaps_cache);
  RUN_CHECKED(refill_uses_the_page_its_reclaim_queued);
  RUN_CHECKED(heap_live_walk_holds_arenas_mapped);
  RUN_CHECKED(exiting_heap_counted_once);
  RUN_CHECKED(heap_counters_read_while_owner_writes);
  RUN_CHECKED(exit_abandons_its_pages_in_one_lock_section);
  RUN_CHECKED(heap_create_fails_cleanly_without_its_key);
  RUN_CHECKED(heap_pool_serves_threads_and_first_class_heaps);
  RUN_CHECKED(retired_heap_has_an_empty_direct_table);
  RUN_CHECKED(heap_obtain_takes_the_lock_once);
  RUN_CHECKED(fork_while_arena_grows);
  RUN_CHECKED(claims_leave_no_granule_looking);
  RUN_CHECKED(dense_first_claim_counts_first_class_heaps);
  RUN_CHECKED(fork_while_a_claim_looks_at_a_granule);
  RUN_CHECKED(fork_during_the_collapse_pass);
  RUN_CHECKED(small_run_takes_back_a_freed_runs_huge_advice);
  RUN_CHECKED(run_asking_less_takes_back_a_freed_runs_huge_advice);
  RUN_CHECKED(verbose_reports_each_failing_entry_point_once);
  RUN_CHECKED(invalid_frees_counts_only_frees);
  RUN_CHECKED(new_arena_survives_a_purge); /* after the huge-advice test: it maps an arena */
  /* last: their threads' pages go back to the arena, and the huge-advice test above takes
   * raw runs from it (an ASan build poisons a run given back) */
  RUN_CHECKED(fork_drops_other_threads_keys);
  RUN_CHECKED(heap_made_during_exit_gets_no_key);
  RUN_CHECKED(last_round_heap_is_retired_by_the_next_holder_of_its_thread_pointer);
  return test_main_end();
}
