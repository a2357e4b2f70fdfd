/* tests/integration/test_oom.c -- out of memory under a lowered RLIMIT_AS.
 *
 * In a child process (the limit must not hurt the test runner): warm the allocator up,
 * set RLIMIT_AS to the current address-space size + 64 MiB, then
 *   0. a huge request larger than the headroom (malloc, aligned_alloc, calloc): NULL, ENOMEM;
 *   1. allocate 1 MiB blocks until NULL: errno must be ENOMEM (a cap of 64 GiB catches an
 *      allocator that never fails), the process must not crash or abort;
 *   2. small blocks until NULL (ENOMEM), chained through the blocks themselves;
 *   3. with memory exhausted: huge malloc, calloc, aligned_alloc, posix_memalign fail
 *      cleanly, and a realloc that cannot grow returns NULL with the old block intact;
 *   4. free everything, then allocate again (small, large, calloc) successfully;
 *   5. repeat the exhaustion once more: the allocator recovers every time.
 * And (aligned_placement_when_tight): after an exhaustion, free and trim, a 128 MiB block
 * when the limit leaves room for it but not for it plus its alignment, and the gap the
 * kernel picks for it holds no aligned placement (a lower one does).
 * The child's checks use test.h; their counts travel to the parent through a pipe, so the
 * parent's "N passed, N failed" line includes them, and the parent checks the exit status.
 *
 * Built against kite_* (core_oom) and against the plain names with libkite.so
 * (core_oom_override): there stdio itself runs on kite, so the failure paths print with
 * fprintf on unbuffered stderr only.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "../api/api_names.h"
#include "test.h"

#define MiB ((size_t)1 << 20)
#define MAX_BIG 65536 /* 64 GiB of 1 MiB blocks: beyond that, the limit was not honoured */

static void *big[MAX_BIG];

static size_t vm_size(void) { return test_statm_bytes(0); }

/* Exhaust, probe, free, recover. */
static void exhaust_and_recover(int pass) {
  /* 0. a huge request beyond the 64 MiB of headroom fails at once, and cleanly */
  errno = 0;
  expect_ptr_eq(A_malloc(test_opaque(128 * MiB)), NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_ptr_eq(A_aligned_alloc(64 * MiB, test_opaque(80 * MiB)), NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_ptr_eq(A_calloc(test_opaque(1024), 100 * 1024), NULL); /* 100 MiB */
  expect_int_eq(errno, ENOMEM);

  /* 1. large blocks until NULL */
  size_t nbig = 0;
  int err = 0;
  while (nbig < MAX_BIG) {
    errno = 0;
    void *p = A_malloc(1 * MiB);
    if (!p) { err = errno; break; }
    memset(p, (int)(nbig & 0xff), 64);
    big[nbig++] = p;
  }
  fprintf(stderr, "pass %d: %zu MiB in 1 MiB blocks before NULL\n", pass, nbig);
  if (nbig == MAX_BIG) TEST_FAIL_("64 GiB allocated under a %s limit", "64 MiB");
  else TEST_PASS_();
  expect_int_eq(err, ENOMEM);

  /* 2. small blocks until NULL, chained */
  void *chain = NULL;
  size_t nsmall = 0;
  err = 0;
  while (nsmall < ((size_t)64 << 20)) {
    errno = 0;
    void **q = A_malloc(48);
    if (!q) { err = errno; break; }
    *q = chain;
    chain = q;
    nsmall++;
  }
  fprintf(stderr, "pass %d: %zu more small blocks before NULL\n", pass, nsmall);
  expect_int_eq(err, ENOMEM);

  /* 3. everything fails cleanly now */
  errno = 0;
  expect_ptr_eq(A_malloc(test_opaque(512 * MiB)), NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_ptr_eq(A_malloc(test_opaque(3 * MiB)), NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_ptr_eq(A_calloc(1, test_opaque(8 * MiB)), NULL);
  expect_int_eq(errno, ENOMEM);
  errno = 0;
  expect_ptr_eq(A_aligned_alloc(1u << 30, test_opaque(4096)), NULL);
  expect_int_eq(errno, ENOMEM);
  void *out = NULL;
  expect_int_eq(A_posix_memalign(&out, 4 * MiB, test_opaque(4 * MiB)), ENOMEM);
  if (nbig > 0) {
    unsigned char *b = big[0];
    test_fill(b, 1 * MiB, 77);
    errno = 0;
    expect_ptr_eq(A_realloc_opaque(b, test_opaque(256 * MiB)), NULL);
    expect_int_eq(errno, ENOMEM);
    expect_true(test_verify(b, 1 * MiB, 77)); /* the old block is intact */
    expect_true(kite_owns(b));
  }

  /* 4. free everything; verify the blocks' heads on the way */
  int bad = 0;
  for (size_t i = 0; i < nbig; i++) {
    const unsigned char *c = big[i];
    if (i > 0 && (c[0] != (unsigned char)(i & 0xff) || c[63] != (unsigned char)(i & 0xff))) bad++;
    A_free(big[i]);
  }
  expect_int_eq(bad, 0);
  while (chain) {
    void *next = *(void **)chain;
    A_free(chain);
    chain = next;
  }
  /* 5. allocations work again */
  void *again[32];
  int got = 0;
  for (int i = 0; i < 32; i++) {
    again[i] = A_malloc(1 * MiB);
    if (again[i]) { memset(again[i], 1, 1 * MiB); got++; }
  }
  expect_int_eq(got, 32);
  for (int i = 0; i < 32; i++) A_free(again[i]);
  void *s = A_malloc(100);
  expect_true(s != NULL);
  A_free(s);
  unsigned char *z = A_calloc(1, 8 * MiB);
  expect_true(z != NULL);
  if (z) {
    size_t nz = 0;
    for (size_t i = 0; i < 8 * MiB; i += 4096) nz += z[i] != 0;
    expect_uint_eq(nz, 0);
    A_free(z);
  }
}

static void child_main(void) {
  /* warm up every size range before measuring the address space */
  void *w1 = A_malloc(100), *w2 = A_malloc(200000), *w3 = A_malloc(2 * MiB);
  A_free(w1);
  A_free(w2);
  A_free(w3);
  struct rlimit rl;
  size_t vm = vm_size();
  rl.rlim_cur = rl.rlim_max = vm + 64 * MiB;
  if (vm == 0 || setrlimit(RLIMIT_AS, &rl) != 0) {
    TEST_FAIL_("cannot set RLIMIT_AS (vm %zu)", vm);
    return;
  }
  fprintf(stderr, "address space %zu MiB, limit %zu MiB\n", vm >> 20, (vm >> 20) + 64);
  exhaust_and_recover(1);
  exhaust_and_recover(2);
}

/* After an exhaustion, freeing everything and malloc_trim: a 128 MiB block (a huge block,
 * mapped 64 MiB-aligned) with room for it under the limit but not for it plus its
 * alignment, when the highest gap the kernel offers for 128 MiB holds no aligned
 * placement: a 1 GiB reservation with a hole of 129 MiB whose top lies 32 MiB past a
 * 64 MiB boundary (the exact map lands in the hole, the aligned addresses next to it
 * overlap the reservation); below the reservation the address space is free. The block
 * must be handed out, and every byte of it written and read back. */
static void tight_aligned_child(void) {
  void *w = A_malloc(100), *w2 = A_malloc(2 * MiB);
  A_free(w);
  A_free(w2);
  struct rlimit rl;
  assert_int_eq(getrlimit(RLIMIT_AS, &rl), 0);
  /* exhaust under a soft limit (the hard one stays, so it can be moved later) */
  rl.rlim_cur = vm_size() + 64 * MiB;
  assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
  size_t nbig = 0;
  while (nbig < MAX_BIG && (big[nbig] = A_malloc(1 * MiB)) != NULL) memset(big[nbig++], 1, 64);
  expect_true(nbig > 0 && nbig < MAX_BIG);
  for (size_t i = 0; i < nbig; i++) A_free(big[i]);
  A_trim(0);
  rl.rlim_cur = RLIM_INFINITY;
  assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);

  const size_t S = 128 * MiB + 4096, A = 64 * MiB; /* the huge map: header page + block */
  uint8_t *r = mmap(NULL, 1024 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  assert_true(r != MAP_FAILED);
  uintptr_t hole_end = (((uintptr_t)r + 512 * MiB) & ~(uintptr_t)(A - 1)) + 32 * MiB;
  uintptr_t hole = hole_end - S - 1 * MiB;
  assert_int_eq(munmap((void *)hole, hole_end - hole), 0);
  /* room for S and 32 MiB more, not for S + A */
  rl.rlim_cur = vm_size() + S + 32 * MiB;
  assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
  /* the layout is as meant: the kernel's place for an exact S is the top of the hole */
  void *probe = mmap(NULL, S, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  expect_ptr_eq(probe, (void *)(hole_end - S));
  if (probe != MAP_FAILED) munmap(probe, S);

  errno = 0;
  uint8_t *p = A_malloc(test_opaque(128 * MiB));
  expect_true(p != NULL);
  if (!p) {
    fprintf(stderr, "malloc(128 MiB): NULL, errno %d\n", errno);
    return;
  }
  expect_true(p < (uint8_t *)hole || p >= (uint8_t *)hole_end); /* not in the hole: no room */
  test_fill(p, 128 * MiB, 99);
  expect_true(test_verify(p, 128 * MiB, 99));
  A_free(p);
  munmap(r, 1024 * MiB); /* (the rest of the reservation; the hole is unmapped already) */
}

/* Run fn in a child; its checks count in ours (through a pipe), its death fails. */
static void in_child(void (*fn)(void)) {
  int fds[2];
  assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    fn();
    unsigned long counts[2] = {test_checks_passed, test_checks_failed};
    ssize_t w = write(fds[1], counts, sizeof counts);
    _exit(w == (ssize_t)sizeof counts ? 0 : 3);
  }
  close(fds[1]);
  unsigned long counts[2] = {0, 0};
  ssize_t r = read(fds[0], counts, sizeof counts);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    TEST_FAIL_("the child died of signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    expect_int_eq(WEXITSTATUS(status), 0);
  expect_int_eq(r, (ssize_t)sizeof counts);
  test_checks_passed += counts[0];
  test_checks_failed += counts[1];
  if (counts[1]) test_current_failed = 1;
}

TEST(aligned_placement_when_tight) { in_child(tight_aligned_child); }

TEST(oom_in_child) {
  unsigned long before = test_checks_passed;
  in_child(child_main);
  expect_true(test_checks_passed - before > 20); /* the child's checks ran */
}

int main(void) {
  test_rng_init(0x00ffull);
  fprintf(stderr, "variant: %s\n", A_VARIANT);
  if (test_emulator_lacks("the OOM suite", TEST_EMU_RLIMIT_AS)) return test_main_end();
  RUN(oom_in_child);
  RUN(aligned_placement_when_tight);
  return test_main_end();
}
