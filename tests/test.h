/* tests/test.h -- the one small test harness every kite test uses.
 *
 *   expect_*(...)   records a failure and continues
 *   assert_*(...)   records a failure and returns from the test function
 *   TEST(name)      defines a test; RUN(name) runs it from main()
 *   test_rng_*      seeded xorshift generator; the seed is printed on failure and can be
 *                   forced with KITE_TEST_SEED=<n>
 *   test_main_end() prints "N passed, N failed" (checks) and returns the exit status
 *
 * Typed comparisons print both values. Nothing here allocates on the failure path
 * beyond stdio's own buffer.
 */
#ifndef KITE_TEST_H
#define KITE_TEST_H
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

static unsigned long test_checks_passed, test_checks_failed;
static int test_current_failed;
static uint64_t test_seed;

#define TEST_FAIL_(fmt, ...)                                                         \
  do {                                                                               \
    test_checks_failed++;                                                            \
    test_current_failed = 1;                                                         \
    fprintf(stderr, "%s:%d: FAIL: " fmt " (seed %" PRIu64 ")\n", __FILE__, __LINE__, \
            __VA_ARGS__, test_seed);                                                 \
  } while (0)
#define TEST_PASS_() (test_checks_passed++)

#define expect_true(e) \
  do { if (e) TEST_PASS_(); else TEST_FAIL_("expected true: %s", #e); } while (0)
#define expect_int_eq(a, b)                                                         \
  do {                                                                              \
    long long a_ = (long long)(a), b_ = (long long)(b);                             \
    if (a_ == b_) TEST_PASS_();                                                     \
    else TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);                     \
  } while (0)
#define expect_uint_eq(a, b)                                                        \
  do {                                                                              \
    unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);  \
    if (a_ == b_) TEST_PASS_();                                                     \
    else TEST_FAIL_("%s == %s: %llu != %llu", #a, #b, a_, b_);                     \
  } while (0)
#define expect_ptr_eq(a, b)                                                         \
  do {                                                                              \
    const void *a_ = (a), *b_ = (b);                                                \
    if (a_ == b_) TEST_PASS_();                                                     \
    else TEST_FAIL_("%s == %s: %p != %p", #a, #b, a_, b_);                         \
  } while (0)
#define expect_str_eq(a, b)                                                         \
  do {                                                                              \
    const char *a_ = (a), *b_ = (b);                                                \
    if (a_ && b_ && strcmp(a_, b_) == 0) TEST_PASS_();                              \
    else TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",      \
                    b_ ? b_ : "(null)");                                            \
  } while (0)

/* assert_* : same checks, but stop the current test on failure. */
#define TEST_STOP_IF_FAILED_(check)                                                 \
  do { unsigned long f_ = test_checks_failed; check; if (test_checks_failed != f_) return; } while (0)
#define assert_true(e) TEST_STOP_IF_FAILED_(expect_true(e))
#define assert_int_eq(a, b) TEST_STOP_IF_FAILED_(expect_int_eq(a, b))
#define assert_uint_eq(a, b) TEST_STOP_IF_FAILED_(expect_uint_eq(a, b))
#define assert_ptr_eq(a, b) TEST_STOP_IF_FAILED_(expect_ptr_eq(a, b))
#define assert_str_eq(a, b) TEST_STOP_IF_FAILED_(expect_str_eq(a, b))

#define TEST(name) static void test_##name(void)
#define RUN(name)                                                        \
  do {                                                                   \
    test_current_failed = 0;                                             \
    test_##name();                                                       \
    fprintf(stderr, "%s %s\n", test_current_failed ? "FAIL" : "ok  ", #name); \
  } while (0)

/* Seeded generator (xorshift64*). test_rng_init reads KITE_TEST_SEED or uses `dflt`. */
static uint64_t test_rng_state = 88172645463325252ull;
static inline void test_rng_init(uint64_t dflt) {
  const char *s = getenv("KITE_TEST_SEED");
  test_seed = s ? strtoull(s, NULL, 0) : dflt;
  test_rng_state = test_seed ? test_seed : 88172645463325252ull;
}
static inline uint64_t test_rng_next(void) {
  uint64_t x = test_rng_state;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  test_rng_state = x;
  return x * 2685821657736338717ull;
}
/* Uniform in [0, n). */
static inline uint64_t test_rng_below(uint64_t n) { return n ? test_rng_next() % n : 0; }

/* Fill / verify a block with a pattern derived from (tag, offset). */
static inline void test_fill(void *p, size_t n, uint64_t tag) {
  unsigned char *b = (unsigned char *)p;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tag * 131u + i * 7u + (i >> 8));
}
static inline int test_verify(const void *p, size_t n, uint64_t tag) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(tag * 131u + i * 7u + (i >> 8))) return 0;
  return 1;
}

/* Threads of this process (entries of /proc/self/task), -1 when it cannot be read. */
static inline long test_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  long n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The OS page size kite works with: the machine's, or the one a page-check build was told to
 * use (KITE_TEST_OS_PAGE, cmake/platform.cmake). */
static inline size_t test_os_page(void) {
  const char *forced = getenv("KITE_TEST_OS_PAGE");
  if (forced && *forced) return (size_t)strtoul(forced, NULL, 0);
  return (size_t)sysconf(_SC_PAGESIZE);
}

/* Run this program again (argv[0] first, NULL-terminated; envp NULL: this environment).
 * Returns only if the exec failed. Under an emulator (the aarch64 suite under qemu-user,
 * where an emulated program cannot start another one by itself) KITE_TEST_EMULATOR names
 * it (its path first, then its options; words split at spaces), and the program runs
 * through it. */
static inline void test_exec_self(char *const argv[], char *const envp[]) {
  char self[4096], words[512], *args[64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n < 0) return;
  self[n] = 0;
  const char *emu = getenv("KITE_TEST_EMULATOR");
  int k = 0;
  if (emu && *emu) {
    snprintf(words, sizeof words, "%s", emu);
    for (char *t = strtok(words, " "); t && k < 32; t = strtok(NULL, " ")) args[k++] = t;
  }
  if (k == 0) {
    if (envp) execve(self, argv, envp); else execv(self, argv);
    return;
  }
  args[k++] = self;
  for (int i = 1; argv[i] && k < 63; i++) args[k++] = argv[i];
  args[k] = NULL;
  if (envp) execve(args[0], args, envp); else execv(args[0], args);
}
#define test_execl_self(...) test_exec_self((char *const[]){__VA_ARGS__}, NULL)

/* Under an emulator (KITE_TEST_EMULATOR set: make test-cross's aarch64 suites under
 * qemu-user 7.2) a check that needs what the emulator does not do is not run there, and
 * says so on stdout with its reason: test_emulator_lacks(what, reason) is 1 then (the
 * caller returns or takes the path the emulator allows), 0 on a real machine. Each reason
 * is one limitation of qemu-user, not of kite: */
/* a thread started in the child of a fork made while another thread ran aborts qemu
 * ("cpu_exec: assertion failed: (cpu == current_cpu)", exit status 127), or now and then
 * leaves the child hung, whoever starts it (the program, or kite's background thread:
 * test_fork.c); a fork from a threaded program, and threads in the child of a
 * single-threaded one, work */
#define TEST_EMU_THREAD_AFTER_FORK "qemu-user cannot start a thread in the child of a fork made while other threads ran"
/* setrlimit(RLIMIT_AS) succeeds and limits nothing (the limit would bound the emulator's
 * own memory), so nothing runs out of memory */
#define TEST_EMU_RLIMIT_AS "qemu-user accepts setrlimit(RLIMIT_AS) without applying it"
/* the resident set (/proc/self/statm, smaps) counts the emulator's own memory: its code
 * cache and each emulated thread's state */
#define TEST_EMU_OWN_RSS "the resident set counts the emulator's own memory"
/* MADV_HUGEPAGE and MADV_COLLAPSE are hints qemu-user may ignore, and does: the kernel's
 * huge pages say nothing about kite's advice there */
#define TEST_EMU_HUGE_ADVICE "qemu-user does not pass huge-page advice on to the kernel"
static inline int test_emulated(void) {
  const char *emu = getenv("KITE_TEST_EMULATOR");
  return emu && *emu;
}
static inline int test_emulator_lacks(const char *what, const char *reason) {
  if (!test_emulated()) return 0;
  printf("  %s: not run under an emulator: %s\n", what, reason);
  fflush(stdout);
  return 1;
}

static inline int test_main_end(void) {
  printf("%lu passed, %lu failed\n", test_checks_passed, test_checks_failed);
  return test_checks_failed ? 1 : 0;
}
/* Field k of /proc/self/statm (0: VmSize, 1: resident) in bytes, read without allocating
 * (0 if /proc is unreadable). */
static inline size_t test_statm_bytes(int k) {
  char buf[160];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *s = buf;
  for (int i = 0; i < k; i++) strtoull(s, &s, 10);
  return (size_t)strtoull(s, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

#endif
