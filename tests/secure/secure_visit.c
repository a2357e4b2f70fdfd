/* secure-visit: the block walks of the secure build report a first-class heap's blocks
 * with the usable size malloc_usable_size gives them: a small block without its canary, a
 * large run or huge block without the guard page after it. Each block of the heap is seen
 * once by kite_heap_visit and by kite_visit_all, and all of what the walk reports is
 * writable (a size that took in the guard page would fault here).
 * usage: LD_PRELOAD=build/libkite-secure.so build/secure-visit */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef bool (*visitor_t)(void *block, size_t usable, void *arg);
enum { N = 4 };
static const size_t sizes[N] = {100, 200000, 300000, (size_t)20 << 20}; /* small, large, large, huge */
static void *blocks[N];
static size_t seen_size[N];
static int seen[N], failures;

static bool record(void *block, size_t usable, void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++)
    if (block == blocks[i]) { seen[i]++; seen_size[i] = usable; }
  return true;
}

static void check_walk(const char *walk) {
  for (int i = 0; i < N; i++) {
    size_t want = malloc_usable_size(blocks[i]);
    if (seen[i] == 1 && seen_size[i] == want && want >= sizes[i]) {
      memset(blocks[i], 0x5a, seen_size[i]);
      printf("ok   %s: block of %zu bytes seen once, usable %zu\n", walk, sizes[i], want);
    } else {
      printf("FAIL %s: block of %zu bytes seen %d times, usable %zu, malloc_usable_size %zu\n", walk,
             sizes[i], seen[i], seen_size[i], want);
      failures++;
    }
  }
  memset(seen, 0, sizeof seen);
}

int main(void) {
  void *(*heap_new)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "kite_heap_new");
  void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "kite_heap_malloc");
  bool (*heap_visit)(void *, visitor_t, void *) = (bool (*)(void *, visitor_t, void *))dlsym(RTLD_DEFAULT, "kite_heap_visit");
  bool (*visit_all)(visitor_t, void *) = (bool (*)(visitor_t, void *))dlsym(RTLD_DEFAULT, "kite_visit_all");
  void (*heap_destroy)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "kite_heap_destroy");
  if (!heap_new || !heap_malloc || !heap_visit || !visit_all || !heap_destroy) {
    printf("FAIL kite's first-class heaps are not loaded\n");
    return 1;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  void *h = heap_new();
  for (int i = 0; i < N; i++) {
    blocks[i] = heap_malloc(h, sizes[i]);
    if (!blocks[i]) { printf("FAIL kite_heap_malloc(%zu) returned NULL\n", sizes[i]); return 1; }
  }
  heap_visit(h, record, NULL);
  check_walk("kite_heap_visit");
  visit_all(record, NULL);
  check_walk("kite_visit_all");
  heap_destroy(h);
  if (failures) printf("FAIL: %d check(s) failed\n", failures);
  else printf("PASS\n");
  return failures ? 1 : 0;
}
