/* bench/workloads/exec.c -- kite-bench-exec: run one benchmark process and report its
 * wall time, CPU time, peak RSS and exit status.
 *
 *   kite-bench-exec [-h|--help] RESULT_FILE PRELOAD -- PROGRAM ARGS...
 *
 * Forks, execs PROGRAM with LD_PRELOAD=PRELOAD in its environment (no LD_PRELOAD at all
 * when PRELOAD is empty), waits for it with wait4 and writes one line to RESULT_FILE:
 *   wall=<s> user=<s> sys=<s> maxrss_kib=<n> minflt=<n> majflt=<n> nvcsw=<n> nivcsw=<n>
 *   exited=<rc>          (or signaled=<sig> in place of exited=)
 * (page faults, voluntary and involuntary context switches: the child's own, from wait4)
 * then exits 0 (126/127 when it cannot start the program, with a message on stderr; 2 with
 * the usage on stderr for a bad option or missing arguments).
 *
 * Why a helper rather than Python's own spawn: ru_maxrss is a high-water mark that survives
 * exec, so a child spawned straight from the runner would report at least the runner's
 * own resident size (~15 MiB). This helper is small and never allocates, so its child's
 * high-water mark starts near zero and measures the workload alone. The helper itself is
 * not run under the allocator being measured (the runner strips LD_PRELOAD from it).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double tv(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; }

static const char usage[] =
    "usage: kite-bench-exec [-h] RESULT_FILE PRELOAD -- PROGRAM ARGS...\n"
    "  Runs PROGRAM with LD_PRELOAD=PRELOAD (none when PRELOAD is empty) and writes its wall\n"
    "  time, CPU time, peak RSS and exit status as one line to RESULT_FILE.\n";

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  /* "+": options end at RESULT_FILE, so PROGRAM's own options are never looked at */
  while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
    if (c == 'h') {
      fputs(usage, stdout);
      return 0;
    }
    fputs(usage, stderr);
    return 2;
  }
  argv += optind - 1;
  argc -= optind - 1;
  if (argc < 5 || strcmp(argv[3], "--") != 0) {
    fputs(usage, stderr);
    return 2;
  }
  const char *result = argv[1], *preload = argv[2];
  /* the child's environment: ours minus LD_PRELOAD, plus PRELOAD if given */
  size_t n = 0;
  for (char **e = environ; *e; e++) n++;
  char *envp[n + 2];
  size_t k = 0;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) envp[k++] = *e;
  char pre[4096];
  if (preload[0]) {
    if (snprintf(pre, sizeof pre, "LD_PRELOAD=%s", preload) >= (int)sizeof pre) {
      fprintf(stderr, "kite-bench-exec: preload path too long\n");
      return 2;
    }
    envp[k++] = pre;
  }
  envp[k] = NULL;

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    perror("kite-bench-exec: fork");
    return 126;
  }
  if (pid == 0) {
    execve(argv[4], argv + 4, envp);
    fprintf(stderr, "kite-bench-exec: cannot run %s: %s\n", argv[4], strerror(errno));
    _exit(127);
  }
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("kite-bench-exec: wait4");
      return 126;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  FILE *f = fopen(result, "w");
  if (!f) {
    perror("kite-bench-exec: result file");
    return 126;
  }
  fprintf(f, "wall=%.6f user=%.6f sys=%.6f maxrss_kib=%ld minflt=%ld majflt=%ld nvcsw=%ld "
          "nivcsw=%ld ", wall, tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt,
          ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw);
  if (WIFSIGNALED(st))
    fprintf(f, "signaled=%d\n", WTERMSIG(st));
  else
    fprintf(f, "exited=%d\n", WEXITSTATUS(st));
  return fclose(f) ? 126 : 0;
}
