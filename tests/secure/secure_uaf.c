/* secure-uaf: a write after free is caught. Freed blocks are zeroed (their first 64 bytes
 * and the 8 before the canary: all of a block of up to 80 bytes) and wait in the thread's
 * quarantine; a block whose zeroed bytes changed is reported when malloc hands it out
 * again, and the program stops with "write after free". So is a block whose last 8 bytes
 * (the canary's slot, holding the freed mark while the block is free) changed after free
 * (an offset "mK": K bytes past the usable size).
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-uaf */
#include "secure_test.h"

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[0], "child") == 0) {
    size_t n = strtoul(argv[2], NULL, 10), off = strtoul(argv[3] + (argv[3][0] == 'm'), NULL, 10);
    void *keep = malloc(n); /* a live neighbour: the page never empties (an empty page is
                               given back and carved again, zeroed: the write is erased) */
    volatile unsigned char *p = malloc(n);
    if (!p || !keep) return 3;
    if (argv[3][0] == 'm') off += malloc_usable_size((void *)p); /* into the mark */
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
                                   {"8", "0"}, {"8", "m0"}, {"32", "m3"}, {"72", "m7"}, {"200", "m1"},
                                   {"4088", "m4"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *args[] = {"x", (char *)cases[i][0], (char *)cases[i][1], NULL};
    st_child_t c;
    st_run_child(args, &c);
    char what[96];
    snprintf(what, sizeof what, "malloc(%s), free, write byte %s", cases[i][0], cases[i][1]);
    st_expect_death(what, &c, SIGABRT, "write after free");
  }
  return st_finish();
}
