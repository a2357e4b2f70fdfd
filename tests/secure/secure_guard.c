/* secure-guard: guard pages. A write one byte past a large block (100 KB) or a huge block
 * (20 MiB) and a write into the page between an arena's metadata and its first user page
 * kill the program with SIGSEGV. The arena's guard is found in /proc/self/maps: the
 * PROT_NONE mapping inside the 64 MiB-aligned arena that holds a small block.
 * Large runs a thread keeps after their free (secure.c K1-K3): the guard stays PROT_NONE
 * while the run is kept, is lifted when malloc_trim gives it back; a run handed out again,
 * for the same size or a smaller one of its order, has its guard right after the new
 * block's last page; a second free of a kept run is reported.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-guard */
#include "secure_test.h"
#include <stdbool.h>

/* The start of a ---p mapping inside [lo, hi), or 0. */
static uintptr_t find_guard(uintptr_t lo, uintptr_t hi) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  uintptr_t found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && a >= lo && b <= hi && strcmp(perms, "---p") == 0)
      found = a;
  }
  fclose(f);
  return found;
}

/* Does x lie in a ---p mapping? */
static bool prot_none_at(uintptr_t x) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[512];
  bool none = false;
  while (!none && fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perms[8];
    none = sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && a <= x && x < b && strcmp(perms, "---p") == 0;
  }
  fclose(f);
  return none;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[0], "child") == 0) {
    const char *what = argv[1];
    if (strcmp(what, "kept") == 0 || strcmp(what, "moved") == 0 || strcmp(what, "kept-double") == 0) {
      char *p = malloc(200000);
      if (!p) return 3;
      free(p);
      if (what[4] == '-') free(p); /* the run is kept: a double free all the same */
      size_t n = what[0] == 'k' ? 200000 : 150000;
      volatile unsigned char *q = malloc(n);
      if ((char *)q != p) { printf("the kept run was not handed out again\n"); return 6; }
      size_t u = malloc_usable_size((void *)q);
      if (u < n || u >= n + 4096) { printf("usable size %zu for %zu bytes\n", u, n); return 7; }
      q[u - 1] = 1;
      printf("wrote the last usable byte\n");
      fflush(stdout);
      q[u] = 1; /* one past: the guard, moved there for the smaller block */
    } else if (strcmp(what, "large") == 0 || strcmp(what, "huge") == 0) {
      size_t n = what[0] == 'l' ? 100000 : (size_t)20 << 20;
      volatile unsigned char *p = malloc(n);
      if (!p) return 3;
      size_t u = malloc_usable_size((void *)p);
      p[u - 1] = 1;  /* the last usable byte is fine */
      printf("wrote the last usable byte\n");
      fflush(stdout);
      p[u] = 1;      /* one past: the guard */
    } else {
      void *s = malloc(16);
      uintptr_t arena = (uintptr_t)s & ~(((uintptr_t)64 << 20) - 1);
      volatile unsigned char *g = (unsigned char *)find_guard(arena, arena + ((uintptr_t)64 << 20));
      if (!g) { printf("no guard mapping in the arena\n"); return 4; }
      if ((uintptr_t)g > (uintptr_t)s) { printf("guard above the first block\n"); return 5; }
      printf("guard at arena + 0x%lx\n", (unsigned long)((uintptr_t)g - arena));
      fflush(stdout);
      g[0] = 1;
    }
    printf("not caught\n");
    return 0;
  }
  static const char *cases[] = {"large", "huge", "arena", "kept", "moved", "kept-double"};
  static const char *whats[] = {"a byte past a 100000-byte block", "a byte past a 20 MiB block",
                                "the page before an arena's first user page",
                                "a byte past a kept run handed out again for the same size",
                                "a byte past a kept run handed out again for a smaller size",
                                "a second free of a kept run"};
  for (size_t i = 0; i < 6; i++) {
    char *args[] = {(char *)cases[i], NULL};
    st_child_t c;
    st_run_child(args, &c);
    st_expect_death(whats[i], &c, i == 5 ? SIGABRT : SIGSEGV, i == 5 ? "double free" : NULL);
    if (c.out[0]) printf("     child said: %s", c.out);
  }
  /* here, without a fault: the guard of a freed large run stays PROT_NONE while the run is
   * kept, and malloc_trim lifts it as it gives the run back */
  char *p = malloc(100000);
  uintptr_t g = (uintptr_t)p + malloc_usable_size(p);
  free(p);
  bool kept = prot_none_at(g);
  malloc_trim(0);
  bool lifted = !prot_none_at(g);
  printf("%s the guard of a freed 100000-byte block stays while the run is kept: %s\n", kept ? "ok  " : "FAIL",
         kept ? "PROT_NONE" : "lifted");
  printf("%s malloc_trim gives the kept run back, guard lifted: %s\n", lifted ? "ok  " : "FAIL",
         lifted ? "yes" : "still PROT_NONE");
  st_failures += !kept + !lifted;
  return st_finish();
}
