/* tests/api/test_model.c -- random operation sequences checked against a reference model.
 *
 *   core_model [OPS]   (default 200000; KITE_MODEL_OPS in the environment also works)
 *
 * The model is a table of live blocks (pointer, requested size, usable size, alignment,
 * tag). Each step picks an operation of the family at random (malloc, calloc, realloc,
 * reallocarray, aligned_alloc, memalign, posix_memalign, valloc, free, kite_free_sized)
 * with sizes from 0 bytes to huge, and checks the result against the model:
 *   - a new block's usable range [p, p + usable) overlaps no live block's usable range
 *     (checked directly against every live block, not only through patterns);
 *   - usable >= requested, the alignment asked for, kite_owns(p), calloc memory zero;
 *   - the usable size of a block never changes while it lives;
 *   - realloc keeps min(old, new) bytes of content; every block's pattern is verified
 *     before it is freed or reallocated.
 * The seed is printed on failure; KITE_TEST_SEED reproduces a run.
 */
#define _GNU_SOURCE
#include "api_names.h"
#include "test.h"

#define LIVE 512
#define MiB ((size_t)1 << 20)

typedef struct {
  unsigned char *p;
  size_t n, usable, align;
  uint64_t tag;
} live_t;

static live_t live[LIVE];
static uint64_t next_tag = 1;
static size_t huge_live;

static size_t pick_size(void) {
  uint64_t r = test_rng_below(1000);
  if (r < 5) return 0;
  if (r < 700) return 1 + test_rng_below(512);
  if (r < 900) return 513 + test_rng_below(16 << 10);
  if (r < 990) return (16 << 10) + test_rng_below(1 * MiB);
  if (r < 998) return 1 * MiB + test_rng_below(8 * MiB);
  return 16 * MiB + test_rng_below(20 * MiB); /* huge */
}

/* Pattern only the first and last 4 KiB of big blocks (checks stay cheap). */
static void pattern(unsigned char *p, size_t n, uint64_t tag) {
  if (n <= 8192) { test_fill(p, n, tag); return; }
  test_fill(p, 4096, tag);
  test_fill(p + n - 4096, 4096, tag ^ 0x55);
}
static int pattern_ok(const unsigned char *p, size_t n, uint64_t tag) {
  if (n <= 8192) return test_verify(p, n, tag);
  return test_verify(p, 4096, tag) && test_verify(p + n - 4096, 4096, tag ^ 0x55);
}

/* A new block in slot `self`: check it against the model. */
static int admit(int self, unsigned char *p, size_t n, size_t align, const char *op) {
  if (!p) { TEST_FAIL_("%s(%zu) returned NULL", op, n); return 0; }
  size_t us = A_usable(p);
  int ok = 1;
  if (us < n) { TEST_FAIL_("%s(%zu): usable %zu", op, n, us); ok = 0; }
  if (align && (uintptr_t)p % align) { TEST_FAIL_("%s(%zu): %p not aligned to %zu", op, n, (void *)p, align); ok = 0; }
  if (!kite_owns(p)) { TEST_FAIL_("%s(%zu): kite_owns(%p) false", op, n, (void *)p); ok = 0; }
  uintptr_t a = (uintptr_t)p, b = a + (us ? us : 1);
  for (int i = 0; i < LIVE; i++) {
    if (i == self || !live[i].p) continue;
    uintptr_t c = (uintptr_t)live[i].p, d = c + (live[i].usable ? live[i].usable : 1);
    if (a < d && c < b) {
      TEST_FAIL_("%s(%zu) = [%p, +%zu) overlaps live block [%p, +%zu)", op, n, (void *)p, us,
                 (void *)live[i].p, live[i].usable);
      ok = 0;
      break;
    }
  }
  if (ok) TEST_PASS_();
  live[self] = (live_t){p, n, us, align, next_tag++};
  if (n > 16 * MiB) huge_live++;
  return ok;
}

/* Verify a live block before it goes away. */
static void check_live(const live_t *l) {
  if (A_usable(l->p) != l->usable)
    TEST_FAIL_("usable size of %p changed: %zu -> %zu", (void *)l->p, l->usable, A_usable(l->p));
  else if (!pattern_ok(l->p, l->n, l->tag))
    TEST_FAIL_("block %p (%zu bytes, tag %" PRIu64 ") lost its content", (void *)l->p, l->n, l->tag);
  else
    TEST_PASS_();
}

static void release(int i) {
  check_live(&live[i]);
  if (live[i].n > 16 * MiB) huge_live--;
  if (test_rng_below(4) == 0 && !live[i].align) kite_free_sized(live[i].p, live[i].n);
  else A_free(live[i].p);
  live[i].p = NULL;
}

static void step(void) {
  int i = (int)test_rng_below(LIVE);
  if (live[i].p && test_rng_below(3) == 0) { release(i); return; }
  size_t n = pick_size();
  if (n > 16 * MiB && huge_live >= 4) n = 1000; /* bound the memory in use */
  uint64_t op = test_rng_below(100);
  if (live[i].p && op < 30) { /* realloc / reallocarray */
    live_t old = live[i];
    check_live(&old);
    if (old.n > 16 * MiB) huge_live--;
    unsigned char *q = op < 25 ? A_realloc_opaque(old.p, n) : A_reallocarray_opaque(old.p, n ? 1 : 0, n);
    if (n == 0 && op >= 25) { /* reallocarray(p, 0, 0): realloc(p, 0), which frees */
      live[i].p = NULL;
      if (q) TEST_FAIL_("reallocarray(%p, 0, 0) returned %p", (void *)old.p, (void *)q);
      return;
    }
    if (n == 0) {
      live[i].p = NULL;
      if (q) TEST_FAIL_("realloc(%p, 0) returned %p, not NULL", (void *)old.p, (void *)q);
      return;
    }
    live[i].p = NULL;
    if (!admit(i, q, n, n >= 16 ? 16 : 1, "realloc")) { live[i].p = NULL; return; }
    size_t keep = old.n < n ? old.n : n;
    /* the surviving prefix: the head pattern of the old block, as far as it reaches */
    size_t head = old.n <= 8192 ? keep : (keep < 4096 ? keep : 4096);
    if (!test_verify(q, head, old.tag))
      TEST_FAIL_("realloc(%zu -> %zu) lost content", old.n, n);
    pattern(q, n, live[i].tag);
    return;
  }
  if (live[i].p) release(i);
  unsigned char *p;
  size_t align = 0;
  const char *name;
  if (op < 60) { p = A_malloc(n); name = "malloc"; }
  else if (op < 70) {
    p = A_calloc(1, n);
    name = "calloc";
    if (p) {
      size_t bad = 0;
      size_t lim = n < 65536 ? n : 65536;
      for (size_t k = 0; k < lim; k++) bad += p[k] != 0;
      for (size_t k = lim; k < n; k += 4093) bad += p[k] != 0;
      if (bad) TEST_FAIL_("calloc(%zu) = %p not zeroed", n, (void *)p);
    }
  } else if (op < 80) {
    align = (size_t)1 << test_rng_below(21); /* 1 .. 1 MiB */
    p = test_rng_below(2) ? A_aligned_alloc(align, n) : A_memalign(align, n);
    name = "aligned_alloc/memalign";
  } else if (op < 90) {
    align = (size_t)8 << test_rng_below(18);
    void *out = NULL;
    int r = A_posix_memalign(&out, align, n);
    if (r != 0) TEST_FAIL_("posix_memalign(%zu, %zu) = %d", align, n, r);
    p = out;
    name = "posix_memalign";
  } else {
    p = A_valloc(n);
    align = (size_t)sysconf(_SC_PAGESIZE);
    name = "valloc";
  }
  if (admit(i, p, n, align ? align : (n >= 16 ? 16 : 1), name)) pattern(p, n, live[i].tag);
  else live[i].p = NULL;
}

int main(int argc, char **argv) {
  long ops = 200000;
  const char *env = getenv("KITE_MODEL_OPS");
  if (argc > 1) ops = atol(argv[1]);
  else if (env) ops = atol(env);
  test_rng_init(0x30de1ull);
  fprintf(stderr, "variant %s: %ld operations\n", A_VARIANT, ops);
  for (long k = 0; k < ops && test_checks_failed < 20; k++) step();
  for (int i = 0; i < LIVE; i++)
    if (live[i].p) release(i);
  fprintf(stderr, "%s model\n", test_checks_failed ? "FAIL" : "ok  ");
  return test_main_end();
}
