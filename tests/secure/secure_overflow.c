/* secure-overflow: an overflow of 1, 8 or 16 bytes past a small block's usable size reaches
 * its canary, and free() stops the program with "buffer overflow" (sizes 1 .. 60000).
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-overflow */
#include "secure_test.h"

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
