/* tests/integration/test_static_stderr.c -- kite linked statically (libkite.a) writes its
 * messages only to the stderr the process had at start-up, also when a constructor of the
 * program moved fd 2 onto a data file before kite printed anything.
 *
 * The parent runs this program again (/proc/self/exe) with its stderr on a pipe and
 * KITE_TEST_DATA naming a data file. In the child, a constructor of default priority
 * opens the file at fd 2 and writes a line of program data; main then frees a stack
 * address, which kite reports. Then the child replaces every descriptor from 3 up to 1023
 * with the data file (so the duplicate kite may keep is gone) and frees another stack
 * address. Expected: the file holds only the program's line; the pipe holds exactly one
 * line, kite's report "kite: free(): invalid pointer...: 0x... (ignored)" of the pointer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/wait.h>

#include "test.h"

static const char data_line[] = "program data\n";

/* A pointer the optimizer cannot see through. */
static void *opaque(void *p) {
  void *volatile v = p;
  return v;
}

__attribute__((constructor)) static void move_stderr(void) {
  const char *path = getenv("KITE_TEST_DATA");
  if (!path) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) != 2) _exit(3);
  close(fd);
  if (write(2, data_line, sizeof data_line - 1) != (ssize_t)(sizeof data_line - 1)) _exit(3);
}

static int child(const char *path) {
  int local[8] = {0};
  void *bad = opaque(&local[2]);
  printf("%p\n", bad); /* the parent looks for it in the report */
  fflush(stdout);
  free(bad);
  int fd = open(path, O_WRONLY | O_APPEND);
  if (fd < 0) return 4;
  for (int i = 3; i < 1024; i++)
    if (i != fd) dup2(fd, i);
  free(bad);
  void *p = malloc(100); /* kite still works */
  if (!p) return 5;
  memset(p, 1, 100);
  free(p);
  return 0;
}

static size_t slurp(int fd, char *buf, size_t cap) {
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  return n;
}

TEST(report_reaches_startup_stderr) {
  char path[] = "/tmp/kite-static-stderr-XXXXXX";
  int tmp = mkstemp(path);
  assert_true(tmp >= 0);
  close(tmp);
  int err[2], out[2];
  assert_int_eq(pipe(err), 0);
  assert_int_eq(pipe(out), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(err[1], 2);
    dup2(out[1], 1);
    close(err[0]); close(err[1]); close(out[0]); close(out[1]);
    setenv("KITE_TEST_DATA", path, 1);
    unsetenv("KITE_ABORT_ON_ERROR");
    test_execl_self("core_static_stderr", "child", (char *)path, (char *)NULL);
    _exit(127);
  }
  close(err[1]); close(out[1]);
  char ptr[64], rep[4096], data[4096];
  size_t np = slurp(out[0], ptr, sizeof ptr);
  slurp(err[0], rep, sizeof rep);
  close(err[0]); close(out[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  expect_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (np && ptr[np - 1] == '\n') ptr[np - 1] = 0;
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  slurp(fd, data, sizeof data);
  close(fd);
  unlink(path);
  /* the program's data is untouched */
  expect_str_eq(data, data_line);
  /* the start-up stderr got the first report, and only it: one line, with the pointer */
  const char *nl = strchr(rep, '\n');
  expect_true(strncmp(rep, "kite: free(): invalid pointer", 29) == 0);
  expect_true(ptr[0] && strstr(rep, ptr) != NULL && strstr(rep, ptr) < nl);
  expect_true(nl != NULL && nl[1] == 0);
  if (test_current_failed) fprintf(stderr, "start-up stderr: \"%s\" (pointer %s)\n", rep, ptr);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  RUN(report_reaches_startup_stderr);
  return test_main_end();
}
