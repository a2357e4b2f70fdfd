/* src/secure.h -- the secure build (libkite-secure.so, compile definition KITE_SECURE=1):
 * its constants and the two layout hooks the lower layers call under `#if KITE_SECURE`.
 * The default build (KITE_SECURE 0) compiles none of this.
 *
 * What the secure build adds (docs/security.md measures it):
 *   - guard pages: PROT_NONE between an arena's metadata (descriptor table, arena header,
 *     buddy metadata) and its first user unit (arena.c), and after every large run and huge
 *     block (secure.c asks for one page more and protects it);
 *   - randomized layout: the blocks of a fresh carve are linked in a random order, and a
 *     fresh run is a random one of the lowest KITE_SECURE_RUN_CHOICES free blocks of its
 *     order (the hooks below);
 *   - a canary in the last 8 bytes of every small block (a class chosen with room for it),
 *     checked at free and cleared by one compare-and-swap, so a block is freed once whatever
 *     the threads do; zero on free, checked when the block is handed out again (write after
 *     free); a per-thread quarantine delays reuse of freed small blocks (secure.c);
 *   - every error reported as "kite: secure: KIND: 0x..." and then abort.
 * The wrappers live in secure.c (entry layer); in this build alloc.c and free.c serve them
 * under internal names (alloc.h). This header is in the bottom layer: types and secret only.
 *
 * Invariants (secure build): every small block that is not handed out is zero except its
 * last 8 bytes, which hold 0 (never handed out) or the freed mark ~canary(block) (the core
 * keeps its free lists outside the blocks); a handed-out small block has canary(block) in
 * its last 8 bytes; a block in a quarantine is zero but for its mark.
 */
#ifndef KITE_SECURE_H
#define KITE_SECURE_H
#include "types.h"
#include "secret.h"
#include <string.h>

#ifndef KITE_SECURE
/* 1: the secure build (libkite-secure.so); 0: the default build. */
#define KITE_SECURE 0
#endif

#define KITE_SECURE_CANARY 8          /* bytes at the end of a small block */
#define KITE_SECURE_GUARD 4096        /* guard after a large run or huge block */
#define KITE_SECURE_RUN_CHOICES 4     /* a fresh run: one of the lowest 4 free blocks */
#define KITE_SECURE_CARVE_MAX 256     /* blocks per carve at most (secure.c checks page.h's) */

/* Carve the n fresh blocks first .. first+n-1 of small page pg (block first at start):
 * zero each (a reused run may hold old bytes), link them in a random
 * order (Fisher-Yates) and put them in front of pg->free. Owner only (page.c's
 * _kite_page_extend). */
static inline void _kite_secure_carve(kite_page_t *pg, uint8_t *start, uint32_t first, uint32_t n) {
  uint32_t bs = pg->block_size;
  uint16_t order[KITE_SECURE_CARVE_MAX];
  for (uint32_t i = 0; i < n; i++) order[i] = (uint16_t)i;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = (uint32_t)(((_kite_random() >> 32) * i) >> 32);
    uint16_t t = order[i - 1]; order[i - 1] = order[j]; order[j] = t;
  }
  uint16_t next = pg->free;
  for (uint32_t i = 0; i < n; i++) {
    memset(start + (size_t)order[i] * bs, 0, bs);
    pg->links[first + order[i]] = next;
    next = (uint16_t)(first + order[i]);
  }
  pg->free = next;
}

/* Random index below n (n >= 1). */
static inline uint32_t _kite_secure_below(uint32_t n) {
  return (uint32_t)(((_kite_random() >> 32) * n) >> 32);
}
#endif
