/* src/secure_layout.h -- the secure build (libkite-secure.so, compile definition
 * KITE_SECURE=1): its constants, the format of its small blocks (zeroed head, canary marks)
 * and the two layout hooks the lower layers call under `#if KITE_SECURE`. The default build
 * (KITE_SECURE 0) compiles none of this.
 *
 * What the secure build adds (docs/security.md measures it):
 *   - guard pages: PROT_NONE between an arena's metadata (descriptor table, arena header,
 *     buddy metadata) and its first user unit (arena.c), and after every large and huge
 *     block (secure.c asks for one page more and protects it, and a large run's unused tail;
 *     a freed large run its thread keeps for reuse keeps its guard);
 *   - randomized layout: the blocks of a fresh carve are linked in a random order, and a
 *     fresh run is a random one of the lowest KITE_SECURE_RUN_CHOICES free blocks of its
 *     order (the hooks below);
 *   - a canary in the last 8 bytes of every small block (a class chosen with room for it),
 *     checked at free and cleared by one compare-and-swap, so a block is freed once whatever
 *     the threads do; zero on free, checked when the block is handed out again (write after
 *     free): the first 64 bytes of a block (one cache line: where objects keep the pointers
 *     and lengths a write after free aims at) and the 8 bytes before the canary, so all of
 *     a block of up to 80 bytes; a per-thread ring of 64 blocks delays reuse (secure.c);
 *   - every error reported as "kite: secure: KIND: 0x..." and then abort.
 * The wrappers live in secure.c (entry layer; its contract is kite.h); in this build
 * alloc.c and free.c serve them under internal names (alloc.h). This header is in the
 * bottom layer: it includes types and secret only, and what it calls is theirs (the canary
 * keys and the random generator live with the other secrets, secret.c), so arena.c, page.c
 * and visit.c use it without reaching up.
 *
 * Invariants (secure build): every small block that is not handed out is zero in the bytes
 * _kite_secure_zero_head names (all but its last 8 bytes up to 80-byte blocks), and its last
 * 8 bytes hold the freed mark canary(block) + 2 (written at free), or the carved mark
 * (canary(block) + 2) ^ 1 when it was never handed out (written at carve; the core keeps its
 * free lists outside the blocks); a handed-out small block has canary(block) in its last
 * 8 bytes; a block in a quarantine is like a freed one.
 */
#ifndef KITE_SECURE_LAYOUT_H
#define KITE_SECURE_LAYOUT_H
#include "types.h"
#include "secret.h"
#include <string.h>

#ifndef KITE_SECURE
/* 1: the secure build (libkite-secure.so); 0: the default build. */
#define KITE_SECURE 0
#endif

#ifndef KITE_SECURE_FLOOR
/* 1 (with KITE_SECURE=1): a build for measuring only, never installed or tested as a
 * protection: the canary (a plain check at free, no claim) and the zero/check of a block's
 * head, nothing else (no quarantine, no random carve, no guard pages made PROT_NONE):
 * what the secure build's cost cannot go below (docs/security.md, "What it costs"). */
#define KITE_SECURE_FLOOR 0
#endif

#define KITE_SECURE_CANARY 8          /* bytes at the end of a small block */
#ifndef KITE_SECURE_CARVE_ZERO_ALWAYS
/* 1: the carve zeroes every block, even of a page known zero (for measuring and tests). */
#define KITE_SECURE_CARVE_ZERO_ALWAYS 0
#endif
#define KITE_SECURE_GUARD KITE_OS_PAGE /* guard after a large run or huge block: one OS page */
#define KITE_SECURE_RUN_CHOICES 4     /* a fresh run: one of the lowest 4 free blocks */
#define KITE_SECURE_CARVE_MAX 256     /* blocks per carve at most: the draws' bias bound (secure.c checks page.h's) */
#ifndef KITE_SECURE_QUARANTINE /* freed small blocks a thread holds back from the core */
#define KITE_SECURE_QUARANTINE 64
#endif
#define KITE_SECURE_KEPT_RUNS 4       /* freed large runs a thread keeps with their guards */

/* What the secure build keeps in each thread's heap struct (heap.h), not in thread-local
 * storage: a heap lives on after its thread when the C library gives the thread no exit
 * destructor (heap_pool.c I-H4: a heap made in the last round of key destructors), and the
 * C library wipes a dead thread's thread-local storage when it hands its stack to a later
 * thread; the heap's retirement (exit or I-H4) gives both back to the core (secure.c's
 * hook, heap.h). Zero in a fresh heap, and always in the static empty heap (never written:
 * its ring's slots read empty, which sends a heapless thread's free to the cold path). */
typedef struct {
  void *slot[KITE_SECURE_QUARANTINE];       /* freed blocks, oldest at next once full */
  kite_page_t *page[KITE_SECURE_QUARANTINE]; /* slot[k]'s small page (head descriptor) */
  uint16_t index[KITE_SECURE_QUARANTINE];    /* slot[k]'s block index in that page */
  uint32_t next;                             /* the oldest entry, replaced by the next push */
} kite_secure_ring_t;
typedef struct {
  kite_page_t *run[KITE_SECURE_KEPT_RUNS]; /* oldest first (secure_large.c K1-K3) */
  size_t bytes;                            /* of the runs kept */
  uint32_t n;
} kite_secure_kept_t;
typedef struct {
  kite_secure_ring_t ring;
  kite_secure_kept_t kept;
} kite_secure_heap_t;

#ifndef KITE_SECURE_ZERO_MAX
/* Zeroed on free and checked at reuse: a block's first bytes up to this many (and the 8
 * before its canary). Each more cache line costs a read at every malloc and a write at
 * every free of larger blocks: docs/security.md measures 64 against 256 and 1024. */
#define KITE_SECURE_ZERO_MAX 64
#endif

/* The bytes of a free small block of size bs that secure.c keeps zero (zeroed at free,
 * checked when the block is handed out again): [0, zero_head) and, for blocks larger than
 * KITE_SECURE_ZERO_MAX + 8, also the 8 bytes before the mark, [bs - 16, bs - 8). */
static inline uint32_t _kite_secure_zero_head(uint32_t bs) {
  return bs - KITE_SECURE_CANARY <= KITE_SECURE_ZERO_MAX ? bs - KITE_SECURE_CANARY : KITE_SECURE_ZERO_MAX;
}
/* Zero those bytes of block b (16-byte aligned, size bs a multiple of 16), not its mark:
 * [0, min(bs - 16, KITE_SECURE_ZERO_MAX)) in 16-byte stores, then the word at bs - 16 (which
 * ends the head when bs <= KITE_SECURE_ZERO_MAX + 16). Inline stores, no memset call (gcc
 * would make one, or a `rep stos`, of a variable size: both slower at these sizes). At free
 * (secure.c) and at carve (a reused run may hold old bytes). */
typedef uint64_t kite_secure_v2_t __attribute__((vector_size(16), may_alias));
typedef uint32_t kite_secure_v4_t __attribute__((vector_size(16), may_alias));
/* With the zeroed head at 64 bytes, a block of 32 <= bs < 80 bytes keeps [0, bs - 16) zero:
 * at bs = 32 (the class of 9-24 byte requests, the commonest) as one lane at 0, at 48 and 64
 * as three 16-byte lanes at 0, 16 and bs - 32 (overlapping at 48), so the zeroing and the
 * check are straight-line code with constant offsets but one. */
static inline __attribute__((always_inline)) void _kite_secure_zero_block(void *p, uint32_t bs) {
  kite_secure_v2_t z = {0, 0};
  if (__builtin_expect(bs >= KITE_SECURE_ZERO_MAX + 16, 1)) {
    memset(p, 0, KITE_SECURE_ZERO_MAX); /* a constant size: inline stores */
  } else if (bs == 32) { /* [0, 16): one lane */
    *(kite_secure_v2_t *)p = z;
  } else if (bs > 16) {
#if KITE_SECURE_ZERO_MAX <= 64 /* bs 48 or 64: [0, bs - 16) in three lanes, overlapping at 48 */
    *(kite_secure_v2_t *)p = z;
    *(kite_secure_v2_t *)((uint8_t *)p + 16) = z;
    *(kite_secure_v2_t *)((uint8_t *)p + bs - 32) = z;
#else
    uint32_t i = 0, head = bs - 16;
    for (; i + 32 <= head; i += 32) {
      *(kite_secure_v2_t *)((uint8_t *)p + i) = z;
      *(kite_secure_v2_t *)((uint8_t *)p + i + 16) = z;
    }
    if (i < head) *(kite_secure_v2_t *)((uint8_t *)p + i) = z;
#endif
  }
  *(uint64_t *)((uint8_t *)p + bs - 16) = 0;
}

/* Is free block w of size bs (16-byte aligned, a multiple of 16) zero where the secure build keeps
 * it zero (_kite_secure_zero_block), with its mark `freed` or the carved mark (freed ^ 1)? 16-byte lanes (SSE2, the
 * x86-64 baseline; plain words elsewhere), two accumulators, no early exit to predict. The
 * last 16 bytes (the word before the mark, and the mark) are read as two words. */
static inline __attribute__((always_inline)) bool _kite_secure_free_block_ok(const uint64_t *w, uint32_t bs, uint64_t freed) {
  kite_secure_v2_t a = {0, 0}, b = a;
  if (likely(bs >= KITE_SECURE_ZERO_MAX + 16)) { /* a constant count: straight-line loads */
    for (uint32_t i = 0; i < KITE_SECURE_ZERO_MAX; i += 32) {
      a |= *(const kite_secure_v2_t *)((const uint8_t *)w + i);
      b |= *(const kite_secure_v2_t *)((const uint8_t *)w + i + 16);
    }
  } else if (bs == 32) { /* _kite_secure_zero_block's one lane: three words and the mark, all scalar */
    return (w[0] | w[1] | w[2] | ((w[3] ^ freed) >> 1)) == 0;
  } else if (bs > 16) { /* the lanes before the last, as _kite_secure_zero_block zeroes them */
#if KITE_SECURE_ZERO_MAX <= 64
    a = *(const kite_secure_v2_t *)w | *(const kite_secure_v2_t *)((const uint8_t *)w + 16);
    b = *(const kite_secure_v2_t *)((const uint8_t *)w + bs - 32);
#else
    uint32_t i = 0, head = bs - 16;
    for (; i + 32 <= head; i += 32) {
      a |= *(const kite_secure_v2_t *)((const uint8_t *)w + i);
      b |= *(const kite_secure_v2_t *)((const uint8_t *)w + i + 16);
    }
    if (i < head) a |= *(const kite_secure_v2_t *)((const uint8_t *)w + i);
#endif
  }
  /* the last 16 bytes as two words: folding them into the lanes would cost more moves */
  const uint64_t *end = (const uint64_t *)((const uint8_t *)w + bs);
  uint64_t t = end[-2] | ((end[-1] ^ freed) >> 1); /* 0 for either mark */
  a |= b;
  /* the lanes' halves folded in the vector unit (a shuffle and an or), then one move out */
  kite_secure_v4_t a4 = (kite_secure_v4_t)a;
  a |= (kite_secure_v2_t)__builtin_shufflevector(a4, a4, 2, 3, 0, 1); /* (x86-64: one pshufd) */
  return (a[0] | t) == 0;
}

/* Canaries: keyed by the block's address (one block's canary says nothing of another's);
 * the first byte (the one an off-by-one write hits) is never zero, so a stray string
 * terminator is always caught. The freed mark is the canary + 2 (one lea from the canary
 * where the claim needs both; it differs from the canary in bit 1 or above, so neither
 * mark is ever the canary, nor is the canary accepted as either); a carved block
 * that was never handed out holds the carved mark, the freed mark with its lowest bit
 * flipped (the carve writes it), so a free of it is told from a double free, and a free
 * block is checked with one compare and a shift (either mark). The keys (secret.h's
 * _kite_canary_k) are drawn before the first carve (_kite_secure_carve), so every carved
 * block's canary can be computed without a check. */
static inline uint64_t _kite_secure_canary_keyed(const void *p, uint64_t k0, uint64_t k1) {
  uint64_t x = ((uintptr_t)p ^ k0) * k1;
  /* a rotation (one instruction) brings the product's well-mixed middle bits to the low
   * byte: the low bits of a product of a 16-byte aligned address vary little */
  return ((x >> 29) | (x << 35)) | 0x80;
}
static inline uint64_t _kite_secure_canary(const void *p) {
  return _kite_secure_canary_keyed(p, __atomic_load_n(&_kite_canary_k[0], __ATOMIC_RELAXED),
                                   __atomic_load_n(&_kite_canary_k[1], __ATOMIC_RELAXED));
}
static inline uint64_t _kite_secure_freed_mark_of(uint64_t canary) { return canary + 2; }
static inline uint64_t _kite_secure_freed_mark(const void *p) { return _kite_secure_freed_mark_of(_kite_secure_canary(p)); }
static inline uint64_t _kite_secure_carved_mark(const void *p) { return _kite_secure_freed_mark(p) ^ 1; }
/* Where small block p of size bs keeps its canary or mark: its last 8 bytes. */
static inline uint64_t *_kite_secure_mark_slot(const void *p, uint32_t bs) {
  return (uint64_t *)((uint8_t *)p + bs - KITE_SECURE_CANARY);
}

/* Small block p (size bs) about to be handed out: if it is as a free block must be
 * (_kite_secure_free_block_ok), its canary is written and true returned; else false,
 * nothing written. */
static inline __attribute__((always_inline)) bool _kite_secure_block_take(void *p, uint32_t bs) {
  uint64_t c = _kite_secure_canary(p);
  if (unlikely(!_kite_secure_free_block_ok(p, bs, _kite_secure_freed_mark_of(c)))) return false;
  __atomic_store_n(_kite_secure_mark_slot(p, bs), c, __ATOMIC_RELAXED);
  return true;
}

/* Is carved small block b (size bs), LIVE in the core's link array, one the program freed
 * (it holds its freed mark: it waits in a thread's quarantine; a LIVE block never holds
 * the carved mark)? Any thread, a snapshot. */
static inline bool _kite_secure_block_freed(const void *b, uint32_t bs) {
  return __atomic_load_n(_kite_secure_mark_slot(b, bs), __ATOMIC_RELAXED) == _kite_secure_freed_mark(b);
}
/* Carve the n fresh blocks first .. first+n-1 of small page pg (block first at start):
 * zero what secure.c checks of each (a reused run may hold old bytes) and write its carved
 * mark, in address order (sequential stores; the keys loaded once), then link them in a
 * random order in front of pg->free. The order is the inside-out Fisher-Yates shuffle in
 * its linked-list form (each block inserted at a random place of the list so far) drawing
 * 16 random bits per step, four steps per 64-bit word: j = (r16 * (k + 1)) >> 16 is below
 * k + 1 <= KITE_SECURE_CARVE_MAX (256), each value with probability 1/(k + 1) off by
 * less than 1/65536 (a bias of under 0.4% of a probability: no index is predictable).
 * n >= 1. Owner only (page.c's _kite_page_extend). */
static inline void _kite_secure_carve(kite_page_t *pg, uint8_t *start, uint32_t first, uint32_t n) {
  uint32_t bs = pg->block_size;
  if (unlikely(!__atomic_load_n(&_kite_canary_k[1], __ATOMIC_ACQUIRE))) _kite_canary_keys();
  uint64_t k0 = __atomic_load_n(&_kite_canary_k[0], __ATOMIC_RELAXED);
  uint64_t k1 = __atomic_load_n(&_kite_canary_k[1], __ATOMIC_RELAXED);
  /* the size test hoisted: one straight loop per shape of _kite_secure_zero_block; none for
   * a page whose uncarved blocks are known zero (page.h's zero_tail: the arena gave its run
   * zeroed, and no block of it was ever handed out), only the marks */
  uint8_t *b = start, *end = start + (size_t)n * bs;
  if (pg->zero_tail && !KITE_SECURE_CARVE_ZERO_ALWAYS) {
    for (; b < end; b += bs) *(uint64_t *)(b + bs - KITE_SECURE_CANARY) = (_kite_secure_freed_mark_of(_kite_secure_canary_keyed(b, k0, k1)) ^ 1);
  } else if (bs >= KITE_SECURE_ZERO_MAX + 16) {
    for (; b < end; b += bs) {
      memset(b, 0, KITE_SECURE_ZERO_MAX);
      *(uint64_t *)(b + bs - 16) = 0;
      *(uint64_t *)(b + bs - KITE_SECURE_CANARY) = (_kite_secure_freed_mark_of(_kite_secure_canary_keyed(b, k0, k1)) ^ 1); /* the carved mark */
    }
  } else {
    for (; b < end; b += bs) {
      _kite_secure_zero_block(b, bs);
      *(uint64_t *)(b + bs - KITE_SECURE_CANARY) = (_kite_secure_freed_mark_of(_kite_secure_canary_keyed(b, k0, k1)) ^ 1);
    }
  }
  /* the links: block k (k = 0, 1, ...) goes into one of the k + 1 gaps of the list built
   * so far, after its head or after one of blocks 0 .. k-1, drawn uniformly: each sequence
   * of draws gives another order, so all n! orders are equally likely; the old list stays
   * behind them. Written into the link array directly (pg->free is the head), no second
   * pass over a table of the order. */
  uint16_t *l = pg->links + first;
  l[0] = pg->free;
  pg->free = (uint16_t)first;
  for (uint32_t k = 1; k < n;) {
    uint64_t r = KITE_SECURE_FLOOR ? ~(uint64_t)0 : _kite_random(); /* the floor: j = k, the address order */
    for (uint32_t e = k + 4 < n ? k + 4 : n; k < e; k++, r >>= 16) { /* four draws of 16 bits */
      uint32_t j = KITE_SECURE_FLOOR ? k : (uint32_t)(((r & 0xffff) * (k + 1)) >> 16);
      uint16_t *at = j == k ? &pg->free : &l[j]; /* the gap after the head, or after block j */
      l[k] = *at;
      *at = (uint16_t)(first + k);
    }
  }
}

/* Random index below n (n >= 1). */
static inline uint32_t _kite_secure_below(uint32_t n) {
  return (uint32_t)(((_kite_random() >> 32) * n) >> 32);
}
#endif
