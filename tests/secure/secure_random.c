/* secure-random: the layout is randomized. Two fresh processes each take 32 blocks of 48
 * bytes; the order of their offsets within the page must differ between the runs and must
 * not be the address order (the default carve). Each also takes one block of 8 other sizes
 * (each from a fresh page) and prints the arena unit each page got: a fresh run is a random
 * one of the lowest free blocks, so the two runs' unit lists differ too. And a forked child
 * carves its fresh pages in another order than its parent does (fork_case). And the order
 * of a carve is a uniform shuffle (uniform_case): over thousands of carves, the position of
 * the first and of the second block handed out, and the distance between them, are spread
 * evenly over the carve's blocks.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-random */
#include "secure_test.h"

enum { N = 32 };

/* Block numbers of N fresh 112-byte blocks, written into buf. */
static void fresh_order(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < N && len + 8 < cap; i++) {
    uintptr_t p = (uintptr_t)malloc(112);
    len += (size_t)snprintf(buf + len, cap - len, "%lu ", (unsigned long)(p & 0xffff) / 112);
  }
}

/* A forked child draws its own layout: the process takes a block (its generator is seeded),
 * forks, and parent and child each carve a fresh page of another class; their block orders
 * must differ (before the fix the child replayed the parent's random sequence). */
static int fork_case(void) {
  free(malloc(48));
  int fd[2];
  if (pipe(fd) != 0) return 2;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 2;
  char mine[512], theirs[512] = "";
  fresh_order(mine, sizeof mine);
  if (pid == 0) {
    if (write(fd[1], mine, strlen(mine) + 1) < 0) _exit(2);
    _exit(0);
  }
  close(fd[1]);
  st_slurp(fd[0], theirs, sizeof theirs);
  int status;
  waitpid(pid, &status, 0);
  printf("parent: %s\nchild:  %s\n", mine, theirs);
  if (theirs[0] == 0 || !WIFEXITED(status) || WEXITSTATUS(status)) { printf("fork: broken\n"); return 0; }
  printf("fork: %s\n", strcmp(mine, theirs) == 0 ? "same" : "differ");
  return 0;
}

/* The shuffle of a carve is uniform. Blocks of 48 bytes are 64-byte blocks (48 + the canary's
 * 8 fit in 64), carved 4 KiB at a time: 64 blocks, aligned to 4 KiB, handed out one carve
 * after another while nothing is freed. Over K carves, the chi-square statistic (63 degrees
 * of freedom: mean 63, standard deviation 11.2) of the first block's position, the second's
 * and their distance (mod 64, 1 .. 63: 62 degrees) is printed; a uniform shuffle stays below 150 with a
 * probability of all but about 1e-9, a shuffle that favours some positions (a random draw
 * reused, a draw not reaching every position) goes far above it. And every position is
 * seen (each expected about 62 times): a bound off by one (a block never first) fails. */
enum { UK = 4000, UB = 64 };
static int uniform_case(void) {
  size_t n = (size_t)UK * UB + 2 * UB;
  uintptr_t *a = malloc(n * sizeof *a);
  if (!a) return 2;
  for (size_t i = 0; i < n; i++) a[i] = (uintptr_t)malloc(48);
  unsigned first[UB] = {0}, second[UB] = {0}, dist[UB] = {0}, k = 0;
  for (size_t i = 1; i + 1 < n && k < UK; i++) {
    if (a[i] >> 12 == a[i - 1] >> 12 || a[i] >> 12 != a[i + 1] >> 12) continue; /* not a carve's first */
    unsigned f = (unsigned)(a[i] & 4095) / UB, s = (unsigned)(a[i + 1] & 4095) / UB;
    first[f]++;
    second[s]++;
    dist[(s - f) % UB]++;
    k++;
  }
  double e = (double)k / UB, d = (double)k / (UB - 1), c1 = 0, c2 = 0, c3 = 0;
  unsigned never = 0;
  for (int j = 0; j < UB; j++) {
    never += (first[j] == 0) + (second[j] == 0) + (j && dist[j] == 0);
    c1 += (first[j] - e) * (first[j] - e) / e;
    c2 += (second[j] - e) * (second[j] - e) / e;
    if (j) c3 += (dist[j] - d) * (dist[j] - d) / d; /* 1 .. 63: two blocks differ */
  }
  printf("carves %u chi2 first %.1f second %.1f distance %.1f never %u\n", k, c1, c2, c3, never);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[0], "child") == 0 && strcmp(argv[1], "fork") == 0) return fork_case();
  if (argc == 2 && strcmp(argv[0], "child") == 0 && strcmp(argv[1], "uniform") == 0) return uniform_case();
  if (argc >= 1 && strcmp(argv[0], "child") == 0) {
    for (int i = 0; i < N; i++) {
      uintptr_t p = (uintptr_t)malloc(48);
      printf("%lu ", (unsigned long)(p & 0xffff) / 48);
    }
    printf("\nunits:");
    for (int k = 0; k < 8; k++) {
      uintptr_t p = (uintptr_t)malloc((size_t)100 << k);
      printf(" %lu", (unsigned long)(p & ((64ul << 20) - 1)) >> 16);
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
  char *ua = strstr(a.out, "units:"), *ub = strstr(b.out, "units:");
  if (!ua || !ub) { printf("FAIL a run printed no units\n"); ok = 0; }
  else {
    if (strncmp(a.out, b.out, (size_t)(ua - a.out)) == 0) { printf("FAIL the two runs gave the same order\n"); ok = 0; }
    if (strcmp(ua, ub) == 0) { printf("FAIL the two runs' fresh pages are the same units\n"); ok = 0; }
  }
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
  else printf("ok   the two runs' block orders and fresh pages differ; no address order\n");
  st_child_t f;
  char *fargs[] = {"fork", NULL};
  st_run_child(fargs, &f);
  printf("%s", f.out);
  if (!WIFEXITED(f.status) || WEXITSTATUS(f.status) || !strstr(f.out, "fork: differ")) {
    printf("FAIL a forked child drew the same block order as its parent (or the check broke)\n");
    st_failures++;
  } else {
    printf("ok   a forked child's fresh page is carved in another order than its parent's\n");
  }
  st_child_t u;
  char *uargs[] = {"uniform", NULL};
  st_run_child(uargs, &u);
  printf("%s", u.out);
  unsigned carves = 0;
  unsigned never = 1;
  double c1 = 1e9, c2 = 1e9, c3 = 1e9;
  if (!WIFEXITED(u.status) || WEXITSTATUS(u.status) ||
      sscanf(u.out, "carves %u chi2 first %lf second %lf distance %lf never %u", &carves, &c1, &c2, &c3, &never) != 5 ||
      carves < UK / 2) {
    printf("FAIL the shuffle check did not run (%u carves seen)\n", carves);
    st_failures++;
  } else if (c1 > 150 || c2 > 150 || c3 > 150 || never) {
    printf("FAIL a carve's order is not a uniform shuffle (chi-square above 150, or a position never seen)\n");
    st_failures++;
  } else {
    printf("ok   over %u carves the first and second blocks' positions and distance are uniform\n", carves);
  }
  return st_finish();
}
