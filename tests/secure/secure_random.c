/* secure-random: the layout is randomized. Two fresh processes each take 32 blocks of 48
 * bytes; the order of their offsets within the page must differ between the runs and must
 * not be the address order (the default carve). Each run prints its offsets.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-random */
#include "secure_test.h"

enum { N = 32 };

int main(int argc, char **argv) {
  if (argc >= 1 && strcmp(argv[0], "child") == 0) {
    for (int i = 0; i < N; i++) {
      uintptr_t p = (uintptr_t)malloc(48);
      printf("%lu ", (unsigned long)(p & 0xffff) / 48);
    }
    printf("\n");
    return 0;
  }
  st_child_t a, b;
  char *args[] = {NULL};
  st_run_child(args, &a);
  st_run_child(args, &b);
  printf("run 1 block numbers: %s", a.out);
  printf("run 2 block numbers: %s", b.out);
  int ok = 1;
  if (!WIFEXITED(a.status) || WEXITSTATUS(a.status) || !WIFEXITED(b.status) || WEXITSTATUS(b.status)) {
    printf("FAIL a run did not exit 0\n");
    ok = 0;
  }
  if (strcmp(a.out, b.out) == 0) { printf("FAIL the two runs gave the same order\n"); ok = 0; }
  unsigned long v[N], prev = 0;
  int ascending = 1, k = 0;
  for (char *s = a.out; k < N; k++) {
    char *e;
    v[k] = strtoul(s, &e, 10);
    if (e == s) break;
    s = e;
    if (k && v[k] != prev + 1) ascending = 0;
    prev = v[k];
  }
  if (k != N) { printf("FAIL run 1 printed %d numbers, want %d\n", k, N); ok = 0; }
  else if (ascending) { printf("FAIL run 1 handed out consecutive blocks in address order\n"); ok = 0; }
  if (!ok) st_failures++;
  else printf("ok   the two runs' orders differ and neither is the address order\n");
  return st_finish();
}
