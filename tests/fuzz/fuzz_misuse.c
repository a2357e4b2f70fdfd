/* tests/fuzz/fuzz_misuse.c -- libFuzzer target: kite's API driven with misuse among normal
 * operations. Built twice (cmake/fuzz.cmake): fuzz_misuse_secure links the secure build
 * (KITE_SECURE=1, src/secure.c), fuzz_misuse the default build.
 *
 * Normal ops (malloc, calloc, realloc, aligned, free) on 48 slots, each live block filled
 * with a pattern of its tag and checked before it is freed or moved. Misuse ops:
 *   double free of a recently freed block (same thread), and of a live block by this thread
 *   and a helper thread at the same moment; a write after free (an attacker's address, or
 *   bytes) into a small block freed within the last 32 frees (a freed large run may be
 *   decommitted and counted clean: a write into it is out of the secure build's reach); an overflow of 1..16 bytes past a
 *   live block's usable size, then its free; a free of an address that is not kite's.
 * The property, checked after every allocation: the block is kite's (kite_owns), it is not
 * inside the attacker's target array, and it overlaps no other live block; live blocks keep
 * their contents.
 * Secure target: each misuse must be reported exactly when it happens (double frees, the
 * racing one included, exactly once; an overflow at its free, when it changed a byte of the
 * canary; a foreign free) -- the test hook _kite_secure_error_hook counts reports instead of
 * aborting, and the operation is skipped. Writes after free into the bytes the secure build
 * zeroes (secure.h: a block's first 64 bytes and the 8 before its canary) are found later
 * (when the block leaves the quarantine or is reused) and the block is then kept out of
 * use; the others are not found, and the property must hold regardless. The harness undoes
 * the bytes an overflow wrote beyond the canary (into the neighbour) once it was reported,
 * as the aborted program would never have used them.
 * Default target (FUZZ_MISUSE_ALL=1, as cmake/fuzz.cmake builds it: the link-array core
 * keeps its free lists out of the blocks): the double, racing and foreign frees (reported
 * and ignored: not counted here) and the writes after free, under the same property. The
 * overflow op is the secure target's only: without a canary, its bytes land in the
 * neighbour's data, which the live-content check would blame.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_input.h"
#include "kite.h"

#ifndef FUZZ_SECURE
#define FUZZ_SECURE 0
#endif
#ifndef FUZZ_MISUSE_ALL
#define FUZZ_MISUSE_ALL FUZZ_SECURE
#endif

#define NSLOTS 48
#define NGHOSTS 16
#define QUARANTINE_SAFE 32 /* writes after free only into blocks freed this recently */
#define SMALL_LIMIT (65536 - 8) /* largest request the secure build serves with a canary */

typedef struct { unsigned char *p; size_t size, usable; uint32_t tag; int small; } slot_t;
typedef struct { unsigned char *p; size_t usable; uint64_t freed_at; int small; } ghost_t;

static slot_t slots[NSLOTS];
static ghost_t ghosts[NGHOSTS];
/* The 8-byte spans written after free, newest last. A freed small block's page may go back
 * to the OS (decommitted: it then counts as clean) before the write lands, which faults the
 * page in again with those bytes: calloc may later hand them out without zeroing. That is
 * the program's own write reaching only itself, so calloc's zero check forgives a nonzero
 * byte inside one of these spans, and no other. */
#define NWRITES 4096
static uintptr_t uaf_spans[NWRITES];
static unsigned uaf_n;
static int uaf_written(const unsigned char *b) {
  for (unsigned i = 0; i < NWRITES && i < uaf_n; i++)
    if ((uintptr_t)b - uaf_spans[i] < 8) return 1;
  return 0;
}
static uint64_t frees; /* frees (and moving reallocs) of this thread */
static uint32_t next_tag;
static unsigned char target[4096] __attribute__((aligned(64))); /* the attacker's */
static atomic_ulong reports;   /* misuse reported when it happened */
#if FUZZ_SECURE
static atomic_ulong uaf_found; /* writes after free found later (at a free or a malloc) */
#endif

#if FUZZ_SECURE
extern void (*_kite_secure_error_hook)(const char *kind, const void *p);
static void on_report(const char *kind, const void *p) {
  (void)p;
  atomic_fetch_add(strncmp(kind, "write after free", 16) == 0 ? &uaf_found : &reports, 1);
}
#endif

static unsigned char pat(uint32_t tag, size_t i) { return (unsigned char)((tag * 131u + i * 7u) | 1u); }

FZ_NOCOV static void fill(slot_t *s) {
  for (size_t i = 0; i < s->size; i++) s->p[i] = pat(s->tag, i);
}
FZ_NOCOV static void verify(const slot_t *s) {
  for (size_t i = 0; i < s->size; i++)
    fz_check(s->p[i] == pat(s->tag, i), "block %p (%zu bytes) byte %zu changed", (void *)s->p, s->size, i);
}

/* The property of a block just handed out. */
FZ_NOCOV static void check_new(const slot_t *n) {
  uintptr_t a = (uintptr_t)n->p;
  fz_check(!(a + n->usable > (uintptr_t)target && a < (uintptr_t)target + sizeof target),
           "malloc returned the attacker's address %p", (void *)n->p);
  fz_check(kite_owns(n->p), "malloc returned %p, not a kite block", (void *)n->p);
  for (int i = 0; i < NSLOTS; i++) {
    const slot_t *s = &slots[i];
    if (!s->p || s == n) continue;
    uintptr_t b = (uintptr_t)s->p;
    fz_check(a + n->usable <= b || b + s->usable <= a, "new block %p+%zu overlaps live %p+%zu",
             (void *)n->p, n->usable, (void *)s->p, s->usable);
  }
}

/* small: the block has a canary after it (secure build), not a guard page */
static void take(slot_t *s, void *p, size_t size, int small) {
  fz_check(p != NULL, "allocation of %zu bytes failed (errno %d)", size, errno);
  s->p = p;
  s->small = small && size <= SMALL_LIMIT;
  s->size = size;
  s->usable = kite_malloc_usable_size(p);
  fz_check(s->usable >= size, "usable %zu < %zu", s->usable, size);
  s->tag = next_tag++;
  check_new(s);
  fill(s);
}

static void ghost_add(unsigned char *p, size_t usable, int small) {
  ghost_t *g = &ghosts[frees % NGHOSTS];
  g->p = p; g->usable = usable; g->freed_at = frees; g->small = small;
  frees++;
}

static void release(slot_t *s) {
  verify(s);
  kite_free(s->p);
  ghost_add(s->p, s->usable, s->small);
  s->p = NULL;
}

/* Is [p, p+n) clear of every live block? */
FZ_NOCOV static int clear_of_live(const unsigned char *p, size_t n) {
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].p && p < slots[i].p + slots[i].usable && slots[i].p < p + n) return 0;
  return 1;
}

static size_t get_size(fz_in_t *in) {
  uint8_t s = fz_u8(in);
  if (s < 160) return fz_u8(in);
  if (s < 230) return fz_u16(in) % 4097;
  if (s < 250) return fz_u32(in) % (70u << 10);
  return fz_u32(in) % (2u << 20);
}

/* ---- the racing double free: a helper thread frees the same block as the main thread ---- */
#if FUZZ_MISUSE_ALL
static pthread_t helper;
static atomic_int go, gone;
static void *volatile victim;
static void *helper_main(void *arg) {
  (void)arg;
  for (int round = 1;; round++) {
    while (atomic_load(&go) < round) { }
    kite_free(victim);
    atomic_store(&gone, round);
  }
  return NULL;
}

static void race_free(slot_t *s) {
  static int round, started;
  if (!started) { pthread_create(&helper, NULL, helper_main, NULL); started = 1; }
  verify(s);
  unsigned long before = atomic_load(&reports);
  victim = s->p;
  atomic_store(&go, ++round);
  kite_free(s->p);
  while (atomic_load(&gone) < round) { }
  ghost_add(s->p, s->usable, s->small);
  s->p = NULL;
#if FUZZ_SECURE
  fz_check(atomic_load(&reports) == before + 1, "racing double free: %lu reports, want 1",
           atomic_load(&reports) - before);
#else
  (void)before;
#endif
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  fz_in_t in = {data, len, 0};
#if FUZZ_SECURE
  _kite_secure_error_hook = on_report;
#endif
  while (!in.done) {
    uint8_t op = fz_u8(&in) % 12;
    slot_t *s = &slots[fz_u8(&in) % NSLOTS];
    unsigned long before = atomic_load(&reports);
    (void)before; /* judged only in the secure target */
    switch (op) {
    case 0: case 1: case 2: /* malloc (frees what the slot held) */
      if (s->p) release(s);
      { size_t n = get_size(&in); take(s, kite_malloc(n), n, 1); }
      break;
    case 3: /* calloc */
      if (s->p) release(s);
      {
        size_t n = get_size(&in);
        unsigned char *p = kite_calloc(1, n);
        for (size_t i = 0; p && i < n; i++) fz_check(p[i] == 0 || uaf_written(p + i), "calloc(1, %zu) = %p: byte %zu is 0x%02x (usable %zu)", n, (void *)p, i, p[i], kite_malloc_usable_size(p));
        take(s, p, n, 1);
      }
      break;
    case 4: /* realloc */
      if (!s->p) break;
      {
        size_t n = get_size(&in) + 1, keep = n < s->size ? n : s->size;
        verify(s);
        unsigned char *old = s->p;
        size_t old_usable = s->usable;
        int old_small = s->small;
        unsigned char *p = kite_realloc(s->p, n);
        fz_check(p != NULL, "realloc to %zu failed", n);
        for (size_t i = 0; i < keep; i++) fz_check(p[i] == pat(s->tag, i), "realloc lost byte %zu", i);
        s->p = NULL;
        if (p != old) ghost_add(old, old_usable, old_small);
        take(s, p, n, 1);
      }
      break;
    case 5: /* posix_memalign */
      if (s->p) release(s);
      {
        size_t al = (size_t)16 << (fz_u8(&in) % 13), n = get_size(&in);
        void *p = NULL;
        fz_check(kite_posix_memalign(&p, al, n) == 0, "posix_memalign(%zu, %zu)", al, n);
        fz_check(((uintptr_t)p & (al - 1)) == 0, "alignment %zu", al);
        take(s, p, n, al <= 65536);
      }
      break;
    case 6: /* free */
      if (s->p) release(s);
      break;
    case 7: { /* double free of a recently freed block that nothing live covers */
      ghost_t *g = &ghosts[fz_u8(&in) % NGHOSTS];
      if (!g->p || !clear_of_live(g->p, g->usable ? g->usable : 1)) break;
      kite_free(g->p);
#if FUZZ_SECURE
      fz_check(atomic_load(&reports) == before + 1, "double free of %p not reported", (void *)g->p);
#endif
      break;
    }
    case 8: /* a free of an address kite never gave out */
      kite_free(target + 64 * (fz_u8(&in) % 32));
#if FUZZ_SECURE
      fz_check(atomic_load(&reports) == before + 1, "foreign free not reported");
#endif
      break;
#if FUZZ_MISUSE_ALL
    case 9: /* racing double free */
      if (s->p) race_free(s);
      break;
    case 10: { /* write after free into a block still held back */
      ghost_t *g = &ghosts[fz_u8(&in) % NGHOSTS];
      uint8_t how = fz_u8(&in);
      if (!g->p || !g->small || g->usable < 8 || frees - g->freed_at > QUARANTINE_SAFE || !clear_of_live(g->p, g->usable)) break;
      size_t off = how & 1 ? 0 : (fz_u16(&in) % (g->usable - 7)) & ~(size_t)7;
      uintptr_t v = how & 2 ? (uintptr_t)(target + 64 * (how >> 2)) : fz_u32(&in) | 1u;
      memcpy(g->p + off, &v, sizeof v);
      uaf_spans[uaf_n++ % NWRITES] = (uintptr_t)(g->p + off);
      g->p = NULL; /* left dirty: the secure build keeps it out of use once it notices */
      break;
    }
#endif
#if FUZZ_SECURE
    case 11: { /* overflow of 1..16 bytes past a live small block, then its free */
      if (!s->p || !s->small) break;
      size_t k = fz_u8(&in) % 16 + 1;
      uint8_t b = fz_u8(&in);
      unsigned char saved[16], *end = s->p + s->usable;
      if ((((uintptr_t)end + 8) & 0xffff) == 0 && k > 8) k = 8; /* the run ends there */
      memcpy(saved, end, k);
      int changed = 0;
      for (size_t i = 0; i < k && i < 8; i++) changed |= end[i] != (unsigned char)(b + i);
      for (size_t i = 0; i < k; i++) end[i] = (unsigned char)(b + i);
      verify(s);
      kite_free(s->p);
      fz_check(atomic_load(&reports) == before + (unsigned long)changed,
               "overflow of %zu bytes past %p: %lu reports, want %d", k, (void *)s->p,
               atomic_load(&reports) - before, changed);
      if (k > 8) memcpy(end + 8, saved + 8, k - 8); /* undo what reached the neighbour */
      if (!changed) ghost_add(s->p, s->usable, s->small); /* an ordinary free */
      s->p = NULL; /* else reported: kept out of use */
      break;
    }
#endif
    default:
      break;
    }
  }
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].p) release(&slots[i]);
  return 0;
}
