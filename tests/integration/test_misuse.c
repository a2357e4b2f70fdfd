/* tests/integration/test_misuse.c -- misuse that kite must report, never let corrupt a heap.
 *
 * Each case runs in a child process whose stderr goes to a pipe; the parent reads what the
 * child printed and how it ended. Cases:
 *   - free of a foreign pointer: a stack address, a global, an mmap'ed page, an address
 *     past everything kite reserved;
 *   - free of an interior pointer (inside a small, large or huge kite block, not its start)
 *     and realloc of a foreign pointer;
 *   - double free of a small, a large and a huge block (of a huge block also by two threads
 *     at once, 100 rounds); of a small block whose second free
 *     comes from another thread, or whose both frees do; of a small block the program
 *     overwrote while it was free (every byte), from its own thread and from another; of a
 *     small block by its owner and another thread at once, the owner's stores landing
 *     between the other's claim and push (a test hook; test builds only);
 *   - malloc_usable_size of a freed small block, of a stack address and of a pointer inside
 *     a small block (0);
 *   - realloc of a freed small block (freed by its thread or another; a size that fits its
 *     class and one that does not), of an interior pointer of a small or large block, of an
 *     uncarved block start: NULL and errno EINVAL, the block left alone;
 *   - kite_heap_destroy, kite_heap_malloc and kite_heap_calloc of a destroyed heap's handle
 *     after kite_heap_new reused its struct: the new heap's blocks intact, NULL and EINVAL;
 *   - writes after free of a chosen address into every word of freed blocks, then 4,000
 *     allocations: none may return that address or a block handed out twice.
 * Expected (kite's documented behaviour, see src/ and docs/design.md): a report on stderr
 * naming the error and the pointer, then the process keeps working: after the bad call
 * the child allocates, fills and verifies blocks of every size range and exits 0. With
 * KITE_ABORT_ON_ERROR=1 the same misuse aborts (SIGABRT) after the same report.
 * Each case runs in a fresh process (this program re-executed with the case's name), so
 * kite reads KITE_ABORT_ON_ERROR at its start-up. Built against kite_* (core_misuse, via
 * kite-noover) and against the plain names with libkite.so (core_misuse_override).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "../api/api_names.h"
#include "test.h"

static int global_object[16];

/* After the misuse: kite still works. Returns 0 if all is well. */
static int still_works(void) {
  static const size_t sizes[] = {1, 64, 100, 1000, 9000, 70000, 300000, 20 << 20};
  void *p[8];
  for (int i = 0; i < 8; i++) {
    p[i] = A_malloc(sizes[i]);
    if (!p[i]) return 1;
    test_fill(p[i], sizes[i], (uint64_t)i);
  }
  for (int i = 0; i < 8; i++)
    if (!test_verify(p[i], sizes[i], (uint64_t)i)) return 2;
  /* the sizes of the misuse cases many times: a corrupted free list would hand out a block
   * twice, which the patterns would show */
  enum { N = 2000 };
  static unsigned char *q[N];
  for (int i = 0; i < N; i++) {
    size_t n = i % 100 == 0 ? 300000 : i % 2 ? 64 : 100;
    q[i] = A_malloc(n);
    if (!q[i]) return 3;
    memset(q[i], i & 0xff, 64);
  }
  for (int i = 0; i < N; i++)
    if (q[i][0] != (i & 0xff) || q[i][63] != (i & 0xff)) return 4;
  for (int i = 0; i < N; i++) A_free(q[i]);
  for (int i = 0; i < 8; i++) A_free(p[i]);
  return 0;
}

typedef void (*misuse_fn)(void);

/* Tell the parent which pointer the misuse is about, so it can find it in kite's report. */
static void *announce(void *p) {
  fprintf(stderr, "misuse pointer %p\n", p);
  return p;
}

static void free_stack(void) {
  int local[8] = {0};
  A_free_opaque(announce(test_opaque((size_t)1) ? (void *)&local[4] : NULL));
}
static void free_global(void) { A_free_opaque(announce(&global_object[2])); }
static void free_mmap(void) {
  void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED) A_free_opaque(announce((char *)m + 4096));
}
static void free_wild(void) { A_free_opaque(announce((void *)test_opaque((size_t)0x7ff000001230ull))); }
static void free_interior(void) {
  char *p = A_malloc(100);
  A_free_opaque(announce(p + 8));
}
static void free_interior_large(void) {
  char *p = A_malloc(300000);
  A_free_opaque(announce(p + 65536));
}
static void free_interior_huge(void) {
  char *p = A_malloc(40u << 20);
  A_free_opaque(announce(p + 4096));
}
static void realloc_foreign(void) {
  int local[8] = {0};
  void *r = A_realloc_opaque(announce(&local[2]), 100);
  (void)r; /* NULL (reported) or abort; never a block overlapping the stack */
}
static void double_free_small(void) {
  void *p = A_malloc(64);
  void *keep = A_malloc(64);
  A_free_opaque(p);
  A_free_opaque(announce(p));
  A_free(keep);
}
/* A block-aligned pointer into the part of a page not handed out yet: accepting it would
 * let the block be carved and handed out twice later. */
static void free_uncarved(void) {
  enum { N = 2000 };
  static unsigned char *q[N];
  unsigned char *p = A_malloc(16);
  A_free_opaque(announce(p + 16 * 300));
  for (int i = 0; i < N; i++) {
    q[i] = A_malloc(16);
    if (!q[i]) exit(20);
    memcpy(q[i], &i, sizeof i);
  }
  for (int i = 0; i < N; i++) {
    int v;
    memcpy(&v, q[i], sizeof v);
    if (v != i || q[i] == p) exit(21); /* a block handed out twice */
  }
  for (int i = 0; i < N; i++) A_free(q[i]);
  A_free(p);
}
static void *remote_free_body(void *p) {
  A_free_opaque(announce(p));
  return NULL;
}
/* the second free comes from another thread: the block sits on a remote list */
static void double_free_remote(void) {
  void *p = A_malloc(64);
  void *keep = A_malloc(64);
  A_free_opaque(p);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, p);
  pthread_join(t, NULL);
  A_free(keep);
}
/* From another thread (the remote path: classify.h C1, remote.c R1), a block start past the
 * carved blocks, and the start of a one-unit page's partial last block (the spare entry past
 * the last block): neither is a block, both are reported. */
static void free_uncarved_remote(void) {
  unsigned char *p = A_malloc(16);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, p + 16 * 300);
  pthread_join(t, NULL);
  A_free(p);
}
static void free_partial_last_remote(void) {
  enum { UNIT = 65536 }; /* a small page of 48-byte blocks is one unit, its first block at its start */
  unsigned char *p = A_malloc(48);
  size_t bs = A_usable(p);
  if (UNIT % bs == 0) exit(22); /* no partial last block: the case cannot be made */
  unsigned char *start = (unsigned char *)((uintptr_t)p & ~(uintptr_t)(UNIT - 1));
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, start + UNIT / bs * bs);
  pthread_join(t, NULL);
  A_free(p);
}
/* both frees from another thread (the first is a legitimate remote free) */
static void double_free_both_remote(void) {
  void *p = A_malloc(200);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, p);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, remote_free_body, p);
  pthread_join(t, NULL);
}
/* the freed block is overwritten whole (as a write after free would), then freed again:
 * kite decides by the block's entry in the link array, not by anything in the block */
static void double_free_overwritten(void) {
  unsigned char *p = A_malloc(48);
  void *keep = A_malloc(48);
  A_free_opaque(p);
  memset(announce(p), 0, 48);
  A_free_opaque(p);
  A_free(keep);
}
#ifdef KITE_TEST_HOOKS
/* The owner and another thread free the same block at once, in the one order that the
 * claim alone does not settle: the owner read LIVE just before the other thread's claim,
 * and its plain stores land between that claim and the other thread's push (a test hook
 * does the owner's stores there). The push does not look back at the entry (remote.c R3),
 * so the block is on thread_free with the owner's link in its entry, and thread_free's
 * count is above its REMOTE entries (kite_check says so) until the owner's take: the
 * allocations below make it, and it reports the block (R4) and leaves it on the owner's
 * list alone. Then the page is sound and the block is handed out once. */
extern void (*_kite_test_hook_remote_push)(void *p); /* src/remote.h, test builds */
void _kite_test_owner_free_store(void *p);
static void owner_store_hook(void *p) { _kite_test_owner_free_store(p); }
static void double_free_owner_race(void) {
  unsigned char *p = A_malloc(48);
  void *keep = A_malloc(48);
  _kite_test_hook_remote_push = owner_store_hook;
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, p);
  pthread_join(t, NULL);
  _kite_test_hook_remote_push = NULL;
  enum { N = 4096 }; /* three pages' worth of 48-byte blocks: p's page fills, p comes back */
  static void *a[N];
  int seen = 0;
  for (int i = 0; i < N; i++) {
    a[i] = A_malloc(48);
    if (a[i] == (void *)p) seen++;
  }
  if (seen != 1) _exit(41); /* free once: handed out again exactly once */
  for (int i = 0; i < N; i++) A_free(a[i]);
  if (kite_check() != 1) _exit(42);
  A_free(keep);
}
#endif
static void double_free_overwritten_remote(void) {
  unsigned char *p = A_malloc(48);
  void *keep = A_malloc(48);
  A_free_opaque(p);
  memset(announce(p), 0xff, 48);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_body, p);
  pthread_join(t, NULL);
  A_free(keep);
}
static void usable_size_freed(void) {
  void *p = A_malloc(64);
  void *keep = A_malloc(64);
  A_free_opaque(p);
  if (A_usable(announce(p)) != 0) exit(22);
  A_free(keep);
}
/* malloc_usable_size of a pointer that is no block: reported, 0 (exit 26 otherwise) */
static void usable_size_stack(void) {
  int local[8] = {0};
  if (A_usable(announce(test_opaque((size_t)1) ? (void *)&local[4] : NULL)) != 0) exit(26);
}
static void usable_size_interior(void) {
  char *p = A_malloc(100);
  if (A_usable(announce(p + 16)) != 0) exit(26);
  A_free(p);
}
/* A second kite_heap_destroy of heap a, after kite_heap_new made b (kite reuses a's struct
 * for it): reported and ignored; every byte of b's small (six classes), large and huge
 * blocks is intact, b still allocates (new blocks that overlap none of the old ones) and is
 * destroyed cleanly. Exit 27 .. 30 when b was hurt. */
enum { STALE_N = 64 };
#if defined(__SANITIZE_THREAD__)
#define STALE_HUGE ((size_t)1 << 20) /* TSan: a large run (a huge map makes TSan slow: shadow) */
#else
#define STALE_HUGE ((size_t)17 << 20)
#endif
static size_t stale_size(int i) { return i == 0 ? STALE_HUGE : i % 8 == 1 ? 200000 : (size_t)(16 + i % 8 * 40); }
static void heap_destroy_stale(void) {
  kite_heap_t *a = kite_heap_new();
  if (!a || !kite_heap_malloc(a, 100)) exit(27);
  kite_heap_destroy(a);
  kite_heap_t *b = kite_heap_new();
  if (!b) exit(27);
  static unsigned char *blk[2 * STALE_N];
  for (int i = 0; i < STALE_N; i++) {
    blk[i] = kite_heap_malloc(b, stale_size(i));
    if (!blk[i]) exit(27);
    test_fill(blk[i], stale_size(i), (uint64_t)i + 1);
  }
  kite_heap_destroy(announce(a)); /* the misuse */
  for (int i = 0; i < STALE_N; i++) /* b allocates again: a freed page would come back here */
    if (!(blk[STALE_N + i] = kite_heap_malloc(b, stale_size(i)))) exit(28);
  for (int i = 0; i < STALE_N; i++) test_fill(blk[STALE_N + i], stale_size(i), (uint64_t)i + 1000);
  for (int i = 0; i < 2 * STALE_N; i++)
    if (!test_verify(blk[i], stale_size(i % STALE_N), i < STALE_N ? (uint64_t)i + 1 : (uint64_t)i - STALE_N + 1000))
      exit(29);
  kite_heap_destroy(b);
  kite_heap_t *c = kite_heap_new(); /* b's struct again; the heap works */
  void *q = c ? kite_heap_malloc(c, 100) : NULL;
  if (!q) exit(30);
  kite_heap_destroy(c);
}
/* kite_heap_malloc and kite_heap_calloc of a destroyed heap's handle, whose struct another
 * heap reuses: reported, NULL with errno EINVAL (exit 31 otherwise), and that heap keeps its
 * block. */
static void heap_malloc_stale(void) {
  kite_heap_t *a = kite_heap_new();
  if (!a) exit(31);
  kite_heap_destroy(a);
  kite_heap_t *b = kite_heap_new();
  unsigned char *keep = b ? kite_heap_malloc(b, 100) : NULL;
  if (!keep) exit(31);
  memset(keep, 0x5a, 100);
  errno = 0;
  if (kite_heap_malloc(announce(a), 100) != NULL || errno != EINVAL) exit(31);
  errno = 0;
  if (kite_heap_calloc(a, 10, 10) != NULL || errno != EINVAL) exit(31);
  for (int i = 0; i < 100; i++)
    if (keep[i] != 0x5a) exit(31);
  kite_heap_destroy(b);
}
/* realloc of a bad small pointer returns NULL with errno EINVAL (exit 23 / 24 otherwise);
 * the block it names is left alone */
static void expect_realloc_einval(void *p, size_t n) {
  errno = 0;
  void *r = A_realloc_opaque(announce(p), n);
  if (r != NULL) exit(23);
  if (errno != EINVAL) exit(24);
}
/* a freed small block: in place (n fits its class) and moving (n does not) */
static void realloc_freed_small(void) {
  void *p = A_malloc(64);
  void *keep = A_malloc(64);
  A_free_opaque(p);
  expect_realloc_einval(p, 60);
  expect_realloc_einval(p, 1000);
  A_free(keep);
}
/* a small block freed by another thread (its entry is a remote free's, not LIVE) */
static void *remote_plain_free_body(void *p) {
  A_free_opaque(p);
  return NULL;
}
static void realloc_freed_remote(void) {
  void *p = A_malloc(200);
  pthread_t t;
  pthread_create(&t, NULL, remote_plain_free_body, p);
  pthread_join(t, NULL);
  expect_realloc_einval(p, 150);
}
/* an interior pointer of a small block; the block keeps its content */
static void realloc_interior_small(void) {
  unsigned char *p = A_malloc(100);
  memset(p, 0x5a, 100);
  expect_realloc_einval(p + 16, 40);
  for (int i = 0; i < 100; i++)
    if (p[i] != 0x5a) exit(25);
  A_free(p);
}
/* a block start in the part of a page not carved yet: invalid, not "freed" */
static void realloc_uncarved(void) {
  unsigned char *p = A_malloc(16);
  expect_realloc_einval(p + 16 * 300, 16);
  A_free(p);
}
static void realloc_interior_large(void) {
  char *p = A_malloc(300000);
  expect_realloc_einval(p + 65536, 400000);
  A_free(p);
}

/* writes after free cannot steer malloc: freed blocks of 32 bytes get the address of a
 * global in every word; then no allocation returns it, and no block comes out twice */
static __attribute__((unused)) void uaf_steer(void) {
  enum { N = 4000 };
  static uintptr_t target[8];
  static void *q[N];
  void *f[64];
  for (int i = 0; i < 64; i++) f[i] = A_malloc(32);
  for (int i = 0; i < 64; i++) A_free_opaque(f[i]);
  for (int i = 0; i < 64; i++)
    for (int w = 0; w < 4; w++) ((uintptr_t *)f[i])[w] = (uintptr_t)target;
  for (int i = 0; i < N; i++) {
    q[i] = A_malloc(32);
    if (!q[i] || q[i] == (void *)target) exit(23);
    memcpy(q[i], &i, sizeof i);
  }
  for (int i = 0; i < N; i++) {
    int v;
    memcpy(&v, q[i], sizeof v);
    if (v != i) exit(24); /* a block handed out twice */
  }
  for (int i = 0; i < N; i++) A_free(q[i]);
  A_free_opaque(announce(f[0])); /* its block came back through malloc and was freed again */
}
static void double_free_huge(void) {
  void *p = A_malloc(40u << 20);
  A_free_opaque(p);
  A_free_opaque(announce(p));
}
/* two threads free the same huge block at the same moment, round after round; the block is
 * too big for the huge cache, so the winner unmaps it at once: the loser must report, never
 * read the header the winner is unmapping */
static volatile int huge_go;
static void *huge_racer(void *p) {
  while (!__atomic_load_n(&huge_go, __ATOMIC_ACQUIRE)) {
  }
  A_free_opaque(p);
  return NULL;
}
static void double_free_huge_race(void) {
  for (int r = 0; r < 100; r++) {
    void *p = A_malloc(200u << 20);
    if (!p) exit(25);
    if (r == 0) announce(p);
    __atomic_store_n(&huge_go, 0, __ATOMIC_RELAXED);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, huge_racer, p);
    __atomic_store_n(&huge_go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }
}
static void double_free_large(void) {
  void *p = A_malloc(300000);
  A_free_opaque(p);
  A_free_opaque(announce(p));
}

typedef struct {
  const char *name;
  misuse_fn fn;
  const char *expect; /* kite's report: "kite: <expect>: <pointer> (ignored|aborting)" */
  int pending;        /* 1: not detected by the core yet, run only with KITE_TEST_PENDING=1 */
} misuse_case_t;

static const misuse_case_t cases[] = {
    {"free_stack", free_stack, "free(): invalid pointer", 0},
    {"free_global", free_global, "free(): invalid pointer", 0},
    {"free_mmap", free_mmap, "free(): invalid pointer", 0},
    {"free_wild", free_wild, "free(): invalid pointer", 0},
    {"free_interior", free_interior, "free(): invalid pointer", 0},
    {"free_interior_large", free_interior_large, "free(): invalid pointer", 0},
    {"free_interior_huge", free_interior_huge, "free(): invalid pointer", 0},
    {"free_uncarved", free_uncarved, "free(): invalid pointer", 0},
    {"free_uncarved_remote", free_uncarved_remote, "free(): invalid pointer or double free", 0},
    {"free_partial_last_remote", free_partial_last_remote, "free(): invalid pointer or double free", 0},
    {"realloc_foreign", realloc_foreign, "realloc(): invalid pointer", 0},
    {"double_free_small", double_free_small, "free(): invalid pointer or double free", 0},
    {"double_free_large", double_free_large, "free(): invalid pointer or double free", 0},
    {"double_free_huge", double_free_huge, "free(): invalid pointer or double free", 0},
    {"double_free_huge_race", double_free_huge_race, "free(): invalid pointer or double free", 0},
    {"double_free_remote", double_free_remote, "free(): invalid pointer or double free", 0},
    {"double_free_both_remote", double_free_both_remote, "free(): invalid pointer or double free", 0},
    {"double_free_overwritten", double_free_overwritten, "free(): invalid pointer or double free", 0},
    {"double_free_overwritten_remote", double_free_overwritten_remote, "free(): invalid pointer or double free", 0},
#ifdef KITE_TEST_HOOKS
    {"double_free_owner_race", double_free_owner_race, "free(): invalid pointer or double free", 0},
#endif
    {"usable_size_freed", usable_size_freed, "malloc_usable_size(): freed block", 0},
    {"usable_size_stack", usable_size_stack, "malloc_usable_size(): invalid pointer", 0},
    {"usable_size_interior", usable_size_interior, "malloc_usable_size(): invalid pointer", 0},
    {"heap_destroy_stale", heap_destroy_stale, "kite_heap_destroy(): invalid or stale heap", 0},
    {"heap_malloc_stale", heap_malloc_stale, "kite_heap_malloc(): invalid or stale heap", 0},
    {"realloc_freed_small", realloc_freed_small, "realloc(): freed block", 0},
    {"realloc_freed_remote", realloc_freed_remote, "realloc(): freed block", 0},
    {"realloc_interior_small", realloc_interior_small, "realloc(): invalid pointer", 0},
    {"realloc_uncarved", realloc_uncarved, "realloc(): invalid pointer", 0},
    {"realloc_interior_large", realloc_interior_large, "realloc(): invalid pointer", 0},
#if !(defined(KITE_TEST_DEBUG) && KITE_TEST_DEBUG >= 3)
    /* (a KITE_DEBUG=3 build checks freed blocks' fill pattern on reuse and aborts on the
     * write itself: test_core_smoke's fill-pattern test) */
    {"uaf_steer", uaf_steer, "free(): invalid pointer or double free", 0},
#endif
};

/* Runs case `idx` in a fresh process (this program re-executed with the case's name, so
 * that kite reads KITE_ABORT_ON_ERROR at start-up), stderr captured into buf.
 * Returns the wait status. */
static int run_child(size_t idx, int abort_on_error, char *buf, size_t cap) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    if (abort_on_error) setenv("KITE_ABORT_ON_ERROR", "1", 1);
    else unsetenv("KITE_ABORT_ON_ERROR");
    test_execl_self("core_misuse", (char *)cases[idx].name, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t n;
  while (len + 1 < cap && (n = read(fds[0], buf + len, cap - 1 - len)) > 0) len += (size_t)n;
  buf[len] = 0;
  char rest[4096]; /* the rest is drained, not kept: the child must not die of SIGPIPE */
  while (read(fds[0], rest, sizeof rest) > 0) {
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

/* The child's side: the misuse, then proof that kite still works. */
static int child_case(const char *name) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cases[i].name, name) != 0) continue;
    void *warm = A_malloc(32); /* the allocator is initialized before the misuse */
    A_free(warm);
    cases[i].fn();
    int r = still_works();
    return r ? 10 + r : 0;
  }
  return 127;
}

static void check_case(size_t idx, int abort_on_error) {
  const misuse_case_t *c = &cases[idx];
  char out[4096];
  int st = run_child(idx, abort_on_error, out, sizeof out);
  /* the pointer the child announced must appear in kite's report line */
  char ptr[64] = "", line[256];
  const char *a = strstr(out, "misuse pointer ");
  if (a) sscanf(a + 15, "%63s", ptr);
#if defined(__SANITIZE_ADDRESS__)
  /* The cases that write into a freed small block before kite sees the misuse: the ASan
   * build poisons a freed small block (src/tool.h), so that write is ASan's report
   * (use-after-poison at the announced pointer) and the process ends there, before kite's
   * own report. */
  if (c->fn == double_free_overwritten || c->fn == double_free_overwritten_remote) {
    snprintf(line, sizeof line, "ERROR: AddressSanitizer: use-after-poison on address %s ", ptr);
    if (!ptr[0] || !strstr(out, line))
      TEST_FAIL_("%s: no \"%s\" on stderr; got: %s", c->name, line, out);
    else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      TEST_FAIL_("%s: ASan reported the write, and the process exited 0", c->name);
    else
      TEST_PASS_();
    return;
  }
#endif
  snprintf(line, sizeof line, "kite: %s", c->expect);
  const char *rep = strstr(out, line);
  const char *eol = rep ? strchr(rep, '\n') : NULL;
  const char *at = rep && ptr[0] ? strstr(rep, ptr) : NULL;
  const char *how = rep ? strstr(rep, abort_on_error ? "(aborting)" : "(ignored)") : NULL;
  if (!rep || !at || (eol && at > eol) || !how || (eol && how > eol))
    TEST_FAIL_("%s: no report \"%s: %s %s\" on stderr; got: %s", c->name, line, ptr,
               abort_on_error ? "(aborting)" : "(ignored)", out);
  else
    TEST_PASS_();
  if (abort_on_error) {
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) TEST_PASS_();
    else TEST_FAIL_("%s with KITE_ABORT_ON_ERROR=1: status 0x%x, expected SIGABRT", c->name, st);
  } else {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) TEST_PASS_();
    else if (WIFSIGNALED(st))
      TEST_FAIL_("%s: the process died of signal %d; stderr: %s", c->name, WTERMSIG(st), out);
    else
      TEST_FAIL_("%s: the allocator misbehaved afterwards (exit %d)", c->name, WEXITSTATUS(st));
  }
}

static int skip(size_t i) {
  if (!cases[i].pending || getenv("KITE_TEST_PENDING")) return 0;
  fprintf(stderr, "skip %s: not detected by the core yet (KITE_TEST_PENDING=1 runs it)\n",
          cases[i].name);
  return 1;
}

TEST(reported_and_survived) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!skip(i)) check_case(i, 0);
}

TEST(reported_and_aborted) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!skip(i)) check_case(i, 1);
}

int main(int argc, char **argv) {
  if (argc > 1) return child_case(argv[1]);
  test_rng_init(0xbadull);
  RUN(reported_and_survived);
  RUN(reported_and_aborted);
  return test_main_end();
}
