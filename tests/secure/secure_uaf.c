/* secure-uaf: a write after free is caught. Freed blocks are zeroed (their first 64 bytes
 * and the 8 before the canary: all of a block of up to 80 bytes) and wait in the thread's
 * quarantine; a block whose zeroed bytes changed is reported when malloc hands it out
 * again, and the program stops with "write after free". So is a block whose last 8 bytes
 * (the canary's slot, holding the freed mark while the block is free) changed after free
 * (an offset "mK": K bytes past the usable size).
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-uaf */
#include "secure_test.h"
#include <dlfcn.h>

/* A run that held blocks and comes back to a page of another class holds their bytes: the
 * carve must zero it (only a run the arena knows zero skips that, page.h's zero_tail), or
 * malloc finds the old bytes in a fresh block and reports a write after free that never
 * happened. A first-class heap's blocks are written all over, the heap destroyed (its runs
 * go back to the arena dirty, and the arena hands out dirty units first), then the main
 * heap carves many pages of another class: every block must come out clean. */
static int reuse_dirty_run(void) {
  void *(*hnew)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "kite_heap_new");
  void *(*hmalloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "kite_heap_malloc");
  void (*hdestroy)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "kite_heap_destroy");
  if (!hnew || !hmalloc || !hdestroy) return 5;
  enum { OLD = 2000, NEW = 40000 };
  void *h = hnew();
  for (int i = 0; i < OLD; i++) {
    void *p = hmalloc(h, 1000);
    if (!p) return 3;
    memset(p, 0xee, 1000);
  }
  hdestroy(h);
  static void *q[NEW];
  for (int i = 0; i < NEW; i++)
    if (!(q[i] = malloc(40))) return 3;
  for (int i = 0; i < NEW; i++) free(q[i]);
  printf("clean\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[0], "child") == 0 && strcmp(argv[1], "reuse") == 0) return reuse_dirty_run();
  if (argc == 4 && strcmp(argv[0], "child") == 0) {
    size_t n = strtoul(argv[2], NULL, 10), off = strtoul(argv[3] + (argv[3][0] == 'm'), NULL, 10);
    void *keep = malloc(n); /* a live neighbour: the page never empties (an empty page is
                               given back and carved again, zeroed: the write is erased) */
    volatile unsigned char *p = malloc(n);
    if (!p || !keep) return 3;
    if (argv[3][0] == 'm') off += malloc_usable_size((void *)p); /* into the mark */
    memset((void *)p, 0x11, n);
    free((void *)p);
    /* the write after free: one byte changed whatever it held (a mark's byte, random with
     * the canary, is 0x42 one time in 256: a plain store of 0x42 would change nothing) */
    p[off] ^= 0x42;
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
                                   /* each byte lane of the classes under 80 bytes (16, 32, 48, 64:
                                    * secure_layout.h zeroes and checks each its own way) */
                                   {"24", "0"}, {"24", "12"}, {"24", "23"}, {"24", "m5"}, {"40", "24"},
                                   {"40", "39"}, {"56", "20"}, {"56", "40"}, {"56", "55"}, {"56", "m6"},
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
  char *args[] = {"reuse", NULL};
  st_child_t c;
  st_run_child(args, &c);
  int ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && strcmp(c.out, "clean\n") == 0 && c.err[0] == 0;
  printf("%s a dirty run carved for another class: ", ok ? "ok  " : "FAIL");
  if (WIFSIGNALED(c.status)) printf("died of signal %d", WTERMSIG(c.status));
  else printf("exited with %d", WEXITSTATUS(c.status));
  if (c.err[0]) printf(" | stderr: %.200s", c.err);
  printf("\n");
  if (!ok) st_failures++;
  return st_finish();
}
