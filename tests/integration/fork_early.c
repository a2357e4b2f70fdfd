/* tests/integration/fork_early.c -- forks before kite's fork handlers are registered.
 *
 * kite registers its pthread_atfork handlers in its constructor (init.c). This program's
 * own constructor runs before that one (priority 101: in one statically linked program it
 * comes before every constructor of the default priority, kite's included) and forks there
 * five times, so no handler of kite's runs in any child:
 *   first_use    nothing of kite's was used yet: the child is kite's first user
 *   mid_once     as if threads of the parent were inside kite's once-initialisations at the
 *                fork (the secrets' draw, the guarded region's making, the fault handler's
 *                installation: claimed through the test hooks, as a thread does on its first
 *                use): the child, where those threads do not exist, has no handler to
 *                take them back; its own first uses take them over (once.h O6)
 *   mid_options  as if a thread of the parent were reading the options (its first call into
 *                kite): the child's first malloc takes the read over (O6)
 *   mid_message  as if a thread of the parent were recording the start-up stderr: the
 *                child's first message (the options' read, or the check below) takes it over
 *   mid_message_dup  the same, the thread's duplicate of fd 2 made and stored (message.c
 *                M1): the child reuses the duplicate it inherited, and holds no second one
 *                (its open descriptors, /proc/self/fd, are as many after its work as before)
 * Each child, still inside the constructor, mallocs, fills, checks and frees small, large,
 * huge (sealed with the secrets) and sampled guarded blocks, checks that messages go to its
 * stderr (fd 2, open), and exits 0; a hang ends as SIGALRM. main checks every child's
 * status, then that the parent allocates as usual.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../api/api_names.h"
#include "test.h"

_Bool _kite_test_secret_claim(void);
void _kite_test_secret_finish(void);
_Bool _kite_test_guarded_claim(void);
_Bool _kite_test_guarded_finish(void);
int _kite_test_faults_stage(int st);
int _kite_test_options_stage(int w);
int _kite_test_message_stage(int w);
int _kite_test_message_stage_fd(int fd);
int _kite_message_fd(void);
void _kite_guarded_counts(uint64_t *allocs, uint64_t *frees);

/* The child's work: 0 when every block came back whole, else which step failed. */
static int child_work(void) {
  static const size_t sizes[] = {24, 1000, 200000, 3u << 20, 80u << 20};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *p = A_malloc(sizes[i]);
    if (!p || !kite_owns(p)) return 10 + (int)i;
    size_t n = sizes[i] < 65536 ? sizes[i] : 65536;
    test_fill(p, n, i);
    if (!test_verify(p, n, i)) return 20 + (int)i;
    A_free(p);
  }
  if (kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1) != 0) return 30; /* every small request */
  uint64_t a0, f0, a1, f1;
  _kite_guarded_counts(&a0, &f0);
  unsigned char *g = A_malloc(100);
  _kite_guarded_counts(&a1, &f1);
  if (!g || a1 != a0 + 1) return 31;
  memset(g, 0x5a, 100);
  if (g[99] != 0x5a) return 32;
  A_free(g);
  _kite_guarded_counts(&a1, &f1);
  if (f1 != f0 + 1) return 33;
  if (_kite_message_fd() != 2) return 40; /* the start-up stderr, recorded in this process */
  return 0;
}

/* The process's open descriptors (/proc/self/fd, less the directory's own), -1 if unreadable. */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;
}

/* child_work in a child that inherited the claim with the claimer's duplicate `staged`: it
 * is the one kept (the message stream falls back on it once fd 2 is another file), and the
 * takeover opens no second one. */
static int staged_fd = -1;
static int child_dup_work(void) {
  int before = open_fds();
  int rc = child_work();
  if (rc) return rc;
  if (before < 0 || open_fds() != before) return 50;
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  if (saved < 0 || null < 0 || dup2(null, 2) != 2) return 51;
  int m = _kite_message_fd();
  dup2(saved, 2);
  close(saved);
  close(null);
  return m == staged_fd ? 0 : 52;
}

static int status_first_use = -1, status_mid_once = -1, status_mid_options = -1;
static int status_mid_message = -1, status_mid_message_dup = -1;

static int run_child(void) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    _exit(staged_fd >= 0 ? child_dup_work() : child_work());
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -2;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

__attribute__((constructor(101))) static void fork_before_kite(void) {
  status_first_use = run_child();
  /* as threads inside kite's first uses: each claim stands in the child, made by nobody there */
  _Bool secret = _kite_test_secret_claim(), region = _kite_test_guarded_claim();
  int faults = _kite_test_faults_stage(1);
  status_mid_once = run_child();
  _kite_test_faults_stage(faults);
  if (secret) _kite_test_secret_finish();
  if (region) _kite_test_guarded_finish();
  /* each alone, as a thread inside it (the words are set back as they were after) */
  int opts = _kite_test_options_stage(-1);
  status_mid_options = run_child();
  _kite_test_options_stage(opts);
  int msg = _kite_test_message_stage(-1);
  status_mid_message = run_child();
  _kite_test_message_stage(msg);
  /* and as that thread once its dup returned (message.c M1) */
  msg = _kite_test_message_stage(-1);
  staged_fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
  int recorded = _kite_test_message_stage_fd(staged_fd);
  status_mid_message_dup = staged_fd >= 0 ? run_child() : -3;
  _kite_test_message_stage_fd(recorded);
  if (staged_fd >= 0) close(staged_fd);
  staged_fd = -1;
  _kite_test_message_stage(msg);
}

static void expect_child(const char *name, int st) {
  if (st != 0) fprintf(stderr, "  %s: child status %d (1000 + signal: %d is SIGALRM, it hung)\n", name, st, SIGALRM);
  expect_int_eq(st, 0);
}

int main(void) {
  fprintf(stderr, "variant: %s\n", A_VARIANT);
  expect_child("first_use", status_first_use);
  expect_child("mid_once", status_mid_once);
  expect_child("mid_options", status_mid_options);
  expect_child("mid_message", status_mid_message);
  expect_child("mid_message_dup", status_mid_message_dup);
  expect_int_eq(child_work(), 0); /* the parent, its claims finished */
  return test_main_end();
}
