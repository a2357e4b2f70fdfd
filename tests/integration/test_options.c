/* tests/integration/test_options.c -- KITE_* options: strict parsing, reported once, the
 * default kept for a malformed value; messages only on the start-up stderr.
 *
 * Each case re-executes this program ("child MODE") in a fresh process with the option in
 * its environment (kite reads options once, at start-up); the child prints the values
 * kite_option_get returns, and the parent checks them and what the child wrote on stderr.
 */
#define _GNU_SOURCE
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
    execve(self, argv, envp);
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
    printf("purge=%ld stats=%ld verbose=%ld abort=%ld huge=%ld\n", kite_option_get(KITE_OPTION_PURGE_DELAY_MS),
           kite_option_get(KITE_OPTION_SHOW_STATS), kite_option_get(KITE_OPTION_VERBOSE),
           kite_option_get(KITE_OPTION_ABORT_ON_ERROR), kite_option_get(KITE_OPTION_HUGEPAGES));
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
  expect_int_eq(run_child("values", "KITE_NOTHING=1", out, err, 0), 0);
  expect_str_eq(out, "purge=10 stats=0 verbose=0 abort=0 huge=0\n");
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
  expect_true(strstr(out, "huge=1") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=auto", out, err, 0), 0);
  expect_true(strstr(out, "huge=2") != NULL);
  expect_int_eq(run_child("values", "KITE_HUGEPAGES=AUTO", out, err, 0), 0);
  expect_true(strstr(out, "huge=2") != NULL);
  expect_int_eq(run_child("values", "KITE_ABORT_ON_ERROR=false", out, err, 0), 0);
  expect_true(strstr(out, "abort=0 ") != NULL);
  expect_str_eq(err, "");
}

/* A malformed value: one report naming the variable and the value, default kept. */
static void bad(const char *env, const char *name, const char *shown, const char *want_out) {
  char out[4096], err[4096];
  expect_int_eq(run_child("values", env, out, err, 0), 0);
  expect_true(strstr(out, want_out) != NULL);
  char msg[256];
  snprintf(msg, sizeof msg, "kite: ignoring %s=\"%s\"", name, shown);
  if (count(err, msg) != 1) fprintf(stderr, "  stderr was: %s\n", err);
  expect_int_eq(count(err, msg), 1);
  expect_int_eq(count(err, "kite: "), 1);
}

TEST(malformed_values) {
  bad("KITE_PURGE_DELAY_MS=abc", "KITE_PURGE_DELAY_MS", "abc", "purge=10 ");
  bad("KITE_PURGE_DELAY_MS=12abc", "KITE_PURGE_DELAY_MS", "12abc", "purge=10 ");
  bad("KITE_PURGE_DELAY_MS=99999999999999999999", "KITE_PURGE_DELAY_MS", "99999999999999999999", "purge=10 ");
  bad("KITE_PURGE_DELAY_MS= 5", "KITE_PURGE_DELAY_MS", " 5", "purge=10 ");
  bad("KITE_PURGE_DELAY_MS=-", "KITE_PURGE_DELAY_MS", "-", "purge=10 ");
  bad("KITE_VERBOSE= 0", "KITE_VERBOSE", " 0", "verbose=0 ");
  bad("KITE_VERBOSE=abc", "KITE_VERBOSE", "abc", "verbose=0 ");
  bad("KITE_HUGEPAGES=2", "KITE_HUGEPAGES", "2", "huge=0");
  bad("KITE_HUGEPAGES=autox", "KITE_HUGEPAGES", "autox", "huge=0");
}

TEST(closed_stderr_stays_closed) {
  char out[4096], err[4096];
  expect_int_eq(run_child("late-fd2", "KITE_NOTHING=1", out, err, 1), 0);
  expect_str_eq(out, "file=0\n");
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) return 1;
  RUN(defaults);
  RUN(good_values);
  RUN(malformed_values);
  RUN(closed_stderr_stays_closed);
  return test_main_end();
}
