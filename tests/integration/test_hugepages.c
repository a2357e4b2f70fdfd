/* tests/integration/test_hugepages.c -- which arena memory KITE_HUGEPAGES advises as
 * transparent huge pages, read back from the kernel: a mapping given MADV_HUGEPAGE shows
 * "hg" in its VmFlags line in /proc/self/smaps.
 *
 *   small_program  auto: a program that allocates a few hundred KiB of small blocks has
 *                  no advised arena memory (a huge page would be resident whole)
 *   big_heap       40 MiB of 512-byte blocks, one address sampled per MiB: with auto the
 *                  samples past the first 16 MiB committed are mostly (>= 3/4) advised and
 *                  the first MiB is not; with 0 none is; with 1 every one is
 *
 * Each case runs in a fresh child process with KITE_HUGEPAGES set (kite reads options once).
 * Skipped where the kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage).
 */
#define _GNU_SOURCE
#include <kite.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static char self[4096];

#define SAMPLES 40
#define BLOCK 512

/* Does the mapping that holds p carry the "hg" flag (MADV_HUGEPAGE)? -1: not found. */
static int advised(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[1024];
  int inside = 0, r = -1;
  uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      r = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return r;
}

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

/* child: print one character per sample, 'h' advised, '-' not, '?' no mapping found */
static int child(const char *mode) {
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
    char *envp[] = {(char *)env, NULL};
    char *argv[] = {self, "child", (char *)mode, NULL};
    execve(self, argv, envp);
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

TEST(big_heap) {
  char out[256];
  expect_int_eq(run_child("big", "KITE_HUGEPAGES=0", out), 0);
  expect_int_eq((int)strlen(out), SAMPLES + 1);
  expect_int_eq(count(out, '-', 0, SAMPLES), SAMPLES);

  expect_int_eq(run_child("big", "KITE_HUGEPAGES=1", out), 0);
  expect_int_eq(count(out, 'h', 0, SAMPLES), SAMPLES);

  expect_int_eq(run_child("big", "KITE_HUGEPAGES=auto", out), 0);
  if (count(out, 'h', 17, SAMPLES) < (SAMPLES - 17) * 3 / 4 || out[0] != '-') fprintf(stderr, "  auto: %s", out);
  expect_true(out[0] == '-');
  expect_true(count(out, 'h', 17, SAMPLES) >= (SAMPLES - 17) * 3 / 4);
  expect_int_eq(count(out, '?', 0, SAMPLES), 0);
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) return 1;
  if (access("/sys/kernel/mm/transparent_hugepage", F_OK) != 0) {
    printf("SKIP: no transparent huge pages in this kernel\n");
    return 0;
  }
  if (!smaps_has_flags()) {
    printf("SKIP: /proc/self/smaps has no VmFlags lines here\n");
    return 0;
  }
  RUN(small_program);
  RUN(big_heap);
  return test_main_end();
}
