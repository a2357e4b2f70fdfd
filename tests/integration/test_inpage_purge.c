/* tests/integration/test_inpage_purge.c -- partly used small pages: the in-page purge (the
 * OS pages, 4 KiB, of a small page that hold only free blocks go back to the OS while the
 * page stays in use) and the drain of sparse pages.
 *
 * Each test fills pages of one size class (a power of two: blocks never straddle an OS
 * page), writes a pattern into every block, frees all but every KEEP-th block and then
 * counts, with mincore, the "free OS pages": those whose every byte lies in a block this
 * test freed (no other block can be there, so kite is free to give them back). Before the
 * purge they are resident (the test wrote them: this is what makes each check able to fail).
 *   trim      kite_malloc_trim(0) gives back every free OS page of the calling thread's
 *             pages: none stays resident; the kept blocks hold their patterns; blocks
 *             allocated again (in the purged OS pages) can be written and read, and
 *             kite_calloc's blocks read zero
 *   policy    no trim: taking fresh pages for another class purges the thread's sparse pages
 *             (at least half free), all but the class's current page: at most one page's
 *             worth (16 OS pages) of free OS pages stays resident
 *   off       the same with KITE_PURGE_DELAY_MS < 0 (only trim gives memory back): every
 *             free OS page stays resident
 *   exit      a thread frees most of its blocks and exits: its sparse pages are purged as
 *             they are abandoned; main checks and frees the kept blocks (remote frees to
 *             abandoned pages), and kite_check passes
 *   drain     a thread's current page, refilled by remote frees to 4 live blocks of 64, gives
 *             way to a denser page of its queue (the next block comes from there); once its
 *             last blocks are freed it is given back whole (the next fresh page of another
 *             class is carved in its unit, from the heap's page cache)
 * Build: kite-noover (KITE_DEBUG < 3: at 3 freed blocks hold a fill pattern and are not
 * purged). Not in the ASan build (it measures residency).
 */
#define _GNU_SOURCE
#include <kite.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test.h"

#define OS_PAGE ((uintptr_t)4096)
#define KEEP 16

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* The free OS pages of the blocks b[i] of size sz (a power of two <= 4 KiB, blocks aligned to
 * sz) with i % KEEP != 0: OS pages covered entirely by such blocks. Writes their addresses
 * to out (room for n); returns how many. */
static size_t free_os_pages(void **b, size_t n, size_t sz, uintptr_t *out) {
  uintptr_t *a = malloc(n * sizeof *a); /* glibc's: this test links kite-noover */
  size_t m = 0, k = 0;
  for (size_t i = 0; i < n; i++) if (i % KEEP) a[m++] = (uintptr_t)b[i];
  qsort(a, m, sizeof *a, cmp_ptr);
  size_t per = OS_PAGE / sz;
  for (size_t i = 0; i < m;) {
    uintptr_t pg = a[i] & ~(OS_PAGE - 1);
    size_t j = i;
    while (j < m && (a[j] & ~(OS_PAGE - 1)) == pg) j++;
    if (j - i == per) out[k++] = pg;
    i = j;
  }
  free(a);
  return k;
}

static size_t resident(const uintptr_t *pages, size_t k) {
  size_t r = 0;
  for (size_t i = 0; i < k; i++) {
    unsigned char v = 0;
    if (mincore((void *)pages[i], OS_PAGE, &v) == 0 && (v & 1)) r++;
  }
  return r;
}

/* Allocate n blocks of sz and write a pattern in each; false if one cannot be had or a
 * block is bigger than sz (the free OS pages would be miscounted). No check macro here: a
 * thread calls it too (test.h's counters are the main thread's). */
static bool fill_blocks(void **b, size_t n, size_t sz, uint64_t tag) {
  for (size_t i = 0; i < n; i++) {
    b[i] = kite_malloc(sz);
    if (!b[i]) return false;
    test_fill(b[i], sz, tag + i);
  }
  return kite_malloc_usable_size(b[0]) == sz;
}
/* Free all but every KEEP-th. */
static void thin(void **b, size_t n) {
  for (size_t i = 0; i < n; i++) if (i % KEEP) kite_free(b[i]);
}
static size_t kept_intact(void **b, size_t n, size_t sz, uint64_t tag) {
  size_t ok = 0;
  for (size_t i = 0; i < n; i += KEEP) ok += test_verify(b[i], sz, tag + i);
  return ok;
}
static void free_kept(void **b, size_t n) {
  for (size_t i = 0; i < n; i += KEEP) kite_free(b[i]);
}

/* ---- trim ---- */
enum { TR_SZ = 1024, TR_N = 16 * 64 }; /* 16 pages of 64 blocks */
static void *tr_b[TR_N], *tr_again[TR_N];
static uintptr_t tr_pages[TR_N];
TEST(trim) {
  assert_true(fill_blocks(tr_b, TR_N, TR_SZ, 0x100));
  size_t k = free_os_pages(tr_b, TR_N, TR_SZ, tr_pages);
  thin(tr_b, TR_N);
  /* 16 OS pages a page, 4 of them with a kept block (every 16th block, 4 blocks an OS
   * page): 12 free ones a page if the blocks were carved in order, fewer otherwise */
  expect_true(k >= 8 * 16);
  size_t before = resident(tr_pages, k);
  expect_uint_eq(before, k);
  expect_int_eq(kite_malloc_trim(0), 1);
  size_t after = resident(tr_pages, k);
  fprintf(stderr, "trim: %zu free OS pages, resident %zu before kite_malloc_trim, %zu after\n", k, before, after);
  expect_uint_eq(after, 0);
  expect_uint_eq(kept_intact(tr_b, TR_N, TR_SZ, 0x100), TR_N / KEEP);
  /* the purged OS pages are handed out again: writable, and calloc's blocks are zero */
  size_t zero = 0, n = TR_N - TR_N / KEEP;
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = i & 1 ? kite_calloc(1, TR_SZ) : kite_malloc(TR_SZ);
    assert_true(p != NULL);
    if (i & 1) {
      size_t j = 0;
      while (j < TR_SZ && p[j] == 0) j++;
      zero += j == TR_SZ;
    }
    test_fill(p, TR_SZ, 0x900 + i);
    tr_again[i] = p;
  }
  expect_uint_eq(zero, n / 2);
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) ok += test_verify(tr_again[i], TR_SZ, 0x900 + i);
  expect_uint_eq(ok, n);
  expect_uint_eq(kept_intact(tr_b, TR_N, TR_SZ, 0x100), TR_N / KEEP);
  for (size_t i = 0; i < n; i++) kite_free(tr_again[i]);
  free_kept(tr_b, TR_N);
  expect_int_eq(kite_check(), 1);
}

/* ---- policy: fresh pages of another class purge the sparse ones ---- */
enum { PO_SZ = 2048, PO_N = 64 * 32, PO_OTHER = 3072, PO_ON = 2048 }; /* 64 pages; 6 MiB of the other class */
static void *po_b[PO_N], *po_other[PO_ON];
static uintptr_t po_pages[PO_N];
static void policy_run(int on, uint64_t tag) {
  assert_true(fill_blocks(po_b, PO_N, PO_SZ, tag));
  size_t k = free_os_pages(po_b, PO_N, PO_SZ, po_pages);
  thin(po_b, PO_N);
  expect_true(k >= 32 * 16);
  size_t before = resident(po_pages, k);
  for (size_t i = 0; i < PO_ON; i++) {
    po_other[i] = kite_malloc(PO_OTHER);
    assert_true(po_other[i] != NULL);
    memset(po_other[i], (int)i, PO_OTHER);
  }
  size_t after = resident(po_pages, k);
  fprintf(stderr, "policy (%s): %zu free OS pages, resident %zu before the other class's 6 MiB, %zu after\n",
          on ? "on" : "off", k, before, after);
  expect_uint_eq(before, k);
  if (on) expect_true(after <= 16); /* the class's current page is not purged */
  else expect_uint_eq(after, k);
  expect_uint_eq(kept_intact(po_b, PO_N, PO_SZ, tag), PO_N / KEEP);
  size_t ok = 0;
  for (size_t i = 0; i < PO_ON; i++) {
    const unsigned char *p = po_other[i];
    ok += p[0] == (unsigned char)i && p[PO_OTHER - 1] == (unsigned char)i;
    kite_free(po_other[i]);
  }
  expect_uint_eq(ok, PO_ON);
  free_kept(po_b, PO_N);
  kite_malloc_trim(0); /* the next run starts from no page of these classes */
  expect_int_eq(kite_check(), 1);
}
TEST(policy) { policy_run(1, 0x2000); }
TEST(off) {
  int64_t d = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, -1);
  policy_run(0, 0x3000);
  kite_option_set(KITE_OPTION_PURGE_DELAY_MS, d);
}

/* ---- thread exit ---- */
enum { EX_SZ = 512, EX_N = 32 * 128 }; /* 32 pages */
static void *ex_b[EX_N];
static uintptr_t ex_pages[EX_N];
static size_t ex_k, ex_before;
static int ex_done; /* the thread's result */
static void *ex_thread(void *arg) {
  if (!fill_blocks(ex_b, EX_N, EX_SZ, 0x5000)) return NULL;
  ex_k = free_os_pages(ex_b, EX_N, EX_SZ, ex_pages);
  thin(ex_b, EX_N);
  ex_before = resident(ex_pages, ex_k);
  return &ex_done; /* the kept blocks stay behind, in abandoned pages */
}
TEST(exit) {
  pthread_t t;
  void *r = NULL;
  assert_int_eq(pthread_create(&t, NULL, ex_thread, NULL), 0);
  pthread_join(t, &r);
  assert_true(r == &ex_done);
  size_t after = resident(ex_pages, ex_k);
  fprintf(stderr, "exit: %zu free OS pages, resident %zu before the thread exited, %zu after\n", ex_k, ex_before, after);
  expect_true(ex_k >= 16 * 16);
  expect_uint_eq(ex_before, ex_k);
  expect_uint_eq(after, 0);
  expect_uint_eq(kept_intact(ex_b, EX_N, EX_SZ, 0x5000), EX_N / KEEP);
  free_kept(ex_b, EX_N);
  expect_int_eq(kite_check(), 1);
}

/* ---- drain ---- */
enum { DR_SZ = 1280, DR_PER = 51, DR_N = 3 * DR_PER }; /* 51 blocks of 1280 in a 64 KiB page */
static void *dr_b[DR_N];
static uintptr_t dr_unit(const void *p) { return (uintptr_t)p >> 16; }
static void *dr_remote(void *arg) { /* frees all but the first 4 blocks of the third page */
  (void)arg;
  for (int i = 2 * DR_PER + 4; i < DR_N; i++) kite_free(dr_b[i]);
  return NULL;
}
static void *dr_owner(void *arg) {
  uintptr_t *res = arg; /* [0] units in order, [1] next block in the dense page, [2] third
                           page's unit reused, [3] blocks intact */
  for (int i = 0; i < DR_N; i++) {
    dr_b[i] = kite_malloc(DR_SZ);
    if (!dr_b[i]) return NULL;
    test_fill(dr_b[i], DR_SZ, 0x7000 + (uint64_t)i);
  }
  uintptr_t u[3] = {dr_unit(dr_b[0]), dr_unit(dr_b[DR_PER]), dr_unit(dr_b[2 * DR_PER])};
  int in_order = u[0] != u[1] && u[1] != u[2] && u[0] != u[2];
  for (int i = 0; i < DR_N; i++) in_order &= dr_unit(dr_b[i]) == u[i / DR_PER];
  res[0] = (uintptr_t)in_order;
  /* the second page gets 8 local frees (it leaves the full list: dense, 43 live) */
  for (int i = DR_PER; i < DR_PER + 8; i++) kite_free(dr_b[i]);
  /* the current (third) page: 47 blocks freed by another thread */
  pthread_t t;
  if (pthread_create(&t, NULL, dr_remote, NULL) != 0) return NULL;
  pthread_join(t, NULL);
  void *p = kite_malloc(DR_SZ); /* the third page has no local free: collect, 4 live */
  res[1] = p && dr_unit(p) == u[1];
  kite_free(p);
  for (int i = 2 * DR_PER; i < 2 * DR_PER + 4; i++) {
    res[3] += test_verify(dr_b[i], DR_SZ, 0x7000 + (uint64_t)i);
    kite_free(dr_b[i]); /* the last one empties it: given back to the heap's cache */
  }
  void *q = kite_malloc(4096); /* a fresh page of another class: the cache's unit */
  res[2] = q && dr_unit(q) == u[2];
  kite_free(q);
  for (int i = 0; i < 2 * DR_PER; i++) {
    if (i >= DR_PER && i < DR_PER + 8) continue;
    res[3] += test_verify(dr_b[i], DR_SZ, 0x7000 + (uint64_t)i);
    kite_free(dr_b[i]);
  }
  return arg;
}
TEST(drain) {
  uintptr_t res[4] = {0};
  pthread_t t;
  void *r = NULL;
  assert_int_eq(pthread_create(&t, NULL, dr_owner, res), 0);
  pthread_join(t, &r);
  assert_true(r == res);
  assert_uint_eq(res[0], 1); /* the blocks were carved page after page (the test's premise) */
  expect_uint_eq(res[1], 1);
  expect_uint_eq(res[2], 1);
  expect_uint_eq(res[3], 4 + 2 * DR_PER - 8);
  expect_int_eq(kite_check(), 1);
}

int main(int argc, char **argv) {
  test_rng_init(0x12ull);
#if KITE_LIB_DEBUG >= 3
  printf("skipped: the library is built with KITE_DEBUG >= 3 (free blocks hold a fill pattern: no in-page purge)\n");
  return 0;
#endif
  const char *only = argc > 1 ? argv[1] : NULL;
  if (!only || !strcmp(only, "trim")) RUN(trim);
  if (!only || !strcmp(only, "policy")) RUN(policy);
  if (!only || !strcmp(only, "off")) RUN(off);
  if (!only || !strcmp(only, "exit")) RUN(exit);
  if (!only || !strcmp(only, "drain")) RUN(drain);
  return test_main_end();
}
