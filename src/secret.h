/* src/secret.h -- per-process secrets for hardening (keyed checksums, encoded links),
 * drawn from the kernel's random source once, on first use. A forked child keeps its
 * parent's secrets (its heap is a copy of the parent's, encoded with them), or draws its
 * own when a thread of the parent was drawing them at the fork (none were in use yet).
 * Layer: bottom.
 */
#ifndef KITE_SECRET_H
#define KITE_SECRET_H
#include "types.h"
#include "once.h"

extern uint64_t _kite_secret_[4] KITE_HIDDEN;
extern kite_once_t _kite_secret_once KITE_HIDDEN;
void _kite_secret_init(void) __attribute__((cold, noinline));
/* A forked child's handler (init.c, before anything that reads a secret): a draw a thread
 * of the parent had begun and not finished at the fork is begun again at the child's next
 * use (secret.c). */
void _kite_secret_fork_child(void);

/* Secret word i (0..3). */
static inline uint64_t _kite_secret(unsigned i) {
  if (unlikely(!_kite_once_done(&_kite_secret_once))) _kite_secret_init();
  return _kite_secret_[i & 3];
}

/* A random 64-bit word from the calling thread's generator (xorshift*, seeded from the
 * secrets and the thread's own address on first use): unpredictable without the secrets,
 * not for cryptography. For the secure build's randomized layout (secure_layout.h). */
uint64_t _kite_random(void);
/* A forked child's generator: reseeded from the kernel (secure build: init.c's fork
 * handler), so parent and child do not draw the same layout. */
void _kite_random_reseed(void);

/* The secure build's canary keys (secure_layout.h's _kite_secure_canary): copies of secret
 * words 2 and 3 (odd, so never 0 once drawn), read without the readiness check of
 * _kite_secret: a carve draws them first (_kite_canary_keys, idempotent; key 1 is stored
 * last, with release), so every carved block's canary is computed with the keys set.
 * Defined in the secure build only (secret.c). Declared hidden (the build's -fvisibility
 * covers definitions only): the fast paths load the keys straight, not through the GOT. */
extern uint64_t _kite_canary_k[2] KITE_HIDDEN;
void _kite_canary_keys(void) __attribute__((cold, noinline));

/* A keyed 64-bit checksum of three words: without the secret, a matching value cannot be
 * computed for chosen words (the multiply-xorshift rounds mix every input bit). */
static inline uint64_t _kite_mac3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = _kite_secret(0) ^ a;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  x ^= b + _kite_secret(1);
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
  x ^= c ^ _kite_secret(2);
  x = (x ^ (x >> 32)) * 0x94d049bb133111ebull;
  return x ^ (x >> 29) ^ _kite_secret(3);
}
#endif
