/* tests/fuzz/fuzz_policy.c -- libFuzzer target: op sequences against every lab policy.
 *
 * Input: [policy u8][heap size u16][start offset u8] then ops (fuzz_input.h) on 64 slots.
 * The heap region is a malloc'd buffer of exactly offset + size bytes, so ASan reports any
 * write past the region's end; the offset bytes in front of the heap hold a guard pattern.
 * Every live block has its whole capacity (usable_size) filled with a pattern from its tag and
 * checked before it is freed or reallocated. After every op:
 *  - validate() holds;
 *  - walk() gives blocks in address order that tile the heap (each starts header_size before
 *    its payload and ends where the next one starts), whose footprint is the same after every
 *    op and within 2 * alignment of the heap size; the allocated ones are exactly the live
 *    slots, with capacity = usable_size >= the size asked for; payloads aligned;
 *  - realloc kept min(old, new) bytes, or failed leaving the block intact;
 *  - a malloc or realloc fails only when no free block is large enough.
 * At the end everything is freed: one free block covers the heap again.
 * Any violation aborts with a message naming the policy.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "policy.h"

#define NSLOTS 64
#define MAX_BLOCKS 8192

typedef struct {
  unsigned char *p;
  size_t size, cap;
  uint32_t tag;
} slot_t;

typedef struct {
  unsigned char *payload;
  size_t cap;
  bool is_free;
} wblock_t;

static const lab_policy_t *P;
static slot_t slots[NSLOTS];
static uint32_t next_tag;
static wblock_t blocks[MAX_BLOCKS];
static size_t nblocks;
static bool walk_overflow;

static inline unsigned char pat(uint32_t tag, size_t i) {
  return (unsigned char)(tag * 151u + i * 11u + (i >> 8) + 3);
}

FZ_NOCOV static void fill(slot_t *s) {
  for (size_t i = 0; i < s->cap; i++) s->p[i] = pat(s->tag, i);
}

FZ_NOCOV static void verify(const slot_t *s, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    fz_check(s->p[i] == pat(s->tag, i), "%s: %s: block %p (cap %zu, tag %u) byte %zu is 0x%02x",
             P->name, what, (void *)s->p, s->cap, s->tag, i, s->p[i]);
}

static void walk_cb(void *ctx, void *payload, size_t cap, bool is_free) {
  if (nblocks == MAX_BLOCKS) { walk_overflow = true; return; }
  blocks[nblocks++] = (wblock_t){payload, cap, is_free};
}

FZ_NOCOV static const wblock_t *find_block(const unsigned char *p) {
  size_t lo = 0, hi = nblocks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (blocks[mid].payload < p) lo = mid + 1;
    else hi = mid;
  }
  return lo < nblocks && blocks[lo].payload == p ? &blocks[lo] : NULL;
}

/* validate + walk model; returns the heap footprint (sum of capacity + header). */
static unsigned char *heap_start;

FZ_NOCOV static size_t check_heap(const char *what, size_t heap_size, size_t nlive) {
  fz_check(P->validate(), "%s: validate() failed after %s", P->name, what);
  nblocks = 0;
  walk_overflow = false;
  size_t n = P->walk(walk_cb, NULL);
  fz_check(!walk_overflow && n == nblocks, "%s: walk returned %zu, saw %zu", P->name, n, nblocks);
  size_t bytes = 0, nalloc = 0;
  for (size_t i = 0; i < nblocks; i++) {
    const wblock_t *b = &blocks[i];
    fz_check((uintptr_t)b->payload % P->alignment == 0, "%s: payload %p misaligned", P->name,
             (void *)b->payload);
    if (i) fz_check(blocks[i - 1].payload + blocks[i - 1].cap + P->header_size == b->payload,
                    "%s: after %s: block %zu at %p does not follow %p + %zu", P->name, what, i,
                    (void *)b->payload, (void *)blocks[i - 1].payload, blocks[i - 1].cap);
    bytes += b->cap + P->header_size;
    nalloc += !b->is_free;
  }
  fz_check(nblocks && blocks[0].payload - P->header_size >= heap_start &&
               blocks[nblocks - 1].payload + blocks[nblocks - 1].cap <= heap_start + heap_size,
           "%s: after %s: blocks outside the heap", P->name, what);
  fz_check(bytes <= heap_size && heap_size - bytes < 2 * P->alignment,
           "%s: after %s: blocks cover %zu of %zu bytes", P->name, what, bytes, heap_size);
  fz_check(nalloc == nlive, "%s: after %s: %zu allocated blocks, %zu live", P->name, what, nalloc,
           nlive);
  for (unsigned i = 0; i < NSLOTS; i++) {
    if (!slots[i].p) continue;
    const wblock_t *b = find_block(slots[i].p);
    fz_check(b && !b->is_free && b->cap == slots[i].cap,
             "%s: after %s: live block %p (cap %zu) %s in the walk", P->name, what,
             (void *)slots[i].p, slots[i].cap,
             b ? (b->is_free ? "free" : "has another cap") : "missing");
  }
  return bytes;
}

/* A failed malloc/realloc(n) is legitimate only if no free block could hold n: every policy
 * searches all its free blocks (first, next or best fit). blocks[] still describes the heap as
 * it was before the op (a failed op changes nothing); 64 + 2 * alignment bytes of slack cover
 * headers, footers, minimum block sizes and rounding. */
FZ_NOCOV static void check_no_fit(size_t n, const char *what) {
  size_t slack = 64 + 2 * P->alignment;
  if (strcmp(P->name, "hwx") == 0 || strcmp(P->name, "pow2") == 0) {
    /* The seeds' hwx and pow2: the walk reports free space and unmapped space as one run, small
     * blocks come from whole 4 KiB pages, and a larger request needs a run of unmapped pages
     * that small pages never return to. */
    if (n + 8 > 4096) return;
    slack = 2 * 4096;
  }
  for (size_t i = 0; i < nblocks; i++)
    fz_check(!blocks[i].is_free || blocks[i].cap < n + slack,
             "%s: %s(%zu) failed with a free block of %zu bytes at %p", P->name, what, n,
             blocks[i].cap, (void *)blocks[i].payload);
}

static void take(slot_t *s, void *p, size_t size, const char *what) {
  s->p = p;
  s->size = size;
  s->cap = P->usable_size(p);
  s->tag = ++next_tag;
  fz_check(s->cap >= size, "%s: %s(%zu): capacity %zu", P->name, what, size, s->cap);
  fill(s);
}

static size_t get_size(fz_in_t *in) {
  uint8_t s = fz_u8(in);
  if (s < 160) return s;
  if (s < 240) return fz_u16(in) % 2048;
  return fz_u16(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  fz_in_t in = {data, len, 0};
  const lab_policy_t *const *all = lab_policies();
  size_t npol = 0;
  while (all[npol]) npol++;
  P = all[fz_u8(&in) % npol];
  size_t heap_size = 1 + fz_u16(&in) % 65536;
  size_t off = fz_u8(&in) % 32;
  unsigned char *region = malloc(off + heap_size);
  fz_check(region != NULL, "region");
  memset(region, 0xEE, off);
  heap_start = region + off;
  if (!P->init(region + off, heap_size)) {
    fz_check(heap_size < 1024, "%s: init(%zu bytes at +%zu) refused", P->name, heap_size, off);
    free(region);
    return 0;
  }
  memset(slots, 0, sizeof slots);
  size_t nlive = 0;
  const size_t footprint = check_heap("init", heap_size, 0);

  for (unsigned step = 0; step < 1000 && !in.done; step++) {
    uint8_t op = fz_u8(&in);
    slot_t *s = &slots[fz_u8(&in) % NSLOTS];
    const char *what = "?";
    switch (op % 6) {
    case 0: case 1: { /* malloc into an empty slot */
      what = "malloc";
      if (s->p) break;
      size_t size = get_size(&in);
      void *p = P->malloc(size);
      if (p) { take(s, p, size, "malloc"); nlive++; }
      else check_no_fit(size, "malloc");
      break;
    }
    case 2: case 3: /* free */
      what = "free";
      if (!s->p) { P->free(NULL); break; }
      verify(s, s->cap, "before free");
      P->free(s->p);
      s->p = NULL;
      nlive--;
      break;
    case 4: { /* realloc, also from NULL and to 0 */
      what = "realloc";
      size_t size = get_size(&in);
      if (s->p) verify(s, s->cap, "before realloc");
      void *p = P->realloc(s->p, size);
      if (!s->p) {
        if (p) { take(s, p, size, "realloc(NULL)"); nlive++; }
        else check_no_fit(size, "realloc(NULL)");
      } else if (size == 0) {
        fz_check(p == NULL, "%s: realloc(p, 0) = %p", P->name, p);
        s->p = NULL;
        nlive--;
      } else if (!p) {
        verify(s, s->cap, "after failed realloc");
        check_no_fit(size, "realloc");
      } else {
        size_t keep = s->size < size ? s->size : size;
        slot_t old = *s;
        old.p = p;
        verify(&old, keep, "after realloc");
        take(s, p, size, "realloc");
      }
      break;
    }
    case 5: /* re-check one live block's content and capacity */
      what = "usable_size";
      if (!s->p) break;
      fz_check(P->usable_size(s->p) == s->cap, "%s: usable_size changed", P->name);
      verify(s, s->cap, "live block");
      break;
    }
    size_t fp = check_heap(what, heap_size, nlive);
    fz_check(fp == footprint, "%s: after %s: footprint %zu, was %zu", P->name, what, fp, footprint);
    for (size_t i = 0; i < off; i++)
      fz_check(region[i] == 0xEE, "%s: after %s: guard byte %zu before the heap changed", P->name,
               what, i);
  }

  for (unsigned i = 0; i < NSLOTS; i++) {
    if (!slots[i].p) continue;
    verify(&slots[i], slots[i].cap, "final free");
    P->free(slots[i].p);
    slots[i].p = NULL;
  }
  check_heap("freeing everything", heap_size, 0);
  fz_check(nblocks == 1 && blocks[0].is_free, "%s: %zu blocks after freeing everything", P->name,
           nblocks);
  free(region);
  return 0;
}
