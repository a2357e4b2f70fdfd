/* secure-uaf: a write after free is caught. Freed blocks are zeroed (their first 64 bytes
 * and the 8 before the canary: all of a block of up to 80 bytes) and wait in the thread's
 * quarantine; a block whose zeroed bytes changed is reported when malloc hands it out
 * again, and the program stops with "write after free".
 * And no false report after malloc_trim: the default build's trim gives back the 4 KiB pages
 * inside small pages that hold only free blocks (they come back zero filled); here free
 * blocks hold canaries and checked zeroes, so the secure build must not (child "trim").
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-uaf */
#include "secure_test.h"

/* 4096 blocks of 200 bytes, all but every 16th freed, malloc_trim, then three rounds of
 * 4096 more allocated, written and freed: the blocks freed before the trim are handed out
 * again and checked. */
static int trim_child(void) {
  enum { N = 4096, SZ = 200 };
  static void *b[N], *q[N];
  for (int i = 0; i < N; i++) {
    if (!(b[i] = malloc(SZ))) return 3;
    memset(b[i], 0x11, SZ);
  }
  for (int i = 0; i < N; i++) if (i % 16) free(b[i]);
  malloc_trim(0);
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < N; i++) {
      if (!(q[i] = malloc(SZ))) return 3;
      memset(q[i], 0x22, SZ);
    }
    for (int i = 0; i < N; i++) free(q[i]);
  }
  for (int i = 0; i < N; i += 16) {
    const unsigned char *p = b[i];
    for (int k = 0; k < SZ; k++) if (p[k] != 0x11) return 4;
    free(b[i]);
  }
  printf("clean\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[0], "child") == 0 && strcmp(argv[1], "trim") == 0) return trim_child();
  if (argc == 4 && strcmp(argv[0], "child") == 0) {
    size_t n = strtoul(argv[2], NULL, 10), off = strtoul(argv[3], NULL, 10);
    void *keep = malloc(n); /* a live neighbour: the page never empties (an empty page is
                               given back and carved again, zeroed: the write is erased) */
    volatile unsigned char *p = malloc(n);
    if (!p || !keep) return 3;
    memset((void *)p, 0x11, n);
    free((void *)p);
    p[off] = 0x42; /* the write after free */
    /* churn the same size until the block leaves the quarantine and comes back */
    for (int i = 0; i < 200000; i++) {
      void *q = malloc(n);
      if (q == (void *)p) { printf("handed out again unchecked\n"); return 4; }
      free(q);
    }
    printf("not caught\n");
    free(keep);
    return 0;
  }
  static const char *cases[][2] = {{"32", "0"}, {"32", "8"}, {"32", "20"}, {"72", "70"}, {"200", "60"},
                                   {"200", "195"}, {"1016", "1015"}, {"4000", "40"},
                                   {"4088", "4080"},
                                   {"8", "0"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *args[] = {"x", (char *)cases[i][0], (char *)cases[i][1], NULL};
    st_child_t c;
    st_run_child(args, &c);
    char what[96];
    snprintf(what, sizeof what, "malloc(%s), free, write byte %s", cases[i][0], cases[i][1]);
    st_expect_death(what, &c, SIGABRT, "write after free");
  }
  {
    char *args[] = {"trim", NULL};
    st_child_t c;
    st_run_child(args, &c);
    int ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && strstr(c.out, "clean");
    const char *nl = strchr(c.err, '\n');
    printf("%s free most, malloc_trim, reuse: no report: %s %d%s%.*s\n", ok ? "ok  " : "FAIL",
           WIFSIGNALED(c.status) ? "died of signal" : "exited with",
           WIFSIGNALED(c.status) ? WTERMSIG(c.status) : WEXITSTATUS(c.status), c.err[0] ? " | stderr: " : "",
           nl ? (int)(nl - c.err) : 200, c.err);
    if (!ok) st_failures++;
  }
  return st_finish();
}
