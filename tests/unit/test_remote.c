/* tests/unit/test_remote.c -- the remote-free protocol (src/remote.c, invariants R1-R4): the
 * claim, the push and its re-links, and the owner's take of the cross-thread list
 * (_kite_page_collect), through the internals build (kite-noover-debug: KITE_TEST_HOOKS,
 * validators on). Abandoned pages (R5): test_remote_abandon.c; shared helpers: remote_test.h.
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
 *   first_relink_is_a_cas     R2, R3: the first re-link (out of line) is a CAS: the
 *                             owner's store landing between its read of the entry and its
 *                             CAS makes it fail and report, and nothing is pushed
 *   relink_refuses_live       R3: as relink_is_a_cas, with the block handed out again
 *                             (LIVE) before the claimer goes on: it reports and pushes
 *                             nothing, the block stays its new user's
 *   push_retries_moved_head   R2: the push's retry loop: its CAS finds the head moved
 *                             again, re-links the block to the new head and tries again
 *                             (all three blocks end on the list)
 *   retry_relink_is_a_cas     R2, R3: that loop's re-link is a CAS: with the owner's store
 *                             landed meanwhile it fails and reports
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
 *   sole_claim_checks_live    R8: the sole claim (a plain store, for a caller that is the
 *                             block's only freer) pushes a LIVE block as the CAS does, and
 *                             still refuses one that is not LIVE: reported, nothing changed
 */
#include "remote_test.h"

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

/* After an owner's store raced a claimer (the claimer reported p once, and its push linked
 * around it): thread_free holds the n other blocks with the last one freed (head) first, p's
 * entry is the owner's link, not REMOTE, the owner's take collects the n and no new report,
 * and p is on the page's free list exactly once. */
static void expect_owner_race_settled(kite_page_t *pg, void *p, uint32_t ip, uint32_t n, uint32_t head) {
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, p);
  uint64_t tf = tf_of(pg);
  expect_uint_eq(KITE_TF_COUNT(tf), n);
  expect_uint_eq(KITE_TF_HEAD(tf), head);
  expect_true(!_kite_link_is_remote(entry(pg, ip)));
  expect_int_eq((kite_check)(), 1);
  uint32_t remote = 0;
  collect(pg, &remote);
  expect_uint_eq(remote, n);
  expect_int_eq(reports_now(), 1);
  expect_int_eq(on_free_list(pg, ip), 1);
  expect_int_eq((kite_check)(), 1);
}

/* The first re-link (out of line) reads its entry, finds REMOTE|next (its own claim), and
 * the owner's store lands before its CAS: the CAS fails on the store (R2, R3), so the free
 * is reported and nothing is pushed; a plain store there would put the owner's freed block
 * on thread_free as well (twice free). The claimer parks before its first push (the head
 * then moves) and again inside the re-link, between its read and its CAS. */
TEST(first_relink_is_a_cas) {
  enum { SIZE = 2304 }; /* a class no other test uses */
  reports_reset();
  park_reset();
  void *p = kite_malloc(SIZE), *j = kite_malloc(SIZE), *keep = kite_malloc(SIZE);
  kite_page_t *pg = page_of(p);
  if (page_of(j) != pg) {
    expect_ptr_eq(page_of(j), pg);
    return;
  }
  uint32_t ip = index_of(pg, p), ij = index_of(pg, j);
  __atomic_store_n(&_kite_test_hook_remote_push, park, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_relink, park, __ATOMIC_RELEASE);
  pthread_t claimer = spawn(free_parked2_body, p);
  expect_true(wait_parked()); /* claimed, before its first push */
  free_on_thread(j);          /* the head moves: the first push fails, the re-link follows */
  unpark();
  expect_true(wait_parked()); /* in the re-link: its entry read, before its CAS */
  _kite_test_owner_free_store(p); /* the owner read LIVE before the claim */
  unpark();
  pthread_join(claimer, NULL);
  __atomic_store_n(&_kite_test_hook_remote_push, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&_kite_test_hook_remote_relink, NULL, __ATOMIC_RELEASE);
  expect_owner_race_settled(pg, p, ip, 1, ij);
  expect_handed_out_once(SIZE, p, j, pg->reserved);
  kite_free(keep);
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
  expect_owner_race_settled(pg, p, ip, 2, ik);
  expect_handed_out_once(240, p, k, pg->reserved);
  kite_free(keep);
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


/* The secure build's release of a block from its quarantine (secure.c, remote.c R8). */
static void *sole_free_body(void *p) {
  kite_page_t *pg = page_of(p);
  _kite_remote_free_as(pg, p, index_of(pg, p), _kite_heap_settle_abandoned, true);
  return NULL;
}
TEST(sole_claim_checks_live) {
  reports_reset();
  void *a = kite_malloc(400), *b = kite_malloc(400), *keep = kite_malloc(400);
  kite_page_t *pg = page_of(a);
  assert_ptr_eq(page_of(b), pg);
  /* LIVE: claimed and pushed, as by the CAS */
  uint64_t tf = tf_of(pg);
  pthread_join(spawn(sole_free_body, b), NULL);
  expect_int_eq(reports_now(), 0);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), KITE_TF_COUNT(tf) + 1);
  expect_uint_eq(KITE_TF_HEAD(tf_of(pg)), index_of(pg, b));
  expect_uint_eq(entry(pg, index_of(pg, b)), (uint16_t)(KITE_LINK_REMOTE | KITE_LINK_END));
  /* not LIVE (the owner freed it: on local_free): reported, its entry and the list as they were */
  uint32_t i = index_of(pg, a);
  kite_free(a);
  uint16_t before = entry(pg, i);
  tf = tf_of(pg);
  pthread_join(spawn(sole_free_body, a), NULL);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, a);
  expect_uint_eq(entry(pg, i), before);
  expect_uint_eq(tf_of(pg), tf);
  expect_true(_kite_page_check(pg, true, -1));
  uint32_t remote = 0;
  collect(pg, &remote); /* R4: b taken once */
  expect_uint_eq(remote, 1);
  expect_int_eq(on_free_list(pg, index_of(pg, b)), 1);
  expect_true(_kite_page_check(pg, true, -1));
  kite_free(keep);
}

int main(void) {
  remote_test_init();
  RUN_CHECKED(push_then_take);
  RUN_CHECKED(claim_refuses_not_live);
  RUN_CHECKED(take_reports_owner_store);
  RUN_CHECKED(claim_is_one_rmw);
  RUN_CHECKED(relink_is_a_cas);
  RUN_CHECKED(first_relink_is_a_cas);
  RUN_CHECKED(relink_refuses_live);
  RUN_CHECKED(push_retries_moved_head);
  RUN_CHECKED(retry_relink_is_a_cas);
  RUN_CHECKED(take_walks_its_count);
  RUN_CHECKED(take_reports_short_list);
  RUN_CHECKED(take_reports_block_met_twice);
  RUN_CHECKED(take_counts_at_every_step);
  RUN_CHECKED(sole_claim_checks_live);
  return test_main_end();
}
