/* tests/unit/test_core_links.c -- internals that no public call reaches alone, through
 * the internals build (kite-noover-debug: KITE_DEBUG=3, KITE_TEST_HOOKS):
 *   links.c  the link arrays: cut from a chunk in 64-byte steps, zero filled, between
 *            PROT_NONE guard pages; a freed array goes back to its own bucket only and is
 *            handed out again zero filled; kite_trim's part decommits the whole OS pages of
 *            free arrays and the committed-bytes statistic follows; the fork hooks; the
 *            entries of a page's array in each block state (page.h), and the page validator
 *            finding an overwritten entry.
 *   heap.c   the pacing of the look for other heaps' dead pages (heap_steal_paced): after a
 *            look that finds none, the class's next 1, 3, 7, then 15 refills skip it (15 at
 *            most, however many looks in a row find none); a look that finds one resets it.
 * Each test starts from kite's initial state (no array freed yet, no page made):
 *   test_core_links         every test, each in a child process of its own
 *   test_core_links NAME    test NAME in this process (what CTest runs, one test a name)
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "types.h"
#include "links.h"
#include "page.h"
#include "classify.h"
#include "pagemap.h"
#include "heap.h"
#include "sizeclass.h"
#include "stats.h"
#include "heap.h"
#include "stats.h"

/* ---- helpers ---- */

/* Does a child that runs fn(arg) and then exits 0 exit 0? false when it dies of a signal,
 * exits otherwise (a sanitizer's report of the fault), or runs longer than 10 s. */
static bool child_survives(void (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    fn(arg);
    _exit(0);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return false;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void write_byte(void *p) { *(volatile uint8_t *)p = 1; }

/* The permissions ("rw-p", "---p") of the mapping that holds address a, from
 * /proc/self/maps; *lo, *hi = its bounds. false when no mapping holds it. */
static bool mapping_of(uintptr_t a, char perms[5], uintptr_t *lo, uintptr_t *hi) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long l, h;
    char p[5];
    if (sscanf(line, "%lx-%lx %4s", &l, &h, p) == 3 && a >= l && a < h) {
      memcpy(perms, p, 5);
      *lo = l;
      *hi = h;
      found = true;
    }
  }
  fclose(f);
  return found;
}

static bool all_zero(const uint16_t *a, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (a[i]) return false;
  return true;
}

static uint64_t committed(void) { return __atomic_load_n(&_kite_stats.committed, __ATOMIC_RELAXED); }

/* ---- links.c ---- */

/* Arrays are cut one after another from the current chunk, each rounded up to 64 bytes
 * (its bucket), zero filled; a freed array is the next one of its bucket, zero filled
 * again, and never one of another bucket. */
TEST(links_carve) {
  uint32_t c1, c2, c3, c4, c5;
  uint16_t *a1 = _kite_links_alloc(1, &c1);
  uint16_t *a2 = _kite_links_alloc(32, &c2);
  uint16_t *a3 = _kite_links_alloc(33, &c3);
  uint16_t *a4 = _kite_links_alloc(KITE_PAGE_MAX_BLOCKS + 1, &c4);
  assert_true(a1 && a2 && a3 && a4);
  expect_uint_eq(c1, 32); /* 2 bytes -> 64 */
  expect_uint_eq(c2, 32); /* 64 bytes exactly */
  expect_uint_eq(c3, 64); /* 66 bytes -> 128 */
  expect_uint_eq(c4, (((KITE_PAGE_MAX_BLOCKS + 1) * 2 + 63) / 64 * 64) / 2);
  expect_ptr_eq(a2, a1 + c1);
  expect_ptr_eq(a3, a2 + c2);
  expect_ptr_eq(a4, a3 + c3);
  expect_true(all_zero(a1, c1) && all_zero(a2, c2) && all_zero(a3, c3) && all_zero(a4, c4));
  for (uint32_t i = 0; i < c2; i++) a2[i] = KITE_LINK_LIVE;
  _kite_links_free(a2, c2);
  /* another bucket: a fresh cut, after a4 */
  uint16_t *a5 = _kite_links_alloc(33, &c5);
  expect_ptr_eq(a5, a4 + c4);
  expect_uint_eq(c5, 64);
  /* its own bucket: a2 again, zero filled */
  uint32_t c6;
  uint16_t *a6 = _kite_links_alloc(20, &c6);
  expect_ptr_eq(a6, a2);
  expect_uint_eq(c6, 32);
  expect_true(all_zero(a6, c6));
  _kite_links_free(a1, c1);
  _kite_links_free(a3, c3);
  _kite_links_free(a4, c4);
  _kite_links_free(a5, c5);
  _kite_links_free(a6, c6);
}

/* The first array of a chunk starts the chunk: the page before it and the page after the
 * chunk are PROT_NONE, so a write just before the first array or just past the chunk
 * faults. */
TEST(links_guards) {
  uint32_t cap;
  uint16_t *a = _kite_links_alloc(1, &cap);
  assert_true(a != NULL);
  char perms[5];
  uintptr_t lo, hi, glo, ghi;
  assert_true(mapping_of((uintptr_t)a, perms, &lo, &hi));
  expect_str_eq(perms, "rw-p");
  expect_uint_eq(lo, (uintptr_t)a); /* the chunk's mapping starts at its first array */
  assert_true(mapping_of(lo - 1, perms, &glo, &ghi));
  expect_str_eq(perms, "---p");
  assert_true(mapping_of(hi, perms, &glo, &ghi));
  expect_str_eq(perms, "---p");
  expect_true(child_survives(write_byte, (uint8_t *)a + 1)); /* the array itself is writable */
  expect_true(!child_survives(write_byte, (uint8_t *)a - 1));
  expect_true(!child_survives(write_byte, (uint8_t *)hi));
  _kite_links_free(a, cap);
}

/* A free array of two OS pages or more: trim decommits its whole OS pages past its header
 * (the list link and the decommitted count) and takes them off the committed bytes; a
 * second trim finds nothing more; its reuse is zero filled and counts them again. */
TEST(links_trim) {
  uint32_t cap;
  uint16_t *a = _kite_links_alloc(KITE_PAGE_MAX_BLOCKS + 1, &cap);
  assert_true(a != NULL);
  size_t bytes = (size_t)cap * 2, page = (size_t)sysconf(_SC_PAGESIZE);
  assert_true(bytes >= 2 * page);
  for (uint32_t i = 0; i < cap; i++) a[i] = (uint16_t)(i + 1);
  uintptr_t lo = ((uintptr_t)a + 16 + page - 1) & ~(uintptr_t)(page - 1);
  uintptr_t hi = ((uintptr_t)a + bytes) & ~(uintptr_t)(page - 1);
  assert_true(hi > lo);
  unsigned char vec[4];
  assert_int_eq(mincore((void *)lo, hi - lo, vec), 0);
  expect_true(vec[0] & 1); /* written: resident */
  _kite_links_free(a, cap);
  uint64_t before = committed();
  expect_uint_eq(_kite_links_trim(), hi - lo);
  expect_uint_eq(committed(), before - (hi - lo));
  assert_int_eq(mincore((void *)lo, hi - lo, vec), 0);
  expect_int_eq(vec[0] & 1, 0); /* given back */
  expect_uint_eq(_kite_links_trim(), 0);
  uint32_t cap2;
  uint16_t *b = _kite_links_alloc(KITE_PAGE_MAX_BLOCKS + 1, &cap2);
  expect_ptr_eq(b, a);
  expect_uint_eq(cap2, cap);
  expect_true(all_zero(b, cap2));
  expect_uint_eq(committed(), before);
  _kite_links_free(b, cap2);
}

/* fork() without the atfork handlers (kite's own would take links_lock too): a child that
 * sees only the hooks this test calls. */
static pid_t raw_fork(void) {
  fflush(NULL);
  return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
}

/* The fork hooks: prepare holds the lock (a child forked then, without the child hook,
 * waits for it for ever: its alarm ends it), the child hook releases it (that child
 * allocates), and the parent hook releases it (the parent allocates). */
TEST(links_fork_hooks) {
  uint32_t cap;
  uint16_t *a = _kite_links_alloc(1, &cap);
  assert_true(a != NULL);
  _kite_links_fork_prepare();
  pid_t held = raw_fork();
  if (held == 0) {
    alarm(2);
    uint32_t c;
    _kite_links_alloc(1, &c);
    _exit(0);
  }
  pid_t fresh = raw_fork();
  if (fresh == 0) {
    alarm(10);
    _kite_links_fork_child();
    uint32_t c;
    _exit(_kite_links_alloc(1, &c) ? 0 : 1);
  }
  _kite_links_fork_parent();
  int st = 0;
  assert_true(held > 0 && waitpid(held, &st, 0) == held);
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM);
  assert_true(fresh > 0 && waitpid(fresh, &st, 0) == fresh);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  _kite_links_free(a, cap);
  uint32_t cap2;
  expect_ptr_eq(_kite_links_alloc(1, &cap2), a);
}

static void *free_in_thread(void *p) {
  kite_free(p);
  return NULL;
}

/* The entries of a small page's array in each state (page.h): LIVE for a block handed out,
 * the next index (or END) on the local free list, REMOTE after another thread's free, 0
 * for an uncarved block; and the validator catches each kind of overwritten entry (a
 * free-list link that is not a block of the page, a carved block on no list and not handed
 * out, an uncarved entry set), and passes again once the entry is restored. */
TEST(links_entry_states) {
  void *p[4];
  for (int i = 0; i < 4; i++) {
    p[i] = kite_malloc(16);
    assert_true(p[i] != NULL);
  }
  kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)p[0]));
  uint32_t ix[4];
  for (int i = 0; i < 4; i++) {
    assert_true(_kite_page_head(_kite_unit_of((uintptr_t)p[i])) == pg);
    assert_true(_kite_block_of(pg, (uintptr_t)p[i], &ix[i])); /* classify.h */
    expect_uint_eq(pg->links[ix[i]], KITE_LINK_LIVE);
  }
  expect_true(pg->capacity < pg->reserved); /* a fresh page: only its first part carved */
  expect_uint_eq(pg->links[pg->capacity], 0);
  expect_true(pg->links_cap >= pg->reserved + 1);
  expect_true(_kite_page_check(pg, true, 1));

  kite_free(p[1]); /* the owner's free: on local_free */
  expect_uint_eq(pg->local_free, ix[1]);
  expect_uint_eq(pg->links[ix[1]], KITE_LINK_END);
  kite_free(p[2]);
  expect_uint_eq(pg->local_free, ix[2]);
  expect_uint_eq(pg->links[ix[2]], ix[1]);
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, free_in_thread, p[0]), 0);
  pthread_join(t, NULL);
  expect_true(_kite_link_is_remote(pg->links[ix[0]]));
  expect_int_eq(KITE_TF_COUNT(__atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE)), 1);
  expect_uint_eq(pg->links[ix[3]], KITE_LINK_LIVE);
  expect_true(_kite_page_check(pg, true, 1));

  uint16_t saved = pg->links[ix[1]];
  pg->links[ix[1]] = KITE_LINK_LIVE; /* a local-free link that is not a block */
  expect_true(!_kite_page_check(pg, true, 1));
  pg->links[ix[1]] = saved;
  expect_true(_kite_page_check(pg, true, 1));

  saved = pg->links[ix[3]];
  pg->links[ix[3]] = (uint16_t)ix[1]; /* a handed-out block that seems to be free */
  expect_true(!_kite_page_check(pg, true, 1));
  pg->links[ix[3]] = saved;

  pg->links[pg->capacity] = 1; /* an uncarved block's entry */
  expect_true(!_kite_page_check(pg, true, 1));
  pg->links[pg->capacity] = 0;
  expect_true(_kite_page_check(pg, true, 1));
  kite_free(p[3]);
  expect_true((kite_check)());
}

/* ---- heap.c: the pacing of heap_steal ----
 * Refills of class cls (fresh pages, page_fresh) are made by allocating its blocks until
 * one comes from a new page: this thread frees nothing, so every new page is fresh. The
 * pacing state is read from the heap after each refill: a refill looked for dead pages iff
 * the class's skip count was 0 before it (a vain look sets it to 2^k - 1, a skipped refill
 * lowers it by one). */

/* Allocate blocks of cls until one is on a new page; that page's head. */
static kite_page_t *refill(unsigned cls, kite_page_t *cur) {
  for (;;) {
    void *b = _kite_malloc_class(cls);
    if (!b) return NULL;
    kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)b));
    if (pg != cur) return pg;
  }
}

/* No other heap has a dead page: the looks come at refills 1, 3, 7, 15 (skipping 1, 3, 7
 * refills in between), then every 16th (15 skipped, the most). */
TEST(steal_pacing_backs_off) {
  const unsigned cls = 64; /* 18432-byte blocks, four-unit pages: no page cache */
  assert_true(_kite_class_order_[cls] > 0);
  static const unsigned want[] = {1, 3, 7, 15, 31, 47, 63};
  unsigned looks[16], nlooks = 0;
  kite_page_t *cur = NULL;
  uint8_t skip_before = 0;
  for (unsigned n = 1; n <= 70; n++) {
    cur = refill(cls, cur);
    assert_true(cur != NULL);
    kite_heap_t *h = _kite_heap_tls;
    if (skip_before == 0 && nlooks < 16) looks[nlooks++] = n;
    if (skip_before == 0) {
      /* after a vain look: skip 2^k - 1 refills, k the looks in a row that found none */
      expect_uint_eq(h->steal_skip[cls], (1u << h->steal_miss[cls]) - 1);
    } else {
      expect_uint_eq(h->steal_skip[cls], skip_before - 1u);
    }
    skip_before = h->steal_skip[cls];
  }
  expect_uint_eq(nlooks, sizeof want / sizeof want[0]);
  for (unsigned i = 0; i < nlooks && i < sizeof want / sizeof want[0]; i++) expect_uint_eq(looks[i], want[i]);
  expect_uint_eq(_kite_heap_tls->steal_miss[cls], 4);
}

/* A second thread's heap with a dead page of the class (a full page whose blocks this
 * thread freed): the next look takes it and resets the pacing, so the refill after it
 * looks again (and, finding none, skips only 1 refill). */
enum { FIND_CLS = 65 }; /* 20480-byte blocks, four-unit pages, 12 a page */
static pthread_mutex_t find_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t find_cv = PTHREAD_COND_INITIALIZER;
static int find_phase; /* 1: the owner filled its first page; 2: it may exit */
static void *find_blocks[64];
static unsigned find_n;
static kite_heap_t *find_owner;

static void *find_owner_thread(void *arg) {
  (void)arg;
  kite_page_t *first = NULL;
  void *b[64];
  unsigned n = 0;
  for (; n < 64; n++) {
    b[n] = _kite_malloc_class(FIND_CLS);
    if (!b[n]) break;
    kite_page_t *pg = _kite_page_head(_kite_unit_of((uintptr_t)b[n]));
    if (!first) first = pg;
    if (pg != first) break; /* the first page is full and on the full list */
  }
  pthread_mutex_lock(&find_mu);
  for (unsigned i = 0; i < n; i++) find_blocks[i] = b[i]; /* the first page's blocks */
  find_n = n;
  find_owner = _kite_heap_tls;
  find_phase = 1;
  pthread_cond_broadcast(&find_cv);
  while (find_phase != 2) pthread_cond_wait(&find_cv, &find_mu);
  pthread_mutex_unlock(&find_mu);
  return NULL;
}

TEST(steal_pacing_find_resets) {
  const unsigned cls = FIND_CLS;
  assert_true(_kite_class_order_[cls] > 0);
  kite_page_t *cur = NULL;
  for (unsigned n = 1; n <= 7; n++) cur = refill(cls, cur); /* vain looks at 1, 3, 7 */
  assert_true(cur != NULL);
  kite_heap_t *h = _kite_heap_tls;
  expect_uint_eq(h->steal_miss[cls], 3);
  expect_uint_eq(h->steal_skip[cls], 7);

  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, find_owner_thread, NULL), 0);
  pthread_mutex_lock(&find_mu);
  while (find_phase != 1) pthread_cond_wait(&find_cv, &find_mu);
  pthread_mutex_unlock(&find_mu);
  assert_true(find_n > 1);
  expect_uint_eq(find_owner->full_count[cls], 1);
  for (unsigned i = 0; i < find_n; i++) kite_free(find_blocks[i]); /* its first page is dead */

  for (unsigned n = 8; n <= 14; n++) cur = refill(cls, cur); /* skipped */
  expect_uint_eq(h->steal_miss[cls], 3);
  expect_uint_eq(h->steal_skip[cls], 0);
  cur = refill(cls, cur); /* 15: looks, takes the dead page */
  expect_uint_eq(find_owner->full_count[cls], 0);
  expect_uint_eq(h->steal_miss[cls], 0);
  expect_uint_eq(h->steal_skip[cls], 0);
  cur = refill(cls, cur); /* 16: looks again, finds none: skips 1 */
  expect_uint_eq(h->steal_miss[cls], 1);
  expect_uint_eq(h->steal_skip[cls], 1);

  pthread_mutex_lock(&find_mu);
  find_phase = 2;
  pthread_cond_broadcast(&find_cv);
  pthread_mutex_unlock(&find_mu);
  pthread_join(t, NULL);
  expect_true((kite_check)());
}

/* ---- the free fast path's arithmetic (classify.h, pagemap.h, page.h) ---- */

/* _kite_block_index with div_magic as page.c sets it: for every class, at every byte offset
 * of its largest page, "a block start" exactly at the multiples of the block size, with
 * the quotient as the index; and at offsets up to 2^31 - 1 (classify.h's bound), sampled. */
TEST(classify_block_index) {
  unsigned bad = 0;
  for (unsigned c = 0; c < KITE_CLASSES && bad < 10; c++) {
    uint32_t bs = _kite_class_size_[c];
    kite_page_t pg = {.block_size = bs, .div_magic = (uint64_t)(~(uint64_t)0 / bs) + 1};
    uint64_t end = (uint64_t)KITE_UNIT_SIZE << _kite_class_order_[c];
    for (uint64_t off = 0; off < end && bad < 10; off++) {
      uint64_t i = ~(uint64_t)0;
      bool start = _kite_block_index(&pg, off, &i);
      if (start != (off % bs == 0) || (start && i != off / bs)) {
        fprintf(stderr, "class %u (%u B), offset %llu: start %d index %llu\n", c, bs, (unsigned long long)off, start,
                (unsigned long long)i);
        bad++;
      }
    }
    for (uint64_t off = end; off < ((uint64_t)1 << 31) && bad < 10; off = off * 3 / 2 + 1)
      for (uint64_t o = off - off % bs; o < off - off % bs + 3; o++) {
        uint64_t i = 0;
        bool start = _kite_block_index(&pg, o, &i);
        if (start != (o % bs == 0) || (start && i != o / bs)) bad++;
      }
  }
  expect_uint_eq(bad, 0);
}

/* pagemap.h M1: every address below the page map's end has a readable descriptor; a block's
 * is its unit's, anything outside an arena (a static, the stack, a huge block, NULL) gets
 * one of the none table's, which names no heap and stays zero. */
TEST(pagemap_unit_none_table) {
  void *p = kite_malloc(48), *big = kite_malloc(64u << 20);
  assert_true(p != NULL && big != NULL);
  expect_true(_kite_pagemap_unit((uintptr_t)p) == _kite_unit_of((uintptr_t)p));
  static char stat[64];
  char stack[64];
  uintptr_t others[] = {(uintptr_t)stat, (uintptr_t)stack, (uintptr_t)big, 0, ((uintptr_t)1 << KITE_ADDR_BITS) - 1};
  const kite_page_t *none = _kite_pagemap_desc.none;
  for (unsigned k = 0; k < sizeof others / sizeof others[0]; k++) {
    kite_page_t *d = _kite_pagemap_unit(others[k]);
    expect_true(d >= none && d < none + KITE_ARENA_UNITS);
    expect_true(d->heap == NULL && d->kind == 0 && d->links == NULL);
  }
  uint64_t reports = __atomic_load_n(&_kite_stats.invalid_frees, __ATOMIC_RELAXED);
  fprintf(stderr, "(a report of an invalid free expected)\n");
  kite_free(stat + 16); /* reported, the none table untouched */
  expect_uint_eq(__atomic_load_n(&_kite_stats.invalid_frees, __ATOMIC_RELAXED), reports + 1);
  const unsigned char *b = (const unsigned char *)none;
  size_t nonzero = 0;
  for (size_t k = 0; k < sizeof _kite_pagemap_desc.none; k++) nonzero += b[k] != 0;
  expect_uint_eq(nonzero, 0);
  kite_free(big);
  kite_free(p);
  expect_true((kite_check)());
}

/* page.h: a page on its heap's full list reads used 1 with its count at capacity; the
 * fast free of one of its blocks takes it back to the queue with the count capacity - 1. */
TEST(full_page_fast_free) {
  enum { N = 3000 };
  static void *blocks[N];
  kite_page_t *first = NULL;
  unsigned k = 0;
  for (; k < N; k++) {
    blocks[k] = kite_malloc(256);
    assert_true(blocks[k] != NULL);
    kite_page_t *pg = _kite_unit_of((uintptr_t)blocks[0]);
    if (!first) first = pg;
    if (first->in_full) break;
  }
  assert_true(k < N && first->in_full);
  expect_int_eq(first->used, 1);
  expect_int_eq(_kite_page_used(first), (int32_t)first->capacity);
  expect_true((kite_check)());
  kite_free(blocks[1]);
  expect_uint_eq(first->in_full, 0);
  expect_int_eq(first->used, (int32_t)first->capacity - 1);
  expect_true((kite_check)());
  for (unsigned j = 0; j <= k; j++)
    if (j != 1) kite_free(blocks[j]);
  expect_true((kite_check)());
}

/* ---- main ---- */

typedef struct { const char *name; void (*fn)(void); } test_entry_t;
static const test_entry_t tests[] = {
  {"links_carve", test_links_carve},
  {"links_guards", test_links_guards},
  {"links_trim", test_links_trim},
  {"links_fork_hooks", test_links_fork_hooks},
  {"links_entry_states", test_links_entry_states},
  {"steal_pacing_backs_off", test_steal_pacing_backs_off},
  {"steal_pacing_find_resets", test_steal_pacing_find_resets},
  {"classify_block_index", test_classify_block_index},
  {"pagemap_unit_none_table", test_pagemap_unit_none_table},
  {"full_page_fast_free", test_full_page_fast_free},
};
enum { NTESTS = sizeof tests / sizeof tests[0] };

static int run_one(const test_entry_t *t) {
  test_current_failed = 0;
  t->fn();
  fprintf(stderr, "%s %s\n", test_current_failed ? "FAIL" : "ok  ", t->name);
  return test_main_end();
}

int main(int argc, char **argv) {
  if (argc >= 2) {
    for (unsigned i = 0; i < NTESTS; i++)
      if (strcmp(argv[1], tests[i].name) == 0) return run_one(&tests[i]);
    fprintf(stderr, "test_core_links: no test named %s\n", argv[1]);
    return 2;
  }
  int failed = 0;
  for (unsigned i = 0; i < NTESTS; i++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(run_one(&tests[i]));
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL %s (its process)\n", tests[i].name);
      failed++;
    }
  }
  printf("%u tests, %d failed\n", (unsigned)NTESTS, failed);
  return failed ? 1 : 0;
}
