/* tests/integration/test_fork.c -- fork while other threads allocate.
 *
 * Background threads loop over malloc/free of small, large and huge blocks and hand blocks
 * to each other (so that, at any moment, some thread is likely inside the allocator holding
 * a lock). Meanwhile the main thread forks repeatedly, and so does a second, non-main
 * thread. Each child first verifies and frees its copies of blocks the parent made before
 * forking and of blocks owned by the background threads (which do not exist in the child),
 * then allocates a deterministic set of blocks (small to huge, also from a new
 * thread of its own; under TSan, ASan and qemu-user, which cannot start one there, on the
 * child's own thread), fills and verifies them, frees them, and writes a checksum of what it
 * verified to a pipe; the parent compares it with the checksum computed from the same recipe
 * and checks the exit status. A child that deadlocks is killed after a generous 60 s and
 * counted as a failure (this detects hangs; it is not a speed check).
 *
 * Built against kite_* (core_fork) and against the plain names with libkite.so
 * (core_fork_override, where the child's blocks must also be kite's).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "../api/api_names.h"
#include "test.h"

#define N_BG 4
#define FORKS_MAIN 40
#define FORKS_THREAD 20
static int child_on_own_thread;

static atomic_int stop;
static _Atomic(void *) handoff[64];

static void *background(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  void *mine[32] = {0};
  while (!atomic_load(&stop)) {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    uint64_t r = s * 2685821657736338717ull;
    size_t n = r % 100 < 90 ? 1 + (r >> 8) % 512 : r % 100 < 99 ? 1 + (r >> 8) % (256 << 10)
                                                                : (4 << 20) + (r >> 8) % (24 << 20);
    int j = (int)((r >> 40) % 32);
    A_free(mine[j]);
    mine[j] = A_malloc(n);
    if (mine[j]) memset(mine[j], (int)j, n < 256 ? n : 256);
    if (r % 7 == 0) { /* hand a block to another thread, free what was there */
      void *old = atomic_exchange(&handoff[(r >> 20) % 64], mine[j]);
      mine[j] = NULL;
      A_free(old);
    }
  }
  for (int j = 0; j < 32; j++) A_free(mine[j]);
  return NULL;
}

/* (Background sizes: 90% small, 9% up to 256 KiB, 1% 4..28 MiB: large runs and huge maps.) */

/* The child's recipe, also used by the parent (without allocating) for the checksum. */
static size_t recipe_size(int round, int i) {
  uint64_t x = (uint64_t)round * 1000003u + (uint64_t)i * 7919u;
  if (i % 50 == 49) return (40u << 20) + x % 4096; /* huge */
  if (i % 10 == 9) return (64u << 10) + x % (1u << 20); /* large */
  return 1 + x % 2000;
}
#define RECIPE_N 150

static uint64_t expected_checksum(int round) {
  uint64_t sum = 0;
  for (int i = 0; i < RECIPE_N; i++) sum = sum * 31 + recipe_size(round, i) + (uint64_t)i;
  return sum * 2 + 1; /* +1: the child's extra thread succeeded; *2 keeps the bits apart */
}

static void *child_thread(void *arg) {
  void *p[64];
  for (int i = 0; i < 64; i++) {
    p[i] = A_malloc(16 + (size_t)i * 40);
    if (!p[i]) return NULL;
    memset(p[i], i, 16 + (size_t)i * 40);
  }
  for (int i = 0; i < 64; i++) A_free(p[i]);
  return (void *)1;
}

/* Blocks the parent's main thread made before forking: every child verifies and frees its
 * copies (from main, or from a thread that does not own them). */
#define PRE_N 100
static void *pre[PRE_N];
static size_t pre_size(int i) { return i % 10 == 9 ? 100000 + (size_t)i : 8 + (size_t)i * 40; }

/* Runs in the child: returns the checksum, or 0 on any failure. Only write(2) for output. */
static uint64_t child_work(int round) {
  static void *blk[RECIPE_N];
  uint64_t sum = 0;
  for (int i = 0; i < PRE_N; i++) {
    if (!test_verify(pre[i], pre_size(i), (uint64_t)i + 500)) return 0;
    A_free(pre[i]);
  }
  /* blocks of the background threads, which do not exist in the child */
  for (int i = 0; i < 64; i++) A_free(atomic_exchange(&handoff[i], NULL));
  for (int i = 0; i < RECIPE_N; i++) {
    size_t n = recipe_size(round, i);
    blk[i] = A_malloc(n);
    if (!blk[i] || !kite_owns(blk[i])) return 0;
    test_fill(blk[i], n < 8192 ? n : 8192, (uint64_t)i);
  }
  for (int i = 0; i < RECIPE_N; i++) {
    size_t n = recipe_size(round, i);
    if (!test_verify(blk[i], n < 8192 ? n : 8192, (uint64_t)i)) return 0;
    sum = sum * 31 + n + (uint64_t)i;
    A_free(blk[i]);
  }
  void *ok = NULL;
#ifdef __SANITIZE_THREAD__
  /* TSan cannot register a thread started in the child of a multi-threaded parent ("dup
   * thread with used id": its registry keeps the parent's threads): the same work runs on
   * the child's own thread. */
  ok = child_thread(NULL);
#else
  if (child_on_own_thread) { /* (the emulator's limit: main) */
    ok = child_thread(NULL);
  } else {
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, NULL) != 0) return 0;
    pthread_join(t, &ok);
  }
#endif
  return sum * 2 + (ok ? 1 : 0);
}

/* Forks one child for `round` and checks it. Returns 1 if all is well. */
static int fork_one(int round, const char **why) {
  int fds[2];
  if (pipe(fds) != 0) { *why = "pipe"; return 0; }
  pid_t pid = fork();
  if (pid < 0) { *why = "fork"; close(fds[0]); close(fds[1]); return 0; }
  if (pid == 0) {
    close(fds[0]);
    uint64_t sum = child_work(round);
    ssize_t w = write(fds[1], &sum, sizeof sum);
    _exit(w == (ssize_t)sizeof sum && sum ? 0 : 3);
  }
  close(fds[1]);
  uint64_t got = 0;
  ssize_t r = 0;
  int status = 0;
  /* wait at most 60 s for the child (a deadlocked child would hang the test) */
  for (int ms = 0;; ms++) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (ms >= 60000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      close(fds[0]);
      *why = "child hung (deadlock in the allocator after fork?)";
      return 0;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  r = read(fds[0], &got, sizeof got);
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    /* the status says which: exit 3 (a check in the child), another exit (the emulator's
     * own: qemu-user ends an aborted child with 127), or a signal */
    static _Thread_local char msg[80];
    snprintf(msg, sizeof msg, "child failed or crashed (wait status 0x%x)", status);
    *why = msg;
    return 0;
  }
  if (r != (ssize_t)sizeof got || got != expected_checksum(round)) { *why = "bad checksum"; return 0; }
  return 1;
}

static atomic_int thread_fork_failures;
static void *forking_thread(void *arg) {
  for (int i = 0; i < FORKS_THREAD; i++) {
    const char *why = "";
    if (!fork_one(1000 + i, &why)) {
      atomic_fetch_add(&thread_fork_failures, 1);
      fprintf(stderr, "fork from a thread, round %d: %s\n", i, why);
    }
  }
  return NULL;
}

TEST(fork_while_allocating) {
  pthread_t bg[N_BG], ft;
  for (int i = 0; i < PRE_N; i++) {
    pre[i] = A_malloc(pre_size(i));
    assert_true(pre[i] != NULL);
    test_fill(pre[i], pre_size(i), (uint64_t)i + 500);
  }
  for (uintptr_t i = 0; i < N_BG; i++) pthread_create(&bg[i], NULL, background, (void *)(i + 1));
  pthread_create(&ft, NULL, forking_thread, NULL);
  int bad = 0;
  for (int i = 0; i < FORKS_MAIN; i++) {
    const char *why = "";
    if (!fork_one(i, &why)) {
      bad++;
      fprintf(stderr, "fork from main, round %d: %s\n", i, why);
    }
  }
  pthread_join(ft, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < N_BG; i++) pthread_join(bg[i], NULL);
  for (int i = 0; i < 64; i++) A_free(atomic_exchange(&handoff[i], NULL));
  int pre_bad = 0;
  for (int i = 0; i < PRE_N; i++) {
    pre_bad += !test_verify(pre[i], pre_size(i), (uint64_t)i + 500);
    A_free(pre[i]);
  }
  expect_int_eq(pre_bad, 0); /* the children's frees did not touch the parent's blocks */
  expect_int_eq(bad, 0);
  expect_int_eq(atomic_load(&thread_fork_failures), 0);
  /* the parent still allocates normally */
  void *p = A_malloc(1000);
  expect_true(p != NULL && kite_owns(p));
  A_free(p);
}

#ifdef KITE_TEST_HOOKS
/* A fork while a thread of the parent is between counting itself in and out of a huge
 * header's read (huge.c): the child, where that thread does not exist, must still unmap a
 * huge block (it hung there, waiting forever for the parent's count to drop). */
void _kite_test_huge_readers(int delta);
TEST(fork_mid_huge_read) {
  _kite_test_huge_readers(+1); /* as a parent thread inside a huge free's read */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a hang ends as SIGALRM, not as a stuck test */
    unsigned char *p = A_malloc(200u << 20); /* past the huge cache: its free unmaps at once */
    if (!p) _exit(2);
    p[0] = 1;
    A_free(p);
    _exit(0);
  }
  _kite_test_huge_readers(-1);
  int status = 0;
  expect_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    fprintf(stderr, "  child status 0x%x (SIGALRM %d: it hung)\n", status, SIGALRM);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A fork while a thread of the parent is drawing the process's secrets (secret.c: it has
 * claimed the draw and is inside its getrandom call): the child, where that thread does not
 * exist, must still seal a huge block's header with secrets (it spun for good waiting for
 * the draw; seen under qemu-user, whose slow system calls widen the window, in
 * fork_while_allocating's first round). Run first, before anything draws the secrets. */
_Bool _kite_test_secret_claim(void);
void _kite_test_secret_finish(void);
TEST(fork_mid_secret_draw) {
  assert_true(_kite_test_secret_claim()); /* as a parent thread inside the draw */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a hang ends as SIGALRM, not as a stuck test */
    unsigned char *p = A_malloc(200u << 20); /* huge: its header is sealed with the secrets */
    if (!p || !kite_owns(p)) _exit(2);
    p[0] = 1;
    A_free(p);
    _exit(0);
  }
  _kite_test_secret_finish();
  int status = 0;
  expect_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    fprintf(stderr, "  child status 0x%x (SIGALRM %d: it hung)\n", status, SIGALRM);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unsigned char *p = A_malloc(200u << 20); /* the parent's own draw, finished */
  expect_true(p != NULL && kite_owns(p));
  A_free(p);
}

/* A fork while a thread of the parent is making the guarded region (guarded.c, under
 * KITE_GUARDED_SAMPLE: it has claimed the region and is inside its mappings, or inside the
 * installation of the fault handler, os.h): the child, where that thread does not exist,
 * must still hand out guarded blocks (it spun for good waiting for the region, or for the
 * handler). Run before anything makes the region. */
_Bool _kite_test_guarded_claim(void);
_Bool _kite_test_guarded_finish(void);
int _kite_test_faults_stage(int st);
void _kite_guarded_counts(uint64_t *allocs, uint64_t *frees);
static pid_t fork_guarded_child(void) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(30); /* a hang ends as SIGALRM, not as a stuck test */
  uint64_t a0, f0, a1, f1;
  _kite_guarded_counts(&a0, &f0);
  unsigned char *p = A_malloc(100);
  _kite_guarded_counts(&a1, &f1);
  if (!p || a1 != a0 + 1 || A_usable(p) != 112) _exit(2);
  memset(p, 0x5a, 100);
  if (p[99] != 0x5a) _exit(3);
  A_free(p);
  _kite_guarded_counts(&a1, &f1);
  _exit(f1 == f0 + 1 ? 0 : 4);
}
TEST(fork_mid_guarded_region) {
  expect_int_eq(kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1), 0); /* every small request */
  assert_true(_kite_test_guarded_claim()); /* as a parent thread making the region */
  pid_t pid[2];
  pid[0] = fork_guarded_child();
  assert_true(_kite_test_faults_stage(1) == 0); /* as that thread installing the handler */
  pid[1] = fork_guarded_child();
  _kite_test_faults_stage(0);
  expect_true(_kite_test_guarded_finish());
  for (int i = 0; i < 2; i++) {
    int status = 0;
    expect_true(pid[i] > 0 && waitpid(pid[i], &status, 0) == pid[i]);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      fprintf(stderr, "  child %d status 0x%x (SIGALRM %d: it hung)\n", i, status, SIGALRM);
    expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  uint64_t a0, f0, a1, f1;
  _kite_guarded_counts(&a0, &f0);
  void *p = A_malloc(100); /* the parent's own region, finished */
  _kite_guarded_counts(&a1, &f1);
  expect_true(p != NULL && a1 == a0 + 1);
  A_free(p);
  expect_int_eq(kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0), 0);
}

/* A fork while a thread of the parent is making the guarded region, its mappings made and
 * not yet published (guarded.c G5): the child never keeps a half-made region. The fork
 * waits for the making, so the child finds the region made, and its first sampled
 * allocation maps no second region: its address space (VmSize) grows by less than a
 * region's 64 MiB. Before G5 the child took the claim back and made a region of its own
 * beside the parent's half-made one, kept reserved. The thread waits inside the making
 * (a test hook) until the forking thread is in fork; the child, where it does not exist,
 * and the process that makes the region are both forked off this one, whose region is
 * made once (run first, before anything makes it). */
extern void (*_kite_test_hook_region_mapped)(void);
static int mapped_flag, forking_flag;
static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}
static void region_mapped_pause(void) {
  __atomic_store_n(&mapped_flag, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&forking_flag, __ATOMIC_ACQUIRE)) nap_ms(1);
  nap_ms(300); /* the forking thread is inside fork: it waits for this making, or forks now */
}
static void *region_maker(void *arg) {
  (void)arg;
  void *p = A_malloc(100); /* sampled: makes the region */
  A_free(p);
  return p;
}
static long vm_size_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}
static int region_child(void) {
  _kite_test_hook_region_mapped = NULL;
  long before = vm_size_kb();
  uint64_t a0, f0, a1, f1;
  _kite_guarded_counts(&a0, &f0);
  unsigned char *p = A_malloc(100);
  _kite_guarded_counts(&a1, &f1);
  if (!p || a1 != a0 + 1) return 2;
  A_free(p);
  long after = vm_size_kb();
  if (before < 0 || after < 0) return 3;
  if (after - before >= 64 * 1024) {
    fprintf(stderr, "  the child's VmSize grew by %ld kB: a second region\n", after - before);
    return 4;
  }
  return 0;
}
static void *region_forker(void *arg) {
  while (!__atomic_load_n(&mapped_flag, __ATOMIC_ACQUIRE)) nap_ms(1);
  __atomic_store_n(&forking_flag, 1, __ATOMIC_RELEASE);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    _exit(region_child());
  }
  int st = 0;
  *(int *)arg = pid > 0 && waitpid(pid, &st, 0) == pid ? (WIFEXITED(st) ? WEXITSTATUS(st) : 100) : 101;
  return NULL;
}
TEST(fork_mid_region_making) {
  pid_t pid = fork();
  if (pid == 0) { /* the process that makes the region */
    alarm(60);
    if (kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1) != 0) _exit(5);
    _kite_test_hook_region_mapped = region_mapped_pause;
    int child = -1;
    pthread_t m, f;
    if (pthread_create(&m, NULL, region_maker, NULL) != 0 || pthread_create(&f, NULL, region_forker, &child) != 0) _exit(6);
    void *made = NULL;
    pthread_join(m, &made);
    pthread_join(f, NULL);
    _exit(made ? child : 7);
  }
  int status = 0;
  expect_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    fprintf(stderr, "  status 0x%x (exit 4: the child made a second region; SIGALRM %d: hung)\n", status, SIGALRM);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A child forked after the fault handler was installed, and one forked while a thread of
 * the parent was between its sigaction call and marking the handler installed (os/linux.c:
 * the child's handler finds the handler in place and takes it as installed): in both,
 * kite's handler is in place, it is installed once (a second request, as a child's own
 * guarded region would make, changes nothing: installed twice, kite's handler would keep
 * itself as the one before and call itself for good on a fault that is not kite's), a
 * fault that is not kite's reaches the handler that was there before kite's exactly once,
 * and the child's guarded allocations work. Run after fork_mid_guarded_region has made the
 * region (and so installed the handler, over probe_handler: main). */
_Bool _kite_os_catch_faults(_Bool (*fn)(void *addr));
static unsigned char *probe;
static size_t probe_len;
static volatile sig_atomic_t probe_faults;
static struct sigaction before_probe;
/* The program's own SIGSEGV handler, there before kite's: a fault on the probe page is
 * counted and the page made writable (the write runs again); any other gives the signal
 * back to the handler before this one. */
static void probe_handler(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  unsigned char *a = si->si_addr;
  if (probe && a >= probe && a < probe + probe_len) {
    probe_faults++;
    mprotect(probe, probe_len, PROT_READ | PROT_WRITE);
    return;
  }
  sigaction(SIGSEGV, &before_probe, NULL);
}
static void probe_install(void) {
  probe_len = test_os_page();
  probe = mmap(NULL, probe_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) probe = NULL;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO;
  sa.sa_sigaction = probe_handler;
  sigaction(SIGSEGV, &sa, &before_probe);
}
static _Bool not_kites(void *addr) { (void)addr; return 0; }
static pid_t fork_fault_child(void) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(30);
  struct sigaction cur, after;
  if (!probe || sigaction(SIGSEGV, NULL, &cur) != 0) _exit(2);
  if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction == probe_handler) _exit(3); /* kite's is in place */
  if (!_kite_os_catch_faults(not_kites)) _exit(4); /* installed already: nothing changes */
  if (sigaction(SIGSEGV, NULL, &after) != 0 || after.sa_sigaction != cur.sa_sigaction) _exit(5);
  probe_faults = 0;
  ((volatile unsigned char *)probe)[1] = 7; /* not kite's: to probe_handler, once */
  if (probe_faults != 1 || probe[1] != 7) _exit(6);
  uint64_t a0, f0, a1, f1;
  _kite_guarded_counts(&a0, &f0);
  unsigned char *p = A_malloc(100); /* sampled: the inherited region */
  _kite_guarded_counts(&a1, &f1);
  if (!p || a1 != a0 + 1) _exit(7);
  A_free(p);
  _exit(0);
}
TEST(fork_child_keeps_the_installed_fault_handler) {
  if (!probe) { printf("  fork_child_keeps_the_installed_fault_handler: no probe page\n"); return; }
  expect_int_eq(kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 1), 0); /* every small request */
  assert_int_eq(_kite_test_faults_stage(2), 2); /* installed (fork_mid_guarded_region) */
  mprotect(probe, probe_len, PROT_NONE);
  pid_t pid[2];
  pid[0] = fork_fault_child(); /* after the installation */
  _kite_test_faults_stage(1); /* as a thread whose sigaction call is made, not yet marked */
  pid[1] = fork_fault_child();
  _kite_test_faults_stage(2);
  for (int i = 0; i < 2; i++) {
    int status = 0;
    expect_true(pid[i] > 0 && waitpid(pid[i], &status, 0) == pid[i]);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      fprintf(stderr, "  child %d status 0x%x (SIGALRM %d: it hung; SIGSEGV %d: a fault went round)\n", i, status,
              SIGALRM, SIGSEGV);
    expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  expect_int_eq(kite_option_set(KITE_OPTION_GUARDED_SAMPLE, 0), 0);
}

/* A fork in the fault handler's installation, once kite's handler is in place (os/linux.c
 * F1, from a test hook there): the child, which takes the installation as done (its fork
 * handler finds kite's handler in place), passes a fault that is not kite's to the handler
 * that was there before kite's, probe_handler, exactly once; so does the installing
 * process. Run in a process of its own, where kite's handler is taken back to never
 * installed, probe_handler in place. */
extern void (*_kite_test_hook_fault_installed)(void);
static int install_child_status = -1;
static int probe_once(void) {
  mprotect(probe, probe_len, PROT_NONE);
  probe_faults = 0;
  ((volatile unsigned char *)probe)[2] = 9; /* not kite's: to probe_handler, once */
  return probe_faults == 1 && probe[2] == 9;
}
static void fork_mid_install(void) {
  _kite_test_hook_fault_installed = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    _exit(probe_once() ? 0 : 2);
  }
  int st = 0;
  install_child_status = pid > 0 && waitpid(pid, &st, 0) == pid ? st : -2;
}
TEST(fork_mid_fault_install) {
  if (!probe) { printf("  fork_mid_fault_install: no probe page\n"); return; }
  pid_t pid = fork();
  if (pid == 0) { /* the installing process */
    alarm(60);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = probe_handler;
    if (sigaction(SIGSEGV, &sa, NULL) != 0) _exit(3);
    _kite_test_faults_stage(0); /* as a process that never installed kite's */
    _kite_test_hook_fault_installed = fork_mid_install;
    if (!_kite_os_catch_faults(not_kites)) _exit(4);
    if (install_child_status != 0) {
      fprintf(stderr, "  the child's wait status 0x%x (SIGSEGV %d: its fault went to the default"
              " action)\n", install_child_status, SIGSEGV);
      _exit(5);
    }
    _exit(probe_once() ? 0 : 6);
  }
  int status = 0;
  expect_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) fprintf(stderr, "  status 0x%x\n", status);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A child that allocates densely starts dense mode's collapse thread in itself (thp.c: its
 * claim marks a granule, purger.c starts the thread, which the child did not inherit), the
 * thread's pass takes the granule, and the child exits with the thread perhaps still
 * running: exit status 0, contents intact. The parent is single-threaded at the fork (a
 * child of a multi-threaded one is fork_while_allocating's), so it also runs under TSan. */
extern uint64_t _kite_test_thp_min_committed, _kite_test_collapse_taken;
#define DENSE_N ((24u << 20) / 1000u)
static unsigned char *dense_parent[DENSE_N];
/* DENSE_N blocks of 1000 bytes, every byte written (the granules are resident); 0 if out of
 * memory */
static int dense_fill(unsigned char **b) {
  for (unsigned i = 0; i < DENSE_N; i++) {
    if (!(b[i] = A_malloc(1000))) return 0;
    memset(b[i], (int)(i % 251), 1000);
  }
  return 1;
}
static int dense_child(void) {
  static unsigned char *b[DENSE_N];
  uint64_t taken = __atomic_load_n(&_kite_test_collapse_taken, __ATOMIC_RELAXED);
  if (!dense_fill(b)) return 2;
  /* the pass runs a purge delay / 8 after the thread starts: up to 10 s on a loaded machine */
  for (int t = 0; t < 1000 && __atomic_load_n(&_kite_test_collapse_taken, __ATOMIC_RELAXED) == taken; t++)
    usleep(10000);
  if (__atomic_load_n(&_kite_test_collapse_taken, __ATOMIC_RELAXED) == taken) return 4;
  for (unsigned i = 0; i < DENSE_N; i++) {
    for (unsigned j = 0; j < 1000; j++)
      if (b[i][j] != (unsigned char)(i % 251)) return 3;
    A_free(b[i]);
  }
  return 0;
}
TEST(fork_child_starts_collapse_thread) {
  if (test_emulator_lacks("a collapse thread started in a fork child", TEST_EMU_THREAD_AFTER_FORK)) return;
  long mode = kite_option_get(KITE_OPTION_HUGEPAGES), delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  if (mode != 3 || delay <= 0) { /* the environment chose another mode: dense needs a delay */
    printf("  fork_child_starts_collapse_thread: not run (KITE_HUGEPAGES=%ld, KITE_PURGE_DELAY_MS=%ld)\n", mode, delay);
    return;
  }
  uint64_t floor = _kite_test_thp_min_committed;
  _kite_test_thp_min_committed = 0; /* a small test process counts as big */
  /* the parent's own collapse thread is usually running at the fork (in its first sleep, a
   * delay / 8 = 50 ms): the child inherits its state as running, which the child's
   * handler (purger.c) must clear, or no thread would ever start in the child */
  expect_int_eq(kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 400), 0);
  /* a second live heap (in the child too): with one heap dense mode advises granules at
   * their first claim instead of collapsing them (thp.c) */
  kite_heap_t *second = kite_heap_new();
  assert_true(second != NULL);
  assert_true(dense_fill(dense_parent));
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60); /* a hang ends as SIGALRM, not as a stuck test */
    exit(dense_child()); /* exit, not _exit: atexit and kite's destructor run beside the thread */
  }
  _kite_test_thp_min_committed = floor;
  expect_int_eq(kite_option_set(KITE_OPTION_PURGE_DELAY_MS, delay), 0);
  int status = 0;
  expect_true(pid > 0 && waitpid(pid, &status, 0) == pid);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    fprintf(stderr, "  child status 0x%x (exit 2: no memory, 3: contents, 4: no collapse pass; SIGALRM %d: hung)\n",
            status, SIGALRM);
  expect_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (unsigned i = 0; i < DENSE_N; i++) A_free(dense_parent[i]);
  kite_heap_destroy(second);
}
#endif

int main(void) {
  test_rng_init(0xf0f0ull);
  fprintf(stderr, "variant: %s\n", A_VARIANT);
  /* Under qemu-user the children do their thread's work on their own thread, as under TSan,
   * and kite starts no thread in them either: KITE_HUGEPAGES=dense (the default) starts its
   * collapse pass's thread in a child whose claim finds the granule below in use and
   * resident whole (thp.c: a child here now and then, about one run in 50), and
   * KITE_BACKGROUND its purger in a child that frees; qemu-user aborts such a child
   * ("cpu_exec: assertion failed: (cpu == current_cpu)", exit 127) or leaves it hung, as
   * it does any program's (test.h). With both off kite starts no thread (test_hugepages
   * checks it); every check of the children stays. Set before the first allocation. */
  child_on_own_thread = test_emulator_lacks("a thread of the fork children's own", TEST_EMU_THREAD_AFTER_FORK);
  int no_kite_thread = child_on_own_thread &&
      test_emulator_lacks("kite's background thread in the children (KITE_HUGEPAGES=0, KITE_BACKGROUND=0)",
                          TEST_EMU_THREAD_AFTER_FORK);
#ifdef __SANITIZE_ADDRESS__
  /* The same under ASan, whose runtime (gcc 12's libasan) takes no lock of its allocator
   * at a fork: a child of a fork made while other threads ran waits for good on an
   * allocator lock a parent thread held when it allocates through ASan, and a thread's
   * start does (glibc's pthread_getattr_np, from ASan's thread start), the program's or
   * kite's. The children's kite work is all checked still, on their own thread. */
  printf("  not under ASan: a thread in the fork children (ASan's allocator is not fork-safe)\n");
  child_on_own_thread = no_kite_thread = 1;
#endif
  if (no_kite_thread) {
    expect_int_eq(kite_option_set(KITE_OPTION_HUGEPAGES, 0), 0);
    expect_int_eq(kite_option_set(KITE_OPTION_BACKGROUND, 0), 0);
  }
#ifdef KITE_TEST_HOOKS
  probe_install(); /* before kite's fault handler, which keeps it as the one before */
  RUN(fork_mid_region_making); /* first: in a process of its own, before any thread */
  RUN(fork_mid_secret_draw); /* first: no secret drawn yet */
  RUN(fork_mid_guarded_region); /* before anything makes the guarded region */
  RUN(fork_child_keeps_the_installed_fault_handler); /* after it: the handler is installed */
  RUN(fork_mid_fault_install);
  RUN(fork_child_starts_collapse_thread);
#endif
  RUN(fork_while_allocating);
#ifdef KITE_TEST_HOOKS
  RUN(fork_mid_huge_read);
#endif
  return test_main_end();
}
