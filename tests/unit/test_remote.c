/* tests/unit/test_remote.c -- the remote-free protocol (src/remote.c, invariants R1-R7)
 * and the owner's take of the cross-thread list (_kite_page_collect), through the internals
 * build (kite-noover-debug: KITE_TEST_HOOKS, validators on).
 *
 * Each test uses a size class of its own, so its blocks share one page that no other test
 * touches. Threads are parked at the protocol's test hooks (remote.h) to make a race happen
 * in one chosen order; misuse reports are counted through _kite_report_invalid_hook.
 * Every wait is bounded: a test whose thread never reaches its hook, or that does not end
 * (a protocol broken into a cycle), fails with a message naming it instead of hanging.
 *   push_then_take            R2, R4: remote frees chain REMOTE|next from the head, the
 *                             count follows; the owner's collect takes them all
 *   claim_refuses_not_live    R1: a free of a freed or an uncarved block changes nothing
 *   take_reports_owner_store  R3, R4: the owner's store between the claim and the push
 *                             (the claimer does not look back) is reported by the take,
 *                             and the block is free once
 *   claim_is_one_rmw          R1: a thread parked between the claim's read and its write,
 *                             while another frees the block completely (the list being
 *                             non-empty): exactly one report, each block handed out once
 *   relink_is_a_cas           R2, R3: the owner's store lands while the claimer is parked
 *                             and the list's head moves: the re-link fails and reports
 *   relink_refuses_live       R3: as relink_is_a_cas, with the block handed out again
 *                             (LIVE) before the claimer goes on: it reports and pushes
 *                             nothing, the block stays its new user's
 *   push_retries_moved_head   R2: the push's retry loop: its CAS finds the head moved
 *                             again, re-links the block to the new head and tries again
 *                             (all three blocks end on the list)
 *   retry_relink_is_a_cas     R2, R3: that loop's re-link is a CAS: with the owner's store
 *                             landed meanwhile it fails and reports
 *   emptied_page_leaves_queue the local free that empties a page that is not the current
 *                             one takes it out of the heap's queue and gives it back
 *   late_free_settles_abandoned_page  R5: a free claimed before its page was abandoned
 *                             and pushed after: the page is settled (empty), not left
 *                             committed for an adopter or a trim
 *   abandoned_free_takes_no_heap_lock  R5: frees into an abandoned page are pushes that
 *                             need no lock (they complete while _kite_heap_lock is held);
 *                             the one that empties the page settles it
 *   emptied_page_is_its_settlers  R5: while the free that emptied an abandoned page has not
 *                             settled it yet, no thread adopts it; then the settle does
 *   take_walks_its_count      R4: the take walks exactly thread_free's count, not to the
 *                             list's END: blocks past the count stay claimed
 *   take_reports_short_list   R4: a list that reaches END before its count is reported as
 *                             broken, and the blocks before END are free once
 *   take_reports_block_met_twice  R3, R4: a block on the list twice is reported at its
 *                             second visit (the walk stored its entry without REMOTE),
 *                             and every block is free once
 *   take_counts_at_every_step R4: lists of 1 to 7 blocks, with their count, one more (a
 *                             short list: reported) and one less (the last block stays
 *                             claimed): the take's three-step rounds and its last steps
 *                             each stop with the right count and list
 *   fork_child_settles_emptied_page  R5, heap_abandon.c I-A4: a fork while that free is
 *                             parked between its push and its settle: the child, where
 *                             the settling thread does not exist, settles the page itself
 *   fork_after_settle_unlock_keeps_the_run  heap_abandon.c I-A5: a fork right after a
 *                             settle that gives its page back lets _kite_heap_lock go: the
 *                             run is the arena's in the child
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include "types.h"
#include "page.h"
#include "remote.h"
#include "heap.h"

extern void (*_kite_report_invalid_hook)(const char *what, const void *p); /* message.h */
void _kite_test_owner_free_store(void *p); /* free.c, test builds */

/* ---- misuse reports ---- */
static int reports;
static const void *report_ptr;
static void count_report(const char *what, const void *p) {
  (void)what;
  __atomic_store_n(&report_ptr, p, __ATOMIC_RELAXED);
  __atomic_fetch_add(&reports, 1, __ATOMIC_SEQ_CST);
}
static void reports_reset(void) {
  __atomic_store_n(&reports, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&report_ptr, NULL, __ATOMIC_RELAXED);
}
static int reports_now(void) { return __atomic_load_n(&reports, __ATOMIC_SEQ_CST); }

/* ---- bounded waits ---- */
enum { WAIT_S = 20, TEST_S = 60 };
static const char *test_now = "";
/* SIGALRM: the running test did not end (async-signal-safe: write and _exit only) */
static void watchdog(int sig) {
  (void)sig;
  static const char a[] = "FAIL: test ", b[] = " did not end within 60 s (a hang: the protocol looped or lost a thread)\n";
  if (write(2, a, sizeof a - 1) < 0 || write(2, test_now, strlen(test_now)) < 0 || write(2, b, sizeof b - 1) < 0) _exit(2);
  _exit(2);
}
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
/* Wait until *flag is set, WAIT_S seconds at most; false (with a message): it never was. */
static bool wait_flag(const int *flag, const char *what) {
  double end = now_s() + WAIT_S;
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST)) {
    if (now_s() > end) {
      fprintf(stderr, "%s: %s did not happen within %d s\n", test_now, what, WAIT_S);
      return false;
    }
    sched_yield();
  }
  return true;
}

/* ---- parking a thread at a hook ---- */
static __thread int park_here; /* set by the thread that is to park at its next hooks: how many */
static int parks, releases;       /* stops made, and releases given */
static int parked;                /* the flag wait_parked watches */
static void park(void *p) {
  (void)p;
  if (!park_here) return;
  park_here--;
  int me = __atomic_add_fetch(&parks, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&parked, 1, __ATOMIC_SEQ_CST);
  double end = now_s() + WAIT_S;
  while (__atomic_load_n(&releases, __ATOMIC_SEQ_CST) < me) {
    if (now_s() > end) {
      fprintf(stderr, "%s: a parked thread was not released within %d s\n", test_now, WAIT_S);
      abort();
    }
    sched_yield();
  }
}
/* false: the thread never reached the hook (the test fails: the path it tests was not taken) */
static bool wait_parked(void) {
  bool ok = wait_flag(&parked, "a freeing thread's stop at the hook");
  __atomic_store_n(&parked, 0, __ATOMIC_SEQ_CST); /* for the next stop */
  return ok;
}
static void unpark(void) { __atomic_add_fetch(&releases, 1, __ATOMIC_SEQ_CST); }
static void park_reset(void) {
  __atomic_store_n(&parks, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&releases, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&parked, 0, __ATOMIC_SEQ_CST);
}

/* ---- threads ---- */
static void *free_body(void *p) {
  kite_free(p);
  return NULL;
}
static void *free_parked2_body(void *p) { /* parks at two hooks, or at one twice */
  park_here = 2;
  kite_free(p);
  return NULL;
}
static void *free_parked_body(void *p) {
  park_here = 1;
  kite_free(p);
  return NULL;
}
static pthread_t spawn(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) abort();
  return t;
}
static void free_on_thread(void *p) { pthread_join(spawn(free_body, p), NULL); }

static kite_page_t *page_of(const void *p) { return _kite_page_head(_kite_unit_of((uintptr_t)p)); }
static uint32_t index_of(const kite_page_t *pg, const void *p) {
  return (uint32_t)(((const uint8_t *)p - _kite_page_block(pg, 0)) / pg->block_size);
}
static uint64_t tf_of(const kite_page_t *pg) { return __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE); }
static uint16_t entry(const kite_page_t *pg, uint32_t i) { return __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED); }
/* Blocks on pg's allocation list equal to i (owner only). */
static int on_free_list(const kite_page_t *pg, uint32_t i) {
  int n = 0, guard = 0;
  for (uint32_t k = pg->free; k != KITE_LINK_END && guard < KITE_PAGE_MAX_BLOCKS; k = pg->links[k], guard++) n += k == i;
  return n;
}
static void collect(kite_page_t *pg, uint32_t *remote) { _kite_page_collect(pg, true, false, remote); }

/* Allocate two pages' worth of blocks of size n: a and b (b may be NULL) must each come
 * back exactly once; then free them all. */
static void expect_handed_out_once(size_t n, const void *a, const void *b, uint32_t reserved) {
  enum { MAX = 2 * KITE_PAGE_MAX_BLOCKS };
  static void *got[MAX];
  int seen_a = 0, seen_b = 0;
  uint32_t k = 0;
  for (; k < MAX && k < 2 * reserved; k++) {
    got[k] = kite_malloc(n);
    seen_a += got[k] == a;
    seen_b += got[k] == b;
  }
  expect_int_eq(seen_a, 1);
  if (b) expect_int_eq(seen_b, 1);
  for (uint32_t j = 0; j < k; j++) kite_free(got[j]);
}

TEST(push_then_take) {
  enum { N = 6 };
  void *b[N];
  for (int k = 0; k < N; k++) b[k] = kite_malloc(48);
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < N; k++) assert_ptr_eq(page_of(b[k]), pg);
  int32_t used = pg->used;
  for (int k = 0; k < 4; k++) free_on_thread(b[k]);
  /* R2: head = the last pushed, each entry REMOTE|next back to END, count 4 */
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 4);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, b[3]));
  for (int k = 3; k >= 0; k--) {
    uint16_t want = (uint16_t)(KITE_LINK_REMOTE | (k ? index_of(pg, b[k - 1]) : KITE_LINK_END));
    expect_uint_eq(entry(pg, index_of(pg, b[k])), want);
  }
  expect_int_eq(pg->used, used); /* counted until taken (R6) */
  expect_true(_kite_page_check(pg, true, -1));
  uint32_t remote = 0;
  collect(pg, &remote); /* R4 */
  expect_uint_eq(remote, 4);
  expect_uint_eq(tf_of(pg), KITE_TF_EMPTY);
  expect_int_eq(pg->used, used - 4);
  for (int k = 0; k < 4; k++) expect_int_eq(on_free_list(pg, index_of(pg, b[k])), 1);
  expect_true(_kite_page_check(pg, true, -1));
  for (int k = 4; k < N; k++) kite_free(b[k]);
}

TEST(claim_refuses_not_live) {
  reports_reset();
  void *a = kite_malloc(80), *keep = kite_malloc(80);
  kite_page_t *pg = page_of(a);
  uint32_t i = index_of(pg, a);
  kite_free(a); /* the owner's free: a is on local_free */
  uint16_t before = entry(pg, i);
  uint64_t tf = tf_of(pg);
  free_on_thread(a);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, a);
  expect_uint_eq(entry(pg, i), before);
  expect_uint_eq(tf_of(pg), tf);
  /* a block start past the carved ones: its entry reads 0 */
  uint32_t cap = pg->capacity;
  if (cap < pg->reserved) {
    void *u = _kite_page_block(pg, cap);
    free_on_thread(u);
    expect_int_eq(reports_now(), 2);
    expect_ptr_eq(report_ptr, u);
    expect_uint_eq(entry(pg, cap), 0);
    expect_uint_eq(tf_of(pg), tf);
  }
  expect_true(_kite_page_check(pg, true, -1));
  kite_free(keep);
}

static void owner_store_hook(void *p) { _kite_test_owner_free_store(p); }
TEST(take_reports_owner_store) {
  reports_reset();
  void *a = kite_malloc(112), *keep = kite_malloc(112);
  kite_page_t *pg = page_of(a);
  uint32_t i = index_of(pg, a);
  /* the owner read LIVE before the claim; its stores land between the claim and the push,
   * which does not look at the entry again (nothing moved the head: no re-link) */
  __atomic_store_n(&_kite_test_hook_remote_push, owner_store_hook, __ATOMIC_RELEASE);
  free_on_thread(a);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 0);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
  expect_true(!_kite_link_is_remote(entry(pg, i)));
  expect_true(!_kite_page_check(pg, true, -1)); /* until the take: count above REMOTE entries */
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_int_eq(reports_now(), 1); /* R3, R4: the take reports it */
  expect_ptr_eq(report_ptr, a);
  expect_uint_eq(remote, 0);
  expect_int_eq(on_free_list(pg, i), 1); /* free once: through the owner's local list */
  expect_true(_kite_page_check(pg, true, -1));
  expect_handed_out_once(112, a, NULL, pg->reserved);
  kite_free(keep);
}

TEST(claim_is_one_rmw) {
  reports_reset();
  park_reset();
  void *p = kite_malloc(144), *k = kite_malloc(144), *keep = kite_malloc(144);
  kite_page_t *pg = page_of(p);
  assert_ptr_eq(page_of(k), pg);
  free_on_thread(k); /* the cross-thread list is not empty */
  __atomic_store_n(&_kite_test_hook_remote_read, park, __ATOMIC_RELEASE);
  pthread_t first = spawn(free_parked_body, p); /* reads LIVE, parks before its write */
  expect_true(wait_parked());
  free_on_thread(p); /* claims and pushes p */
  unpark();
  pthread_join(first, NULL);
  __atomic_store_n(&_kite_test_hook_remote_read, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, p);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2);
  expect_int_eq((kite_check)(), 1);
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_uint_eq(remote, 2);
  expect_int_eq(reports_now(), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, p)), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, k)), 1);
  expect_int_eq((kite_check)(), 1);
  expect_handed_out_once(144, p, k, pg->reserved);
  kite_free(keep);
}

/* The re-link tests' set-up: three blocks of size n on one page (p, j, keep) and a thread
 * whose remote free of p claimed it (REMOTE|END) and parks before its first push, until
 * claim_release. false: p and j are not on one page (the test stops). */
typedef struct {
  void *p, *j, *keep;
  kite_page_t *pg;
  uint32_t i; /* p's index */
  pthread_t claimer;
} parked_claim_t;
static bool claim_and_park(parked_claim_t *c, size_t n) {
  reports_reset();
  park_reset();
  c->p = kite_malloc(n);
  c->j = kite_malloc(n);
  c->keep = kite_malloc(n);
  c->pg = page_of(c->p);
  expect_ptr_eq(page_of(c->j), c->pg);
  if (page_of(c->j) != c->pg) return false;
  c->i = index_of(c->pg, c->p);
  __atomic_store_n(&_kite_test_hook_remote_push, park, __ATOMIC_RELEASE);
  c->claimer = spawn(free_parked_body, c->p);
  expect_true(wait_parked());
  return true;
}
static void claim_release(parked_claim_t *c) {
  unpark();
  pthread_join(c->claimer, NULL);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
}

TEST(relink_is_a_cas) {
  parked_claim_t c;
  if (!claim_and_park(&c, 176)) return;
  free_on_thread(c.j);              /* the head moves: the claimer must re-link */
  _kite_test_owner_free_store(c.p); /* the owner read LIVE before the claim */
  claim_release(&c);
  expect_int_eq(reports_now(), 1); /* the re-link's CAS saw the owner's store */
  expect_ptr_eq(report_ptr, c.p);
  uint64_t tf = tf_of(c.pg);
  expect_int_eq(KITE_TF_COUNT(tf), 1);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(c.pg, c.j));
  expect_true(!_kite_link_is_remote(entry(c.pg, c.i)));
  expect_int_eq((kite_check)(), 1);
  uint32_t remote = 0;
  collect(c.pg, &remote);
  expect_uint_eq(remote, 1);
  expect_int_eq(reports_now(), 1);
  expect_int_eq(on_free_list(c.pg, c.i), 1);
  expect_int_eq((kite_check)(), 1);
  expect_handed_out_once(176, c.p, c.j, c.pg->reserved);
  kite_free(c.keep);
}

/* The owner's store lands while the claimer waits before its first push, then the owner
 * takes the block back and hands it out again (LIVE), and the head moves: the claimer's
 * push, out of line, reads its entry to re-link it, finds LIVE, not REMOTE|next, and
 * reports; the block stays the new allocation's. */
TEST(relink_refuses_live) {
  enum { SIZE = 1856 }; /* a class no other test uses */
  parked_claim_t c;
  if (!claim_and_park(&c, SIZE)) return;
  _kite_test_owner_free_store(c.p); /* the owner read LIVE before the claim */
  uint32_t remote = 0;
  collect(c.pg, &remote); /* p to the head of the allocation list */
  void *q = kite_malloc(SIZE);
  assert_ptr_eq(q, c.p);
  expect_uint_eq(entry(c.pg, c.i), KITE_LINK_LIVE);
  free_on_thread(c.j); /* the head moves */
  claim_release(&c);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, c.p);
  expect_uint_eq(entry(c.pg, c.i), KITE_LINK_LIVE);
  uint64_t tf = tf_of(c.pg);
  expect_int_eq(KITE_TF_COUNT(tf), 1);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(c.pg, c.j));
  expect_int_eq((kite_check)(), 1);
  kite_free(q);
  expect_int_eq(reports_now(), 1);
  expect_int_eq((kite_check)(), 1);
  expect_handed_out_once(SIZE, c.p, c.j, c.pg->reserved);
  kite_free(c.keep);
}

/* The push's retry loop: the head moves before the first try (the re-link out of line),
 * and again before the loop's CAS, so that CAS fails and the loop re-links and retries. */
TEST(push_retries_moved_head) {
  reports_reset();
  park_reset();
  void *p = kite_malloc(208), *j = kite_malloc(208), *k = kite_malloc(208), *keep = kite_malloc(208);
  kite_page_t *pg = page_of(p);
  assert_ptr_eq(page_of(j), pg);
  assert_ptr_eq(page_of(k), pg);
  uint32_t ip = index_of(pg, p), ij = index_of(pg, j), ik = index_of(pg, k);
  __atomic_store_n(&_kite_test_hook_remote_push, park, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_retry, park, __ATOMIC_RELEASE);
  pthread_t pusher = spawn(free_parked2_body, p); /* claims p, parks before its first try */
  expect_true(wait_parked());
  free_on_thread(j); /* the head moves to j */
  unpark();
  expect_true(wait_parked()); /* re-linked to j, parked before the loop's CAS */
  free_on_thread(k); /* the head moves to k: that CAS fails */
  unpark();
  pthread_join(pusher, NULL);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_retry, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 0);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 3);
  expect_uint_eq(KITE_TF_HEAD(tf), ip);
  expect_uint_eq(entry(pg, ip), KITE_LINK_REMOTE | ik);
  expect_uint_eq(entry(pg, ik), KITE_LINK_REMOTE | ij);
  expect_uint_eq(entry(pg, ij), KITE_LINK_REMOTE | KITE_LINK_END);
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_uint_eq(remote, 3);
  expect_int_eq(on_free_list(pg, ip), 1);
  expect_int_eq(on_free_list(pg, ij), 1);
  expect_int_eq(on_free_list(pg, ik), 1);
  expect_true(_kite_page_check(pg, true, -1));
  expect_handed_out_once(208, p, k, pg->reserved);
  kite_free(keep);
}

/* The same loop's re-link is a CAS: the owner's store lands while the pusher waits before
 * the loop's CAS, and the head moves: the re-link fails and reports, p is pushed not. */
TEST(retry_relink_is_a_cas) {
  reports_reset();
  park_reset();
  void *p = kite_malloc(240), *j = kite_malloc(240), *k = kite_malloc(240), *keep = kite_malloc(240);
  kite_page_t *pg = page_of(p);
  assert_ptr_eq(page_of(j), pg);
  assert_ptr_eq(page_of(k), pg);
  uint32_t ip = index_of(pg, p), ik = index_of(pg, k);
  __atomic_store_n(&_kite_test_hook_remote_push, park, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_retry, park, __ATOMIC_RELEASE);
  pthread_t pusher = spawn(free_parked2_body, p);
  expect_true(wait_parked());
  free_on_thread(j);
  unpark();
  expect_true(wait_parked()); /* in the loop, before its CAS */
  free_on_thread(k);
  _kite_test_owner_free_store(p); /* the owner read LIVE before the claim */
  unpark();
  pthread_join(pusher, NULL);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_retry, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, p);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 2);
  expect_uint_eq(KITE_TF_HEAD(tf), ik);
  expect_true(!_kite_link_is_remote(entry(pg, ip)));
  expect_int_eq((kite_check)(), 1);
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_uint_eq(remote, 2);
  expect_int_eq(on_free_list(pg, ip), 1);
  expect_int_eq((kite_check)(), 1);
  expect_handed_out_once(240, p, k, pg->reserved);
  kite_free(keep);
}

/* ---- R5 ---- */
/* Is pg on queue q? */
static int on_queue(const kite_pageq_t *q, const kite_page_t *pg) {
  for (const kite_page_t *x = q->first; x; x = x->next)
    if (x == pg) return 1;
  return 0;
}
TEST(emptied_page_leaves_queue) {
  enum { SIZE = 3072, MAX = 64 }; /* a class no other test uses; a page holds fewer */
  void *b[MAX];
  size_t n = 0;
  b[n++] = kite_malloc(SIZE);
  kite_page_t *first = page_of(b[0]);
  /* fill the first page, then one block of the next (it becomes the current page) */
  while (n < MAX) {
    b[n] = kite_malloc(SIZE);
    if (page_of(b[n++]) != first) break;
  }
  assert_true(n < MAX);
  kite_heap_t *h = _kite_heap_tls;
  unsigned cls = first->cls;
  for (size_t k = 0; k + 1 < n; k++) kite_free(b[k]); /* every block of the first page */
  expect_int_eq(on_queue(&h->queue[cls], first), 0);
  expect_int_eq(on_queue(&h->full[cls], first), 0);
  expect_int_eq(__atomic_load_n(&first->heap, __ATOMIC_RELAXED) == h && first->kind == KITE_KIND_SMALL, 0);
  expect_int_eq((kite_check)(), 1);
  kite_free(b[n - 1]);
}

static void *owner_p;
static int owner_go;
static void *owner_body(void *arg) {
  (void)arg;
  __atomic_store_n(&owner_p, kite_malloc(3000), __ATOMIC_RELEASE);
  while (!__atomic_load_n(&owner_go, __ATOMIC_ACQUIRE)) sched_yield();
  return NULL; /* thread exit: the heap abandons the page, p still counted in used */
}
TEST(late_free_settles_abandoned_page) {
  reports_reset();
  park_reset();
  pthread_t owner = spawn(owner_body, NULL);
  void *p;
  while ((p = __atomic_load_n(&owner_p, __ATOMIC_ACQUIRE)) == NULL) sched_yield();
  kite_page_t *pg = page_of(p);
  __atomic_store_n(&_kite_test_hook_remote_push, park, __ATOMIC_RELEASE);
  pthread_t freer = spawn(free_parked_body, p); /* claims p, parks before the push */
  expect_true(wait_parked());
  __atomic_store_n(&owner_go, 1, __ATOMIC_RELEASE);
  pthread_join(owner, NULL); /* abandoned: p's claim keeps it from settling */
  expect_true(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE) == NULL);
  expect_int_eq(pg->used, 1);
  unpark();
  pthread_join(freer, NULL);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 0);
  /* settled: kept empty on its abandoned list for the next thread, or back in the arena */
  expect_true(pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf_of(pg)) == 0));
  expect_int_eq((kite_check)(), 1);
}

/* An abandoned page of K blocks (its owner exits with all of them handed out), for the
 * tests below: each uses a size class of its own. */
enum { ABANDON_MAX = 64 };
static void *abandoned_blocks[ABANDON_MAX];
static size_t abandoned_size, abandoned_k;
static void *abandon_body(void *arg) {
  (void)arg;
  for (size_t k = 0; k < abandoned_k; k++) abandoned_blocks[k] = kite_malloc(abandoned_size);
  return NULL; /* thread exit: the page is abandoned with k blocks handed out */
}
static kite_page_t *make_abandoned(size_t size, size_t k) {
  abandoned_size = size;
  abandoned_k = k;
  pthread_join(spawn(abandon_body, NULL), NULL);
  kite_page_t *pg = page_of(abandoned_blocks[0]);
  for (size_t j = 1; j < k; j++)
    if (page_of(abandoned_blocks[j]) != pg) return NULL;
  return pg;
}
static int frees_done;
static void *free_all_but_last(void *arg) {
  (void)arg;
  for (size_t k = 0; k + 1 < abandoned_k; k++) kite_free(abandoned_blocks[k]);
  __atomic_store_n(&frees_done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}
TEST(abandoned_free_takes_no_heap_lock) {
  enum { SIZE = 2560, K = 8 }; /* a class no other test uses; one page holds K */
  reports_reset();
  kite_page_t *pg = make_abandoned(SIZE, K);
  assert_true(pg != NULL);
  expect_true(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE) == NULL);
  expect_int_eq(pg->used, K);
  /* every free but the page's last is a push: it completes while another thread holds
   * _kite_heap_lock (this one, as a fork would) */
  __atomic_store_n(&frees_done, 0, __ATOMIC_SEQ_CST);
  _kite_heap_fork_prepare();
  pthread_t t = spawn(free_all_but_last, NULL);
  bool done = wait_flag(&frees_done, "K - 1 frees into an abandoned page while _kite_heap_lock was held");
  _kite_heap_fork_parent();
  pthread_join(t, NULL);
  expect_true(done);
  expect_int_eq(reports_now(), 0);
  expect_true(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE) == NULL && pg->kind == KITE_KIND_SMALL);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), K - 1);
  expect_int_eq((kite_check)(), 1);
  /* the last free empties it: settled, kept empty for the next thread or given back */
  kite_free(abandoned_blocks[K - 1]);
  expect_int_eq(reports_now(), 0);
  expect_true(pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf_of(pg)) == 0));
}

static void *adopter_p;
static void *adopter_body(void *arg) {
  __atomic_store_n(&adopter_p, kite_malloc((size_t)(uintptr_t)arg), __ATOMIC_RELEASE);
  return NULL; /* its page (adopted or fresh) is abandoned again at its exit */
}
static void *free_last_parked(void *p) {
  park_here = 1;
  kite_free(p);
  return NULL;
}
/* An abandoned page of k blocks of the given size with all but its last block freed, then
 * a thread freeing the last: its push sets KITE_TF_EMPTIED and the thread parks before the
 * settle. *pgp: the page, *freer: the parked thread (unpark() lets it settle). False when
 * no such page could be made (nothing parked then). */
static bool park_the_settle(kite_page_t **pgp, pthread_t *freer, size_t size, size_t k) {
  park_reset();
  kite_page_t *pg = make_abandoned(size, k);
  expect_true(pg != NULL);
  if (pg == NULL) return false;
  for (size_t j = 0; j + 1 < k; j++) kite_free(abandoned_blocks[j]);
  __atomic_store_n(&_kite_test_hook_remote_emptied, park, __ATOMIC_RELEASE);
  *freer = spawn(free_last_parked, abandoned_blocks[k - 1]);
  bool parked_ok = wait_parked();
  expect_true(parked_ok);
  expect_true((tf_of(pg) & (KITE_TF_EMPTIED | KITE_TF_ABANDONED)) == (KITE_TF_EMPTIED | KITE_TF_ABANDONED));
  *pgp = pg;
  return true;
}
TEST(emptied_page_is_its_settlers) {
  enum { SIZE = 2304, K = 4 }; /* a class no other test uses */
  reports_reset();
  kite_page_t *pg;
  pthread_t freer;
  assert_true(park_the_settle(&pg, &freer, SIZE, K));
  /* a thread short of this class does not adopt it (remote.c R5) */
  pthread_join(spawn(adopter_body, (void *)(uintptr_t)SIZE), NULL);
  void *q = __atomic_load_n(&adopter_p, __ATOMIC_ACQUIRE);
  expect_true(q != NULL && page_of(q) != pg);
  expect_true(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE) == NULL && pg->kind == KITE_KIND_SMALL);
  expect_int_eq(pg->used, K);
  expect_int_eq((kite_check)(), 1);
  unpark();
  pthread_join(freer, NULL);
  __atomic_store_n(&_kite_test_hook_remote_emptied, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 0);
  expect_true(pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf_of(pg)) == 0));
  kite_free(q);
}

/* thread_free with its count replaced by n (head and high bits kept): the state a corrupt
 * or racing list leaves, made directly */
static void force_count(kite_page_t *pg, uint32_t n) {
  uint64_t tf = tf_of(pg);
  __atomic_store_n(&pg->thread_free, (tf & ~(uint64_t)0xFFFF0000u) | ((uint64_t)n << 16), __ATOMIC_RELEASE);
}

TEST(take_walks_its_count) {
  enum { N = 4 };
  reports_reset();
  void *b[N];
  for (int k = 0; k < N; k++) b[k] = kite_malloc(1344);
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < N; k++) assert_ptr_eq(page_of(b[k]), pg);
  int32_t used = pg->used;
  for (int k = 0; k < 3; k++) free_on_thread(b[k]);
  force_count(pg, 2); /* the list holds b2 -> b1 -> b0 -> END, its count says 2 */
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_uint_eq(remote, 2);
  expect_int_eq(reports_now(), 0);
  expect_int_eq(pg->used, used - 2);
  expect_int_eq(on_free_list(pg, index_of(pg, b[2])), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, b[1])), 1);
  /* b0 is still claimed, REMOTE|END, not on the allocation list */
  expect_int_eq(on_free_list(pg, index_of(pg, b[0])), 0);
  expect_uint_eq(entry(pg, index_of(pg, b[0])), KITE_LINK_REMOTE | KITE_LINK_END);
  /* put b0 back on thread_free as a one-block list, as its push would have */
  __atomic_store_n(&pg->thread_free, (uint64_t)(KITE_LINK_REMOTE | index_of(pg, b[0])) | ((uint64_t)1 << 16), __ATOMIC_RELEASE);
  collect(pg, &remote);
  expect_uint_eq(remote, 1);
  expect_int_eq(pg->used, used - 3);
  expect_int_eq(on_free_list(pg, index_of(pg, b[0])), 1);
  expect_true(_kite_page_check(pg, true, -1));
  kite_free(b[3]);
}

TEST(take_reports_short_list) {
  enum { N = 3 };
  reports_reset();
  void *b[N];
  for (int k = 0; k < N; k++) b[k] = kite_malloc(1472);
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < N; k++) assert_ptr_eq(page_of(b[k]), pg);
  int32_t used = pg->used;
  for (int k = 0; k < 2; k++) free_on_thread(b[k]);
  force_count(pg, 3); /* b1 -> b0 -> END, its count says 3 */
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, _kite_page_block(pg, 0)); /* the page's report, not a block's */
  expect_uint_eq(remote, 2); /* both blocks before END are taken */
  expect_int_eq(pg->used, used - 2);
  expect_int_eq(on_free_list(pg, index_of(pg, b[0])), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, b[1])), 1);
  expect_uint_eq(tf_of(pg), KITE_TF_EMPTY);
  expect_true(_kite_page_check(pg, true, -1));
  expect_handed_out_once(1472, b[0], b[1], pg->reserved);
  kite_free(b[2]);
}

/* R3, R4: a block on the list twice (the owner's store landed before the claimer's push,
 * the owner handed the block out again, and another thread freed it again before the
 * take), made directly: x -> y -> x, count 3. The walk takes x, then y, and finds x's
 * entry as it stored it (no REMOTE): one report, x and y free once. */
TEST(take_reports_block_met_twice) {
  reports_reset();
  void *x = kite_malloc(1600), *y = kite_malloc(1600), *keep = kite_malloc(1600);
  kite_page_t *pg = page_of(x);
  assert_ptr_eq(page_of(y), pg);
  uint32_t ix = index_of(pg, x), iy = index_of(pg, y);
  int32_t used = pg->used;
  free_on_thread(x);
  free_on_thread(y); /* y -> x -> END, count 2 */
  __atomic_store_n(&pg->links[ix], (uint16_t)(KITE_LINK_REMOTE | iy), __ATOMIC_RELAXED);
  __atomic_store_n(&pg->thread_free, (uint64_t)(KITE_LINK_REMOTE | ix) | ((uint64_t)3 << 16), __ATOMIC_RELEASE);
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, x);
  expect_uint_eq(remote, 2);
  expect_int_eq(pg->used, used - 2);
  expect_int_eq(on_free_list(pg, ix), 1);
  expect_int_eq(on_free_list(pg, iy), 1);
  expect_uint_eq(tf_of(pg), KITE_TF_EMPTY);
  expect_true(_kite_page_check(pg, true, -1));
  expect_handed_out_once(1600, x, y, pg->reserved);
  kite_free(keep);
}

/* One list of len blocks pushed by other threads (b[len-1] -> ... -> b[0] -> END), its
 * count made len + delta, taken: the blocks the count reaches are free once, the rest stay
 * claimed; a count past END is reported once. */
static void take_case(kite_page_t *pg, size_t size, uint32_t len, int delta) {
  void *b[8];
  for (uint32_t k = 0; k < len; k++) {
    b[k] = kite_malloc(size);
    assert_ptr_eq(page_of(b[k]), pg);
  }
  int32_t used = pg->used;
  for (uint32_t k = 0; k < len; k++) free_on_thread(b[k]);
  reports_reset();
  if (delta) force_count(pg, len + (uint32_t)delta);
  uint32_t remote = 0, taken = delta < 0 ? len - 1 : len;
  collect(pg, &remote);
  if (remote != taken) fprintf(stderr, "take_counts_at_every_step: %u blocks, count %d: took %u\n", len, (int)len + delta, remote);
  expect_uint_eq(remote, taken);
  expect_int_eq(reports_now(), delta > 0);
  expect_int_eq(pg->used, used - (int32_t)taken);
  for (uint32_t k = len - taken; k < len; k++) expect_int_eq(on_free_list(pg, index_of(pg, b[k])), 1);
  if (delta < 0) { /* b0: claimed, REMOTE|END; then taken as the one-block list its push made */
    expect_int_eq(on_free_list(pg, index_of(pg, b[0])), 0);
    expect_uint_eq(entry(pg, index_of(pg, b[0])), KITE_LINK_REMOTE | KITE_LINK_END);
    __atomic_store_n(&pg->thread_free, (uint64_t)(KITE_LINK_REMOTE | index_of(pg, b[0])) | ((uint64_t)1 << 16), __ATOMIC_RELEASE);
    collect(pg, &remote);
    expect_uint_eq(remote, 1);
    expect_int_eq(pg->used, used - (int32_t)len);
  }
  expect_true(_kite_page_check(pg, true, -1));
}
TEST(take_counts_at_every_step) {
  enum { SIZE = 1728 }; /* a class no other test uses */
  void *keep = kite_malloc(SIZE);
  kite_page_t *pg = page_of(keep);
  for (uint32_t len = 1; len <= 7; len++)
    for (int delta = -1; delta <= 1; delta++)
      if (len + delta > 0) take_case(pg, SIZE, len, delta);
  kite_free(keep);
}

/* The page's settle is due in the child of a fork made between the push that emptied it
 * and its settle (the thread that made the push is not in the child): the child's fork
 * handler settles it, so the child can use or give back the page (without, the page stays
 * listed, emptied and unsettled, for the child's life: no adoption or trim takes it). */
/* The forked child pid exited with status 0 (its own checks passed). */
static void expect_child_ok(pid_t pid) {
  int st = -1;
  expect_true(pid > 0 && waitpid(pid, &st, 0) == pid);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
static int child_settled(kite_page_t *pg, uint32_t k) {
  uint64_t tf = tf_of(pg);
  bool settled = pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf) == 0 && !(tf & KITE_TF_EMPTIED));
  if (!settled) fprintf(stderr, "child: page not settled: used %d of %u, thread_free %#llx\n", (int)pg->used, k, (unsigned long long)tf);
  return settled && (kite_check)() ? 0 : 1;
}
TEST(fork_child_settles_emptied_page) {
  enum { SIZE = 2816, K = 4 }; /* a class no other test uses */
  reports_reset();
  kite_page_t *pg;
  pthread_t freer;
  assert_true(park_the_settle(&pg, &freer, SIZE, K));
  pid_t pid = fork();
  if (pid == 0) _exit(child_settled(pg, K));
  expect_child_ok(pid);
  unpark();
  pthread_join(freer, NULL);
  __atomic_store_n(&_kite_test_hook_remote_emptied, NULL, __ATOMIC_RELEASE);
  expect_int_eq(reports_now(), 0);
  expect_true(pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf_of(pg)) == 0));
}

/* A settle that gives its page back (no room left to keep it empty) hands the run to the
 * arena before it lets _kite_heap_lock go (heap_abandon.c I-A5): a fork made right after
 * that unlock finds the run the arena's in the child. Without, the page was off its list
 * and not yet the arena's there, with no thread in the child to finish the give-back. */
static int child_run_freed(kite_page_t *pg) {
  if (pg->kind != KITE_KIND_FREE) {
    fprintf(stderr, "child: the settled page's run is not the arena's (kind %d, heap %p)\n", (int)pg->kind,
            (void *)__atomic_load_n(&pg->heap, __ATOMIC_RELAXED));
    return 1;
  }
  return (kite_check)() ? 0 : 1;
}
TEST(fork_after_settle_unlock_keeps_the_run) {
  enum { SIZE = 3584, K = 4 }; /* a class no other test uses */
  reports_reset();
  park_reset();
  kite_page_t *pg = make_abandoned(SIZE, K);
  assert_true(pg != NULL);
  for (size_t j = 0; j + 1 < K; j++) kite_free(abandoned_blocks[j]);
  uint32_t keep = _kite_test_abandoned_empty_max;
  _kite_test_abandoned_empty_max = 0; /* the settle gives the page back */
  __atomic_store_n(&_kite_test_hook_settle_unlocked, park, __ATOMIC_RELEASE);
  pthread_t freer = spawn(free_last_parked, abandoned_blocks[K - 1]);
  bool parked_ok = wait_parked();
  expect_true(parked_ok);
  if (parked_ok) {
    pid_t pid = fork();
    if (pid == 0) _exit(child_run_freed(pg));
    expect_child_ok(pid);
  }
  unpark();
  pthread_join(freer, NULL);
  __atomic_store_n(&_kite_test_hook_settle_unlocked, NULL, __ATOMIC_RELEASE);
  _kite_test_abandoned_empty_max = keep;
  expect_int_eq(reports_now(), 0);
  expect_int_eq(pg->kind, KITE_KIND_FREE);
}

#define RUN_CHECKED(name)                 \
  do {                                    \
    test_now = #name;                     \
    alarm(TEST_S);                        \
    RUN(name);                            \
    alarm(0);                             \
    expect_int_eq((kite_check)(), 1);     \
  } while (0)

int main(void) {
  test_rng_init(1);
  signal(SIGALRM, watchdog);
  __atomic_store_n(&_kite_report_invalid_hook, count_report, __ATOMIC_RELEASE);
  RUN_CHECKED(push_then_take);
  RUN_CHECKED(claim_refuses_not_live);
  RUN_CHECKED(take_reports_owner_store);
  RUN_CHECKED(claim_is_one_rmw);
  RUN_CHECKED(relink_is_a_cas);
  RUN_CHECKED(relink_refuses_live);
  RUN_CHECKED(push_retries_moved_head);
  RUN_CHECKED(retry_relink_is_a_cas);
  RUN_CHECKED(emptied_page_leaves_queue);
  RUN_CHECKED(late_free_settles_abandoned_page);
  RUN_CHECKED(abandoned_free_takes_no_heap_lock);
  RUN_CHECKED(emptied_page_is_its_settlers);
  RUN_CHECKED(take_walks_its_count);
  RUN_CHECKED(take_reports_short_list);
  RUN_CHECKED(take_reports_block_met_twice);
  RUN_CHECKED(take_counts_at_every_step);
  RUN_CHECKED(fork_child_settles_emptied_page);
  RUN_CHECKED(fork_after_settle_unlock_keeps_the_run);
  return test_main_end();
}
