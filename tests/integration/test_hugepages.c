/* tests/integration/test_hugepages.c -- which arena memory KITE_HUGEPAGES advises as
 * transparent huge pages, read back from the kernel: a mapping given MADV_HUGEPAGE shows
 * "hg" in its VmFlags line in /proc/self/smaps.
 *
 *   small_program  auto: a program that allocates a few hundred KiB of small blocks has
 *                  no advised arena memory (a huge page would be resident whole)
 *   small_program_gets_no_huge_page  a program under 16 MiB (small blocks, and large
 *                  ones of 3 and 4 MiB), in the default mode, auto and dense: nothing
 *                  advised, AnonHugePages 0 (THP mode madvise)
 *   big_heap       40 MiB of 512-byte blocks, one address sampled per MiB: with auto, and
 *                  with dense in a process of one heap, the samples past the first 16 MiB
 *                  committed are mostly (>= 3/4) advised and the first MiB is not; with
 *                  dense and a second live heap none is; with 0 none is; with 1 every one is
 *   dense          dense, one heap: the same heap faulted huge at first touch (AnonHugePages
 *                  >= 20 MiB at once) for at most one granule and one page tail more Rss
 *                  than under 0; with a second live heap (a thread), nothing advised:
 *                  40 MiB of 512-byte blocks, every byte written: the granules full of
 *                  them are rebuilt on huge pages by the background thread (smaps_rollup's
 *                  AnonHugePages >= 24 MiB within 10 s,
 *                  where 0 gives none) for no more Rss than under 0 (1% and 256 KiB of
 *                  slack for what else the process maps), with every block's bytes kept; freeing the blocks
 *                  of every other 64 KiB unit and trimming splits them back (AnonHugePages
 *                  0, Rss about halved) and the live blocks still hold their bytes. With
 *                  KITE_PURGE_DELAY_MS=0 the mode does nothing (no huge page)
 *
 * Each case runs in a fresh child process with KITE_HUGEPAGES set (kite reads options once).
 * Skipped where the kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage).
 * Under an emulator only the checks that do not read the kernel's huge pages run (emulated).
 */
#define _GNU_SOURCE
#include <kite.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "smaps.h"

static char self[4096];
/* Under qemu-user (KITE_TEST_EMULATOR: tests/test.h) huge-page advice never reaches the
 * kernel (qemu takes MADV_HUGEPAGE and MADV_COLLAPSE as hints it may ignore, and does), and
 * smaps_rollup counts the emulator's own huge pages: the checks of what the kernel did are
 * left out there, with a line that says so; the rest (modes, contents, resident set) run. */
static int emulated;
static int kernel_checks(const char *what) {
  return !(emulated && test_emulator_lacks(what, TEST_EMU_HUGE_ADVICE));
}

#define SAMPLES 40
#define BLOCK 512

/* Does the mapping that holds p carry the "hg" flag (MADV_HUGEPAGE)? -1: not found. */
static int advised(const void *p) { return smaps_vma_flag(p, "hg", NULL); }

/* Does this kernel show VmFlags in smaps at all (a sandbox may hide them)? */
static int smaps_has_flags(void) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  char line[1024];
  int r = 0;
  while (!r && fgets(line, sizeof line, f)) r = strncmp(line, "VmFlags:", 8) == 0;
  fclose(f);
  return r;
}

/* Rss and AnonHugePages of the whole process, KiB (smaps_rollup); -1 if unreadable. */
static void rollup(long *rss, long *ahp) {
  *rss = *ahp = -1;
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "Rss:", 4) == 0) *rss = atol(line + 4);
    if (strncmp(line, "AnonHugePages:", 14) == 0) *ahp = atol(line + 14);
  }
  fclose(f);
}

#define DENSE_BLOCKS ((40u << 20) / BLOCK)
static unsigned char *dense_blocks[DENSE_BLOCKS];

/* child "dense": prints "huge=H rss=R ahp=A bad=B rss2=R2 ahp2=A2 bad2=B2 threads=T" (KiB;
 * bad: blocks whose bytes changed, before and after the half free and trim; T: threads once
 * the heap is built) */
static int child_dense(void) {
  for (unsigned i = 0; i < DENSE_BLOCKS; i++) {
    dense_blocks[i] = kite_malloc(BLOCK);
    if (!dense_blocks[i]) return 3;
    memset(dense_blocks[i], (int)(i * 7u + 1u), BLOCK);
  }
  long rss, ahp, rss2, ahp2, bad = 0, bad2 = 0;
  long threads = test_thread_count(); /* dense: its collapse thread is usually running now */
  rollup(&rss, &ahp);
  /* dense: the collapses are the background thread's; give it up to 10 s (a loaded
   * machine) to reach what the check asks for */
  for (int t = 0; t < 500 && ahp < 24 * 1024 && kite_option_get(KITE_OPTION_HUGEPAGES) == 3; t++) {
    usleep(20000);
    rollup(&rss, &ahp);
  }
  for (unsigned i = 0; i < DENSE_BLOCKS; i++)
    for (unsigned j = 0; j < BLOCK; j++) bad += dense_blocks[i][j] != (unsigned char)(i * 7u + 1u);
  for (unsigned i = 0; i < DENSE_BLOCKS; i++)
    if ((((uintptr_t)dense_blocks[i] >> 16) & 1) == 0) {
      kite_free(dense_blocks[i]);
      dense_blocks[i] = NULL;
    }
  kite_malloc_trim(0);
  rollup(&rss2, &ahp2);
  for (unsigned i = 0; i < DENSE_BLOCKS; i++)
    if (dense_blocks[i])
      for (unsigned j = 0; j < BLOCK; j++) bad2 += dense_blocks[i][j] != (unsigned char)(i * 7u + 1u);
  printf("huge=%ld rss=%ld ahp=%ld bad=%ld rss2=%ld ahp2=%ld bad2=%ld threads=%ld\n",
         kite_option_get(KITE_OPTION_HUGEPAGES), rss, ahp, bad, rss2, ahp2, bad2, threads);
  return 0;
}

/* child "tiny": a program under 16 MiB (4 MiB of 512-byte blocks, blocks of 4 MiB and 3
 * MiB, every byte written, 60 ms for a background collapse): prints "ahp=A hg=H" (KiB of
 * AnonHugePages; how many of the sampled blocks' mappings carry MADV_HUGEPAGE) */
static int child_tiny(void) {
  enum { N = (4u << 20) / BLOCK };
  static void *b[N];
  int hg = 0;
  for (unsigned i = 0; i < N; i++) {
    if (!(b[i] = kite_malloc(BLOCK))) return 3;
    memset(b[i], 1, BLOCK);
  }
  void *four = kite_malloc((size_t)4 << 20), *three = kite_malloc((size_t)3 << 20);
  if (!four || !three) return 3;
  memset(four, 2, (size_t)4 << 20);
  memset(three, 3, (size_t)3 << 20);
  usleep(60000);
  for (unsigned i = 0; i < N; i += N / 16) hg += advised(b[i]) == 1;
  hg += (advised(four) == 1) + (advised((char *)four + ((size_t)2 << 20)) == 1) + (advised(three) == 1);
  long rss, ahp;
  rollup(&rss, &ahp);
  printf("ahp=%ld hg=%d\n", ahp, hg);
  return 0;
}

/* child: print one character per sample, 'h' advised, '-' not, '?' no mapping found */
/* A second live heap for the rest of the child's life: a thread that allocates one block
 * and then waits for the process to end (dense mode advises granules at their first claim
 * only while the process has one heap, thp.c). Returns 0, or 3 if the thread or its block
 * could not be made. */
static pthread_mutex_t second_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t second_cv = PTHREAD_COND_INITIALIZER;
static int second_state; /* 1: its block is made, 2: it failed */
static void *second_heap_thread(void *arg) {
  (void)arg;
  void *p = kite_malloc(64);
  pthread_mutex_lock(&second_mu);
  second_state = p ? 1 : 2;
  pthread_cond_broadcast(&second_cv);
  for (;;) pthread_cond_wait(&second_cv, &second_mu); /* until the process exits */
  return NULL;
}
static int start_second_heap(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, second_heap_thread, NULL) != 0) return 3;
  pthread_mutex_lock(&second_mu);
  while (!second_state) pthread_cond_wait(&second_cv, &second_mu);
  int r = second_state == 1 ? 0 : 3;
  pthread_mutex_unlock(&second_mu);
  return r;
}

static int child(const char *mode) {
  if (strncmp(mode, "mt-", 3) == 0) { /* the same with a second live heap */
    if (start_second_heap() != 0) return 3;
    mode += 3;
  }
  if (strcmp(mode, "dense") == 0) return child_dense();
  if (strcmp(mode, "tiny") == 0) return child_tiny();
  if (strcmp(mode, "small") == 0) {
    void *keep[512];
    for (int i = 0; i < 512; i++) {
      keep[i] = kite_malloc(16 + (size_t)(i % 32) * 32);
      if (!keep[i]) return 3;
      memset(keep[i], 1, 16);
    }
    for (int i = 0; i < 512; i += 64) putchar("-h?"[advised(keep[i]) < 0 ? 2 : advised(keep[i])]);
    putchar('\n');
    return 0;
  }
  if (strcmp(mode, "big") == 0) {
    size_t per_mib = ((size_t)1 << 20) / BLOCK;
    for (int s = 0; s < SAMPLES; s++) {
      void *first = NULL;
      for (size_t i = 0; i < per_mib; i++) { /* kept live: the test ends with the process */
        char *q = kite_malloc(BLOCK);
        if (!q) return 3;
        memset(q, (int)s, BLOCK);
        if (!first) first = q;
      }
      int r = advised(first);
      putchar(r < 0 ? '?' : r ? 'h' : '-');
    }
    putchar('\n');
    return 0;
  }
  return 2;
}

static int run_child(const char *mode, const char *env, char *out) {
  int po[2];
  if (pipe(po)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    close(po[0]); close(po[1]);
    char *envp[4] = {NULL};
    char envs[256];
    snprintf(envs, sizeof envs, "%s", env); /* "A=x B=y": several variables */
    int ne = 0;
    for (char *t = strtok(envs, " "); t && ne < 3; t = strtok(NULL, " ")) envp[ne++] = t;
    char *argv[] = {self, "child", (char *)mode, NULL};
    test_exec_self(argv, envp);
    _exit(127);
  }
  close(po[1]);
  size_t n = 0;
  ssize_t m;
  while (n < 255 && (m = read(po[0], out + n, 255 - n)) > 0) n += (size_t)m;
  out[n] = 0;
  close(po[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count(const char *s, int c, int from, int to) {
  int k = 0;
  for (int i = from; i < to && s[i]; i++) k += s[i] == c;
  return k;
}

TEST(small_program) {
  char out[256];
  expect_int_eq(run_child("small", "KITE_HUGEPAGES=auto", out), 0);
  expect_str_eq(out, "--------\n");
}

/* THP mode of the system: "always", "madvise" or "never" (the bracketed word). */
static void thp_mode(char *mode, size_t n);

/* A program under 16 MiB gets no huge page in the default mode, auto or dense: none of its
 * memory is advised, large blocks of 2 MiB and more included (they are elsewhere), and with
 * THP mode madvise (only advised memory gets huge pages) AnonHugePages stays 0. Under
 * "always" the kernel gives huge pages to unadvised memory too: only the advice is checked. */
TEST(small_program_gets_no_huge_page) {
  char out[256], mode[16];
  thp_mode(mode, sizeof mode);
  int kernel = kernel_checks("small_program_gets_no_huge_page");
  const char *envs[] = {"KITE_TEST_NOTHING=1", "KITE_HUGEPAGES=auto", "KITE_HUGEPAGES=dense"};
  for (int i = 0; i < 3; i++) {
    long ahp = -1;
    int hg = -1;
    expect_int_eq(run_child("tiny", envs[i], out), 0);
    expect_int_eq(sscanf(out, "ahp=%ld hg=%d", &ahp, &hg), 2);
    if (hg != 0 || ahp != 0) fprintf(stderr, "  %s: %s", envs[i], out);
    if (kernel) expect_int_eq(hg, 0);
    if (kernel && strcmp(mode, "madvise") == 0) expect_int_eq(ahp, 0);
  }
}

static void thp_mode(char *mode, size_t n) {
  snprintf(mode, n, "?");
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char line[128];
  if (f && fgets(line, sizeof line, f)) {
    char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    if (a && b) snprintf(mode, n, "%.*s", (int)(b - a - 1), a + 1);
  }
  if (f) fclose(f);
}

/* Does this kernel collapse a resident 2 MiB range onto a huge page (MADV_COLLAPSE, Linux
 * 6.1 and later; a sandbox or THP "never" may refuse)? */
static int can_collapse(void) {
  size_t h = (size_t)2 << 20;
  char *m = mmap(NULL, 2 * h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  char *a = (char *)(((uintptr_t)m + h - 1) & ~(uintptr_t)(h - 1));
  memset(a, 1, h);
  int ok = madvise(a, h, 25 /* MADV_COLLAPSE */) == 0;
  munmap(m, 2 * h);
  return ok;
}

TEST(dense) {
  char out[256], mode[16];
  thp_mode(mode, sizeof mode);
  if (strcmp(mode, "never") == 0 || !can_collapse()) {
    printf("  dense: skipped (THP mode %s; MADV_COLLAPSE refused)\n", mode);
    return;
  }
  long h0, r0, a0, b0, r0b, a0b, b0b, h, r, a, b, r2, a2, b2;
  expect_int_eq(run_child("dense", "KITE_HUGEPAGES=0", out), 0);
  assert_int_eq(sscanf(out, "huge=%ld rss=%ld ahp=%ld bad=%ld rss2=%ld ahp2=%ld bad2=%ld", &h0, &r0, &a0, &b0, &r0b, &a0b,
                       &b0b), 7);
  expect_int_eq(h0, 0);
  expect_int_eq(b0 + b0b, 0);
  /* KITE_HUGEPAGES=0: a 40 MiB heap built, nothing freed yet, and no thread of kite's (the
   * default KITE_BACKGROUND=idle starts one only for what frees leave: options.c's text) */
  const char *th = strstr(out, "threads=");
  if (!test_emulator_lacks("the thread count with KITE_HUGEPAGES=0", "qemu-user runs a thread of its own in the process"))
    expect_true(th != NULL && strtol(th + 8, NULL, 10) == 1);
  int kernel = kernel_checks("dense");
  if (kernel && strcmp(mode, "madvise") == 0) expect_int_eq(a0, 0);

  /* one heap: the granules past the first 16 MiB are advised at their first claim and
   * faulted huge (no wait for a collapse); the advice costs at most the granule being filled
   * when the heap stops growing (2 MiB) and the uncarved tail of the one class's current
   * page, on top of 0's 1% and 256 KiB of slack */
  expect_int_eq(run_child("dense", "KITE_HUGEPAGES=dense", out), 0);
  fprintf(stderr, "  0: rss %ld KiB; dense, one heap: %s", r0, out);
  assert_int_eq(sscanf(out, "huge=%ld rss=%ld ahp=%ld bad=%ld rss2=%ld ahp2=%ld bad2=%ld", &h, &r, &a, &b, &r2, &a2, &b2), 7);
  expect_int_eq(h, 3);
  if (kernel) expect_true(a >= 20 * 1024);
  if (!test_emulator_lacks("dense's peak RSS against 0's", TEST_EMU_OWN_RSS))
    expect_true(r <= r0 + r0 / 100 + 256 + 2048 + 64);
  expect_int_eq(b + b2, 0);
  if (kernel && strcmp(mode, "madvise") == 0) expect_int_eq(a2, 0); /* purged in part: split, 4 KiB pages for good */
  expect_true(r2 < r - 16 * 1024);

  /* two heaps: nothing advised, the full granules collapsed by the background thread */
  expect_int_eq(run_child("mt-dense", "KITE_HUGEPAGES=DENSE", out), 0);
  fprintf(stderr, "  dense, two heaps: %s", out);
  assert_int_eq(sscanf(out, "huge=%ld rss=%ld ahp=%ld bad=%ld rss2=%ld ahp2=%ld bad2=%ld", &h, &r, &a, &b, &r2, &a2, &b2), 7);
  expect_int_eq(h, 3);
  if (kernel) expect_true(a >= 24 * 1024);
  /* collapsing costs no memory: 512 resident pages become one huge page (1% and 256 KiB
   * of slack for the background thread's stack and the two runs' own noise) */
  if (!test_emulator_lacks("dense's peak RSS against 0's", TEST_EMU_OWN_RSS)) expect_true(r <= r0 + r0 / 100 + 256);
  expect_int_eq(b, 0);
  expect_int_eq(b2, 0);
  if (kernel && strcmp(mode, "madvise") == 0) expect_int_eq(a2, 0); /* every collapsed granule was purged in part */
  expect_true(r2 < r - 16 * 1024);

  expect_int_eq(run_child("dense", "KITE_HUGEPAGES=dense KITE_PURGE_DELAY_MS=0", out), 0);
  assert_int_eq(sscanf(out, "huge=%ld rss=%ld ahp=%ld bad=%ld rss2=%ld ahp2=%ld bad2=%ld", &h, &r, &a, &b, &r2, &a2, &b2), 7);
  expect_int_eq(h, 3);
  if (kernel && strcmp(mode, "madvise") == 0) expect_int_eq(a, 0);
  expect_int_eq(b + b2, 0);
}

TEST(big_heap) {
  char out[256];
  expect_int_eq(run_child("big", "KITE_HUGEPAGES=0", out), 0);
  expect_int_eq((int)strlen(out), SAMPLES + 1);
  expect_int_eq(count(out, '-', 0, SAMPLES), SAMPLES);
  if (!kernel_checks("big_heap")) return;

  expect_int_eq(run_child("big", "KITE_HUGEPAGES=1", out), 0);
  expect_int_eq(count(out, 'h', 0, SAMPLES), SAMPLES);

  expect_int_eq(run_child("big", "KITE_HUGEPAGES=auto", out), 0);
  if (count(out, 'h', 17, SAMPLES) < (SAMPLES - 17) * 3 / 4 || out[0] != '-') fprintf(stderr, "  auto: %s", out);
  expect_true(out[0] == '-');
  expect_true(count(out, 'h', 17, SAMPLES) >= (SAMPLES - 17) * 3 / 4);
  expect_int_eq(count(out, '?', 0, SAMPLES), 0);

  /* dense: auto's rule while the process has one heap; with a second live heap nothing is
   * advised (the collapse alone) */
  expect_int_eq(run_child("big", "KITE_HUGEPAGES=dense", out), 0);
  if (count(out, 'h', 17, SAMPLES) < (SAMPLES - 17) * 3 / 4 || out[0] != '-') fprintf(stderr, "  dense: %s", out);
  expect_true(out[0] == '-');
  expect_true(count(out, 'h', 17, SAMPLES) >= (SAMPLES - 17) * 3 / 4);
  expect_int_eq(run_child("mt-big", "KITE_HUGEPAGES=dense", out), 0);
  expect_int_eq((int)strlen(out), SAMPLES + 1);
  if (count(out, '-', 0, SAMPLES) != SAMPLES) fprintf(stderr, "  dense, two heaps: %s", out);
  expect_int_eq(count(out, '-', 0, SAMPLES), SAMPLES);
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) return 1;
  emulated = test_emulated();
  if (access("/sys/kernel/mm/transparent_hugepage", F_OK) != 0) {
    printf("SKIP: no transparent huge pages in this kernel\n");
    return 0;
  }
  if (!smaps_has_flags()) {
    printf("SKIP: /proc/self/smaps has no VmFlags lines here\n");
    return 0;
  }
  RUN(small_program);
  RUN(small_program_gets_no_huge_page);
  RUN(big_heap);
  RUN(dense);
  return test_main_end();
}
