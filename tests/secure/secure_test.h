/* tests/secure/secure_test.h -- shared by the secure build's check programs.
 *
 * Each program checks one protection of libkite-secure.so and runs alone:
 *   LD_PRELOAD=build/libkite-secure.so build/secure-<name>
 * It re-runs itself (/proc/self/exe) as a child for each misuse, with the child's stderr
 * on a pipe (a fresh process, so the allocator records the pipe as its stderr at start-up),
 * and judges how the child ended: the signal it died of and what the allocator wrote.
 * Prints one line per check and "PASS"/"FAIL: ..." at the end; exit 0 only when every
 * check passed. Under an allocator without these protections the checks fail.
 */
#ifndef KITE_SECURE_TEST_H
#define KITE_SECURE_TEST_H
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  int status;      /* waitpid status */
  char err[4096];  /* the child's stderr (truncated) */
  char out[4096];  /* the child's stdout (truncated) */
} st_child_t;

static int st_failures;

/* Read all of fd into buf (NUL-terminated, truncated to cap - 1). */
static void st_slurp(int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (;;) {
    char tmp[512];
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t k = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
    memcpy(buf + n, tmp, k);
    n += k;
  }
  buf[n] = 0;
}

/* Run this program again with argv args (NULL-terminated), collecting how it ended. */
static void st_run_child(char *const args[], st_child_t *c) {
  int pe[2], po[2];
  if (pipe(pe) != 0 || pipe(po) != 0) { perror("pipe"); exit(2); }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); exit(2); }
  if (pid == 0) {
    dup2(pe[1], 2); dup2(po[1], 1);
    close(pe[0]); close(pe[1]); close(po[0]); close(po[1]);
    char *argv[16] = {"child"};
    int i = 0;
    for (; args[i] && i < 14; i++) argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(pe[1]); close(po[1]);
  st_slurp(po[0], c->out, sizeof c->out); /* the child writes little: no deadlock */
  st_slurp(pe[0], c->err, sizeof c->err);
  close(pe[0]); close(po[0]);
  while (waitpid(pid, &c->status, 0) < 0 && errno == EINTR) { }
}

/* The child must have died of signal sig, and (when want is not NULL) have said want on
 * stderr. Prints the check's line. */
__attribute__((unused)) static void st_expect_death(const char *what, const st_child_t *c, int sig, const char *want) {
  int ok = WIFSIGNALED(c->status) && WTERMSIG(c->status) == sig && (!want || strstr(c->err, want));
  printf("%s %s: ", ok ? "ok  " : "FAIL", what);
  if (WIFSIGNALED(c->status)) printf("died of signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
  else printf("exited with %d", WEXITSTATUS(c->status));
  if (!ok) printf(", want signal %d%s%s", sig, want ? " and stderr with: " : "", want ? want : "");
  const char *nl = strchr(c->err, '\n');
  if (c->err[0]) printf(" | stderr: %.*s", nl ? (int)(nl - c->err) : 200, c->err);
  printf("\n");
  if (!ok) st_failures++;
}

static int st_finish(void) {
  if (st_failures) printf("FAIL: %d check(s) failed\n", st_failures);
  else printf("PASS\n");
  return st_failures ? 1 : 0;
}
#endif
