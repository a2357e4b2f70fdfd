/* tests/fuzz/fuzz_kite.c -- libFuzzer target: random operation sequences on kite's API.
 *
 * Input: a sequence of ops, each an opcode byte and its operands (fuzz_input.h), applied to 64
 * slots that each hold at most one live block. The model per slot is (pointer, requested size,
 * alignment, tag): every live block is filled with a pattern derived from its tag and checked
 * byte for byte before it is freed or reallocated, and at the end. After every allocation:
 * the alignment asked for (16 for plain malloc), kite_malloc_usable_size >= requested,
 * kite_owns, calloc's block all zero, realloc kept min(old, new) bytes. Ops: malloc, calloc
 * (including overflowing counts: NULL + ENOMEM), realloc (NULL pointer = malloc, size 0 =
 * free), free, free_sized, aligned_alloc, posix_memalign, memalign, valloc, pvalloc (including
 * invalid alignments: EINVAL), usable_size and owns of a live block, bursts of up to 2048
 * same-size blocks (whole slab pages filled and emptied), impossible sizes (NULL + ENOMEM,
 * a failed realloc or an overflowing reallocarray leaves its block intact), malloc_trim (live
 * blocks intact). free_sized / free_aligned_sized serve op 6 and half the final frees.
 * Sizes range from 0 to a few MiB with rare huge ones (past the 16 MiB buddy limit);
 * alignments are powers of two up to 4 MiB. Live bytes are capped so a run stays within
 * libFuzzer's RSS limit, and once an input has filled or checked 16 MiB its further sizes are
 * small ones (each input stays fast).
 * kite's state persists across inputs (like a long-running program); each input frees what it
 * allocated. Any mismatch aborts with a message.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_input.h"
#include "kite.h"

#define NSLOTS 64
#define LIVE_CAP ((size_t)192 << 20)
/* Bytes filled or verified per input before sizes are limited to small ones: keeps every
 * input well under a second (libFuzzer's speed is what finds bugs). */
#define TOUCH_BUDGET ((size_t)16 << 20)

typedef struct {
  unsigned char *p;
  size_t size;
  size_t align;
  uint32_t tag;
} slot_t;

static slot_t slots[NSLOTS];
static size_t live_bytes;
static uint32_t next_tag;
static size_t touched; /* bytes filled or verified by the current input */

/* The pattern of a block with tag t: byte i is T[(t * 97 + i) % 4096], T a fixed table of
 * 8 KiB (the second half repeats the first), so filling and checking are memcpy/memcmp of
 * up-to-4 KiB pieces: fast even under ASan, and blocks of different tags differ. */
#define PAT_PERIOD 4096
static unsigned char pat_table[2 * PAT_PERIOD];

static void pat_init(void) {
  if (pat_table[0]) return;
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < PAT_PERIOD; i++) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    pat_table[i] = pat_table[i + PAT_PERIOD] = (unsigned char)(x | 1);
  }
}

static inline const unsigned char *pat_at(uint32_t tag, size_t i) {
  return pat_table + ((size_t)tag * 97 + i) % PAT_PERIOD;
}

static void fill(unsigned char *p, size_t n, uint32_t tag) {
  touched += n;
  for (size_t i = 0; i < n; i += PAT_PERIOD)
    memcpy(p + i, pat_at(tag, i), n - i < PAT_PERIOD ? n - i : PAT_PERIOD);
}

static void verify(const unsigned char *p, size_t n, uint32_t tag, const char *what) {
  touched += n;
  for (size_t i = 0; i < n; i += PAT_PERIOD) {
    size_t len = n - i < PAT_PERIOD ? n - i : PAT_PERIOD;
    if (memcmp(p + i, pat_at(tag, i), len) == 0) continue;
    for (size_t j = i; j < i + len; j++)
      fz_check(p[j] == *pat_at(tag, j),
               "%s: block %p (%zu bytes, tag %u) byte %zu is 0x%02x, want 0x%02x", what,
               (const void *)p, n, tag, j, p[j], *pat_at(tag, j));
  }
}

/* Sizes: mostly small, sometimes around the small/large border and up to 4 MiB, rarely huge. */
static size_t get_size(fz_in_t *in) {
  uint8_t s = fz_u8(in);
  if (touched > TOUCH_BUDGET && s >= 176) s = 112 + s % 64;
  if (s < 112) return fz_u8(in);
  if (s < 176) return fz_u16(in) % 4097;
  if (s < 232) return fz_u32(in) % (70u << 10);
  if (s < 248) return fz_u32(in) % (1u << 20);
  if (s < 255) return fz_u32(in) % (4u << 20);
  return (16u << 20) - (64u << 10) + fz_u32(in) % (1u << 20);
}

/* Alignment: a power of two 1 .. 4 MiB; with a rare non-power-of-two or zero (EINVAL). */
static size_t get_align(fz_in_t *in, int *valid) {
  uint8_t a = fz_u8(in);
  *valid = 1;
  if (a == 255) { *valid = 0; return 0; }
  if (a == 254) { *valid = 0; return (size_t)3 << (fz_u8(in) % 20); } /* never a power of 2 */
  return (size_t)1 << (a % 23);
}

static void check_new(slot_t *s, const char *what) {
  fz_check(s->p != NULL, "%s(%zu, align %zu) returned NULL (errno %d)", what, s->size, s->align,
           errno);
  size_t al = s->align < 16 ? 16 : s->align;
  fz_check(((uintptr_t)s->p & (al - 1)) == 0, "%s(%zu): %p not aligned to %zu", what, s->size,
           (void *)s->p, al);
  size_t us = kite_malloc_usable_size(s->p);
  fz_check(us >= s->size, "%s(%zu): usable size %zu", what, s->size, us);
  fz_check(kite_owns(s->p), "%s(%zu): kite_owns(%p) false", what, s->size, (void *)s->p);
}

static void release(slot_t *s, int sized) {
  if (!s->p) return;
  verify(s->p, s->size, s->tag, "before free");
  if (sized && s->align == 0) kite_free_sized(s->p, s->size);
  else if (sized) kite_free_aligned_sized(s->p, s->align, s->size);
  else kite_free(s->p);
  live_bytes -= s->size;
  s->p = NULL;
}

static void store(slot_t *s, void *p, size_t size, size_t align, const char *what) {
  s->p = p;
  s->size = size;
  s->align = align;
  s->tag = ++next_tag;
  check_new(s, what);
  live_bytes += size;
  fill(s->p, size, s->tag);
}

/* COUNT (u16 % 2048 + 1, at most 8 MiB in all) blocks of SIZE (u8 selector: small classes), each filled with its own
 * tag, then freed in one of four orders (forward, backward, odd then even, from the middle),
 * each checked just before its free. Enough blocks to fill several slab pages of one class,
 * so pages become full, get freed empty and are reused. */
static void burst(fz_in_t *in) {
  static unsigned char *ps[2048];
  size_t count = fz_u16(in) % 2048 + 1;
  uint8_t sel = fz_u8(in);
  size_t size = sel < 192 ? sel : (size_t)(sel - 191) * 1024;
  uint8_t order = fz_u8(in) % 4;
  /* at most 8 MiB a burst (4 MiB past the input's byte budget): one-block pages stay few */
  size_t cap = (touched > TOUCH_BUDGET ? (size_t)4 << 20 : (size_t)8 << 20) / (size + 1) + 1;
  if (count > cap) count = cap;
  uint32_t base = next_tag;
  next_tag += (uint32_t)count;
  for (size_t i = 0; i < count; i++) {
    ps[i] = kite_malloc(size);
    fz_check(ps[i] != NULL, "burst malloc(%zu) #%zu NULL", size, i);
    fz_check(kite_malloc_usable_size(ps[i]) >= size, "burst usable size");
    fill(ps[i], size, base + (uint32_t)i);
  }
  for (size_t k = 0; k < count; k++) {
    size_t i = k;
    switch (order) {
    case 1: i = count - 1 - k; break;
    case 2: i = k < count / 2 ? 2 * k + 1 : 2 * (k - count / 2); break;
    case 3: i = (k + count / 2) % count; break;
    }
    verify(ps[i], size, base + (uint32_t)i, "burst block");
    kite_free(ps[i]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  fz_in_t in = {data, len, 0};
  touched = 0;
  pat_init();
  for (unsigned step = 0; step < 4096 && !in.done; step++) {
    uint8_t op = fz_u8(&in);
    slot_t *s = &slots[fz_u8(&in) % NSLOTS];
    size_t size, align;
    int valid;
    void *p;
    switch (op % 14) {
    case 0: case 1: /* malloc */
      size = get_size(&in);
      release(s, 0);
      if (live_bytes + size > LIVE_CAP) break;
      store(s, kite_malloc(size), size, 0, "malloc");
      break;
    case 2: { /* calloc */
      size_t n = fz_u8(&in) % 17, each = get_size(&in);
      release(s, 0);
      if (n == 16) { /* overflowing product */
        errno = 0;
        p = kite_calloc((SIZE_MAX / 3) + (each | 1), 4);
        fz_check(p == NULL && errno == ENOMEM, "calloc overflow: %p errno %d", p, errno);
        break;
      }
      if (n && each > (16u << 20) / n) each = (16u << 20) / n;
      if (live_bytes + n * each > LIVE_CAP) break;
      p = kite_calloc(n, each);
      fz_check(p != NULL, "calloc(%zu, %zu) NULL", n, each);
      touched += n * each;
      for (size_t i = 0; i < n * each; i += PAT_PERIOD) {
        static const unsigned char zero[PAT_PERIOD];
        size_t l = n * each - i < PAT_PERIOD ? n * each - i : PAT_PERIOD;
        if (memcmp((unsigned char *)p + i, zero, l) == 0) continue;
        for (size_t j = i; j < i + l; j++)
          fz_check(((unsigned char *)p)[j] == 0, "calloc(%zu, %zu): byte %zu is 0x%02x", n, each,
                   j, ((unsigned char *)p)[j]);
      }
      store(s, p, n * each, 0, "calloc");
      break;
    }
    case 3: case 4: { /* realloc */
      size = get_size(&in);
      size_t old = s->p ? s->size : 0;
      if (s->p) verify(s->p, s->size, s->tag, "before realloc");
      if (live_bytes - old + size > LIVE_CAP) break;
      if (s->p && size == 0) { /* C semantics here: frees, returns NULL */
        p = kite_realloc(s->p, 0);
        fz_check(p == NULL, "realloc(p, 0) = %p", p);
        live_bytes -= s->size;
        s->p = NULL;
        break;
      }
      /* op 4 goes through reallocarray(p, size / 8, 8) + remainder-free sizes */
      if (op % 14 == 4 && size % 8 == 0) p = kite_reallocarray(s->p, size / 8, 8);
      else p = kite_realloc(s->p, size);
      fz_check(p != NULL, "realloc(%p, %zu) NULL", (void *)s->p, size);
      if (s->p) {
        size_t keep = old < size ? old : size;
        verify(p, keep, s->tag, "after realloc");
        live_bytes -= old;
      }
      s->p = NULL;
      store(s, p, size, 0, "realloc");
      break;
    }
    case 5: /* free (of NULL when the slot is empty: a no-op) */
      if (!s->p) kite_free(NULL);
      release(s, 0);
      break;
    case 6: /* free_sized */
      release(s, 1);
      break;
    case 7: /* aligned_alloc */
      align = get_align(&in, &valid);
      size = get_size(&in);
      release(s, 0);
      if (live_bytes + size > LIVE_CAP) break;
      errno = 0;
      p = kite_aligned_alloc(align, size);
      if (!valid) {
        fz_check(p == NULL && errno == EINVAL, "aligned_alloc(%zu): %p errno %d", align, p, errno);
        break;
      }
      store(s, p, size, align, "aligned_alloc");
      break;
    case 8: { /* posix_memalign */
      align = get_align(&in, &valid);
      size = get_size(&in);
      release(s, 0);
      if (live_bytes + size > LIVE_CAP) break;
      p = (void *)0x1234;
      int rc = kite_posix_memalign(&p, align, size);
      if (!valid || align < sizeof(void *)) {
        fz_check(rc == EINVAL && p == (void *)0x1234, "posix_memalign(%zu) = %d", align, rc);
        break;
      }
      fz_check(rc == 0, "posix_memalign(%zu, %zu) = %d", align, size, rc);
      store(s, p, size, align, "posix_memalign");
      break;
    }
    case 9: /* memalign, valloc, pvalloc */
      align = get_align(&in, &valid);
      size = get_size(&in);
      release(s, 0);
      if (live_bytes + size + 4096 > LIVE_CAP) break;
      if (align & 1) {
        store(s, kite_valloc(size), size, 4096, "valloc");
      } else if (align & 2) {
        p = kite_pvalloc(size);
        store(s, p, size ? (size + 4095) & ~(size_t)4095 : 4096, 4096, "pvalloc");
      } else {
        errno = 0;
        p = kite_memalign(align, size);
        if (!valid) {
          fz_check(p == NULL && errno == EINVAL, "memalign(%zu): %p errno %d", align, p, errno);
          break;
        }
        store(s, p, size, align, "memalign");
      }
      break;
    case 10: case 11: /* queries on a live block */
      if (!s->p) break;
      fz_check(kite_malloc_usable_size(s->p) >= s->size, "usable_size %zu < %zu",
               kite_malloc_usable_size(s->p), s->size);
      fz_check(kite_owns(s->p), "kite_owns(%p) false for a live block", (void *)s->p);
      verify(s->p, s->size, s->tag, "live block");
      break;
    case 12: /* burst: many blocks of one size (fills pages, frees them empty) */
      burst(&in);
      break;
    case 13: { /* impossible sizes: NULL and ENOMEM, nothing else changes; malloc_trim */
      uint16_t v = fz_u16(&in);
      if (v & 1) {
        kite_malloc_trim(v >> 1);
        for (unsigned i = 0; i < NSLOTS; i++)
          if (slots[i].p) verify(slots[i].p, slots[i].size, slots[i].tag, "after malloc_trim");
        break;
      }
      size = (SIZE_MAX >> 1) + 1 + ((size_t)v << 20);
      errno = 0;
      p = kite_malloc(size);
      fz_check(p == NULL && errno == ENOMEM, "malloc(%zu) = %p errno %d", size, p, errno);
      if (!s->p) break;
      errno = 0;
      p = kite_realloc(s->p, size);
      fz_check(p == NULL && errno == ENOMEM, "realloc(p, %zu) = %p errno %d", size, p, errno);
      verify(s->p, s->size, s->tag, "after failed realloc");
      errno = 0;
      p = kite_reallocarray(s->p, (SIZE_MAX >> 4) + v, 32);
      fz_check(p == NULL && errno == ENOMEM, "reallocarray overflow = %p errno %d", p, errno);
      verify(s->p, s->size, s->tag, "after failed reallocarray");
      fz_check(kite_owns(s->p), "kite_owns false after a failed realloc");
      break;
    }
    }
  }
  for (unsigned i = 0; i < NSLOTS; i++) release(&slots[i], i & 1);
  fz_check(live_bytes == 0, "live bytes %zu after freeing everything", live_bytes);
  return 0;
}
