/* tests/integration/test_prof_threads.c -- the heap profiler (src/prof.h) under threads,
 * through the kite_* API of the internals build (every validator on), run with KITE_PROF=
 * in the environment (cmake/prof.cmake), so it runs in the sanitizer builds too: four
 * threads allocate and free small, large and huge blocks (some freed by another thread)
 * while a fifth writes profiles; then every block's content is intact, kite_check()
 * passes, a last profile is a well-formed protobuf stream with samples, every huge block's
 * record goes with its free, and no capture re-entered malloc. Then a first-class heap's
 * blocks and small aligned ones, sampled at a small gap, through the heap's destroy. And
 * the small count's arithmetic, exact between samples.
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include "prof.h"
#include "stack.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define BLOCKS 3000

static void *handoff[THREADS][BLOCKS]; /* blocks each thread leaves to the next one to free */
static volatile int writers_stop;
/* what the threads saw go wrong (test.h's counters belong to the main thread) */
static unsigned long bad_content, failed_dumps;
static char dir[64];

static size_t size_of(uint64_t *x, int k) {
  *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
  if (k % 97 == 0) return (size_t)(20u << 20); /* huge */
  if (k % 13 == 0) return 70000 + *x % 500000;  /* large */
  return 2 + *x % 2000;
}

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
  for (int round = 0; round < 20; round++) {
    for (int k = 0; k < BLOCKS; k++) {
      size_t n = size_of(&x, k + round);
      unsigned char *p = kite_malloc(n);
      if (!p) continue;
      memset(p, (unsigned char)(k + t), n < 64 ? n : 64);
      p[n - 1] = (unsigned char)k;
      if (k % 3 == 0) { /* content checked, then freed here */
        bool ok = p[0] == (unsigned char)(k + t) && p[n - 1] == (unsigned char)k;
        if (!ok) __atomic_add_fetch(&bad_content, 1, __ATOMIC_RELAXED);
        kite_free(p);
      } else if (k % 3 == 1) {
        kite_free(p);
      } else {
        void *old = __atomic_exchange_n(&handoff[(t + 1) % THREADS][k], p, __ATOMIC_ACQ_REL);
        kite_free(old); /* another thread's block, or NULL */
      }
    }
  }
  return NULL;
}

static void *writer(void *arg) {
  (void)arg;
  char path[128];
  for (int i = 0; !__atomic_load_n(&writers_stop, __ATOMIC_ACQUIRE); i++) {
    snprintf(path, sizeof path, "%s/during.pb", dir);
    if (kite_prof_dump(path) != 0) __atomic_add_fetch(&failed_dumps, 1, __ATOMIC_RELAXED);
    usleep(2000);
  }
  return NULL;
}

/* Walk a protobuf stream of length-delimited and varint fields: the count of field 2
 * (samples), or -1 when it is not well formed. */
static long samples_in(const unsigned char *b, size_t len) {
  long samples = 0;
  size_t i = 0;
  while (i < len) {
    uint64_t key = 0, v = 0;
    for (int s = 0; i < len; s += 7) { key |= (uint64_t)(b[i] & 0x7f) << s; if (!(b[i++] & 0x80)) break; }
    for (int s = 0; i < len; s += 7) { v |= (uint64_t)(b[i] & 0x7f) << s; if (!(b[i++] & 0x80)) break; }
    if ((key & 7) == 2) {
      if (v > len - i) return -1;
      i += v;
    } else if ((key & 7) != 0) {
      return -1;
    }
    samples += (key >> 3) == 2;
  }
  return samples;
}

TEST(threads_sample_free_and_dump) {
  snprintf(dir, sizeof dir, "/tmp/kite-prof-threads-%d", (int)getpid());
  assert_int_eq(mkdir(dir, 0700), 0);
  pthread_t w[THREADS], d;
  assert_int_eq(pthread_create(&d, NULL, writer, NULL), 0);
  for (int t = 0; t < THREADS; t++) assert_int_eq(pthread_create(&w[t], NULL, worker, (void *)(intptr_t)t), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(w[t], NULL);
  __atomic_store_n(&writers_stop, 1, __ATOMIC_RELEASE);
  pthread_join(d, NULL);
  expect_uint_eq(bad_content, 0);
  expect_uint_eq(failed_dumps, 0);
  expect_int_eq((kite_check)(), 1);
  char path[128];
  snprintf(path, sizeof path, "%s/after.pb", dir);
  assert_int_eq(kite_prof_dump(path), 0);
  static unsigned char buf[1 << 22];
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  ssize_t len = read(fd, buf, sizeof buf);
  close(fd);
  expect_true(len > 100);
  long samples = samples_in(buf, (size_t)len);
  /* one sample per distinct stack (the small, large and huge paths' own frames differ
   * here, kite being linked in): hundreds of MiB at 512 KiB sample every path */
  expect_true(samples >= 2);
  expect_true(__atomic_load_n(&_kite_stack_reentered, __ATOMIC_RELAXED) == 0);
  for (int t = 0; t < THREADS; t++)
    for (int k = 0; k < BLOCKS; k++) kite_free(handoff[t][k]);
  expect_true(__atomic_load_n(&_kite_prof_huge_live, __ATOMIC_RELAXED) == 0); /* P1: every huge record went */
  expect_int_eq((kite_check)(), 1);
  kite_prof_dump(path);
  unlink(path);
  snprintf(path, sizeof path, "%s/during.pb", dir);
  unlink(path);
  rmdir(dir);
}

/* First-class heaps and small aligned requests are sampled (prof.h): at a 4 KiB gap some of
 * each set are runs of their own (usable size a page or more, for requests below 2 KiB),
 * every block keeps its content and its alignment, and the heap's destroy leaves every
 * structure valid. */
TEST(heap_and_aligned_blocks_sampled) {
  int64_t gap = kite_option_get(KITE_OPTION_PROF_SAMPLE);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, 4096), 0);
  enum { N = 20000 };
  static unsigned char *heap_blocks[N], *aligned[N];
  kite_heap_t *h = kite_heap_new();
  assert_true(h != NULL);
  uint64_t x = 12345;
  unsigned heap_runs = 0, aligned_runs = 0, bad = 0;
  for (int k = 0; k < N; k++) {
    size_t n = size_of(&x, 1) % 2000 + 1, align = (size_t)64 << (k % 5);
    heap_blocks[k] = kite_heap_malloc(h, n);
    void *p = NULL;
    expect_int_eq(kite_posix_memalign(&p, align, n), 0);
    aligned[k] = p;
    if (!heap_blocks[k] || !p || (uintptr_t)p % align) { bad++; continue; }
    memset(heap_blocks[k], k & 0xff, n);
    memset(p, ~k & 0xff, n);
    heap_runs += kite_malloc_usable_size(heap_blocks[k]) >= 4096;
    aligned_runs += kite_malloc_usable_size(p) >= 4096;
    if (k % 2) { /* every other block freed at once, the rest after the checks */
      kite_free(heap_blocks[k]);
      kite_free(p);
      heap_blocks[k] = aligned[k] = NULL;
    }
  }
  expect_uint_eq(bad, 0);
  expect_true(heap_runs > 0);
  expect_true(aligned_runs > 0);
  for (int k = 0; k < N; k += 2)
    if (heap_blocks[k] && aligned[k] && (heap_blocks[k][0] != (k & 0xff) || aligned[k][0] != (~k & 0xff))) bad++;
  expect_uint_eq(bad, 0);
  expect_int_eq((kite_check)(), 1);
  kite_heap_destroy(h); /* its kept blocks go with it */
  for (int k = 0; k < N; k += 2) kite_free(aligned[k]);
  expect_int_eq((kite_check)(), 1);
  char path[128];
  snprintf(path, sizeof path, "/tmp/kite-prof-heap-%d.pb", (int)getpid());
  expect_int_eq(kite_prof_dump(path), 0);
  unlink(path);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, gap), 0);
}

/* The small count's arithmetic (prof.h P6, P7, _kite_prof_counted_page, account_list): a
 * list is counted whole when the slow path hands it out, on the one count the thread's
 * classes share, so that the count plus, over the classes, the class size times (the blocks
 * allocated since, and the blocks left on its current list) stays what was drawn, until the
 * next sample. Local frees go to the page's other list, counted only when a refill hands it
 * out (the quick refill of prof_small, or the generic one). With a gap far beyond what is
 * allocated here, nothing is sampled or cut. One size in the direct range, one above it
 * (which reaches the slow path every time), allocated in turn. */
static int64_t listed_of(unsigned c) {
  const kite_page_t *pg = _kite_heap_tls->queue[c].first;
  int64_t listed = 0;
  for (uint32_t i = pg ? pg->free : KITE_LINK_END; i != KITE_LINK_END && listed <= pg->capacity; i = pg->links[i])
    listed++;
  return listed;
}
static bool has_bit(const uint64_t *set, unsigned c) { return (set[c / 64] >> (c % 64)) & 1; }

enum { SIZES = 2 };
static const size_t count_sizes_n[SIZES] = {48, 3000};

/* drawn - (the count plus the classes' allocated and listed bytes): 0 between samples */
static int64_t counted_drift(const int64_t *allocated, int64_t drawn) {
  int64_t sum = _kite_prof_thread.left_small;
  for (int z = 0; z < SIZES; z++) {
    unsigned c = _kite_class_of(count_sizes_n[z]);
    sum += (int64_t)_kite_class_size_[c] * (allocated[z] + listed_of(c));
  }
  return sum - drawn;
}

typedef struct { unsigned long drift, refills, cut; } count_seen_t;

static void *count_sizes(void *arg) {
  count_seen_t *seen = arg; /* (test.h's counters belong to the main thread) */
  enum { N = 4000 };
  static void *b[SIZES][N];
  unsigned long drift = 0, refills = 0, cut = 0;
  int64_t allocated[SIZES] = {1, 0};
  b[0][0] = kite_malloc(count_sizes_n[0]); /* the thread's first visit: its gap drawn */
  int64_t drawn = counted_drift(allocated, 0);
  for (int round = 0; round < 6; round++) {
    for (int k = 1; k < N; k++) {
      for (int z = 0; z < SIZES; z++) {
        if (b[z][k]) continue;
        unsigned c = _kite_class_of(count_sizes_n[z]);
        uint16_t before = _kite_heap_tls->queue[c].first ? _kite_heap_tls->queue[c].first->free : KITE_LINK_END;
        b[z][k] = kite_malloc(count_sizes_n[z]);
        allocated[z]++;
        refills += before == KITE_LINK_END;
        drift += counted_drift(allocated, drawn) != 0;
        cut += has_bit(_kite_prof_thread.cut, c);
      }
    }
    for (int k = 1 + round % 3; k < N; k += 3) /* local frees: refilled from later */
      for (int z = 0; z < SIZES; z++) {
        kite_free(b[z][k]);
        b[z][k] = NULL;
      }
  }
  for (int z = 0; z < SIZES; z++)
    for (int k = 0; k < N; k++) {
      kite_free(b[z][k]);
      b[z][k] = NULL;
    }
  seen->drift = drift;
  seen->refills = refills;
  seen->cut = cut;
  return NULL;
}

TEST(small_count_is_exact_between_samples) {
  int64_t gap = kite_option_get(KITE_OPTION_PROF_SAMPLE);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, (int64_t)1 << 40), 0);
  pthread_t t; /* a fresh thread: its count not drawn yet */
  count_seen_t seen = {1, 0, 1};
  assert_int_eq(pthread_create(&t, NULL, count_sizes, &seen), 0);
  pthread_join(t, NULL);
  expect_uint_eq(seen.drift, 0);
  expect_uint_eq(seen.cut, 0);
  expect_true(seen.refills > 20);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, gap), 0);
}

/* A list the count ends inside is sampled at the right block (prof.c cut_list, P7): the
 * count set, just before a refill of 48-byte blocks, so that it ends inside block j of what
 * the refill hands out (the refill's own block first), the j blocks before it are plain
 * ones, the next 48-byte request is the sampled one (served by a run of its own, whose
 * usable size is a page), and the next gap starts there; 3000-byte requests in between, on
 * the same count, are not sampled. Both refills: the page's local frees (the quick refill),
 * and a new list. */
typedef struct { int wrong_block, sampled, other_sampled, not_restarted; } straddle_seen_t;

static void straddle(bool quick, int64_t j, straddle_seen_t *seen) {
  enum { N = 3000 };
  static void *b[N];
  void *other[64] = {0};
  size_t n = 48;
  unsigned c = _kite_class_of(n);
  int64_t s = (int64_t)_kite_class_size_[c];
  int k = 0;
  b[k++] = kite_malloc(n);
  while (_kite_heap_tls->queue[c].first->free != KITE_LINK_END && k < N) b[k++] = kite_malloc(n); /* list emptied */
  if (quick)
    for (int i = k - 20; i < k; i++) { /* local frees: the next refill is the quick one */
      kite_free(b[i]);
      b[i] = NULL;
    }
  _kite_prof_thread.left_small = s + j * s + s / 2; /* the refill's block, j more, then half of one */
  int64_t served = 0;
  for (int i = 0; i < 40; i++) {
    void *p = kite_malloc(n);
    other[i] = kite_malloc(3000);
    bool sampled = kite_malloc_usable_size(p) >= 4096;
    if (kite_malloc_usable_size(other[i]) >= 4096) seen->other_sampled++;
    if (sampled) {
      seen->sampled++;
      if (served != j + 1) seen->wrong_block++;
      if (_kite_prof_thread.left_small < ((int64_t)1 << 30) || has_bit(_kite_prof_thread.cut, c)) seen->not_restarted++;
    }
    served++;
    kite_free(p);
  }
  for (int i = 0; i < 40; i++) kite_free(other[i]);
  for (int i = 0; i < k; i++) kite_free(b[i]);
}

static void *straddle_thread(void *arg) {
  straddle_seen_t *seen = arg;
  kite_free(kite_malloc(16)); /* the thread's count drawn (far beyond what is allocated here) */
  straddle(true, 4, seen);
  straddle(false, 7, seen);
  return NULL;
}

TEST(list_straddling_the_count_is_sampled_at_its_block) {
  int64_t gap = kite_option_get(KITE_OPTION_PROF_SAMPLE);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, (int64_t)1 << 40), 0);
  pthread_t t;
  straddle_seen_t seen = {0};
  assert_int_eq(pthread_create(&t, NULL, straddle_thread, &seen), 0);
  pthread_join(t, NULL);
  expect_int_eq(seen.sampled, 2);
  expect_int_eq(seen.wrong_block, 0);
  expect_int_eq(seen.other_sampled, 0);
  expect_int_eq(seen.not_restarted, 0);
  assert_int_eq(kite_option_set(KITE_OPTION_PROF_SAMPLE, gap), 0);
}

/* A sample's weight, 1 / (1 - e^(-s/mean)) (prof.h): bits.h's 1 - e^-x against the series
 * summed to its 40th term in long double, over the x of small blocks (a few bytes to
 * 16 KiB at gaps of 4 KiB and up) and beyond, where the sum stops early. */
TEST(sample_weight_is_exact) {
  double worst = 0;
  for (double x = 1e-9; x < 0.5; x *= 1.01) {
    long double t = x, sum = x;
    for (int i = 2; i <= 40; i++) { t *= -(long double)x / i; sum += t; }
    double err = (double)((_kite_one_minus_exp_neg(x) - sum) / sum);
    if (err < 0) err = -err;
    if (err > worst) worst = err;
  }
  expect_true(worst < 1e-15);
}

TEST(dump_to_a_bad_path_fails_with_errno) {
  errno = 0;
  expect_int_eq(kite_prof_dump("/nonexistent-dir/x.pb"), -1);
  expect_int_eq(errno, ENOENT);
  errno = 0;
  expect_int_eq(kite_prof_dump(NULL), -1);
  expect_int_eq(errno, EINVAL);
}

int main(void) {
  RUN(threads_sample_free_and_dump);
  RUN(heap_and_aligned_blocks_sampled);
  RUN(small_count_is_exact_between_samples);
  RUN(list_straddling_the_count_is_sampled_at_its_block);
  RUN(sample_weight_is_exact);
  RUN(dump_to_a_bad_path_fails_with_errno);
  return test_main_end();
}
