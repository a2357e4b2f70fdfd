/* secure-free: every invalid free of a small block stops the program, named for what it is:
 * a double free (the block waits in the quarantine, or is back in the allocator's lists), a
 * free, realloc or malloc_usable_size of a block that was never handed out, and a free of
 * a pointer inside a block (each free also from another thread, and one of a block of the
 * page never carved); malloc_usable_size of a stack address, of a block never carved or of
 * a pointer inside a small or a large block is reported in the default build's words and
 * stops it too.
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-free */
#include "secure_test.h"
#include <pthread.h>

/* 600-byte requests (with the 8-byte canary, 640-byte blocks: nothing else in this program
 * uses that class) come from a fresh single-unit page (64 KiB, 64 KiB-aligned) whose first
 * carve holds its blocks 0 .. 5 (4 KiB of blocks), linked in a random order. */
#define N 600
#define BS 640
#define UNIT 65536

/* free(arg) on a thread of its own (the block is then another thread's: the free's
 * cross-thread path), joined. */
static void *free_it(void *arg) {
  free(arg);
  return NULL;
}
static void free_on_thread(void *p) {
  pthread_t t;
  if (pthread_create(&t, NULL, free_it, p) != 0 || pthread_join(t, NULL) != 0) exit(3);
}

/* A carved block of p's page, not p, that nothing handed out. */
static void *never_handed_out(void *p) {
  uintptr_t start = (uintptr_t)p & ~(uintptr_t)(UNIT - 1);
  return (void *)(start + ((uintptr_t)p - start == 0 ? BS : 0));
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[0], "child") == 0) {
    const char *what = argv[2];
    char *p = malloc(N);
    if (!p) return 3;
    if (strcmp(what, "double") == 0) {
      free(p);
      free(p);
    } else if (strcmp(what, "double-late") == 0) {
      free(p);
      for (int i = 0; i < 1000; i++) free(malloc(24)); /* p leaves the quarantine */
      free(p);
    } else if (strcmp(what, "never") == 0) {
      free(never_handed_out(p));
    } else if (strcmp(what, "never-realloc") == 0) {
      void *q = realloc(never_handed_out(p), 100);
      printf("realloc returned %p\n", q);
    } else if (strcmp(what, "never-usable") == 0) {
      printf("usable size %zu\n", malloc_usable_size(never_handed_out(p)));
    } else if (strcmp(what, "interior") == 0) {
      free(p + 16);
    } else if (strcmp(what, "remote-double") == 0) {
      free_on_thread(p);
      free_on_thread(p);
    } else if (strcmp(what, "remote-never") == 0) {
      free_on_thread(never_handed_out(p));
    } else if (strcmp(what, "remote-interior") == 0) {
      free_on_thread(p + 16);
    } else if (strcmp(what, "remote-uncarved") == 0) {
      /* block 10 of the page: past its first carve (blocks 0 .. 5), never carved */
      free_on_thread((void *)(((uintptr_t)p & ~(uintptr_t)(UNIT - 1)) + 10 * BS));
    } else if (strcmp(what, "usable-uncarved") == 0) {
      printf("usable size %zu\n", malloc_usable_size((void *)(((uintptr_t)p & ~(uintptr_t)(UNIT - 1)) + 10 * BS)));
    } else if (strcmp(what, "usable-stack") == 0) {
      char local[64];
      printf("usable size %zu\n", malloc_usable_size(local));
    } else if (strcmp(what, "usable-interior") == 0) {
      printf("usable size %zu\n", malloc_usable_size(p + 16));
    } else if (strcmp(what, "usable-interior-large") == 0) {
      char *big = malloc(300000);
      printf("usable size %zu\n", malloc_usable_size(big + 4096));
    } else {
      return 3;
    }
    printf("not caught\n");
    return 0;
  }
  static const char *cases[][3] = {
      {"double", "malloc(600), free, free", "double free"},
      {"double-late", "malloc(600), free, 1000 other frees, free", "double free"},
      {"never", "free of a carved block never handed out", "free(): invalid pointer (a block never handed out)"},
      {"never-realloc", "realloc of a carved block never handed out",
       "realloc(): invalid pointer (a block never handed out)"},
      {"never-usable", "malloc_usable_size of a carved block never handed out",
       "malloc_usable_size(): invalid pointer (a block never handed out)"},
      {"interior", "free of a pointer 16 bytes into a block", "free(): invalid pointer"},
      {"remote-double", "malloc(600), free on another thread, free on a third", "double free"},
      {"remote-never", "free on another thread of a carved block never handed out",
       "free(): invalid pointer (a block never handed out)"},
      {"remote-interior", "free on another thread of a pointer 16 bytes into a block", "free(): invalid pointer"},
      {"remote-uncarved", "free on another thread of a block of the page never carved",
       "free(): invalid pointer or double free"},
      {"usable-uncarved", "malloc_usable_size of a block of the page never carved",
       "malloc_usable_size(): invalid pointer: 0x"},
      {"usable-stack", "malloc_usable_size of a stack address", "malloc_usable_size(): invalid pointer: 0x"},
      {"usable-interior", "malloc_usable_size of a pointer 16 bytes into a block",
       "malloc_usable_size(): invalid pointer: 0x"},
      {"usable-interior-large", "malloc_usable_size of a pointer 4 KiB into a large block",
       "malloc_usable_size(): invalid pointer: 0x"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *args[] = {"x", (char *)cases[i][0], NULL};
    st_child_t c;
    st_run_child(args, &c);
    st_expect_death(cases[i][1], &c, SIGABRT, cases[i][2]);
  }
  return st_finish();
}
