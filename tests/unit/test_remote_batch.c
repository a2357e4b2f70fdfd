/* tests/unit/test_remote_batch.c -- a thread's batch of remote frees into one page
 * (src/remote.c R8), through the internals build (kite-noover-debug: KITE_TEST_HOOKS,
 * validators on).
 *
 * A worker thread with a heap of its own (it allocates first) frees blocks the main thread
 * owns; the main thread looks at the page between the worker's steps. A thread's first
 * free into a page is pushed alone; the second in a row into that page begins a batch.
 * Each test uses a size class of its own.
 *   batch_chains_until_page_change  the first free is pushed; the next ones' claims chain
 *                             the blocks (the first of them to thread_free's head as read
 *                             then), and nothing more reaches thread_free until a free into
 *                             another page pushes them all with their count; the owner's
 *                             take gets exactly them, and the live blocks keep their
 *                             bytes; the worker's exit pushes the other page's batch
 *   batch_relinks_moved_head  thread_free's head moved while the batch was kept: the
 *                             flush links the batch's tail to the new head
 *   batch_flushes_at_its_bound  the free that fills a batch (KITE_REMOTE_BATCH_MAX) pushes it
 *   batch_flushes_on_slow_paths  malloc_trim, a large block's free, a refill of malloc's
 *                             generic path, free's local slow end
 *   batch_double_free_reported  a batched block freed again (by the batch's thread, by a
 *                             thread without a heap, by the owner) is reported each time
 *                             and changes nothing; the take gets each block once
 *   batch_owner_store_fails_relink  the owner's store (R3) on the batch's tail, with the
 *                             head moved: the flush's re-link fails and reports; the
 *                             block is free once (the owner's), the others stay claimed
 *   batch_settles_abandoned_page  a batch into a page whose owner exited: not settled
 *                             while the batch holds blocks; the flush that reaches its
 *                             target settles it
 *   batch_survives_adoption   the page is adopted while a batch holds its blocks: the
 *                             flush lands on the adopter's page, which takes them
 *   batch_and_fork            the forking thread's batch is pushed before the fork (parent
 *                             and child both see it); another thread's batch is dropped in
 *                             the child (its blocks stay claimed there, the heap is sound)
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include "types.h"
#include "page.h"
#include "remote.h"
#include "heap.h"

extern void (*_kite_report_invalid_hook)(const char *what, const void *p); /* message.h */
void _kite_test_owner_free_store(void *p);                                 /* free.c */

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

/* ---- the worker: one thread with a heap, running the main thread's jobs in turn ---- */
typedef void (*job_fn)(void *arg);
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static job_fn job;
static void *job_arg;
static int job_posted, job_done;
static pthread_t worker;
static kite_heap_t *worker_heap;
static void *worker_main(void *arg) {
  (void)arg;
  kite_free(kite_malloc(8)); /* a heap of its own: its remote frees are batched */
  worker_heap = _kite_heap_tls;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (job_posted == job_done) pthread_cond_wait(&cv, &mu);
    job_fn fn = job;
    pthread_mutex_unlock(&mu);
    if (fn) fn(job_arg);
    pthread_mutex_lock(&mu);
    job_done++;
    pthread_cond_broadcast(&cv);
    if (!fn) break;
  }
  pthread_mutex_unlock(&mu);
  return NULL; /* its exit pushes its batch (heap_retire) */
}
/* Run fn(arg) on the worker and wait for it; fn NULL ends the worker. */
static void on_worker(job_fn fn, void *arg) {
  pthread_mutex_lock(&mu);
  job = fn;
  job_arg = arg;
  job_posted++;
  pthread_cond_broadcast(&cv);
  while (job_done != job_posted) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}
static void nop_job(void *arg) { (void)arg; }
static void worker_start(void) {
  if (pthread_create(&worker, NULL, worker_main, NULL)) abort();
  on_worker(nop_job, NULL); /* its heap made */
}
static void worker_end(void) { pthread_join(worker, NULL); }

static void free_job(void *p) { kite_free(p); }
static void trim_job(void *arg) {
  (void)arg;
  kite_malloc_trim(0);
}

static void *free_body(void *p) {
  kite_free(p);
  return NULL;
}
static void free_on_heapless_thread(void *p) {
  pthread_t t;
  if (pthread_create(&t, NULL, free_body, p)) abort();
  pthread_join(t, NULL);
}

static kite_page_t *page_of(const void *p) { return _kite_page_head(_kite_unit_of((uintptr_t)p)); }
static uint32_t index_of(const kite_page_t *pg, const void *p) {
  return (uint32_t)(((const uint8_t *)p - _kite_page_block(pg, 0)) / pg->block_size);
}
static uint64_t tf_of(const kite_page_t *pg) { return __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE); }
static uint16_t entry(const kite_page_t *pg, uint32_t i) { return __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED); }
static uint16_t remote_link(uint32_t next) { return (uint16_t)(KITE_LINK_REMOTE | next); }
static int on_free_list(const kite_page_t *pg, uint32_t i) {
  int n = 0, guard = 0;
  for (uint32_t k = pg->free; k != KITE_LINK_END && guard < KITE_PAGE_MAX_BLOCKS; k = pg->links[k], guard++) n += k == i;
  return n;
}
static uint32_t take(kite_page_t *pg) {
  uint32_t remote = 0;
  _kite_page_collect(pg, true, false, &remote);
  return remote;
}
static bool bytes_are(const void *p, int c, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (((const unsigned char *)p)[k] != (unsigned char)c) return false;
  return true;
}

TEST(batch_chains_until_page_change) {
  enum { N = 8, K = 5, SZ = 48, QSZ = 96 };
  reports_reset();
  void *b[N];
  for (int k = 0; k < N; k++) {
    b[k] = kite_malloc(SZ);
    memset(b[k], 'a' + k, SZ);
  }
  void *q = kite_malloc(QSZ), *q2 = kite_malloc(QSZ), *qkeep = kite_malloc(QSZ);
  kite_page_t *pg = page_of(b[0]), *qg = page_of(q);
  for (int k = 1; k < N; k++) assert_true(page_of(b[k]) == pg);
  assert_true(qg != pg && page_of(q2) == qg && page_of(qkeep) == qg);
  int32_t used = pg->used;
  worker_start();
  on_worker(free_job, b[0]); /* pushed alone */
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
  for (int k = 1; k < K; k++) on_worker(free_job, b[k]);
  /* R8: claimed and chained, not on thread_free; counted in used */
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 1);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, b[0]));
  expect_int_eq(pg->used, used);
  for (int k = 1; k < K; k++) expect_uint_eq(entry(pg, index_of(pg, b[k])), remote_link(index_of(pg, b[k - 1])));
  expect_ptr_eq(worker_heap->rbatch.page, pg);
  expect_true(_kite_page_check(pg, true, -1));
  on_worker(free_job, q); /* another page: the batch goes whole; q is pushed alone */
  tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), K);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, b[K - 1]));
  expect_int_eq(KITE_TF_COUNT(tf_of(qg)), 1);
  on_worker(free_job, q2); /* batched */
  expect_int_eq(KITE_TF_COUNT(tf_of(qg)), 1);
  on_worker(NULL, NULL);
  worker_end(); /* the exit pushes q2's batch */
  expect_int_eq(KITE_TF_COUNT(tf_of(qg)), 2);
  expect_uint_eq(take(pg), K); /* R4: exactly those */
  expect_int_eq(pg->used, used - K);
  expect_uint_eq(tf_of(pg), KITE_TF_EMPTY);
  for (int k = 0; k < K; k++) expect_int_eq(on_free_list(pg, index_of(pg, b[k])), 1);
  for (int k = K; k < N; k++) expect_true(bytes_are(b[k], 'a' + k, SZ)); /* the live blocks' bytes */
  expect_true(_kite_page_check(pg, true, -1));
  expect_uint_eq(take(qg), 2);
  expect_int_eq(reports_now(), 0);
  for (int k = K; k < N; k++) kite_free(b[k]);
  kite_free(qkeep);
}

TEST(batch_relinks_moved_head) {
  enum { SZ = 64 };
  reports_reset();
  void *a = kite_malloc(SZ), *b = kite_malloc(SZ), *c = kite_malloc(SZ), *d = kite_malloc(SZ), *keep = kite_malloc(SZ);
  kite_page_t *pg = page_of(a);
  assert_true(page_of(b) == pg && page_of(c) == pg && page_of(d) == pg);
  worker_start();
  on_worker(free_job, a); /* pushed alone */
  on_worker(free_job, b); /* the batch begins: b links to a, the head then */
  free_on_heapless_thread(c); /* pushed: the head moves */
  on_worker(free_job, d);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2);
  on_worker(trim_job, NULL);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 4);
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, d));
  expect_uint_eq(entry(pg, index_of(pg, b)), remote_link(index_of(pg, c))); /* R2: the tail re-linked */
  on_worker(NULL, NULL);
  worker_end();
  expect_uint_eq(take(pg), 4);
  expect_int_eq(on_free_list(pg, index_of(pg, a)), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, b)), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, c)), 1);
  expect_int_eq(on_free_list(pg, index_of(pg, d)), 1);
  expect_int_eq(reports_now(), 0);
  kite_free(keep);
}

TEST(batch_flushes_at_its_bound) {
  enum { SZ = 32, N = KITE_REMOTE_BATCH_MAX + 3 };
  static void *b[N];
  reports_reset();
  for (int k = 0; k < N; k++) b[k] = kite_malloc(SZ);
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < N; k++) assert_true(page_of(b[k]) == pg);
  worker_start();
  on_worker(free_job, b[0]); /* pushed alone */
  for (int k = 1; k < KITE_REMOTE_BATCH_MAX; k++) on_worker(free_job, b[k]);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
  on_worker(free_job, b[KITE_REMOTE_BATCH_MAX]); /* fills it */
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), KITE_REMOTE_BATCH_MAX + 1);
  expect_ptr_eq(worker_heap->rbatch.page, NULL);
  on_worker(free_job, b[KITE_REMOTE_BATCH_MAX + 1]); /* a new batch (the same page as the last) */
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), KITE_REMOTE_BATCH_MAX + 1);
  on_worker(NULL, NULL);
  worker_end();
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), KITE_REMOTE_BATCH_MAX + 2);
  expect_uint_eq(take(pg), KITE_REMOTE_BATCH_MAX + 2);
  for (int k = 0; k < KITE_REMOTE_BATCH_MAX + 2; k++) expect_int_eq(on_free_list(pg, index_of(pg, b[k])), 1);
  expect_int_eq(reports_now(), 0);
  kite_free(b[N - 1]);
}

/* slow paths of the worker, each with a batch of two blocks pending */
static void large_free_job(void *arg) {
  (void)arg;
  kite_free(kite_malloc(300000));
}
enum { LOCAL_SZ = 1500, LOCAL_MAX = 512 };
static void *local_blocks[LOCAL_MAX];
static int local_n;
/* arg set: fill a page of the worker's own until malloc moves it to the full list (a block
 * lands on another page); arg NULL: free the full page's first block (free's local slow
 * end: a page on the full list), then the rest */
static void local_slow_job(void *arg) {
  if (arg) {
    local_n = 0;
    do local_blocks[local_n] = kite_malloc(LOCAL_SZ);
    while (page_of(local_blocks[local_n++]) == page_of(local_blocks[0]) && local_n < LOCAL_MAX);
  } else {
    for (int k = 0; k < local_n; k++) kite_free(local_blocks[k]);
  }
}
static void refill_job(void *arg) { kite_free(kite_malloc((size_t)(uintptr_t)arg)); }
static void forget_last_job(void *arg) { /* the next free into any page is pushed alone */
  (void)arg;
  _kite_heap_tls->rbatch.last = NULL;
}
TEST(batch_flushes_on_slow_paths) {
  enum { SZ = 160, CASES = 4 };
  reports_reset();
  worker_start();
  for (int c = 0; c < CASES; c++) {
    void *a = kite_malloc(SZ), *b = kite_malloc(SZ), *d = kite_malloc(SZ), *keep = kite_malloc(SZ);
    kite_page_t *pg = page_of(a);
    assert_true(page_of(b) == pg && page_of(d) == pg);
    if (c == 3) on_worker(local_slow_job, (void *)1);
    on_worker(forget_last_job, NULL);
    on_worker(free_job, a); /* pushed alone */
    on_worker(free_job, b); /* batched */
    on_worker(free_job, d);
    expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
    switch (c) {
    case 0: on_worker(trim_job, NULL); break;
    case 1: on_worker(large_free_job, NULL); break;
    case 2: on_worker(refill_job, (void *)(uintptr_t)4000); break; /* a class it never used */
    case 3: on_worker(local_slow_job, NULL); break;
    }
    expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 3);
    expect_uint_eq(take(pg), 3);
    kite_free(keep);
  }
  on_worker(NULL, NULL);
  worker_end();
  expect_int_eq(reports_now(), 0);
}

TEST(batch_double_free_reported) {
  enum { SZ = 208 };
  reports_reset();
  void *a = kite_malloc(SZ), *b = kite_malloc(SZ), *c = kite_malloc(SZ), *keep = kite_malloc(SZ);
  kite_page_t *pg = page_of(a);
  assert_true(page_of(b) == pg && page_of(c) == pg);
  uint32_t ia = index_of(pg, a), ib = index_of(pg, b), ic = index_of(pg, c);
  worker_start();
  on_worker(free_job, a); /* pushed alone */
  on_worker(free_job, b); /* b and c batched */
  on_worker(free_job, c);
  uint16_t ea = entry(pg, ia), eb = entry(pg, ib), ec = entry(pg, ic);
  uint64_t tf = tf_of(pg);
  on_worker(free_job, b); /* a batched block, by the batch's thread */
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, b);
  free_on_heapless_thread(c); /* by another thread */
  expect_int_eq(reports_now(), 2);
  expect_ptr_eq(report_ptr, c);
  kite_free(b); /* by the owner */
  expect_int_eq(reports_now(), 3);
  expect_ptr_eq(report_ptr, b);
  on_worker(free_job, a); /* the pushed block, by the batch's thread */
  expect_int_eq(reports_now(), 4);
  expect_ptr_eq(report_ptr, a);
  expect_uint_eq(entry(pg, ia), ea);
  expect_uint_eq(entry(pg, ib), eb);
  expect_uint_eq(entry(pg, ic), ec);
  expect_uint_eq(worker_heap->rbatch.head, ic);
  expect_uint_eq(tf_of(pg), tf);
  on_worker(NULL, NULL);
  worker_end();
  expect_uint_eq(take(pg), 3);
  expect_int_eq(on_free_list(pg, ia), 1);
  expect_int_eq(on_free_list(pg, ib), 1);
  expect_int_eq(on_free_list(pg, ic), 1);
  expect_int_eq(reports_now(), 4);
  expect_true(_kite_page_check(pg, true, -1));
  kite_free(keep);
}

TEST(batch_owner_store_fails_relink) {
  enum { SZ = 240 };
  reports_reset();
  void *a = kite_malloc(SZ), *b = kite_malloc(SZ), *c = kite_malloc(SZ), *d = kite_malloc(SZ), *keep = kite_malloc(SZ);
  kite_page_t *pg = page_of(a);
  assert_true(page_of(b) == pg && page_of(c) == pg && page_of(d) == pg);
  uint32_t ib = index_of(pg, b), id = index_of(pg, d);
  int32_t used = pg->used;
  worker_start();
  on_worker(free_job, a); /* pushed alone */
  on_worker(free_job, b); /* the batch's tail */
  on_worker(free_job, d);
  _kite_test_owner_free_store(b); /* the owner read LIVE before the claim (R3) */
  free_on_heapless_thread(c);     /* the head moves: the flush must re-link b */
  on_worker(trim_job, NULL);
  expect_int_eq(reports_now(), 1);
  expect_ptr_eq(report_ptr, b);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 2); /* a and c */
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, c));
  expect_uint_eq(entry(pg, id), remote_link(ib)); /* d stays claimed (R8) */
  on_worker(NULL, NULL);
  worker_end();
  expect_uint_eq(take(pg), 2);
  expect_int_eq(on_free_list(pg, ib), 1); /* free once: the owner's */
  expect_int_eq(on_free_list(pg, id), 0);
  expect_int_eq(pg->used, used - 3); /* a, b and c; d is counted still */
  expect_int_eq(reports_now(), 1);
  expect_true(_kite_page_check(pg, true, -1));
  kite_free(keep);
}

/* An abandoned page of K blocks (its owner exits with all of them handed out). */
enum { ABANDON_K = 4 };
static void *abandoned_blocks[ABANDON_K];
static size_t abandoned_size;
static void *abandon_body(void *arg) {
  (void)arg;
  for (size_t k = 0; k < ABANDON_K; k++) abandoned_blocks[k] = kite_malloc(abandoned_size);
  return NULL;
}
static kite_page_t *make_abandoned(size_t size) {
  abandoned_size = size;
  pthread_t t;
  if (pthread_create(&t, NULL, abandon_body, NULL)) abort();
  pthread_join(t, NULL);
  kite_page_t *pg = page_of(abandoned_blocks[0]);
  for (size_t j = 1; j < ABANDON_K; j++)
    if (page_of(abandoned_blocks[j]) != pg) return NULL;
  return pg;
}

TEST(batch_settles_abandoned_page) {
  enum { SZ = 2304 };
  reports_reset();
  kite_page_t *pg = make_abandoned(SZ);
  assert_true(pg != NULL);
  assert_true(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE) == NULL);
  worker_start();
  for (int k = 0; k < ABANDON_K; k++) on_worker(free_job, abandoned_blocks[k]);
  /* R6, R8: every block free, but the batch's (all but the first) are not pushed: not
   * settled */
  expect_ptr_eq(worker_heap->rbatch.page, pg);
  expect_int_eq(pg->kind, KITE_KIND_SMALL);
  expect_int_eq(pg->used, ABANDON_K);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
  expect_true(!(tf_of(pg) & KITE_TF_EMPTIED));
  on_worker(trim_job, NULL); /* the push reaches the target: settled */
  expect_true(pg->kind != KITE_KIND_SMALL || (pg->used == 0 && KITE_TF_COUNT(tf_of(pg)) == 0));
  on_worker(NULL, NULL);
  worker_end();
  expect_int_eq(reports_now(), 0);
}

TEST(batch_survives_adoption) {
  enum { SZ = 3072 };
  reports_reset();
  kite_page_t *pg = make_abandoned(SZ);
  assert_true(pg != NULL);
  worker_start();
  for (int k = 0; k + 1 < ABANDON_K; k++) on_worker(free_job, abandoned_blocks[k]);
  void *mine = kite_malloc(SZ); /* the main thread, short of that class, adopts pg */
  bool adopted = page_of(mine) == pg;
  if (adopted) expect_ptr_eq(__atomic_load_n(&pg->heap, __ATOMIC_ACQUIRE), _kite_heap_tls);
  on_worker(NULL, NULL);
  worker_end(); /* its batch lands on the adopter's page */
  if (adopted) { /* the first was pushed alone (mine may be it), the others were batched */
    expect_int_eq(KITE_TF_COUNT(tf_of(pg)), ABANDON_K - 2);
    take(pg);
    for (int k = 0; k + 1 < ABANDON_K; k++)
      if (abandoned_blocks[k] != mine) expect_int_eq(on_free_list(pg, index_of(pg, abandoned_blocks[k])), 1);
  }
  kite_free(abandoned_blocks[ABANDON_K - 1]);
  kite_free(mine);
  expect_int_eq(reports_now(), 0);
}

/* fork: the forking thread's batch is pushed first; other threads' are dropped */
static kite_page_t *fork_pg;
static int fork_child_status;
static void fork_job(void *arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) _exit(KITE_TF_COUNT(tf_of(fork_pg)) == 2 && (kite_check)() == 1 ? 0 : 1);
  int st = -1;
  waitpid(pid, &st, 0);
  fork_child_status = st;
}
TEST(batch_and_fork) {
  enum { SZ = 272 };
  reports_reset();
  void *a = kite_malloc(SZ), *b = kite_malloc(SZ), *c = kite_malloc(SZ), *keep = kite_malloc(SZ);
  fork_pg = page_of(a);
  assert_true(page_of(b) == fork_pg && page_of(c) == fork_pg);
  worker_start();
  on_worker(free_job, a); /* pushed alone */
  on_worker(free_job, b); /* batched */
  on_worker(fork_job, NULL); /* the worker forks: its batch is pushed first */
  expect_true(WIFEXITED(fork_child_status) && WEXITSTATUS(fork_child_status) == 0);
  expect_int_eq(KITE_TF_COUNT(tf_of(fork_pg)), 2);
  expect_uint_eq(take(fork_pg), 2);
  on_worker(free_job, c); /* batched (the worker's last page) */
  expect_ptr_eq(worker_heap->rbatch.page, fork_pg);
  int32_t used = fork_pg->used;
  pid_t pid = fork(); /* the main thread forks */
  if (pid == 0) {
    int bad = worker_heap->rbatch.page != NULL;       /* dropped */
    bad |= (KITE_TF_COUNT(tf_of(fork_pg)) != 0) << 1; /* never pushed */
    bad |= (fork_pg->used != used) << 2;              /* c stays claimed */
    bad |= ((kite_check)() != 1) << 3;
    void *p = kite_malloc(SZ);
    bad |= (p == NULL || p == c) << 4;
    _exit(bad);
  }
  int st = -1;
  waitpid(pid, &st, 0);
  expect_true(WIFEXITED(st));
  expect_int_eq(WEXITSTATUS(st), 0);
  on_worker(NULL, NULL);
  worker_end();
  expect_uint_eq(take(fork_pg), 1);
  expect_int_eq(reports_now(), 0);
  kite_free(keep);
}

int main(void) {
  test_rng_init(1);
  __atomic_store_n(&_kite_report_invalid_hook, count_report, __ATOMIC_RELEASE);
  RUN(batch_chains_until_page_change);
  RUN(batch_relinks_moved_head);
  RUN(batch_flushes_at_its_bound);
  RUN(batch_flushes_on_slow_paths);
  RUN(batch_double_free_reported);
  RUN(batch_owner_store_fails_relink);
  RUN(batch_settles_abandoned_page);
  RUN(batch_survives_adoption);
  RUN(batch_and_fork);
  expect_int_eq((kite_check)(), 1);
  return test_main_end();
}
