/* src/bits.h -- bit arithmetic shared by the core and the standalone buddy heap. */
#ifndef KITE_BITS_H
#define KITE_BITS_H
#include <stdint.h>

/* ceil(log2(x)); 0 for x <= 1 */
static inline unsigned _kite_ceil_log2(uint64_t x) { return x <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(x - 1); }
#endif
