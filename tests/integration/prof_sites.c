/* tests/integration/prof_sites.c -- the workload tests/integration/test_prof.py profiles:
 * three call sites allocate 60%, 30% and 10% of TOTAL bytes in known proportions, with
 * blocks of mixed sizes, and free some, linked against libkite.so (the heap profiler, on
 * through KITE_PROF in the environment). It prints the truth, one line per site:
 *   site_a alloc BYTES OBJECTS live BYTES OBJECTS
 * for the moment of kite_prof_dump(PATH) (live: blocks not freed by then).
 *
 * usage: prof_sites MODE PATH [THREADS]
 *   mixed  TOTAL 200 MiB; 1% of each site's bytes in blocks of 16 B .. 4 KiB, the rest in
 *          blocks of 8 .. 10 MiB (each site goes on until it has its share, the last block
 *          past it: the truth printed is what was allocated). The mix keeps the estimate's
 *          standard deviation near 2% of the smallest site's bytes at the default gap (a
 *          small block's bytes add about gap x bytes to the variance, a block of 8 MiB
 *          and more next to nothing), so the tests' 10% bound is 5 deviations away. site_a frees every other block, site_b each block at
 *          once, site_c none. THREADS threads (default 1) each run a share.
 *   small  the same with blocks of 16 B .. 4 KiB only (run at a small sampling gap).
 *   fork   mixed, run and dumped in a forked child (after the parent allocated from
 *          site_parent and freed it all).
 *   leak   mixed, then site_a frees all of its blocks and site_b keeps one block in four:
 *          at exit site_b and site_c leak, site_a does not. No dump: KITE_PROF writes one.
 *   churn  256 MiB from 4096 short threads, four at a time, each allocating 64 KiB in
 *          blocks of 16 B .. 2 KiB (the three sites' shares as above) and freeing each
 *          block at once: most of a thread's size classes see one visit, counted on its
 *          shared count (src/prof.h P8; run at a 4 KiB gap). Nothing is live at the dump.
 *   kinds  64 MiB in blocks of 16 B .. 4 KiB from four sites of the other entry points:
 *          site_heap (kite_heap_malloc of a first-class heap, 40%), site_posix
 *          (posix_memalign, 64-byte aligned, 20%), site_aligned (aligned_alloc, 256, 20%),
 *          site_memalign (memalign, 1024, 20%); each keeps every other block. After the dump
 *          the heap is destroyed and a second profile written to PATH.after (site_heap's
 *          blocks went with the heap: none live there).
 */
#define _GNU_SOURCE
#include <kite.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define KEEP_MAX 200000

static volatile char sink;
/* The call sites: a store after each call keeps the call from becoming a jump, so the
 * return address lies in the site's own function. */
__attribute__((noinline)) void *site_a(size_t n) { void *p = malloc(n); sink = 0; return p; }
__attribute__((noinline)) void *site_b(size_t n) { void *p = malloc(n); sink = 0; return p; }
__attribute__((noinline)) void *site_c(size_t n) { void *p = malloc(n); sink = 0; return p; }
__attribute__((noinline)) void *site_parent(size_t n) { void *p = malloc(n); sink = 0; return p; }
static kite_heap_t *heap; /* kinds: site_heap's */
__attribute__((noinline)) void *site_heap(size_t n) { void *p = kite_heap_malloc(heap, n); sink = 0; return p; }
__attribute__((noinline)) void *site_posix(size_t n) {
  void *p = NULL;
  int rc = posix_memalign(&p, 64, n);
  sink = 0;
  return rc == 0 ? p : NULL;
}
__attribute__((noinline)) void *site_aligned(size_t n) { void *p = aligned_alloc(256, (n + 255) & ~(size_t)255); sink = 0; return p; }
__attribute__((noinline)) void *site_memalign(size_t n) { void *p = memalign(1024, n); sink = 0; return p; }

typedef struct {
  size_t alloc_b, alloc_n, live_b, live_n;
  void **keep;  /* blocks kept */
  size_t *size;
  size_t kept;
} site_t;

typedef struct {
  size_t total;
  bool small_only, leak;
  uint64_t seed;
  site_t s[3];
} work_t;

static uint64_t next(uint64_t *x) {
  *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
  return *x;
}

static void *call_site(int i, size_t n) { return i == 0 ? site_a(n) : i == 1 ? site_b(n) : site_c(n); }

/* The site furthest behind its share of the bytes (share[i]), or -1 when every site has
 * its share: picking it next interleaves the three sites. */
static int furthest_behind(const work_t *w, const size_t share[3]) {
  int best = -1;
  double lag = 1.0;
  for (int i = 0; i < 3; i++) {
    double f = (double)w->s[i].alloc_b / (double)share[i];
    if (f < lag) { lag = f; best = i; }
  }
  return best;
}

static void one_block(work_t *w, int i, size_t *small_done) {
  site_t *s = &w->s[i];
  bool small = w->small_only || *small_done * 100 < s->alloc_b + 1;
  /* large blocks of 8 MiB and more: the default gap (512 KiB) passes over one with a chance
   * of e^-16 (at 4 MiB it was e^-8, and a site of a few such blocks that lost one read 14% low
   * in one run of a clean clone's make test: the estimate is unbiased, its tail is not small) */
  size_t n = small ? 16 + next(&w->seed) % 4081 : 8 * MIB + next(&w->seed) % (2 * MIB);
  char *p = call_site(i, n);
  if (!p) { perror("malloc"); exit(2); }
  p[0] = p[n - 1] = 1;
  if (small) *small_done += n;
  s->alloc_b += n;
  s->alloc_n++;
  /* site_a frees every other block, site_b all (one in four kept when leaking), site_c none */
  bool keep = i == 2 || (i == 0 && s->alloc_n % 2 == 0) || (i == 1 && w->leak && s->alloc_n % 4 == 0);
  if (!keep || s->kept == KEEP_MAX) {
    free(p);
    return;
  }
  s->keep[s->kept] = p;
  s->size[s->kept++] = n;
  s->live_b += n;
  s->live_n++;
}

static void *run(void *arg) {
  work_t *w = arg;
  const size_t share[3] = {w->total / 10 * 6, w->total / 10 * 3, w->total / 10};
  size_t small_done[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    w->s[i].keep = calloc(KEEP_MAX, sizeof(void *));
    w->s[i].size = calloc(KEEP_MAX, sizeof(size_t));
  }
  for (;;) { /* the site furthest behind its share goes next: the three interleave */
    int best = furthest_behind(w, share);
    if (best < 0) break;
    one_block(w, best, &small_done[best]);
  }
  return NULL;
}

static void print_truth(work_t *w, int nw) {
  static const char *names[3] = {"site_a", "site_b", "site_c"};
  for (int i = 0; i < 3; i++) {
    size_t ab = 0, an = 0, lb = 0, ln = 0;
    for (int t = 0; t < nw; t++) {
      ab += w[t].s[i].alloc_b; an += w[t].s[i].alloc_n;
      lb += w[t].s[i].live_b; ln += w[t].s[i].live_n;
    }
    printf("%s alloc %zu %zu live %zu %zu\n", names[i], ab, an, lb, ln);
  }
  fflush(stdout);
}

static int workload(const char *mode, const char *path, int threads) {
  work_t w[16];
  memset(w, 0, sizeof w);
  pthread_t tid[16];
  for (int t = 0; t < threads; t++) {
    w[t].total = 200 * MIB / (size_t)threads;
    w[t].small_only = strcmp(mode, "small") == 0;
    w[t].leak = strcmp(mode, "leak") == 0;
    w[t].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
    if (threads == 1) run(&w[0]);
    else if (pthread_create(&tid[t], NULL, run, &w[t])) { perror("pthread_create"); return 2; }
  }
  for (int t = 0; threads > 1 && t < threads; t++) pthread_join(tid[t], NULL);
  if (w[0].leak) { /* site_a gives back everything: it must not be reported */
    for (int t = 0; t < threads; t++) {
      site_t *a = &w[t].s[0];
      for (size_t k = 0; k < a->kept; k++) free(a->keep[k]);
      a->kept = a->live_b = a->live_n = 0;
    }
    print_truth(w, threads);
    for (int t = 0; t < threads; t++) /* the test's own arrays: only the sites' blocks leak */
      for (int i = 0; i < 3; i++) {
        free(w[t].s[i].keep);
        free(w[t].s[i].size);
      }
    return 0;
  }
  print_truth(w, threads);
  if (kite_prof_dump(path) != 0) { perror("kite_prof_dump"); return 2; }
  return 0;
}

/* Mode churn (above): one short thread's share, each block freed at once. */
static void *churn_run(void *arg) {
  work_t *w = arg;
  const size_t share[3] = {w->total / 10 * 6, w->total / 10 * 3, w->total / 10};
  for (;;) {
    int best = furthest_behind(w, share);
    if (best < 0) break;
    size_t n = 16 + next(&w->seed) % 2033;
    char *p = call_site(best, n);
    if (!p) { perror("malloc"); exit(2); }
    p[0] = p[n - 1] = 1;
    w->s[best].alloc_b += n;
    w->s[best].alloc_n++;
    free(p);
  }
  return NULL;
}

static int churn(const char *path) {
  enum { WAVE = 4, THREADS = 4096 };
  work_t all, w[WAVE];
  memset(&all, 0, sizeof all);
  for (int k = 0; k < THREADS / WAVE; k++) {
    pthread_t tid[WAVE];
    memset(w, 0, sizeof w);
    for (int t = 0; t < WAVE; t++) {
      w[t].total = 256 * MIB / THREADS;
      w[t].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(k * WAVE + t + 1);
      if (pthread_create(&tid[t], NULL, churn_run, &w[t])) { perror("pthread_create"); return 2; }
    }
    for (int t = 0; t < WAVE; t++) {
      pthread_join(tid[t], NULL);
      for (int i = 0; i < 3; i++) {
        all.s[i].alloc_b += w[t].s[i].alloc_b;
        all.s[i].alloc_n += w[t].s[i].alloc_n;
      }
    }
  }
  print_truth(&all, 1);
  if (kite_prof_dump(path) != 0) { perror("kite_prof_dump"); return 2; }
  return 0;
}

/* Mode kinds (above): the truth, then the dump; the heap destroyed, the second dump. */
static int kinds(const char *path) {
  static const char *names[4] = {"site_heap", "site_posix", "site_aligned", "site_memalign"};
  static const size_t align[4] = {16, 64, 256, 1024};
  const size_t share[4] = {64 * MIB / 10 * 4, 64 * MIB / 10 * 2, 64 * MIB / 10 * 2, 64 * MIB / 10 * 2};
  size_t ab[4] = {0}, an[4] = {0}, lb[4] = {0}, ln[4] = {0};
  static void *keep[4][KEEP_MAX];
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  heap = kite_heap_new();
  if (!heap) { perror("kite_heap_new"); return 2; }
  for (int i = 0; i < 4; i++)
    while (ab[i] < share[i]) {
      size_t n = 16 + next(&seed) % 4081;
      if (i == 2) n = (n + 255) & ~(size_t)255; /* aligned_alloc: a multiple of the alignment */
      char *p = i == 0 ? site_heap(n) : i == 1 ? site_posix(n) : i == 2 ? site_aligned(n) : site_memalign(n);
      if (!p || (uintptr_t)p % align[i]) { fprintf(stderr, "%s(%zu): %p\n", names[i], n, (void *)p); return 2; }
      p[0] = p[n - 1] = 1;
      ab[i] += n;
      if (++an[i] % 2 || ln[i] == KEEP_MAX) {
        free(p);
        continue;
      }
      keep[i][ln[i]++] = p;
      lb[i] += n;
    }
  for (int i = 0; i < 4; i++) printf("%s alloc %zu %zu live %zu %zu\n", names[i], ab[i], an[i], lb[i], ln[i]);
  fflush(stdout);
  if (kite_prof_dump(path) != 0) { perror("kite_prof_dump"); return 2; }
  kite_heap_destroy(heap);
  char after[4096];
  snprintf(after, sizeof after, "%s.after", path);
  if (kite_prof_dump(after) != 0) { perror("kite_prof_dump"); return 2; }
  for (int i = 1; i < 4; i++) /* the heap's went with it */
    for (size_t k = 0; k < ln[i]; k++) free(keep[i][k]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: prof_sites mixed|small|fork|leak|churn|kinds PATH [THREADS]\n"); return 2; }
  if (strcmp(argv[1], "kinds") == 0) return kinds(argv[2]);
  if (strcmp(argv[1], "churn") == 0) return churn(argv[2]);
  int threads = argc > 3 ? atoi(argv[3]) : 1;
  if (threads < 1 || threads > 16) threads = 1;
  if (strcmp(argv[1], "fork") != 0) return workload(argv[1], argv[2], threads);
  for (int k = 0; k < 64; k++) free(site_parent(2 * MIB));
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 2; }
  if (pid == 0) _exit(workload("mixed", argv[2], threads));
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 2;
  return WEXITSTATUS(st);
}
