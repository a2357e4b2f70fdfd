/* secure-guard: guard pages. A write one byte past a large block (100 KB) or a huge block
 * (20 MiB) and a write into the page between an arena's metadata and its first user page
 * kill the program with SIGSEGV. The arena's guard is found in /proc/self/maps: the
 * PROT_NONE mapping inside the 64 MiB-aligned arena that holds a small block.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-guard */
#include "secure_test.h"

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

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[0], "child") == 0) {
    const char *what = argv[1];
    if (strcmp(what, "large") == 0 || strcmp(what, "huge") == 0) {
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
  static const char *cases[] = {"large", "huge", "arena"};
  for (size_t i = 0; i < 3; i++) {
    char *args[] = {(char *)cases[i], NULL};
    st_child_t c;
    st_run_child(args, &c);
    char what[96];
    snprintf(what, sizeof what, "%s", i == 0 ? "a byte past a 100000-byte block" : i == 1 ? "a byte past a 20 MiB block"
             : "the page before an arena's first user page");
    st_expect_death(what, &c, SIGSEGV, NULL);
    if (c.out[0]) printf("     child said: %s", c.out);
  }
  return st_finish();
}
