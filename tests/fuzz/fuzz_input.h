/* tests/fuzz/fuzz_input.h -- decoding a libFuzzer input as a stream of small integers.
 *
 * Every fuzzer reads its input front to back through a fz_in_t cursor. Reads past the end
 * return 0 and set `done`, so any byte string decodes to a valid (finite) operation sequence:
 * libFuzzer's mutations (insert, erase, flip) then map to nearby op sequences, which is what
 * makes coverage guidance effective. Integers are little-endian.
 */
#ifndef KITE_FUZZ_INPUT_H
#define KITE_FUZZ_INPUT_H
#include <stddef.h>
#include <stdint.h>

typedef struct fz_in_s {
  const uint8_t *p;
  size_t n;
  int done;
} fz_in_t;

static inline uint8_t fz_u8(fz_in_t *in) {
  if (in->n == 0) { in->done = 1; return 0; }
  in->n--;
  return *in->p++;
}
static inline uint16_t fz_u16(fz_in_t *in) {
  uint16_t lo = fz_u8(in);
  return (uint16_t)(lo | (uint16_t)fz_u8(in) << 8);
}
static inline uint32_t fz_u32(fz_in_t *in) {
  uint32_t lo = fz_u16(in);
  return lo | (uint32_t)fz_u16(in) << 16;
}

/* Model and checking code that only loops over state: not instrumented for coverage (its
 * comparisons would dominate the run time and guide nothing). */
#if defined(__clang__) && __clang_major__ >= 13
#define FZ_NOCOV __attribute__((no_sanitize("coverage")))
#else
#define FZ_NOCOV
#endif

/* Abort with a message: a broken expectation is a crash libFuzzer records with its input. */
#include <stdio.h>
#include <stdlib.h>
#define fz_check(e, ...)                                                       \
  do {                                                                         \
    if (!(e)) {                                                                \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #e);    \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
