/* src/secret.c -- the process's secrets (contract in secret.h). */
#include "secret.h"
#include "os.h"

uint64_t _kite_secret_[4];
kite_once_t _kite_secret_once; /* once.h: the draw (it never fails) */

/* The claimer's draw. */
static void draw(void) {
  uint64_t s[4];
  _kite_os_random(s, sizeof s);
  for (int i = 0; i < 4; i++) _kite_secret_[i] = s[i] | 1; /* never zero */
  _kite_once_end(&_kite_secret_once, true);
}

void _kite_secret_init(void) {
  if (_kite_once_claim(&_kite_secret_once, _kite_os_getpid(), NULL)) draw(); /* (else another thread drew them) */
}

/* Claimed and not drawn in a forked child: the parent's thread that was drawing (inside
 * the getrandom call, the window a fork can hit) does not exist here (once.h O5). Nothing
 * can hold a value computed from these secrets (every reader waits for the draw, O3), so
 * the child's next use draws its own. */
void _kite_secret_fork_child(void) { _kite_once_fork_child(&_kite_secret_once, NULL); }

#ifdef KITE_TEST_HOOKS
/* Tests: act as a thread that claimed the draw and is drawing (false, doing nothing, when
 * the secrets are drawn already), then finish that draw. */
bool _kite_test_secret_claim(void) { return _kite_once_try(&_kite_secret_once, _kite_os_getpid()); }
void _kite_test_secret_finish(void) { draw(); }
#endif

static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));

void _kite_random_reseed(void) {
  uint64_t s = 0;
  _kite_os_random(&s, sizeof s);
  /* the kernel's word (without entropy, os.h mixes clocks and the process id), keyed */
  rng_state = _kite_mac3(s, rng_state, (uintptr_t)&rng_state) | 1;
}

/* One xorshift* step from state x, stored as the thread's state. */
static inline uint64_t random_step(uint64_t x) {
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  rng_state = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* A thread's first draw, its state seeded from the secrets and the state's own address:
 * out of line and reached by a tail call, so that _kite_random keeps no stack frame or
 * saved register for it. */
static KITE_COLD uint64_t random_first(void) {
  return random_step(_kite_mac3((uintptr_t)&rng_state, _kite_secret(1), _kite_secret(2)) | 1);
}

uint64_t _kite_random(void) {
  uint64_t x = rng_state;
  if (unlikely(x == 0)) return random_first();
  return random_step(x);
}

#if defined(KITE_SECURE) && KITE_SECURE
uint64_t _kite_canary_k[2];

void _kite_canary_keys(void) {
  if (__atomic_load_n(&_kite_canary_k[1], __ATOMIC_ACQUIRE)) return;
  __atomic_store_n(&_kite_canary_k[0], _kite_secret(2), __ATOMIC_RELAXED);
  /* every thread computes the same */
  __atomic_store_n(&_kite_canary_k[1], _kite_secret(3), __ATOMIC_RELEASE);
}
#endif
