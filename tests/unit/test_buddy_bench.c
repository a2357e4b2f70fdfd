/* tests/unit/test_buddy_bench.c -- the buddy benchmark keeps its stable interface.
 *
 * build/kite-buddy-bench is a benchmark, not a test: nothing here looks at the times. This
 * checks what scripts rely on (DESIGN.md section 5): -h prints the usage and exits 0; a short
 * run prints exactly the four tests, each as `NAME: X ns/op, Y GiB/s`, and exits 0; --list
 * names every lab variant; --variant runs one variant with the `variant/` prefix; a bad
 * argument or an unknown variant exits 2.
 * The benchmark's path comes from the build (KITE_BUDDY_BENCH).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

#ifndef KITE_BUDDY_BENCH
#error "KITE_BUDDY_BENCH must name the benchmark binary"
#endif

/* Run the benchmark with args; its stdout goes to out (up to cap bytes). Returns the exit
 * status, or -1. */
static int run(const char *args, char *out, size_t cap) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", KITE_BUDDY_BENCH, args);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Is line `NAME: X ns/op, Y GiB/s` with that name and positive numbers? */
static int line_ok(const char *line, const char *name) {
  char got[128];
  double ns = -1, gib = -1;
  char tail[8] = "";
  if (sscanf(line, "%127[^:]: %lf ns/op, %lf GiB/%7s", got, &ns, &gib, tail) != 4) return 0;
  return strcmp(got, name) == 0 && ns > 0 && gib > 0 && strcmp(tail, "s") == 0;
}

/* Lines of out that are not comments, in order. */
static int lines(char *out, char **v, int max) {
  int n = 0;
  for (char *s = strtok(out, "\n"); s && n < max; s = strtok(NULL, "\n"))
    if (s[0] != '#' && s[0] != '|' && s[0] != 0) v[n++] = s;
  return n;
}

static char buf[1 << 16];

TEST(help) {
  expect_int_eq(run("-h", buf, sizeof buf), 0);
  expect_true(strstr(buf, "usage: kite-buddy-bench") != NULL);
  expect_true(strstr(buf, "--variant") != NULL);
}

TEST(default_run) {
  assert_int_eq(run("--reps 1 --ops 2000", buf, sizeof buf), 0);
  char *v[16];
  int n = lines(buf, v, 16);
  assert_int_eq(n, 4);
  expect_true(line_ok(v[0], "seq-alloc-1GiB"));
  expect_true(line_ok(v[1], "seq-free-1GiB"));
  expect_true(line_ok(v[2], "churn-1GiB"));
  expect_true(line_ok(v[3], "churn-16GiB"));
}

TEST(variants) {
  assert_int_eq(run("--list", buf, sizeof buf), 0);
  expect_str_eq(buf, "lists-vector\nlists-dlist\nrbtree-vector\nrbtree-list\nbitmap-bytes\nbitmap-tree\n");
  assert_int_eq(run("--variant rbtree-list --reps 1 --ops 2000", buf, sizeof buf), 0);
  char *v[16];
  int n = lines(buf, v, 16);
  assert_int_eq(n, 4);
  expect_true(line_ok(v[0], "rbtree-list/seq-alloc-1GiB"));
  expect_true(line_ok(v[1], "rbtree-list/seq-free-1GiB"));
  expect_true(line_ok(v[2], "rbtree-list/churn-1GiB"));
  expect_true(line_ok(v[3], "rbtree-list/churn-16GiB"));
}

TEST(bad_arguments) {
  expect_int_eq(run("--no-such-flag", buf, sizeof buf), 2);
  expect_int_eq(run("--variant no-such-variant", buf, sizeof buf), 2);
}

int main(void) {
  test_rng_init(1);
  RUN(help);
  RUN(default_run);
  RUN(variants);
  RUN(bad_arguments);
  return test_main_end();
}
