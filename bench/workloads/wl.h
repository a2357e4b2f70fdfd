/* bench/workloads/wl.h -- the small toolkit every kite benchmark workload shares.
 *
 * A workload is one C program run under LD_PRELOAD with whichever malloc is being measured,
 * so it uses only the standard malloc family and pthreads. Every workload:
 *   - takes `-h`/`--help` (usage), `-t THREADS`, `-n SIZE` (its main size knob), `-s SEED`, plus a few
 *     options of its own (see its usage text);
 *   - draws all randomness from a seeded xorshift generator (wl_rng_t), one per thread, so a
 *     run is reproducible for a given (seed, threads) pair;
 *   - writes a pattern into every block it allocates and verifies it before freeing, and ends
 *     with a self-check: `checksum: <hex> ok` and exit 0, or a line starting with `WRONG:`
 *     and exit WL_EXIT_WRONG (3). A timing line `time: <seconds> s` precedes it.
 * The benchmark runner (bench/run.py) classifies exit 3 / "WRONG" as a wrong result, any
 * other non-zero exit as a failure and a signal as a crash; only clean runs count as times.
 *
 * Nothing here allocates except through the standard family, and nothing is global except
 * the option values (written by main before any thread starts).
 */
#ifndef KITE_BENCH_WL_H
#define KITE_BENCH_WL_H
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WL_EXIT_WRONG 3

/* xorshift64* : fast, good enough for picking slots and sizes; never seeded with 0. */
typedef struct wl_rng_s { uint64_t s; } wl_rng_t;

static inline void wl_rng_seed(wl_rng_t *r, uint64_t seed, uint64_t stream) {
  /* splitmix64 of (seed, stream) so per-thread streams do not overlap trivially */
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  r->s = z ? z : 0x2545f4914f6cdd1dull;
}
static inline uint64_t wl_rng_next(wl_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  r->s = x;
  return x * 2685821657736338717ull;
}
/* Uniform in [0, n) (n > 0); the multiply-shift avoids a division on the hot path. */
static inline uint64_t wl_rng_below(wl_rng_t *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)wl_rng_next(r) * n) >> 64);
}
/* Uniform in [lo, hi]. */
static inline uint64_t wl_rng_range(wl_rng_t *r, uint64_t lo, uint64_t hi) {
  return lo + wl_rng_below(r, hi - lo + 1);
}

/* A "Field:  N kB" line of a /proc file (e.g. /proc/self/status, smaps_rollup) in MiB, or
 * -1 when the file or the field is missing. */
static inline double wl_proc_mib(const char *path, const char *field) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  size_t k = strlen(field);
  double v = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, k) == 0 && line[k] == ':') {
      v = strtod(line + k + 1, NULL) / 1024.0;
      break;
    }
  fclose(f);
  return v;
}

static inline double wl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Block stamps: a block of n >= 16 bytes carries (tag, n) in its first 16 bytes, and a tag
 * byte at its end when there is room past those; smaller blocks carry what fits. wl_stamp writes, wl_stamp_ok checks.
 * Cheap (three stores), so the workload measures the allocator, not memset. */
static inline void wl_stamp(void *p, size_t n, uint64_t tag) {
  unsigned char *b = (unsigned char *)p;
  if (n >= 8) {
    memcpy(b, &tag, 8);
    if (n >= 16) {
      uint64_t len = (uint64_t)n;
      memcpy(b + 8, &len, 8);
    }
  } else if (n > 0) {
    b[0] = (unsigned char)tag;
  }
  size_t head = n >= 16 ? 16 : n >= 8 ? 8 : 1;
  if (n > head) b[n - 1] = (unsigned char)(tag ^ 0x5a);
}
static inline int wl_stamp_ok(const void *p, size_t n, uint64_t tag) {
  const unsigned char *b = (const unsigned char *)p;
  if (n >= 16) {
    uint64_t h[2];
    memcpy(h, b, 16);
    if (h[0] != tag || h[1] != (uint64_t)n) return 0;
  } else if (n >= 8) {
    uint64_t t;
    memcpy(&t, b, 8);
    if (t != tag) return 0;
  } else if (n > 0) {
    if (b[0] != (unsigned char)tag) return 0;
  }
  size_t head = n >= 16 ? 16 : n >= 8 ? 8 : 1;
  return n <= head || b[n - 1] == (unsigned char)(tag ^ 0x5a);
}

/* Self-describing blocks, for workloads that pass blocks between threads with nothing but
 * the pointer. A block of n bytes (WL_SB_MIN <= n <= WL_SB_MAX) carries tag =
 * (serial << 24) | n in its first 8 bytes and ~tag in the next 8; one byte at every 4 KiB
 * page past the head (but its last byte), so a large block's pages are really touched; and a tag byte at its
 * end. wl_sb_check reads the size back from the block and returns it, or 0 when any of
 * those stamps is wrong (a flipped bit anywhere in the head changes tag or ~tag). */
#define WL_SB_MIN 16
#define WL_SB_MAX ((1u << 24) - 1)
#define WL_SB_PAGE 4096

static inline void wl_sb_fill(void *p, size_t n, uint64_t serial) {
  unsigned char *b = (unsigned char *)p;
  uint64_t tag = (serial << 24) | (uint64_t)n, inv = ~tag;
  memcpy(b, &tag, 8);
  memcpy(b + 8, &inv, 8);
  for (size_t off = WL_SB_PAGE; off + 1 < n; off += WL_SB_PAGE)
    b[off] = (unsigned char)(serial + off / WL_SB_PAGE);
  if (n > 16) b[n - 1] = (unsigned char)(tag ^ 0x5a);
}
static inline size_t wl_sb_check(const void *p) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t tag, inv;
  memcpy(&tag, b, 8);
  memcpy(&inv, b + 8, 8);
  size_t n = (size_t)(tag & WL_SB_MAX);
  uint64_t serial = tag >> 24;
  if (inv != ~tag || n < WL_SB_MIN) return 0;
  for (size_t off = WL_SB_PAGE; off + 1 < n; off += WL_SB_PAGE)
    if (b[off] != (unsigned char)(serial + off / WL_SB_PAGE)) return 0;
  if (n > 16 && b[n - 1] != (unsigned char)(tag ^ 0x5a)) return 0;
  return n;
}

/* Fold a value into a running checksum (order-dependent; use per thread, then combine with
 * wl_mix in thread-index order or with + when the order is not deterministic). */
static inline uint64_t wl_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

/* Out of memory is not a benchmark result: report and exit 2 (a FAIL, not a WRONG). */
static inline void *wl_oom(size_t n) {
  fprintf(stderr, "out of memory allocating %zu bytes\n", n);
  exit(2);
}
static inline void *wl_malloc(size_t n) {
  void *p = malloc(n);
  if (!p && n) wl_oom(n);
  return p;
}
static inline void *wl_realloc(void *q, size_t n) {
  void *p = realloc(q, n);
  if (!p && n) wl_oom(n);
  return p;
}

/* Common options. Each workload sets the defaults before calling wl_parse, and passes the
 * letters of its own extra options (each taking a numeric argument) in `extra`, e.g. "ir";
 * their values land in wl_opt_extra['i'] and so on. */
typedef struct wl_opts_s {
  long threads, size;
  uint64_t seed;
  long extra[128];
  int extra_set[128];
} wl_opts_t;

static inline long wl_parse_long(const char *prog, char opt, const char *arg) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 0);
  if (errno || end == arg || *end || v < 0) {
    fprintf(stderr, "%s: -%c needs a non-negative integer, got '%s' (see -h)\n", prog, opt, arg);
    exit(2);
  }
  return v;
}

/* Parses argv into o. `usage` is printed for -h/--help (exit 0) and, on stderr, for a bad
 * option or argument (exit 2, the usage-error status of every kite tool). */
static inline void wl_parse(int argc, char **argv, wl_opts_t *o, const char *extra,
                            const char *usage) {
  char spec[64] = "ht:n:s:";
  size_t k = strlen(spec);
  for (const char *e = extra; *e && k + 2 < sizeof spec; e++) {
    spec[k++] = *e;
    spec[k++] = ':';
  }
  spec[k] = 0;
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, spec, longopts, NULL)) != -1) {
    switch (c) {
      case 'h': fputs(usage, stdout); exit(0);
      case 't': o->threads = wl_parse_long(argv[0], 't', optarg); break;
      case 'n': o->size = wl_parse_long(argv[0], 'n', optarg); break;
      case 's': o->seed = (uint64_t)wl_parse_long(argv[0], 's', optarg); break;
      case '?': fputs(usage, stderr); exit(2);
      default:
        o->extra[c & 127] = wl_parse_long(argv[0], (char)c, optarg);
        o->extra_set[c & 127] = 1;
        break;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
    fputs(usage, stderr);
    exit(2);
  }
  if (o->threads < 1) o->threads = 1;
  if (o->threads > 1024) {
    fprintf(stderr, "%s: at most 1024 threads\n", argv[0]);
    exit(2);
  }
}

/* Starts n threads running fn(arg_i) with arg_i = base + i*stride, and joins them. */
static inline void wl_run_threads(long n, void *(*fn)(void *), void *base, size_t stride) {
  pthread_t *t = (pthread_t *)wl_malloc((size_t)n * sizeof *t);
  for (long i = 0; i < n; i++) {
    int e = pthread_create(&t[i], NULL, fn, (char *)base + (size_t)i * stride);
    if (e) {
      fprintf(stderr, "pthread_create: %s\n", strerror(e));
      exit(2);
    }
  }
  for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
  free(t);
}

/* The closing lines: timing, then the verdict. Returns the exit status for main. */
/* The cache-* workloads' step: allocate a `size`-byte object, write every byte `writes`
 * times (pass w writes w + b + id, so each pass really stores), check the last pass, add the
 * bytes read to *sum and each mismatch to *bad, free the object. */
static inline void wl_scribble(long size, long writes, long id, uint64_t *sum, long *bad) {
  volatile unsigned char *p = (volatile unsigned char *)wl_malloc((size_t)size);
  for (long w = 0; w < writes; w++)
    for (long b = 0; b < size; b++) p[b] = (unsigned char)(w + b + id);
  unsigned char want = (unsigned char)(writes - 1 + id);
  for (long b = 0; b < size; b++) {
    if (writes && p[b] != (unsigned char)(want + b)) (*bad)++;
    *sum += p[b];
  }
  free((void *)p);
}

static inline int wl_finish(double seconds, uint64_t checksum, long errors, const char *what) {
  printf("time: %.6f s\n", seconds);
  if (errors) {
    printf("WRONG: %ld %s\n", errors, what);
    fflush(stdout);
    return WL_EXIT_WRONG;
  }
  printf("checksum: %016" PRIx64 " ok\n", checksum);
  fflush(stdout);
  return 0;
}
/* Fold the thread records ts[0..n) (stride bytes apart, each with a uint64_t checksum at
 * sum_off and a long error count at bad_off) into *sum and *bad: the checksums with wl_mix
 * in thread-index order when mix (each thread's sum is deterministic), else added (the
 * order is not); the error counts added. */
static inline void wl_fold(const void *ts, long n, size_t stride, size_t sum_off, size_t bad_off, bool mix,
                           uint64_t *sum, long *bad) {
  for (long i = 0; i < n; i++) {
    const char *rec = (const char *)ts + (size_t)i * stride;
    uint64_t s;
    long b;
    memcpy(&s, rec + sum_off, sizeof s);
    memcpy(&b, rec + bad_off, sizeof b);
    *sum = mix ? wl_mix(*sum, s) : *sum + s;
    *bad += b;
  }
}
/* wl_fold of an array of records with fields `sum` and `bad`, mixed in thread order. */
#define WL_FOLD(ts, n, sump, badp)                                                              \
  wl_fold((ts), (n), sizeof *(ts), offsetof(__typeof__(*(ts)), sum), offsetof(__typeof__(*(ts)), bad), \
          true, (sump), (badp))

/* The common ending of the workloads whose thread records carry `uint64_t sum` and `long
 * bad`: run fn once per record of ts[0..n), time the run, fold the records' sums and error
 * counts (wl_fold, mix as there), free ts and finish as wl_finish does. */
static inline int wl_run_and_finish(void *ts, long n, size_t stride, void *(*fn)(void *),
                                    size_t sum_off, size_t bad_off, bool mix, const char *what) {
  double t0 = wl_now();
  wl_run_threads(n, fn, ts, stride);
  double t1 = wl_now();
  uint64_t sum = 0;
  long bad = 0;
  wl_fold(ts, n, stride, sum_off, bad_off, mix, &sum, &bad);
  free(ts);
  return wl_finish(t1 - t0, sum, bad, what);
}
/* The sums added (threads whose sums depend on the scheduling) ... */
#define WL_RUN_AND_FINISH(ts, n, fn, what)                                               \
  wl_run_and_finish((ts), (n), sizeof *(ts), (fn), offsetof(__typeof__(*(ts)), sum),   \
                    offsetof(__typeof__(*(ts)), bad), false, (what))
/* ... or mixed in thread order (each thread's sum deterministic). */
#define WL_RUN_AND_FINISH_MIXED(ts, n, fn, what)                                         \
  wl_run_and_finish((ts), (n), sizeof *(ts), (fn), offsetof(__typeof__(*(ts)), sum),   \
                    offsetof(__typeof__(*(ts)), bad), true, (what))

#endif
