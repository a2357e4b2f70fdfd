/* secure-overflow: an overflow of 1, 8 or 16 bytes past a small block's usable size reaches
 * its canary, and free() stops the program with "buffer overflow" (sizes 1 .. 60000).
 * An overflow that steps over the canary into memory no block of which was handed out
 * yet (the next block, carved but never used; or 4 KiB on, past the page's first carve,
 * not carved yet) is reported as an overflow, not a write after free, when malloc would
 * hand out the changed block: the exact report, with that block's address.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-overflow */
#include "secure_test.h"
#include <stdbool.h>

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[0], "child") == 0) {
    size_t n = strtoul(argv[2], NULL, 10), k = strtoul(argv[3], NULL, 10);
    unsigned char *p = malloc(n);
    size_t u = malloc_usable_size(p);
    if (!p || u < n) return 3;
    for (size_t i = 0; i < k; i++) p[u + i] = (unsigned char)(0x41 + i); /* the overflow */
    free(p);
    printf("free returned\n");
    return 0;
  }
  if (argc == 2 && strcmp(argv[0], "child") == 0) {
    /* 248 bytes: a 256-byte block, a class the C library does not use at start-up, so the
     * first block is in the page's first 4 KiB carve and no other block of it is live */
    unsigned char *p = malloc(248);
    if (!p) return 3;
    size_t at = strcmp(argv[1], "next") == 0 ? 256 : 4096;
    unsigned char *victim = p + at;
    char line[64];
    int len = snprintf(line, sizeof line, "%p\n", (void *)victim);
    if (write(1, line, (size_t)len) != len) return 3; /* before the abort: no stdio buffer */
    memset(victim, 0x41, 16); /* the overflow, past p's canary */
    for (int i = 0; i < 2000; i++) {
      void *q = malloc(248);
      if (q == victim) { printf("handed out unchecked\n"); return 4; }
    }
    printf("not caught\n");
    return 0;
  }
  static const char *into[] = {"next", "uncarved"};
  for (size_t i = 0; i < sizeof into / sizeof *into; i++) {
    char *args[] = {(char *)into[i], NULL};
    st_child_t c;
    st_run_child(args, &c);
    char want[160];
    size_t n = strcspn(c.out, "\n");
    snprintf(want, sizeof want, "kite: secure: buffer overflow (a block never handed out changed): %.*s (aborting)\n", (int)n, c.out);
    bool ok = WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGABRT && n > 2 && strcmp(c.err, want) == 0;
    printf("%s malloc(248), 16 bytes written into the %s block, malloc until it comes: %s", ok ? "ok  " : "FAIL", into[i], c.err);
    if (!ok) {
      printf("  want: %s", want);
      st_failures++;
    }
  }
  static const char *sizes[] = {"1", "8", "24", "48", "100", "1000", "5000", "60000"};
  static const char *over[] = {"1", "8", "16"};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (size_t j = 0; j < sizeof over / sizeof *over; j++) {
      char *args[] = {"x", (char *)sizes[i], (char *)over[j], NULL};
      st_child_t c;
      st_run_child(args, &c);
      char what[96];
      snprintf(what, sizeof what, "malloc(%s), %s byte(s) written past the usable size, free", sizes[i], over[j]);
      st_expect_death(what, &c, SIGABRT, "buffer overflow");
    }
  return st_finish();
}
