/* tests/bench/test_workloads.c -- every benchmark workload, at tiny size, verifies itself.
 *
 * Runs the kite-wl-* executables from $KITE_BENCH_BIN (the build directory) through
 * /bin/sh and checks: exit 0 and a `checksum: <hex> ok` line for each workload at a tiny
 * size (and at several thread counts where threads matter); the exact collatz answers for
 * TOP = 100, 1000, 10000; the exact first lines and checksums of the workloads that pass
 * blocks between threads (mstress, glibc-thread, rptest), which must not depend on the
 * scheduling; identical checksums for identical seeds and different ones for
 * different seeds; -h and bad options; and that the self-checks really fail (exit 3,
 * `WRONG:`) under libkite-bench-wrong.so, which corrupts live blocks, and that
 * libkite-bench-crash.so really kills a workload with SIGSEGV (the runner tests rely on
 * both). The workloads run under glibc's malloc here; the runner measures the others.
 */
#include "test.h"
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>

static const char *g_bin;
static char g_out[1 << 16];

/* Runs `fmt` (a command line relative to the build dir) and captures stdout+stderr into
 * g_out. Returns the raw wait status. */
static int run(const char *fmt, ...) {
  char cmd[1024], full[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "cd '%s' && exec %s 2>&1", g_bin, cmd);
  FILE *f = popen(full, "r");
  if (!f) return -1;
  size_t n = fread(g_out, 1, sizeof g_out - 1, f);
  g_out[n] = 0;
  return pclose(f);
}

static int exited(int st, int code) { return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == code; }

/* The hex checksum of the last run, or NULL when there is no `checksum: ... ok` line. */
static const char *checksum(char *buf, size_t n) {
  const char *p = strstr(g_out, "checksum: ");
  if (!p) return NULL;
  p += 10;
  size_t k = 0;
  while (k + 1 < n && p[k] && p[k] != ' ' && p[k] != '\n') {
    buf[k] = p[k];
    k++;
  }
  buf[k] = 0;
  return strncmp(p + k, " ok\n", 4) == 0 ? buf : NULL;
}

static void expect_ok(const char *what, int st) {
  char ck[32];
  if (!exited(st, 0) || !checksum(ck, sizeof ck)) {
    fprintf(stderr, "%s: status %d, output:\n%s\n", what, st, g_out);
    expect_true(0);
  } else {
    expect_true(strstr(g_out, "time: ") != NULL);
    expect_true(strstr(g_out, "WRONG") == NULL);
  }
}

/* Each workload at tiny size, as `bench/run.py --size tiny` runs them. */
static const char *const k_tiny[] = {
    "./kite-wl-collatz-ivec -n 2000 -t 4",
    "./kite-wl-collatz-list -n 2000 -t 4",
    "./kite-wl-rnbench -t 4 -n 1000 -i 20000",
    "./kite-wl-larson -t 4 -n 200 -e 4 -i 2000",
    "./kite-wl-xmalloc -t 4 -n 200",
    "./kite-wl-xmalloc -t 1 -n 50",
    "./kite-wl-cache-thrash -t 4 -n 200 -w 100",
    "./kite-wl-cache-scratch -t 4 -n 200 -w 100",
    "./kite-wl-realloc -t 2 -n 50 -l 300 -r 2",
    "./kite-wl-large -t 2 -n 20 -l 4 -m 4194304",
    /* many blocks whose end falls in their last page's stamp now and then */
    "./kite-wl-large -t 1 -n 20000 -l 4 -m 131072",
    "./kite-wl-graph -n 5000 -r 2",
    "./kite-wl-thread-churn -t 4 -n 40 -b 50",
    "./kite-wl-churn -t 2 -n 20000 -k 256",
    "./kite-wl-churn -t 8 -n 5000 -k 256",
    "./kite-wl-churn -t 1 -n 5000 -k 64 -r 100",
    "./kite-wl-xfer -t 2 -n 2000",
    "./kite-wl-xfer -t 8 -n 2000 -q 3",
    "./kite-wl-thread-rounds -t 4 -n 3 -k 100 -i 500",
    "./kite-wl-rnbench -m 1 -t 8 -n 1000 -i 5000",
    "./kite-wl-churn -t 8 -n 5000 -k 256 -m 16000",
    "./kite-wl-large -t 1 -n 4 -l 3 -a 5242880 -m 8388608",
    "./kite-wl-graph -n 5000 -r 2 -w 0",
    "./kite-wl-phases -n 4 -t 4 -i 10",
    "./kite-wl-exit-rss -t 4 -n 20 -b 50 -k 100 -i 1",
    "./kite-wl-tlb -n 4 -r 1",
    "./kite-wl-mstress -t 8 -n 5 -r 2",
    "./kite-wl-glibc-thread -t 8 -n 5000",
    "./kite-wl-rptest -t 8 -n 5 -o 200",
    "./kite-wl-rptest -t 1 -n 5 -o 200",
};

/* The checksums of the new workloads at fixed options: they depend only on the options and
 * the seed (never on the allocator or the scheduling), so a change in what a workload does
 * shows up here. Computed once under glibc and kite, which agree. */
static const struct { const char *cmd, *sum; } k_known[] = {
    {"./kite-wl-xfer -t 2 -n 2000", "9e3779b97f506e5b"},
    {"./kite-wl-xfer -t 5 -n 1000 -q 7", "9e3779b97f506ac0"},
    {"./kite-wl-thread-rounds -t 4 -n 3 -k 100 -i 500", "19316937806572ea"},
    {"./kite-wl-rnbench -m 1 -t 2 -n 1000 -i 5000", "62847c80948fff2c"},
    {"./kite-wl-churn -t 2 -n 20000 -k 256 -m 16000", "9e3779b9928dfd80"},
    {"./kite-wl-large -t 1 -n 4 -l 3 -a 5242880 -m 8388608", "e69f651667737b19"},
    {"./kite-wl-graph -n 5000 -r 1 -w 0", "0000000000bf0a02"},
    {"./kite-wl-phases -n 4 -t 4 -i 10", "8d2ac06039975329"},
    {"./kite-wl-exit-rss -t 4 -n 20 -b 50 -k 100 -i 1", "9e3779b97f6e0fed"},
    {"./kite-wl-exit-rss -t 1 -n 10 -b 10 -k 0 -i 0", "9e3779b97f4b518e"},
    {"./kite-wl-tlb -n 4 -r 1", "9e377ba40038c195"},
    {"./kite-wl-replay -l 1 \"$KITE_BENCH_SRC/tests/data/traces/sort.trace\"", "961be508da10b59b"},
    {"./kite-wl-replay -l 3 \"$KITE_BENCH_SRC/tests/data/traces/sort.trace\"", "3d3091665e1ab1f6"},
    /* the losing shapes: blocks passed between threads and rounds (mstress), per-thread
     * working sets (glibc-thread), remote frees through inboxes (rptest): scheduling decides
     * who frees what, never the checksum */
    {"./kite-wl-mstress -t 2 -n 5 -r 2", "fa563d52fa818dac"},
    {"./kite-wl-mstress -t 8 -n 5 -r 2", "de9f112a53213f53"},
    {"./kite-wl-glibc-thread -t 2 -n 5000", "ba09ddbfa3e1add2"},
    {"./kite-wl-glibc-thread -t 8 -n 5000", "37aec62611320bc1"},
    {"./kite-wl-rptest -t 4 -n 5 -o 200", "5a569a0e4cd7b631"},
    {"./kite-wl-rptest -t 8 -n 5 -o 200", "ea60590334f59c2b"},
    {"./kite-wl-rptest -t 1 -n 5 -o 200", "0853805ba57553a1"},
};

/* The new workloads' first output line, exactly: what they ran and, for mstress, the bytes
 * they allocated (a function of the options and the seed only). */
static const struct { const char *cmd, *line; } k_lines[] = {
    {"./kite-wl-mstress -t 2 -n 5 -r 2",
     "mstress: 2 threads x 2 rounds, 500 steps each; 4236915 bytes allocated\n"},
    {"./kite-wl-mstress -t 8 -n 5 -r 2",
     "mstress: 8 threads x 2 rounds, 500 steps each; 10604836 bytes allocated\n"},
    {"./kite-wl-glibc-thread -t 8 -n 5000", "glibc-thread: 8 threads x 5000 steps, working set 1024\n"},
    {"./kite-wl-rptest -t 8 -n 5 -o 200",
     "rptest: 8 threads x 5 passes over 200 slots, 32..16000 bytes, 1 in 8 remote\n"},
    /* below 32 bytes the inbox link and the stamps do not fit: the minimum is raised */
    {"./kite-wl-rptest -t 2 -n 2 -o 50 -a 8 -m 64",
     "rptest: 2 threads x 2 passes over 50 slots, 32..64 bytes, 1 in 8 remote\n"},
};

TEST(losing_shapes_exact_output) {
  for (size_t i = 0; i < sizeof k_lines / sizeof k_lines[0]; i++) {
    expect_ok(k_lines[i].cmd, run("%s", k_lines[i].cmd));
    if (strncmp(g_out, k_lines[i].line, strlen(k_lines[i].line)))
      fprintf(stderr, "%s:\n%s\n", k_lines[i].cmd, g_out);
    expect_true(strncmp(g_out, k_lines[i].line, strlen(k_lines[i].line)) == 0);
    expect_true(strstr(g_out, "time: ") == g_out + strlen(k_lines[i].line));
  }
}

TEST(new_workloads_known_checksums) {
  char ck[32];
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++) {
    int st = run("%s", k_known[i].cmd);
    expect_ok(k_known[i].cmd, st);
    const char *got = checksum(ck, sizeof ck);
    if (!got || strcmp(got, k_known[i].sum)) fprintf(stderr, "%s:\n%s\n", k_known[i].cmd, g_out);
    expect_true(got && !strcmp(got, k_known[i].sum));
  }
  /* rnbench -m 1 says which loop ran; -m 2 is not a mode */
  expect_ok("rnbench -m 1", run("./kite-wl-rnbench -m 1 -t 1 -n 100 -i 1000"));
  expect_true(strstr(g_out, "x 1000 iterations (mode 1)") != NULL);
  expect_true(exited(run("./kite-wl-rnbench -m 2"), 64));
  /* exit-rss reports its three resident-set figures; tlb its phases and memory */
  expect_ok("exit-rss", run("./kite-wl-exit-rss -t 2 -n 5 -b 20 -k 10 -i 0"));
  expect_true(strstr(g_out, "rss_peak_mib: ") && strstr(g_out, "rss_exit_mib: ") &&
              strstr(g_out, "rss_idle_mib: "));
  expect_ok("tlb", run("./kite-wl-tlb -n 2 -r 1"));
  expect_true(strstr(g_out, "build: ") && strstr(g_out, "chase: ") && strstr(g_out, "rss_mib: ") &&
              strstr(g_out, "anon_huge_mib: "));
  expect_true(exited(run("./kite-wl-tlb -b 8"), 2)); /* a node needs 24 bytes */
  expect_true(strstr(g_out, "-b must be at least 24") != NULL);
  /* graph -p 1 adds its phase times on stderr; what it computes (the checksum) is unchanged,
   * and without -p that line is not there */
  expect_ok("graph -p", run("./kite-wl-graph -n 5000 -r 1 -w 0 -p 1"));
  expect_true(strstr(g_out, "phases: build ") && strstr(g_out, " s, walk ") && strstr(g_out, " s, shuffle ") &&
              strstr(g_out, " s, tear-down "));
  expect_true(checksum(ck, sizeof ck) && !strcmp(ck, "0000000000bf0a02"));
  expect_ok("graph", run("./kite-wl-graph -n 5000 -r 1 -w 0"));
  expect_true(strstr(g_out, "phases: ") == NULL);
  expect_true(exited(run("./kite-wl-graph -p x"), 2));
  /* phases announces every phase, in order */
  expect_ok("phases", run("./kite-wl-phases -n 2 -t 2 -i 5"));
  const char *want[] = {"phase build ", "phase free ", "phase idle ", "phase rebuild ",
                        "phase threads ", "phase idle2 ", "phase teardown ", "phase end "};
  const char *at = g_out;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *p = strstr(at, want[i]);
    expect_true(p != NULL);
    if (p) at = p;
  }
  /* replay: a missing or malformed trace is a usage error naming the problem */
  expect_true(exited(run("./kite-wl-replay -l 1 /nonexistent.trace"), 64));
  expect_true(exited(run("./kite-wl-replay"), 2));
  expect_true(strstr(g_out, "one TRACE file") != NULL);
}

TEST(tiny_runs_verify_themselves) {
  for (size_t i = 0; i < sizeof k_tiny / sizeof k_tiny[0]; i++) expect_ok(k_tiny[i], run("%s", k_tiny[i]));
}

TEST(collatz_known_answers) {
  static const struct { int top; const char *line; } k[] = {
      {100, "Max steps is at 97: 118 steps\n"},
      {1000, "Max steps is at 871: 178 steps\n"},
      {10000, "Max steps is at 6171: 261 steps\n"},
  };
  for (int v = 0; v < 2; v++)
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
      const char *prog = v ? "collatz-list" : "collatz-ivec";
      int st = run("./kite-wl-%s -n %d", prog, k[i].top);
      expect_ok(prog, st);
      expect_true(strstr(g_out, k[i].line) == g_out);
    }
  /* the seeds' positional form, and one thread */
  expect_ok("positional", run("./kite-wl-collatz-ivec 1000"));
  expect_true(strstr(g_out, "Max steps is at 871: 178 steps\n") != NULL);
  expect_ok("one thread", run("./kite-wl-collatz-list -t 1 -n 1000"));
  expect_true(strstr(g_out, "Max steps is at 871: 178 steps\n") != NULL);
}

TEST(seeded_and_deterministic) {
  char a[32], b[32], c[32];
  expect_ok("rnbench seed 7", run("./kite-wl-rnbench -t 2 -n 500 -i 10000 -s 7"));
  assert_true(checksum(a, sizeof a) != NULL);
  expect_ok("rnbench seed 7 again", run("./kite-wl-rnbench -t 2 -n 500 -i 10000 -s 7"));
  assert_true(checksum(b, sizeof b) != NULL);
  expect_str_eq(a, b);
  expect_ok("rnbench seed 8", run("./kite-wl-rnbench -t 2 -n 500 -i 10000 -s 8"));
  assert_true(checksum(c, sizeof c) != NULL);
  expect_true(strcmp(a, c) != 0);
  /* rnbench prints one line per thread and a total */
  expect_true(strstr(g_out, "thread 0: ") && strstr(g_out, "thread 1: ") && strstr(g_out, "total: "));
  /* checksums that depend only on the work, not on scheduling */
  expect_ok("larson", run("./kite-wl-larson -t 3 -n 100 -e 3 -i 1000 -s 5"));
  assert_true(checksum(a, sizeof a) != NULL);
  expect_ok("larson again", run("./kite-wl-larson -t 3 -n 100 -e 3 -i 1000 -s 5"));
  assert_true(checksum(b, sizeof b) != NULL);
  expect_str_eq(a, b);
  expect_ok("graph", run("./kite-wl-graph -n 3000 -r 1 -s 3"));
  assert_true(checksum(a, sizeof a) != NULL);
  expect_ok("graph again", run("./kite-wl-graph -n 3000 -r 1 -s 3"));
  assert_true(checksum(b, sizeof b) != NULL);
  expect_str_eq(a, b);
}

TEST(help_and_bad_options) {
  static const char *const names[] = {"collatz-ivec", "collatz-list", "rnbench", "larson",
                                      "xmalloc", "cache-thrash", "cache-scratch", "realloc",
                                      "large", "graph", "thread-churn", "churn", "xfer",
                                      "thread-rounds", "phases", "replay", "exit-rss", "tlb",
                                      "mstress", "glibc-thread", "rptest"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int st = run("./kite-wl-%s -h", names[i]);
    expect_true(exited(st, 0));
    expect_true(strncmp(g_out, "usage: kite-wl-", 15) == 0);
    expect_true(exited(run("./kite-wl-%s --help", names[i]), 0));
    expect_true(strncmp(g_out, "usage: kite-wl-", 15) == 0);
    expect_true(exited(run("./kite-wl-%s -Z 1", names[i]), 2));
    expect_true(exited(run("./kite-wl-%s -n nope", names[i]), 2));
  }
}

TEST(self_checks_catch_a_corrupting_allocator) {
  static const char *const cmds[] = {
      "./kite-wl-rnbench -t 2 -n 1000 -i 20000",
      "./kite-wl-larson -t 2 -n 200 -e 2 -i 2000",
      "./kite-wl-xmalloc -t 2 -n 100",
      "./kite-wl-collatz-list -n 1000",
      "./kite-wl-churn -t 2 -n 20000 -k 256",
      "./kite-wl-xfer -t 2 -n 5000",
      "./kite-wl-thread-rounds -t 2 -n 2 -k 100 -i 2000",
      "./kite-wl-rnbench -m 1 -t 2 -n 1000 -i 20000",
      "./kite-wl-graph -n 5000 -r 1 -w 0",
      "./kite-wl-phases -n 2 -t 2 -i 1",
      "./kite-wl-exit-rss -t 4 -n 20 -b 50 -k 100 -i 1",
      "./kite-wl-tlb -n 4 -r 1",
      "./kite-wl-mstress -t 2 -n 20 -r 2",
      "./kite-wl-glibc-thread -t 2 -n 20000",
      "./kite-wl-rptest -t 2 -n 10",
      "./kite-wl-replay -l 20 \"$KITE_BENCH_SRC/tests/data/traces/sqlite3.trace\"",
  };
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    int st = run("env LD_PRELOAD=./libkite-bench-wrong.so %s", cmds[i]);
    if (!exited(st, 3)) fprintf(stderr, "%s: status %d\n%s\n", cmds[i], st, g_out);
    expect_true(exited(st, 3));
    expect_true(strstr(g_out, "WRONG: ") != NULL);
    expect_true(strstr(g_out, "checksum: ") == NULL);
  }
}

TEST(crash_library_crashes) {
  int st = run("env LD_PRELOAD=./libkite-bench-crash.so ./kite-wl-rnbench -t 2 -n 1000 -i 20000");
  expect_true(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

int main(void) {
  g_bin = getenv("KITE_BENCH_BIN");
  if (!g_bin) g_bin = ".";
  test_rng_init(1);
  RUN(tiny_runs_verify_themselves);
  RUN(new_workloads_known_checksums);
  RUN(losing_shapes_exact_output);
  RUN(collatz_known_answers);
  RUN(seeded_and_deterministic);
  RUN(help_and_bad_options);
  RUN(self_checks_catch_a_corrupting_allocator);
  RUN(crash_library_crashes);
  return test_main_end();
}
