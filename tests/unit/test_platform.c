/* tests/unit/test_platform.c -- the platform's geometry (os.h, types.h), on the page-check
 * build (kite-pagecheck: KITE_OS_PAGE_CHECK, KITE_OS_PAGE_MAX = 64 KiB).
 *   page_in_force   KITE_TEST_OS_PAGE=16384/65536 is the page kite uses: valloc, guards and
 *                   every range it maps are aligned to it, and ranges were checked
 *   check_fires     a misaligned mprotect or madvise aborts with a message naming it
 *   refuse_big_page a page above KITE_OS_PAGE_MAX: start-up refuses, with a message
 *   huge_page_size  a huge page larger than an arena is never advised (nor collapsed)
 *   noreplace_hint  a kernel that takes MAP_FIXED_NOREPLACE for a hint (before 4.17;
 *                   qemu-user 7.2 over a range in use) maps elsewhere, off the forced page:
 *                   kite undoes that mapping without tripping the check, leaves the range's
 *                   owner alone, and an arena whose growth such a range blocks leaves the
 *                   runs to another arena
 *   resident_whole  the dense huge-page mode's residency check (_kite_os_resident_whole) gives
 *                   the answer of a count of the whole granule's resident pages, at 4, 16 and
 *                   64 KiB pages, and over a granule with its first page missing it asks
 *                   mincore about the first 64 KiB (or OS page) only: it stops there
 *   high_addresses  an address above KITE_ADDR_BITS is never kite's: kite_owns says no, free
 *                   reports it as invalid without touching it; a real mapping there (the
 *                   kernel gives one only with 5-level paging) is treated the same
 * Each case runs in a fresh process (this program run again with the case's name: kite reads
 * the geometry once, at start-up) with the environment it names.
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include "os.h"
#include "types.h"
#include "pagemap.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { const char *name; void (*fn)(void); } child_t;
static const child_t *children_;

/* Run fn in a new process of this program with `env` set (NAME=VALUE or NULL); its stderr
 * into buf. Returns the wait status. */
static int run_child(void (*fn)(void), const char *env, char *buf, size_t cap) {
  const char *name = NULL;
  for (const child_t *c = children_; c->name; c++)
    if (c->fn == fn) name = c->name;
  int fds[2];
  if (pipe(fds) != 0) { perror("pipe"); exit(2); }
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); exit(2); }
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    if (env) putenv((char *)env);
    test_execl_self("test_platform", (char *)name, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(fds[0], buf + len, cap - 1 - len)) > 0) len += (size_t)r;
  buf[len] = 0;
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  return st;
}

static void page_in_force_child(void) {
  size_t want = (size_t)strtoul(getenv("KITE_TEST_OS_PAGE"), NULL, 0);
  void *p = kite_malloc(100), *big = kite_malloc(3 << 20), *huge = kite_malloc(40 << 20);
  void *v = kite_valloc(10);
  if (!p || !big || !huge || !v) _exit(10);
  if (_kite_os_page_size != want) _exit(11);
  if ((uintptr_t)v % want) _exit(12);
  if (kite_malloc_usable_size(huge) % want) _exit(13);
  if (!kite_check()) _exit(14);
  kite_free(p); kite_free(big); kite_free(huge); kite_free(v);
  kite_malloc_trim(0);
  if (_kite_os_checked_ranges < 4) _exit(15); /* arenas, guards, purges were all looked at */
  _exit(0);
}
TEST(page_in_force) {
  char buf[512];
  int st = run_child(page_in_force_child, "KITE_TEST_OS_PAGE=16384", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) printf("  16 KiB: status %d, stderr: %s\n", st, buf);
  st = run_child(page_in_force_child, "KITE_TEST_OS_PAGE=65536", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) printf("  64 KiB: status %d, stderr: %s\n", st, buf);
}

static void misaligned_protect_child(void) {
  uint8_t *p = kite_malloc(1 << 20); /* a large run: 64 KiB aligned, ours to protect */
  if (!p) _exit(10);
  _kite_os_protect(p + 4096, 4096, false);
  _exit(0); /* not reached: the check aborts */
}
static void misaligned_advise_child(void) {
  uint8_t *p = kite_malloc(1 << 20);
  if (!p) _exit(10);
  _kite_os_decommit(p, 16384 + 4096);
  _exit(0);
}
TEST(check_fires) {
  char buf[512];
  int st = run_child(misaligned_protect_child, "KITE_TEST_OS_PAGE=65536", buf, sizeof buf);
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  expect_true(strstr(buf, "kite: misaligned mprotect(0x") != NULL);
  expect_true(strstr(buf, ", 0x1000) for the OS page 0x10000") != NULL);
  st = run_child(misaligned_advise_child, "KITE_TEST_OS_PAGE=16384", buf, sizeof buf);
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  expect_true(strstr(buf, "kite: misaligned madvise(0x") != NULL);
  /* the same calls aligned to the page in force pass */
  st = run_child(misaligned_protect_child, "KITE_TEST_OS_PAGE=4096", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void big_page_child(void) {
  void *p = kite_malloc(10);
  _exit(p ? 0 : 10);
}
TEST(refuse_big_page) {
  char buf[512];
  int st = run_child(big_page_child, "KITE_TEST_OS_PAGE=131072", buf, sizeof buf);
  expect_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  expect_true(strstr(buf, "kite: the OS page size is 128.0 KiB; this build of kite supports pages up to 64.0 KiB") != NULL);
  if (!strstr(buf, "128.0 KiB")) printf("  stderr: %s\n", buf);
}

static void huge_page_child(void) {
  size_t h = _kite_os_huge_page_size();
  const char *forced = getenv("KITE_TEST_HUGE_PAGE");
  size_t f = forced ? (size_t)strtoull(forced, NULL, 0) : 0;
  if (f > KITE_ARENA_SIZE && h != 0) _exit(11);
  if (f == ((size_t)2 << 20) && h != f) _exit(12);
  if (h == 0) {
    void *p = kite_malloc(KITE_ARENA_SIZE / 4);
    if (!p) _exit(10);
    /* no huge page: collapse refuses without asking the kernel */
    if (_kite_os_collapse_huge((void *)((uintptr_t)p & ~(uintptr_t)((2 << 20) - 1)), 2 << 20)) _exit(13);
  }
  _exit(0);
}
TEST(huge_page_size) {
  char buf[256];
  int st = run_child(huge_page_child, "KITE_TEST_HUGE_PAGE=536870912", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) printf("  512 MiB: status %d %s\n", st, buf);
  st = run_child(huge_page_child, "KITE_TEST_HUGE_PAGE=2097152", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) printf("  2 MiB: status %d %s\n", st, buf);
}

TEST(high_addresses) {
  kite_stats_t before, after;
  kite_stats_get(&before);
  /* a pointer above the width: never followed, never kite's */
  void *p = (void *)(((uintptr_t)1 << KITE_ADDR_BITS) + KITE_ARENA_SIZE + 4096);
  expect_true(!kite_owns(p));
  expect_uint_eq(_kite_pagemap_kind((uintptr_t)p), KITE_PM_NONE);
  expect_uint_eq(_kite_pagemap_kind(UINTPTR_MAX), KITE_PM_NONE);
  kite_free(p); /* reported as invalid (the pointer is not read) */
  kite_stats_get(&after);
  expect_uint_eq(after.invalid_frees, before.invalid_frees + 1);
  /* a real mapping above the width, where the kernel gives one (a hint above 2^47 on x86-64
   * with 5-level paging, above 2^48 on a 52-bit aarch64 kernel) */
  void *hint = (void *)((uintptr_t)1 << (KITE_ADDR_BITS + 2));
  void *m = mmap(hint, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED && (uintptr_t)m >> KITE_ADDR_BITS) {
    memset(m, 0x5a, 1 << 16);
    expect_true(!kite_owns(m));
    kite_free(m); /* reported, the mapping untouched */
    expect_uint_eq(((uint8_t *)m)[100], 0x5a);
  } else {
    printf("  (the kernel gives no mapping above 2^%d here: only the pointer case ran)\n", KITE_ADDR_BITS);
  }
  if (m != MAP_FAILED) munmap(m, 1 << 16);
}

/* The end of the run of adjacent mappings that holds p (/proc/self/maps), 0 if none. */
static uintptr_t mapped_end(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  uintptr_t lo, hi, end = 0;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
      if (lo <= (uintptr_t)p && (uintptr_t)p < hi) end = hi;
      else if (end && lo == end) end = hi;
    }
  fclose(f);
  return end;
}
static void noreplace_hint_child(void) {
  const size_t page = _kite_os_page_size;
  _kite_test_os_noreplace_hint = true;
  /* a range in use: refused, its content intact; free again: mapped there */
  uint8_t *raw = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) _exit(10);
  uint8_t *x = (uint8_t *)(((uintptr_t)raw + page - 1) & ~(uintptr_t)(page - 1));
  memset(x, 0x6b, page / 2);
  if (_kite_os_map_at(x, page)) _exit(11);
  if (x[page / 2 - 1] != 0x6b) _exit(12);
  munmap(raw, 2 * page);
  if (!_kite_os_map_at(x, page)) _exit(13);
  _kite_os_unmap(x, page);
  /* an arena that cannot grow (its next page taken): the runs come from another arena */
  uint8_t *first = kite_malloc(1 << 20);
  uintptr_t end = first ? mapped_end(first) : 0;
  if (!end) _exit(14);
  uint8_t *block = mmap((void *)end, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (block != (uint8_t *)end) _exit(15);
  memset(block, 0x3c, page);
  enum { RUNS = 80 };
  uint8_t *r[RUNS];
  for (int i = 0; i < RUNS; i++) {
    if (!(r[i] = kite_malloc(1 << 20))) _exit(16);
    memset(r[i], i, 1 << 20);
  }
  for (int i = 0; i < RUNS; i++)
    if (r[i][0] != (uint8_t)i || r[i][(1 << 20) - 1] != (uint8_t)i) _exit(17);
  if (block[0] != 0x3c || block[page - 1] != 0x3c) _exit(18);
  if (!kite_check()) _exit(19);
  for (int i = 0; i < RUNS; i++) kite_free(r[i]);
  kite_free(first);
  _exit(0);
}
TEST(noreplace_hint) {
  char buf[512];
  int st = run_child(noreplace_hint_child, "KITE_TEST_OS_PAGE=65536", buf, sizeof buf);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) printf("  status %d, stderr: %s\n", st, buf);
}

/* The answer against the count it must equal, and the kernel pages mincore was asked about. */
extern uint64_t _kite_test_os_mincore_pages;
static uint64_t whole_asked(uint8_t *g, size_t len, uint32_t max_missing, bool want, int code) {
  uint64_t before = _kite_test_os_mincore_pages;
  if (_kite_os_resident_whole(g, len, max_missing) != want) _exit(code);
  return _kite_test_os_mincore_pages - before;
}
static void resident_whole_child(void) {
  const size_t page = _kite_os_page_size, len = (size_t)2 << 20;
  const size_t kpage = (size_t)sysconf(_SC_PAGESIZE), all = len / kpage;
  const size_t first = (page > 65536 ? page : 65536) / kpage; /* the first look's pages */
  uint8_t *g = _kite_os_map_aligned(len, len, NULL);
  if (!g) _exit(10);
  if (whole_asked(g, len, 0, false, 11) > first) _exit(12); /* nothing resident */
  memset(g, 0x5c, len);
  if (whole_asked(g, len, 0, true, 13) != all) _exit(14); /* all resident: all looked at */
  _kite_os_decommit(g + len - page, page);                   /* the last page missing */
  whole_asked(g, len, 0, false, 15);
  whole_asked(g, len, 1, true, 16);
  memset(g + len - page, 0x5c, page);
  _kite_os_decommit(g, page); /* the first page missing: the first look tells */
  if (whole_asked(g, len, 0, false, 17) > first) _exit(18);
  whole_asked(g, len, 1, true, 19);
  _kite_os_decommit(g + len / 2, page); /* and one in the middle: two missing */
  whole_asked(g, len, 1, false, 20);
  whole_asked(g, len, 2, true, 21);
  if (g[0] != 0 || g[page] != 0x5c || g[len - 1] != 0x5c) _exit(22); /* decommitted: zero */
  _kite_os_unmap(g, len);
  _exit(0);
}
TEST(resident_whole) {
  static const char *const env[] = {"KITE_TEST_OS_PAGE=4096", "KITE_TEST_OS_PAGE=16384",
                                    "KITE_TEST_OS_PAGE=65536"};
  for (int i = 0; i < 3; i++) {
    char buf[512];
    int st = run_child(resident_whole_child, env[i], buf, sizeof buf);
    expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      printf("  %s: status %d, stderr: %s\n", env[i], st, buf);
  }
}

static const child_t children[] = {
  {"page_in_force", page_in_force_child}, {"misaligned_protect", misaligned_protect_child},
  {"misaligned_advise", misaligned_advise_child}, {"big_page", big_page_child},
  {"huge_page", huge_page_child}, {"noreplace_hint", noreplace_hint_child},
  {"resident_whole", resident_whole_child}, {NULL, NULL}};

int main(int argc, char **argv) {
  children_ = children;
  if (argc == 2) {
    for (const child_t *c = children; c->name; c++)
      if (strcmp(c->name, argv[1]) == 0) c->fn();
    return 126;
  }
  RUN(page_in_force);
  RUN(check_fires);
  RUN(refuse_big_page);
  RUN(huge_page_size);
  RUN(resident_whole);
  RUN(high_addresses);
  RUN(noreplace_hint);
  return test_main_end();
}
