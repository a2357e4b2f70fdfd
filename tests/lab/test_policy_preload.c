/* tests/lab/test_policy_preload.c -- libkite-lab.so under real programs.
 *
 *   test_policy_preload            for a few policies: this binary's --child checks of the whole
 *                                  malloc family run under LD_PRELOAD, then python3 and sort
 *                                  with output compared to the plain run; unknown policy names
 *   test_policy_preload --child    the malloc-family checks (run under the preload)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#ifndef KITE_LAB_SO
#error "KITE_LAB_SO must name libkite-lab.so"
#endif

/* ---- child: the malloc family, served by the preloaded policy ------------------------------- */
/* Called through volatile pointers so the compiler cannot see the (deliberately) impossible
 * sizes or reason about the block after a failed call. */
static void *(*volatile malloc_v)(size_t) = malloc;
static void *(*volatile calloc_v)(size_t, size_t) = calloc;
static void *(*volatile realloc_v)(void *, size_t) = realloc;
static void *(*volatile reallocarray_v)(void *, size_t, size_t) = reallocarray;
TEST(child_runs_under_lab) {
  /* the preload library brings the registry with it */
  expect_true(dlsym(RTLD_DEFAULT, "lab_policy_find") != NULL);
}

TEST(child_malloc_free_usable) {
  void *z1 = malloc(0), *z2 = malloc(0);
  expect_true(z1 && z2 && z1 != z2);
  free(z1);
  free(z2);
  expect_uint_eq(malloc_usable_size(NULL), 0);
  for (size_t n = 1; n < 70000; n = n * 3 + 1) {
    unsigned char *p = malloc(n);
    assert_true(p != NULL);
    expect_uint_eq((uintptr_t)p % 16, 0);
    size_t u = malloc_usable_size(p);
    expect_true(u >= n);
    test_fill(p, u, n);
    expect_true(test_verify(p, u, n));
    free(p);
  }
  errno = 0;
  expect_true(malloc_v(SIZE_MAX) == NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_true(malloc_v((size_t)128 << 30) == NULL); /* more than the whole lab heap */
  expect_int_eq(errno, ENOMEM);
  errno = 1234;
  free(NULL);
  expect_int_eq(errno, 1234);
}

TEST(child_calloc_realloc) {
  unsigned char *d = malloc(4000);
  assert_true(d != NULL);
  memset(d, 0xFF, 4000);
  free(d);
  unsigned char *c = calloc(1000, 4);
  assert_true(c != NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < 4000; i++) nonzero += c[i] != 0;
  expect_uint_eq(nonzero, 0);
  free(c);
  errno = 0;
  expect_true(calloc_v(SIZE_MAX / 2, 3) == NULL);
  expect_int_eq(errno, ENOMEM);
  char *p = NULL;
  for (size_t n = 1; n <= 131072; n *= 2) {
    p = realloc(p, n);
    assert_true(p != NULL);
    if (n > 1) expect_true(test_verify(p, n / 2, 7));
    test_fill(p, n, 7);
  }
  errno = 0;
  expect_true(realloc_v(p, SIZE_MAX - 100) == NULL);
  expect_int_eq(errno, ENOMEM);
  expect_true(test_verify(p, 131072, 7));
  p = reallocarray_v(p, 1000, 10);
  assert_true(p != NULL);
  expect_true(test_verify(p, 10000, 7));
  errno = 0;
  expect_true(reallocarray_v(p, SIZE_MAX / 2, 4) == NULL);
  expect_int_eq(errno, ENOMEM);
  expect_true(test_verify(p, 10000, 7));
  free(p);
}

TEST(child_aligned_family) {
  for (size_t al = sizeof(void *); al <= ((size_t)1 << 20); al *= 2) {
    void *p = NULL;
    expect_int_eq(posix_memalign(&p, al, 100), 0);
    assert_true(p != NULL);
    expect_uint_eq((uintptr_t)p % al, 0);
    expect_true(malloc_usable_size(p) >= 100);
    test_fill(p, 100, al);
    void *q = realloc(p, 300); /* keeps content (alignment need not survive) */
    assert_true(q != NULL);
    expect_true(test_verify(q, 100, al));
    free(q);
    void *a = aligned_alloc(al, 3 * al);
    assert_true(a != NULL);
    expect_uint_eq((uintptr_t)a % al, 0);
    expect_true(malloc_usable_size(a) >= 3 * al);
    memset(a, 0x5A, 3 * al);
    free(a);
    void *m = memalign(al, 1);
    assert_true(m != NULL);
    expect_uint_eq((uintptr_t)m % al, 0);
    free(m);
  }
  void *p = (void *)1;
  expect_int_eq(posix_memalign(&p, 3, 10), EINVAL);
  expect_int_eq(posix_memalign(&p, 0, 10), EINVAL);
  expect_int_eq(posix_memalign(&p, sizeof(void *) / 2, 10), EINVAL);
  expect_ptr_eq(p, (void *)1);
  expect_int_eq(posix_memalign(&p, 64, SIZE_MAX - 10), ENOMEM);
  /* alignments that are not powers of two, through a volatile: the point is what the
   * allocator does with them at run time (Clang rejects a constant one at compile time) */
  static volatile size_t odd24 = 24, odd48 = 48;
  errno = 0;
  expect_true(aligned_alloc(odd24, 48) == NULL);
  expect_int_eq(errno, EINVAL);
  void *m = memalign(odd48, 10); /* rounded up to 64, like glibc */
  assert_true(m != NULL);
  expect_uint_eq((uintptr_t)m % 64, 0);
  free(m);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *v = valloc(10);
  assert_true(v != NULL);
  expect_uint_eq((uintptr_t)v % page, 0);
  free(v);
  void *pv = pvalloc(10);
  assert_true(pv != NULL);
  expect_uint_eq((uintptr_t)pv % page, 0);
  expect_true(malloc_usable_size(pv) >= page);
  memset(pv, 1, page);
  free(pv);
}

static void *thread_churn(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 2654435761u + 1;
  void *slot[64] = {0};
  size_t len[64] = {0};
  long bad = 0;
  for (int i = 0; i < 20000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int k = (int)(s % 64);
    if (slot[k]) {
      if (!test_verify(slot[k], len[k], (uint64_t)k + (uintptr_t)arg)) bad++;
      free(slot[k]);
      slot[k] = NULL;
    } else {
      len[k] = (size_t)(s >> 20) % 3000;
      slot[k] = malloc(len[k]);
      if (!slot[k]) bad++;
      else test_fill(slot[k], len[k], (uint64_t)k + (uintptr_t)arg);
    }
  }
  for (int k = 0; k < 64; k++) free(slot[k]);
  return (void *)bad;
}

TEST(child_threads_share_the_locked_heap) {
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) assert_int_eq(pthread_create(&t[i], NULL, thread_churn, (void *)i), 0);
  for (int i = 0; i < 4; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    expect_int_eq((long)(intptr_t)bad, 0);
  }
}

TEST(child_fork) {
  char *p = malloc(1000);
  assert_true(p != NULL);
  test_fill(p, 1000, 5);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = test_verify(p, 1000, 5);
    free(p);
    char *q = malloc(5000);
    if (q) memset(q, 1, 5000);
    _exit(ok && q ? 0 : 1);
  }
  int st = 0;
  assert_true(pid > 0);
  waitpid(pid, &st, 0);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  expect_true(test_verify(p, 1000, 5));
  free(p);
}

/* Under a small KITE_LAB_HEAP: fill the heap until malloc fails with ENOMEM, free it all, and
 * the heap serves again (a policy must come back from exhaustion intact). */
TEST(child_exhaustion) {
  if (!getenv("KITE_LAB_HEAP")) return;
  enum { MAXB = 4096 };
  static void *b[MAXB];
  size_t n = 0;
  errno = 0;
  while (n < MAXB && (b[n] = malloc(64 << 10)) != NULL) {
    memset(b[n], (int)n, 64 << 10);
    n++;
  }
  expect_true(n < MAXB);
  expect_true(n > 100); /* most of the 32 MiB */
  expect_int_eq(errno, ENOMEM);
  void *p = NULL;
  expect_int_eq(posix_memalign(&p, 4096, 1 << 20), ENOMEM);
  for (size_t i = 0; i < n; i++) {
    unsigned char *c = b[i];
    if (c[0] != (unsigned char)i || c[(64 << 10) - 1] != (unsigned char)i) TEST_FAIL_("block %zu changed", i);
    free(b[i]);
  }
  void *big = malloc(16 << 20);
  expect_true(big != NULL);
  free(big);
}

/* ---- parent: run programs with and without the preload ------------------------------------- */
static const char *self_path;

/* Run argv with extra environment entries (NULL-terminated, may be NULL); capture stdout and
 * stderr into malloc'd strings. Returns the wait status. */
static int run_capture(char *const argv[], const char *const extra_env[], const char *stdin_file,
                       char **out, char **err) {
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
    if (stdin_file && !freopen(stdin_file, "r", stdin)) _exit(126);
    for (const char *const *e = extra_env; e && *e; e++) putenv((char *)*e);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(po[1]), close(pe[1]);
  size_t cap[2] = {1 << 16, 1 << 12}, len[2] = {0, 0};
  char *buf[2] = {malloc(cap[0]), malloc(cap[1])};
  int fds[2] = {po[0], pe[0]};
  /* read both pipes without deadlocking: stderr is small, drain stdout first then stderr is
   * fine only if stderr stays below the pipe buffer, which our programs guarantee */
  for (int k = 0; k < 2; k++) {
    for (;;) {
      if (len[k] + 4096 + 1 > cap[k]) buf[k] = realloc(buf[k], cap[k] *= 2);
      ssize_t r = read(fds[k], buf[k] + len[k], 4096);
      if (r <= 0) break;
      len[k] += (size_t)r;
    }
    buf[k][len[k]] = 0;
    close(fds[k]);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  *out = buf[0];
  *err = buf[1];
  return st;
}

static const char *const checked_policies[] = {"seglist", "rbtree_clrs", "splay_topdown", "hwx"};

static const char *py_script =
    "import json, collections, re\n"
    "d = {str(i): [i * j for j in range(i % 40)] for i in range(6000)}\n"
    "s = json.dumps(d, sort_keys=True)\n"
    "back = json.loads(s)\n"
    "words = re.findall(r'[0-9]+', s)\n"
    "c = collections.Counter(w[-1] for w in words)\n"
    "l = []\n"
    "for i in range(20000):\n"
    "    l.append('x' * (i % 300))\n"
    "    if i % 3 == 0: l.pop(i // 7 % len(l))\n"
    "print(len(s), back == d, sorted(c.items()), sum(map(len, l)))\n";

TEST(programs_match_plain_runs) {
  /* input for sort: lines from a fixed generator */
  char input[] = "/tmp/kite-lab-sort-XXXXXX";
  int fd = mkstemp(input);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  uint64_t s = 42;
  for (int i = 0; i < 40000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    fprintf(f, "%08llx line %d %.*s\n", (unsigned long long)(s & 0xffffffffu), i,
            (int)(s % 40), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP");
  }
  fclose(f);

  char *const py_argv[] = {"python3", "-c", (char *)py_script, NULL};
  char *const sort_argv[] = {"sort", "-k3,3n", "-k1,1", NULL};
  char *py_plain, *sort_plain, *e;
  int st = run_capture(py_argv, NULL, NULL, &py_plain, &e);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  expect_true(strstr(py_plain, " True [") != NULL);
  free(e);
  st = run_capture(sort_argv, NULL, input, &sort_plain, &e);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  expect_true(strlen(sort_plain) > 40000 * 14);
  free(e);

  static char preload_env[4096], policy_env[256];
  snprintf(preload_env, sizeof preload_env, "LD_PRELOAD=%s", KITE_LAB_SO);
  for (size_t i = 0; i < sizeof checked_policies / sizeof checked_policies[0]; i++) {
    char policy[256];
    snprintf(policy, sizeof policy, "KITE_LAB_POLICY=%s", checked_policies[i]);
    memcpy(policy_env, policy, sizeof policy);
    const char *env[] = {preload_env, policy_env, NULL};
    char *out;
    unsigned long failed_before = test_checks_failed;
    char *const child_argv[] = {(char *)self_path, "--child", NULL};
    st = run_capture(child_argv, env, NULL, &out, &e);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      fprintf(stderr, "child under %s:\n%s%s", checked_policies[i], e, out);
    expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    expect_true(strstr(out, " 0 failed") != NULL);
    free(out), free(e);

    st = run_capture(py_argv, env, NULL, &out, &e);
    expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    expect_str_eq(out, py_plain);
    free(out), free(e);

    st = run_capture(sort_argv, env, input, &out, &e);
    expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    expect_true(strcmp(out, sort_plain) == 0);
    free(out), free(e);
    fprintf(stderr, "     %s: child checks, python3 and sort %s\n", checked_policies[i],
            test_checks_failed == failed_before ? "match" : "FAILED");
  }
  free(py_plain), free(sort_plain);
  unlink(input);
}

TEST(small_heap_exhaustion) {
  static char preload_env[4096];
  snprintf(preload_env, sizeof preload_env, "LD_PRELOAD=%s", KITE_LAB_SO);
  static const char *const pols[] = {"KITE_LAB_POLICY=rbtree_topdown", "KITE_LAB_POLICY=hwx"};
  for (int i = 0; i < 2; i++) {
    const char *env[] = {preload_env, pols[i], "KITE_LAB_HEAP=32M", NULL};
    char *const argv[] = {(char *)self_path, "--child", NULL};
    char *out, *err;
    int st = run_capture(argv, env, NULL, &out, &err);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) fprintf(stderr, "%s\n%s%s", pols[i], err, out);
    expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    expect_true(strstr(err, "ok   child_exhaustion") != NULL);
    free(out), free(err);
  }
}

TEST(unknown_policy_lists_names_and_exits_2) {
  static char preload_env[4096];
  snprintf(preload_env, sizeof preload_env, "LD_PRELOAD=%s", KITE_LAB_SO);
  const char *env[] = {preload_env, "KITE_LAB_POLICY=no_such_policy", NULL};
  char *const argv[] = {"sort", "/dev/null", NULL};
  char *out, *err;
  int st = run_capture(argv, env, NULL, &out, &err);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  expect_true(strstr(err, "no_such_policy") != NULL);
  static const char *const names[] = {"seglist",      "rbtree_clrs",  "rbtree_unified",
                                      "rbtree_linked", "rbtree_stack", "rbtree_topdown",
                                      "splay_stack",  "splay_topdown", "hwx"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) expect_true(strstr(err, names[i]) != NULL);
  free(out), free(err);
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc > 1 && strcmp(argv[1], "--child") == 0) {
    RUN(child_runs_under_lab);
    RUN(child_malloc_free_usable);
    RUN(child_calloc_realloc);
    RUN(child_aligned_family);
    RUN(child_threads_share_the_locked_heap);
    RUN(child_fork);
    RUN(child_exhaustion);
    return test_main_end();
  }
  RUN(programs_match_plain_runs);
  RUN(small_heap_exhaustion);
  RUN(unknown_policy_lists_names_and_exits_2);
  return test_main_end();
}
