/* tests/introspect/test_introspect.c -- statistics and heap introspection.
 *
 * Built twice: introspect (kite_* names, kite-noover; also in the ASan build) checks the
 * block walks; introspect_override (-DKITE_TEST_PLAIN, plain names, libkite.so) also checks
 * glibc's names served by kite: mallinfo2, mallinfo, mallopt, malloc_info.
 *
 * Modes (for the Python checks in test_stats.py):
 *   test_introspect            the C checks
 *   test_introspect json N     allocate N blocks of 100 bytes, 3 of 100 KiB, 1 of 20 MiB
 *                              (also N frees from a second thread) and print
 *                              kite_stats_print_json(1); exits without freeing
 *   test_introspect xml        (override build) malloc_info(0, stdout)
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>
#include "api_names.h"
#include "test.h"
#ifndef KITE_TEST_PLAIN
#include "visit.h" /* the statistics field table (kite-noover exposes it) */
#endif

/* What kite_stats_print(fd) / kite_stats_print_json(fd) write, in a static buffer. */
static char printed[1 << 16];
static const char *print_to_buffer(void (*print)(int)) {
  FILE *f = tmpfile();
  if (!f) return "";
  print(fileno(f));
  rewind(f);
  size_t n = fread(printed, 1, sizeof printed - 1, f);
  printed[n] = 0;
  fclose(f);
  return printed;
}

/* Both printers say which process they describe: its pid and program name. */
TEST(stats_name_the_process) {
  char want[256];
  snprintf(want, sizeof want, "kite statistics (pid %d, program %s)\n", (int)getpid(), program_invocation_short_name);
  const char *text = print_to_buffer(kite_stats_print);
  expect_true(strncmp(text, want, strlen(want)) == 0);
  snprintf(want, sizeof want, "\"pid\": %d, \"program\": \"%s\"", (int)getpid(), program_invocation_short_name);
  const char *json = print_to_buffer(kite_stats_print_json);
  if (!strstr(json, want)) fprintf(stderr, "  wanted %s in: %.200s\n", want, json);
  expect_true(strstr(json, want) != NULL);
}

#ifndef KITE_TEST_PLAIN
/* The field table is complete (visit.h V1): every word of kite_gstats_t is read by some
 * field, so a counter that no printer shows fails here; every field is printed by the text
 * ("  label: ") and the JSON ("key" in its group), and reaches kite_stats_get with the value
 * of a snapshot taken just before; every field of kite_stats_t is some field's. */
TEST(stat_fields_complete) {
  for (unsigned w = 0; w < sizeof(kite_gstats_t) / sizeof(uint64_t); w++) {
    bool read = false;
    for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
      const kite_stat_field_t *f = &_kite_stat_fields[i];
      if ((f->src == KITE_SRC_COUNTER && f->at == w) ||
          (f->src == KITE_SRC_CLASSES && w >= f->at && w < f->at + (unsigned)KITE_CLASSES)) read = true;
    }
    if (!read) fprintf(stderr, "  word %u of kite_gstats_t is in no statistics field\n", w);
    expect_true(read);
  }
  bool got[sizeof(kite_stats_t) / sizeof(unsigned long long)] = {0};
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    unsigned k = _kite_stat_fields[i].get / sizeof(unsigned long long);
    assert_true(k < sizeof got / sizeof got[0]);
    expect_true(!got[k]);
    got[k] = true;
  }
  for (unsigned k = 0; k < sizeof got / sizeof got[0]; k++) expect_true(got[k]);

  void *keep[3] = {A_malloc(100), A_malloc(100 << 10), A_malloc((size_t)20 << 20)};
  const char *text = print_to_buffer(kite_stats_print);
  char text_copy[1 << 16];
  snprintf(text_copy, sizeof text_copy, "%s", text);
  const char *json = print_to_buffer(kite_stats_print_json);
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    const kite_stat_field_t *f = &_kite_stat_fields[i];
    char want[160];
    snprintf(want, sizeof want, "\n  %s: ", f->label);
    if (!strstr(text_copy, want)) fprintf(stderr, "  text lacks %s\n", f->label);
    expect_true(strstr(text_copy, want) != NULL);
    const char *in = json;
    if (*f->group) {
      snprintf(want, sizeof want, "\"%s\": {", f->group);
      in = strstr(json, want);
      expect_true(in != NULL);
      if (!in) continue;
    }
    snprintf(want, sizeof want, "\"%s\": ", f->key);
    const char *at = strstr(in, want), *end = *f->group ? strchr(in, '}') : NULL;
    if (!at || (end && at > end)) fprintf(stderr, "  JSON lacks %s.%s\n", f->group, f->key);
    expect_true(at != NULL && (!end || at < end));
  }
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  kite_stats_t st;
  memset(&st, 0xff, sizeof st);
  kite_stats_get(&st);
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    unsigned long long v = *(unsigned long long *)((char *)&st + _kite_stat_fields[i].get);
    if (v != sn.v[i]) fprintf(stderr, "  kite_stats_get: %s %llu, snapshot %llu\n", _kite_stat_fields[i].label, v,
                              (unsigned long long)sn.v[i]);
    expect_uint_eq(v, sn.v[i]);
  }
  expect_true(st.live_blocks >= 3 && st.huge_live_blocks >= 1 && st.large_live_blocks >= 1);
  expect_uint_eq(st.live_blocks, st.small_live_blocks + st.large_live_blocks + st.huge_live_blocks);
  for (int i = 0; i < 3; i++) A_free(keep[i]);
}
#endif

#define NSET 600
static void *set[NSET];
static size_t set_size[NSET];
static bool set_live[NSET];
static int seen[NSET];
static unsigned long seen_other, seen_bad_size;
static int stop_after;

static int find(const void *p) {
  for (int i = 0; i < NSET; i++) if (set[i] == p) return i;
  return -1;
}

/* Records visits of the set's blocks; allocates nothing. */
static bool record(void *block, size_t usable, void *arg) {
  (void)arg;
  int i = find(block);
  if (i < 0) { seen_other++; }
  else {
    seen[i]++;
    if (usable != A_usable(block) || usable < set_size[i]) seen_bad_size++;
  }
  return stop_after <= 0 || --stop_after > 0;
}

static void reset_seen(void) {
  memset(seen, 0, sizeof seen);
  seen_other = seen_bad_size = 0;
  stop_after = 0;
}

static size_t pick_size(int i) {
  static const size_t sizes[] = {1, 16, 24, 100, 512, 1000, 1500, 4000, 9000, 30000, 65536};
  return sizes[i % (sizeof sizes / sizeof sizes[0])] + (size_t)(i % 7);
}

/* The calling thread's heap: exactly the live small blocks of the set are seen, once each. */
TEST(visit_thread_heap) {
  for (int i = 0; i < NSET; i++) {
    set_size[i] = pick_size(i) > 65536 ? 65536 : pick_size(i);
    set[i] = A_malloc(set_size[i]);
    assert_true(set[i] != NULL);
    set_live[i] = true;
  }
  for (int i = 0; i < NSET; i += 3) { A_free(set[i]); set_live[i] = false; }
  reset_seen();
  expect_true(kite_heap_visit(NULL, record, NULL));
  int wrong = 0;
  for (int i = 0; i < NSET; i++) wrong += seen[i] != (set_live[i] ? 1 : 0);
  expect_int_eq(wrong, 0);
  expect_uint_eq(seen_bad_size, 0);
  /* stopping early */
  reset_seen();
  stop_after = 5;
  expect_true(!kite_heap_visit(NULL, record, NULL));
  int n = 0;
  for (int i = 0; i < NSET; i++) n += seen[i];
  expect_int_eq(n + (int)seen_other, 5);
  for (int i = 0; i < NSET; i++) if (set_live[i]) A_free(set[i]);
  memset(set, 0, sizeof set);
}

/* A first-class heap holds only what we put in it: the walk sees exactly that, large and
 * huge blocks included. */
TEST(visit_first_class_heap) {
  kite_heap_t *h = kite_heap_new();
  assert_true(h != NULL);
  for (int i = 0; i < 200; i++) {
    set_size[i] = i == 7 ? ((size_t)20 << 20) : (i % 50 == 0 ? 200000 : pick_size(i));
    set[i] = kite_heap_malloc(h, set_size[i]);
    assert_true(set[i] != NULL);
    set_live[i] = true;
  }
  for (int i = 0; i < 200; i += 4) { A_free(set[i]); set_live[i] = false; }
  reset_seen();
  expect_true(kite_heap_visit(h, record, NULL));
  int wrong = 0;
  for (int i = 0; i < 200; i++) wrong += seen[i] != (set_live[i] ? 1 : 0);
  expect_int_eq(wrong, 0);
  expect_uint_eq(seen_other, 0);
  expect_uint_eq(seen_bad_size, 0);
  kite_heap_destroy(h);
  memset(set, 0, sizeof set);
}

static void *free_half(void *arg) {
  (void)arg;
  for (int i = 0; i < NSET; i += 2) A_free(set[i]);
  return NULL;
}

/* Blocks freed by another thread sit in the pages' thread_free lists: not live. And the
 * process-wide walk sees the large and huge blocks too. */
TEST(visit_remote_frees_and_all) {
  for (int i = 0; i < NSET; i++) {
    set_size[i] = i == 1 ? ((size_t)20 << 20) : (i == 3 ? 300000 : 48 + (size_t)(i % 5) * 16);
    set[i] = A_malloc(set_size[i]);
    assert_true(set[i] != NULL);
    set_live[i] = i % 2 != 0;
  }
  pthread_t t;
  assert_int_eq(pthread_create(&t, NULL, free_half, NULL), 0);
  pthread_join(t, NULL);
  reset_seen();
  expect_true(kite_heap_visit(NULL, record, NULL));
  int wrong = 0;
  for (int i = 0; i < NSET; i++) if (i != 1 && i != 3) wrong += seen[i] != (set_live[i] ? 1 : 0);
  expect_int_eq(wrong, 0);
  expect_int_eq(seen[1], 0); /* huge and large blocks belong to no thread heap */
  expect_int_eq(seen[3], 0);
  reset_seen();
  expect_true(kite_visit_all(record, NULL));
  wrong = 0;
  for (int i = 0; i < NSET; i++) wrong += seen[i] != (set_live[i] ? 1 : 0);
  expect_int_eq(wrong, 0);
  expect_uint_eq(seen_bad_size, 0);
#ifdef KITE_TEST_PLAIN
  expect_true(seen_other > 0); /* the other blocks of the process (stdio's buffer) */
#endif
  for (int i = 1; i < NSET; i += 2) A_free(set[i]);
  reset_seen();
  expect_true(kite_visit_all(record, NULL));
  int n = 0;
  for (int i = 0; i < NSET; i++) n += seen[i];
  expect_int_eq(n, 0);
  memset(set, 0, sizeof set);
}

#ifdef KITE_TEST_PLAIN
/* mallinfo2 gives kite's figures; the old mallinfo the same ones as ints. */
TEST(mallinfo2_figures) {
  struct mallinfo2 a = mallinfo2();
  expect_true(a.arena > 0);
  expect_uint_eq(a.fordblks, a.arena - a.uordblks);
  expect_true(a.usmblks >= a.arena);
  enum { N = 1000 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = malloc(200);
  void *big = malloc((size_t)40 << 20);
  void *mid = malloc(500000);
  struct mallinfo2 b = mallinfo2();
  expect_true(b.uordblks >= a.uordblks + N * 200 + ((size_t)40 << 20) + 500000);
  expect_uint_eq(b.hblks, a.hblks + 1);
  expect_uint_eq(b.hblkhd, a.hblkhd + malloc_usable_size(big));
  expect_uint_eq(b.fordblks, b.arena - b.uordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
  expect_uint_eq((size_t)m.uordblks, b.uordblks);
  expect_uint_eq((size_t)m.hblks, b.hblks);
  expect_uint_eq((size_t)m.arena, b.arena);
  for (int i = 0; i < N; i++) free(p[i]);
  free(big);
  free(mid);
  struct mallinfo2 c = mallinfo2();
  expect_true(c.uordblks + N * 200 + ((size_t)40 << 20) + 500000 <= b.uordblks);
  expect_uint_eq(c.hblks, a.hblks);
  expect_uint_eq(c.hblkhd, a.hblkhd);
}

TEST(mallopt_params) {
  /* M_TRIM_THRESHOLD: 0 -> purge delay 0, negative -> -1, positive -> the start-up delay
   * (this process's environment sets none: the default, 10), whatever came before */
  long delay = kite_option_get(KITE_OPTION_PURGE_DELAY_MS);
  expect_int_eq(delay, 10);
  expect_int_eq(mallopt(M_TRIM_THRESHOLD, 0), 1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), 0);
  expect_int_eq(mallopt(M_TRIM_THRESHOLD, 128 << 10), 1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), delay);
  expect_int_eq(mallopt(M_TRIM_THRESHOLD, -1), 1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), -1);
  expect_int_eq(mallopt(M_TRIM_THRESHOLD, 1 << 20), 1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), delay);
  expect_int_eq(kite_option_set(KITE_OPTION_PURGE_DELAY_MS, 500), 0);
  expect_int_eq(mallopt(M_TRIM_THRESHOLD, 1), 1);
  expect_int_eq(kite_option_get(KITE_OPTION_PURGE_DELAY_MS), delay);
  expect_int_eq(mallopt(M_ARENA_MAX, 2), 1);
  expect_int_eq(mallopt(M_ARENA_TEST, 1), 1);
  expect_int_eq(mallopt(M_MMAP_THRESHOLD, 16 << 20), 1);
  expect_int_eq(mallopt(M_MMAP_THRESHOLD, 128 << 10), 0);
  expect_int_eq(mallopt(M_MMAP_MAX, 0), 0);
  expect_int_eq(mallopt(M_TOP_PAD, 4096), 0);
  expect_int_eq(mallopt(M_PERTURB, 0x55), 0);
  expect_int_eq(mallopt(12345, 1), 0);
}

/* malloc_info writes kite's document (the Python check parses it), and refuses options. */
TEST(malloc_info_doc) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_true(f != NULL);
  void *p = malloc(777);
  expect_int_eq(malloc_info(0, f), 0);
  fclose(f);
  expect_true(buf && strncmp(buf, "<malloc version=\"kite-1\"", 24) == 0);
  expect_true(buf && strstr(buf, "<size class=\"") != NULL);
  expect_true(buf && strstr(buf, "<system type=\"current\" size=\"") != NULL);
  expect_true(buf && len > 9 && strcmp(buf + len - 10, "</malloc>\n") == 0);
  free(buf);
  free(p);
  errno = 0;
  expect_int_eq(malloc_info(1, stdout), -1);
  expect_int_eq(errno, EINVAL);
}
#endif

static void *json_thread(void *arg) {
  (void)arg;
  return A_malloc(40);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "json") == 0) {
    long n = argc >= 3 ? atol(argv[2]) : 1000;
    for (long i = 0; i < n; i++) (void)!A_malloc(100);
    for (int i = 0; i < 3; i++) (void)!A_malloc(100 << 10);
    (void)!A_malloc((size_t)20 << 20);
    pthread_t t;
    void *r;
    pthread_create(&t, NULL, json_thread, NULL);
    pthread_join(t, &r);
    kite_stats_print_json(1);
    return 0;
  }
#ifdef KITE_TEST_PLAIN
  if (argc >= 2 && strcmp(argv[1], "xml") == 0) {
    for (int i = 0; i < 100; i++) (void)!malloc(50);
    fflush(stdout);
    return malloc_info(0, stdout) == 0 ? 0 : 1;
  }
#endif
  RUN(visit_thread_heap);
  RUN(visit_first_class_heap);
  RUN(visit_remote_frees_and_all);
  RUN(stats_name_the_process);
#ifndef KITE_TEST_PLAIN
  RUN(stat_fields_complete);
#endif
#ifdef KITE_TEST_PLAIN
  RUN(mallinfo2_figures);
  RUN(mallopt_params);
  RUN(malloc_info_doc);
#endif
  return test_main_end();
}
