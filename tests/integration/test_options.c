/* tests/integration/test_options.c -- KITE_* options: strict parsing, reported once with
 * what the option accepts, the default kept for a refused value; both ends of every range
 * accepted and the values just outside refused, through the environment and through
 * kite_option_set (EINVAL, value unchanged); unknown KITE_* names warned about once;
 * messages only on the start-up stderr.
 *
 * Each case re-executes this program ("child MODE") in a fresh process with the option in
 * its environment (kite reads options once, at start-up); the child prints the values
 * kite_option_get returns, and the parent checks them and what the child wrote on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <kite.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static char self[4096];

/* Run this program as "child MODE" with one extra environment variable; capture stdout and
 * stderr (each up to 4 KiB). Returns the exit status. */
static int run_child(const char *mode, const char *env, char *out, char *err, int close_stderr) {
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    if (close_stderr) close(2); else dup2(pe[1], 2);
    close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
    char *envp[] = {(char *)env, NULL};
    char *argv[] = {self, "child", (char *)mode, NULL};
    test_exec_self(argv, envp);
    _exit(127);
  }
  close(po[1]); close(pe[1]);
  ssize_t n = read(po[0], out, 4095); out[n > 0 ? n : 0] = 0;
  ssize_t m = read(pe[0], err, 4095); err[m > 0 ? m : 0] = 0;
  close(po[0]); close(pe[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count(const char *hay, const char *needle) {
  int c = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) c++;
  return c;
}

static int child(const char *mode) {
  if (strcmp(mode, "values") == 0) {
    void *p = kite_malloc(10); /* options are read by now */
    kite_free(p);
    printf("purge=%ld stats=%ld verbose=%ld abort=%ld huge=%ld background=%ld\n",
           kite_option_get(KITE_OPTION_PURGE_DELAY_MS), kite_option_get(KITE_OPTION_SHOW_STATS),
           kite_option_get(KITE_OPTION_VERBOSE), kite_option_get(KITE_OPTION_ABORT_ON_ERROR),
           kite_option_get(KITE_OPTION_HUGEPAGES), kite_option_get(KITE_OPTION_BACKGROUND));
    return 0;
  }
  if (strcmp(mode, "late-fd2") == 0) {
    /* fd 2 was closed at start; a file the program opens gets fd 2; an invalid free must
     * not write into it */
    char path[] = "/tmp/kite-opt-XXXXXX";
    int fd = mkstemp(path);
    if (fd != 2) { printf("fd=%d\n", fd); return 1; }
    int local;
    kite_free(&local);
    off_t size = lseek(fd, 0, SEEK_END);
    unlink(path);
    printf("file=%ld\n", (long)size);
    return 0;
  }
  return 2;
}

TEST(defaults) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", "NOT_KITE=1", out, err, 0), 0);
  expect_str_eq(out, "purge=10 stats=0 verbose=0 abort=0 huge=3 background=2\n");
  expect_str_eq(err, "");
}

TEST(good_values) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY_MS=250", out, err, 0), 0);
  expect_true(strstr(out, "purge=250 ") != NULL);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY_MS=-1", out, err, 0), 0);
  expect_true(strstr(out, "purge=-1 ") != NULL);
  expect_int_eq(run_child("values", "KITE_VERBOSE=yes", out, err, 0), 0);
  expect_true(strstr(out, "verbose=1 ") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=ON", out, err, 0), 0);
  expect_true(strstr(out, "huge=1 ") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=auto", out, err, 0), 0);
  expect_true(strstr(out, "huge=2 ") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=AUTO", out, err, 0), 0);
  expect_true(strstr(out, "huge=2 ") != NULL);
  expect_int_eq(run_child("values", "KITE_ABORT_ON_ERROR=false", out, err, 0), 0);
  expect_true(strstr(out, "abort=0 ") != NULL);
  expect_str_eq(err, "");
}

/* A refused value: exactly one line on stderr (want_err), the default kept (want_out). */
static void bad(const char *env, const char *want_out, const char *want_err) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", env, out, err, 0), 0);
  if (!strstr(out, want_out)) fprintf(stderr, "  %s: stdout was: %s\n", env, out);
  expect_true(strstr(out, want_out) != NULL);
  expect_str_eq(err, want_err);
}

#define PURGE_RANGE "[-2147483648, 86400000]"
#define BOOL_WORDS "0, 1, off, on, no, yes, false, true"

TEST(malformed_values) {
  bad("KITE_PURGE_DELAY_MS=abc", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=abc: not a whole number in " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=99999999999999999999", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=99999999999999999999: out of range " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS= 5", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS= 5: not a whole number in " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=-", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=-: not a whole number in " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=1e3", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=1e3: not a whole number in " PURGE_RANGE " (ignored)\n");
  bad("KITE_VERBOSE= 0", "verbose=0 ", "kite: KITE_VERBOSE= 0: not one of " BOOL_WORDS " (ignored)\n");
  bad("KITE_VERBOSE=abc", "verbose=0 ", "kite: KITE_VERBOSE=abc: not one of " BOOL_WORDS " (ignored)\n");
  bad("KITE_VERBOSE=2", "verbose=0 ", "kite: KITE_VERBOSE=2: not one of " BOOL_WORDS " (ignored)\n");
  bad("KITE_HUGEPAGES=2", "huge=3",
      "kite: KITE_HUGEPAGES=2: not one of " BOOL_WORDS ", auto, dense (ignored)\n");
  bad("KITE_HUGEPAGES=autox", "huge=3",
      "kite: KITE_HUGEPAGES=autox: not one of " BOOL_WORDS ", auto, dense (ignored)\n");
  bad("KITE_SHOW_STATS=2x", "stats=0 ",
      "kite: KITE_SHOW_STATS=2x: not one of " BOOL_WORDS ", json (ignored)\n");
  /* a long value is shown cut at 40 characters */
  bad("KITE_BACKGROUND=0123456789012345678901234567890123456789xyz", "background=2",
      "kite: KITE_BACKGROUND=0123456789012345678901234567890123456789...: not one of " BOOL_WORDS ", idle (ignored)\n");
}

/* Digits followed by anything else are not a number (no prefix is taken). */
TEST(number_with_trailing_text) {
  bad("KITE_PURGE_DELAY_MS=12abc", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=12abc: not a whole number in " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=12 ", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=12 : not a whole number in " PURGE_RANGE " (ignored)\n");
}

/* Both ends of the number range are accepted; one past either end is refused, also where
 * the value fits in 64 bits. */
TEST(env_range_boundaries) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY_MS=86400000", out, err, 0), 0);
  expect_true(strstr(out, "purge=86400000 ") != NULL);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY_MS=-2147483648", out, err, 0), 0);
  expect_true(strstr(out, "purge=-2147483648 ") != NULL);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY_MS=+0", out, err, 0), 0);
  expect_true(strstr(out, "purge=0 ") != NULL);
  expect_str_eq(err, "");
  bad("KITE_PURGE_DELAY_MS=86400001", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=86400001: out of range " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=-2147483649", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=-2147483649: out of range " PURGE_RANGE " (ignored)\n");
  bad("KITE_PURGE_DELAY_MS=9223372036854775807", "purge=10 ",
      "kite: KITE_PURGE_DELAY_MS=9223372036854775807: out of range " PURGE_RANGE " (ignored)\n");
  /* the words of the enumerated options: each end of their range */
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=off", out, err, 0), 0);
  expect_true(strstr(out, "huge=0 ") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=dense", out, err, 0), 0);
  expect_true(strstr(out, "huge=3 ") != NULL);
  expect_int_eq(run_child("values", "KITE_SHOW_STATS=no", out, err, 0), 0);
  expect_true(strstr(out, "stats=0 ") != NULL);
  expect_str_eq(err, "");
}

/* Words are case-insensitive for every option (JSON as well as ON). */
TEST(words_any_case) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", "KITE_SHOW_STATS=JSON", out, err, 0), 0);
  expect_true(strstr(out, "stats=2 ") != NULL);
  expect_true(strncmp(err, "{\"schema\"", 9) == 0); /* the statistics at exit, nothing before */
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=Dense", out, err, 0), 0);
  expect_true(strstr(out, "huge=3 ") != NULL);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_BACKGROUND=TRUE", out, err, 0), 0);
  expect_true(strstr(out, "background=1") != NULL);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_BACKGROUND=Idle", out, err, 0), 0);
  expect_true(strstr(out, "background=2") != NULL);
  expect_int_eq(run_child("values", "KITE_BACKGROUND=off", out, err, 0), 0);
  expect_true(strstr(out, "background=0") != NULL);
  expect_str_eq(err, "");
}

/* Every option's range through kite_option_set: both ends accepted (0, and the value read
 * back), one past either end refused with -1 and EINVAL, the value unchanged. */
static const struct { kite_option_t o; long min, max; } ranges[] = {
  {KITE_OPTION_SHOW_STATS, 0, 2},     {KITE_OPTION_VERBOSE, 0, 1},
  {KITE_OPTION_ABORT_ON_ERROR, 0, 1}, {KITE_OPTION_PURGE_DELAY_MS, -2147483648L, 86400000},
  {KITE_OPTION_HUGEPAGES, 0, 3},      {KITE_OPTION_BACKGROUND, 0, 2},
};

TEST(set_range_boundaries) {
  for (unsigned i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    kite_option_t o = ranges[i].o;
    long before = kite_option_get(o);
    expect_int_eq(kite_option_set(o, ranges[i].max), 0);
    expect_int_eq(kite_option_get(o), ranges[i].max);
    errno = 0;
    expect_int_eq(kite_option_set(o, ranges[i].max + 1), -1);
    expect_int_eq(errno, EINVAL);
    expect_int_eq(kite_option_get(o), ranges[i].max);
    expect_int_eq(kite_option_set(o, ranges[i].min), 0);
    expect_int_eq(kite_option_get(o), ranges[i].min);
    errno = 0;
    expect_int_eq(kite_option_set(o, ranges[i].min - 1), -1);
    expect_int_eq(errno, EINVAL);
    expect_int_eq(kite_option_get(o), ranges[i].min);
    expect_int_eq(kite_option_set(o, before), 0);
    expect_int_eq(kite_option_get(o), before);
  }
  /* a purge delay that fits a long but not the decay arithmetic */
  long d = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  expect_int_eq(kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 1L << 40), -1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), d);
  /* one past the last option */
  errno = 0;
  expect_int_eq(kite_option_set((kite_option_t)(KITE_OPTION_PROF_PEAK + 1), 0), -1);
  expect_int_eq(errno, EINVAL);
  errno = 0;
  expect_int_eq(kite_option_get((kite_option_t)(KITE_OPTION_PROF_PEAK + 1)), -1);
  expect_int_eq(errno, EINVAL);
}

/* A KITE_* name kite does not know: one warning naming the closest option; the names of
 * kite's own tools are left alone. */
TEST(unknown_names) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", "KITE_SHOWSTATS=1", out, err, 0), 0);
  expect_str_eq(out, "purge=10 stats=0 verbose=0 abort=0 huge=3 background=2\n");
  expect_str_eq(err, "kite: KITE_SHOWSTATS: not a kite option, the closest is KITE_SHOW_STATS (ignored)\n");
  expect_int_eq(run_child("values", "KITE_PURGE_DELAY=5", out, err, 0), 0);
  expect_str_eq(err, "kite: KITE_PURGE_DELAY: not a kite option, the closest is KITE_PURGE_DELAY_MS (ignored)\n");
  expect_int_eq(run_child("values", "KITE_VERBOSE_=1", out, err, 0), 0);
  expect_str_eq(err, "kite: KITE_VERBOSE_: not a kite option, the closest is KITE_VERBOSE (ignored)\n");
  expect_int_eq(run_child("values", "KITE_FOO=1", out, err, 0), 0);
  expect_int_eq(count(err, "kite: KITE_FOO: not a kite option, the closest is KITE_"), 1);
  expect_int_eq(count(err, "\n"), 1);
  expect_int_eq(run_child("values", "KITE_LAB_POLICY=buddy", out, err, 0), 0);
  expect_str_eq(err, "");
  expect_int_eq(run_child("values", "KITE_TRACE_FILE=/dev/null", out, err, 0), 0);
  expect_str_eq(err, "");
}

TEST(closed_stderr_stays_closed) {
  char out[4096], err[4096];
  expect_int_eq(run_child("late-fd2", "NOT_KITE=1", out, err, 1), 0);
  expect_str_eq(out, "file=0\n");
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) return 1;
  RUN(defaults);
  RUN(good_values);
  RUN(malformed_values);
  RUN(number_with_trailing_text);
  RUN(env_range_boundaries);
  RUN(words_any_case);
  RUN(set_range_boundaries);
  RUN(unknown_names);
  RUN(closed_stderr_stays_closed);
  return test_main_end();
}
