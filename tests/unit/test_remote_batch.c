/* tests/unit/test_remote_batch.c -- a thread's batch of frees into another thread's page
 * (src/remote.c B1-B5), through the internals build (kite-noover-debug: validators on).
 *
 * A worker thread frees, says so, and waits to be let go: between the two the test sees
 * what its batch holds back and what it has pushed; its exit flushes the rest. Each test
 * uses a size class of its own. Every wait is bounded (a watchdog names the test).
 *   batch_chains_until_exit   B1, B2, B5: the first free into a page is pushed at once; the
 *                             next ones are claimed and chained (the first of them to
 *                             thread_free's head, each later one to the one before), not
 *                             pushed; a second free of one is reported; the thread's exit
 *                             pushes them in one step (head the last)
 *   batch_flush_relinks_tail  B1, R2: the head moved since the first claim: the flush
 *                             re-links its tail to the new head
 *   batch_full_is_pushed      B3: the KITE_REMOTE_BATCH-th block pushes the batch
 *   batch_one_page_at_a_time  B2, B3: a free into another page of the slot pushes the
 *                             slot's batch first
 *   batch_per_class_slot      B3: frees of two classes of other slots, alternating, stay in
 *                             their own batches
 *   first_class_heap_at_once  B4: a first-class heap's block is pushed at once
 *   malloc_slow_path_flushes  B2: the thread's malloc slow path pushes the batch of the
 *                             class's slot
 *   trim_flushes              B2: kite_malloc_trim pushes the calling thread's batch
 *   fork_flushes              B2: fork pushes the forking thread's batch (the child and
 *                             the parent both see it on thread_free)
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "types.h"
#include "page.h"
#include "remote.h"
#include "heap.h"

extern void (*_kite_report_invalid_hook)(const char *what, const void *p); /* message.h */

enum { TEST_S = 60 };
static int reports;
static const void *report_ptr;
static void count_report(const char *what, const void *p) {
  (void)what;
  __atomic_store_n(&report_ptr, p, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&reports, 1, __ATOMIC_SEQ_CST);
}
static const char *test_now = "";
static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_remote_batch: a test did not end in time: ";
  (void)!write(2, msg, sizeof msg - 1);
  (void)!write(2, test_now, strlen(test_now));
  (void)!write(2, "\n", 1);
  _exit(1);
}

/* ---- a worker: job(arg), then done, then it waits for go and exits ---- */
typedef struct {
  void (*job)(void *);
  void *arg;
  int done, go;
  pthread_t t;
} worker_t;
static void *worker_body(void *a) {
  worker_t *w = a;
  w->job(w->arg);
  __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
  while (!__atomic_load_n(&w->go, __ATOMIC_SEQ_CST)) sched_yield();
  return NULL; /* its exit flushes its batch (B2) */
}
static void worker_start(worker_t *w, void (*job)(void *), void *arg) {
  w->job = job;
  w->arg = arg;
  w->done = w->go = 0;
  if (pthread_create(&w->t, NULL, worker_body, w) != 0) abort();
  while (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST)) sched_yield();
}
static void worker_end(worker_t *w) {
  __atomic_store_n(&w->go, 1, __ATOMIC_SEQ_CST);
  pthread_join(w->t, NULL);
}

static kite_page_t *page_of(const void *p) { return _kite_page_head(_kite_unit_of((uintptr_t)p)); }
static uint32_t index_of(const kite_page_t *pg, const void *p) {
  return (uint32_t)(((const uint8_t *)p - _kite_page_block(pg, 0)) / pg->block_size);
}
static uint64_t tf_of(const kite_page_t *pg) { return __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE); }
static uint16_t entry(const kite_page_t *pg, uint32_t i) { return __atomic_load_n(&pg->links[i], __ATOMIC_RELAXED); }
static int on_free_list(const kite_page_t *pg, uint32_t i) {
  int n = 0, guard = 0;
  for (uint32_t k = pg->free; k != KITE_LINK_END && guard < KITE_PAGE_MAX_BLOCKS; k = pg->links[k], guard++) n += k == i;
  return n;
}

/* the blocks a job frees, in order, then NULL */
static void free_list_job(void *arg) {
  for (void **p = arg; *p; p++) kite_free(*p);
}

TEST(batch_chains_until_exit) {
  __atomic_store_n(&reports, 0, __ATOMIC_SEQ_CST);
  void *b[5];
  for (int k = 0; k < 5; k++) b[k] = kite_malloc(48);
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < 5; k++) assert_ptr_eq(page_of(b[k]), pg);
  uint32_t i0 = index_of(pg, b[0]), i1 = index_of(pg, b[1]), i2 = index_of(pg, b[2]), i3 = index_of(pg, b[3]);
  expect_uint_eq(tf_of(pg), KITE_TF_EMPTY);
  int32_t used = pg->used;
  void *job[] = {b[0], b[1], b[2], b[3], b[1], NULL}; /* the last: a double free */
  worker_t w;
  worker_start(&w, free_list_job, job);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 1); /* b[0] only (B5) */
  expect_uint_eq(KITE_TF_HEAD(tf), i0);
  expect_uint_eq(entry(pg, i0), KITE_LINK_REMOTE | KITE_LINK_END);
  expect_uint_eq(entry(pg, i1), KITE_LINK_REMOTE | i0);
  expect_uint_eq(entry(pg, i2), KITE_LINK_REMOTE | i1);
  expect_uint_eq(entry(pg, i3), KITE_LINK_REMOTE | i2);
  expect_int_eq(__atomic_load_n(&reports, __ATOMIC_SEQ_CST), 1); /* R1: its claim failed */
  expect_ptr_eq(report_ptr, b[1]);
  expect_int_eq(pg->used, used); /* counted (R6) */
  expect_true(_kite_page_check(pg, true, -1));
  worker_end(&w);
  tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 4);
  expect_uint_eq(KITE_TF_HEAD(tf), i3);
  uint32_t remote = 0;
  _kite_page_collect(pg, true, false, &remote);
  expect_uint_eq(remote, 4);
  for (int k = 0; k < 4; k++) expect_int_eq(on_free_list(pg, index_of(pg, b[k])), 1);
  expect_int_eq(__atomic_load_n(&reports, __ATOMIC_SEQ_CST), 1);
  kite_free(b[4]);
}

static void *free_body(void *p) {
  kite_free(p);
  return NULL;
}

TEST(batch_flush_relinks_tail) {
  __atomic_store_n(&reports, 0, __ATOMIC_SEQ_CST);
  void *o = kite_malloc(64), *p = kite_malloc(64), *q = kite_malloc(64), *keep = kite_malloc(64);
  kite_page_t *pg = page_of(p);
  assert_ptr_eq(page_of(q), pg);
  assert_ptr_eq(page_of(o), pg);
  uint32_t io = index_of(pg, o), ip = index_of(pg, p), iq = index_of(pg, q);
  void *job[] = {o, p, NULL};
  worker_t w;
  worker_start(&w, free_list_job, job); /* o pushed; p: the tail, linked to o */
  expect_uint_eq(entry(pg, ip), KITE_LINK_REMOTE | io);
  pthread_t t;
  if (pthread_create(&t, NULL, free_body, q) != 0) abort();
  pthread_join(t, NULL); /* q pushed at that thread's exit: the head moved */
  expect_uint_eq(KITE_TF_HEAD(tf_of(pg)), iq);
  worker_end(&w);
  expect_int_eq(__atomic_load_n(&reports, __ATOMIC_SEQ_CST), 0);
  expect_uint_eq(entry(pg, ip), KITE_LINK_REMOTE | iq);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), 3);
  expect_uint_eq(KITE_TF_HEAD(tf), ip);
  uint32_t remote = 0;
  _kite_page_collect(pg, true, false, &remote);
  expect_uint_eq(remote, 3);
  expect_int_eq(on_free_list(pg, io), 1);
  expect_int_eq(on_free_list(pg, ip), 1);
  expect_int_eq(on_free_list(pg, iq), 1);
  expect_int_eq(__atomic_load_n(&reports, __ATOMIC_SEQ_CST), 0);
  kite_free(keep);
}

TEST(batch_full_is_pushed) {
  enum { N = KITE_REMOTE_BATCH + 2 }; /* one at once, a full batch, one held */
  static void *b[N + 1];
  for (int k = 0; k < N; k++) b[k] = kite_malloc(80);
  b[N] = NULL;
  kite_page_t *pg = page_of(b[0]);
  for (int k = 1; k < N; k++) assert_ptr_eq(page_of(b[k]), pg);
  worker_t w;
  worker_start(&w, free_list_job, b);
  uint64_t tf = tf_of(pg);
  expect_int_eq(KITE_TF_COUNT(tf), KITE_REMOTE_BATCH + 1); /* the last one waits */
  expect_uint_eq(KITE_TF_HEAD(tf), index_of(pg, b[N - 2]));
  /* the next batch's first block links to the head the full one pushed */
  expect_uint_eq(entry(pg, index_of(pg, b[N - 1])), KITE_LINK_REMOTE | index_of(pg, b[N - 2]));
  worker_end(&w);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), N);
  uint32_t remote = 0;
  _kite_page_collect(pg, true, false, &remote);
  expect_uint_eq(remote, N);
}

TEST(batch_one_page_at_a_time) {
  enum { MAX = 2 * KITE_PAGE_MAX_BLOCKS };
  static void *b[MAX];
  size_t n = 0;
  b[n++] = kite_malloc(112);
  kite_page_t *pp = page_of(b[0]);
  while (n < MAX) { /* to the first block of the class's next page */
    b[n] = kite_malloc(112);
    if (page_of(b[n++]) != pp) break;
  }
  assert_true(n >= 3 && n < MAX);
  void *q = b[n - 1];
  kite_page_t *pq = page_of(q);
  void *job[] = {b[0], b[1], q, NULL};
  worker_t w;
  worker_start(&w, free_list_job, job);
  expect_int_eq(KITE_TF_COUNT(tf_of(pp)), 2); /* b[1] pushed when the next free went elsewhere */
  expect_int_eq(KITE_TF_COUNT(tf_of(pq)), 1); /* at once (B5) */
  worker_end(&w);
  expect_int_eq(KITE_TF_COUNT(tf_of(pq)), 1);
  uint32_t remote = 0;
  _kite_page_collect(pp, true, false, &remote);
  expect_uint_eq(remote, 2);
  _kite_page_collect(pq, true, false, &remote);
  expect_uint_eq(remote, 1);
  for (size_t k = 2; k + 1 < n; k++) kite_free(b[k]);
}

TEST(batch_per_class_slot) {
  void *a1 = kite_malloc(208), *a2 = kite_malloc(208), *c1 = kite_malloc(240), *c2 = kite_malloc(240);
  kite_page_t *pa = page_of(a1), *pc = page_of(c1);
  assert_true(KITE_REMOTE_SLOT(pa->cls) != KITE_REMOTE_SLOT(pc->cls));
  void *a3 = kite_malloc(208), *c3 = kite_malloc(240);
  void *job[] = {a1, c1, a2, c2, a3, c3, NULL}; /* alternating: each class keeps its batch */
  worker_t w;
  worker_start(&w, free_list_job, job);
  expect_int_eq(KITE_TF_COUNT(tf_of(pa)), 1);
  expect_int_eq(KITE_TF_COUNT(tf_of(pc)), 1);
  expect_uint_eq(entry(pa, index_of(pa, a3)), KITE_LINK_REMOTE | index_of(pa, a2));
  expect_uint_eq(entry(pc, index_of(pc, c3)), KITE_LINK_REMOTE | index_of(pc, c2));
  worker_end(&w);
  expect_int_eq(KITE_TF_COUNT(tf_of(pa)), 3);
  expect_int_eq(KITE_TF_COUNT(tf_of(pc)), 3);
}

TEST(first_class_heap_at_once) {
  kite_heap_t *h = kite_heap_new();
  assert_true(h != NULL);
  void *x = kite_heap_malloc(h, 48), *y = kite_heap_malloc(h, 48);
  assert_true(x != NULL && y != NULL);
  kite_page_t *pg = page_of(x);
  void *job[] = {x, y, NULL};
  worker_t w;
  worker_start(&w, free_list_job, job);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2); /* pushed at once: the heap may go any time */
  worker_end(&w);
  kite_heap_destroy(h);
}

static void free_then_malloc_job(void *arg) {
  void **p = arg;
  kite_free(p[0]);
  kite_free(p[1]);
  void *own = kite_malloc(144); /* its first of the class: the slow path */
  if (!own) abort();
  kite_free(own);
}
TEST(malloc_slow_path_flushes) {
  void *x[2] = {kite_malloc(144), kite_malloc(144)}, *keep = kite_malloc(144);
  kite_page_t *pg = page_of(x[0]);
  worker_t w;
  worker_start(&w, free_then_malloc_job, x);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2);
  worker_end(&w);
  uint32_t remote = 0;
  _kite_page_collect(pg, true, false, &remote);
  expect_uint_eq(remote, 2);
  kite_free(keep);
}

static void free_then_trim_job(void *arg) {
  void **p = arg;
  kite_free(p[0]);
  kite_free(p[1]);
  kite_malloc_trim(0);
}
TEST(trim_flushes) {
  void *x[2] = {kite_malloc(160), kite_malloc(160)}, *keep = kite_malloc(160);
  kite_page_t *pg = page_of(x[0]);
  worker_t w;
  worker_start(&w, free_then_trim_job, x);
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2);
  worker_end(&w);
  kite_free(keep);
}

static void *owned_block[2];
static void malloc_job(void *arg) {
  (void)arg;
  owned_block[0] = kite_malloc(176);
  owned_block[1] = kite_malloc(176);
}
TEST(fork_flushes) {
  worker_t w;
  worker_start(&w, malloc_job, NULL); /* the page's owner stays alive */
  kite_page_t *pg = page_of(owned_block[0]);
  kite_free(owned_block[0]); /* pushed at once */
  kite_free(owned_block[1]); /* this thread's batch holds it */
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 1);
  pid_t pid = fork();
  if (pid == 0) _exit(KITE_TF_COUNT(tf_of(pg)) == 2 ? 0 : 1);
  assert_true(pid > 0);
  int st = 0;
  expect_int_eq(waitpid(pid, &st, 0), pid);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* the child saw it pushed */
  expect_int_eq(KITE_TF_COUNT(tf_of(pg)), 2);
  worker_end(&w);
}

#define RUN_CHECKED(name)             \
  do {                                \
    test_now = #name;                 \
    alarm(TEST_S);                    \
    RUN(name);                        \
    alarm(0);                         \
    expect_int_eq((kite_check)(), 1); \
  } while (0)

int main(void) {
  signal(SIGALRM, watchdog);
  __atomic_store_n(&_kite_report_invalid_hook, count_report, __ATOMIC_RELEASE);
  RUN_CHECKED(batch_chains_until_exit);
  RUN_CHECKED(batch_flush_relinks_tail);
  RUN_CHECKED(batch_full_is_pushed);
  RUN_CHECKED(batch_one_page_at_a_time);
  RUN_CHECKED(batch_per_class_slot);
  RUN_CHECKED(first_class_heap_at_once);
  RUN_CHECKED(malloc_slow_path_flushes);
  RUN_CHECKED(trim_flushes);
  RUN_CHECKED(fork_flushes);
  return test_main_end();
}
