/* tests/unit/test_remote_abandon.c -- the remote-free protocol on abandoned pages (src/remote.c R5,
 * heap_abandon.c): frees into them with no lock, the settle of an emptied page, and fork
 * around it, through the internals build (kite-noover-debug: KITE_TEST_HOOKS, validators
 * on). The claim, push and take (R1-R4): test_remote.c; shared helpers: remote_test.h.
 *
 * Each test uses a size class of its own, so its blocks share one page that no other test
 * touches. Threads are parked at the protocol's test hooks (remote.h) to make a race happen
 * in one chosen order; misuse reports are counted through _kite_report_invalid_hook.
 * Every wait is bounded: a test whose thread never reaches its hook, or that does not end
 * (a protocol broken into a cycle), fails with a message naming it instead of hanging.
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
 *   fork_child_settles_emptied_page  R5, heap_abandon.c I-A4: a fork while that free is
 *                             parked between its push and its settle: the child, where
 *                             the settling thread does not exist, settles the page itself
 *   fork_after_settle_unlock_keeps_the_run  heap_abandon.c I-A5: a fork right after a
 *                             settle that gives its page back lets _kite_heap_lock go: the
 *                             run is the arena's in the child
 */
#include "remote_test.h"

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


int main(void) {
  remote_test_init();
  RUN_CHECKED(emptied_page_leaves_queue);
  RUN_CHECKED(late_free_settles_abandoned_page);
  RUN_CHECKED(abandoned_free_takes_no_heap_lock);
  RUN_CHECKED(emptied_page_is_its_settlers);
  RUN_CHECKED(fork_child_settles_emptied_page);
  RUN_CHECKED(fork_after_settle_unlock_keeps_the_run);
  return test_main_end();
}
