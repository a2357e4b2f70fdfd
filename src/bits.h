/* src/bits.h -- bit arithmetic shared by the core and the standalone buddy heap. */
#ifndef KITE_BITS_H
#define KITE_BITS_H
#include <stdint.h>

/* The number of set bits of x. __builtin_popcountll is one instruction where the target has
 * one (x86-64 with -mpopcnt, i.e. __POPCNT__; aarch64's cnt), but on the baseline x86-64 that
 * kite is built for gcc makes it a call to libgcc's __popcountdi2: a function outside kite,
 * in a library the buddy heap is meant to need nothing of. There the bits are summed in
 * place instead (pairs, nibbles, bytes, then one multiply adds the eight byte counts into
 * the top byte): branch-free, about a dozen instructions, no call. */
static inline unsigned _kite_popcount64(uint64_t x) {
#if defined(__POPCNT__) || defined(__aarch64__)
  return (unsigned)__builtin_popcountll(x);
#else
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* ceil(log2(x)); 0 for x <= 1 */
static inline unsigned _kite_ceil_log2(uint64_t x) {
  return x <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(x - 1);
}

/* Natural logarithm of x in (0, 1], without libm (the samplers' random gaps, guarded.c and
 * prof.c): x = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1)) by
 * its series (|s| < 0.18: six terms reach double precision's last digits). */
static inline double _kite_ln(double x) {
  union { double d; uint64_t u; } v = {x};
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & (((uint64_t)1 << 52) - 1)) | ((uint64_t)1023 << 52);
  double m = v.d;
  if (m > 1.4142135623730951) { m *= 0.5; e++; }
  double s = (m - 1) / (m + 1), s2 = s * s;
  double t = s * (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 +
                                                          s2 * (1.0 / 9 + s2 * (1.0 / 11))))));
  return e * 0.6931471805599453 + 2 * t;
}

/* 1 - e^-x for x >= 0, without libm, accurate for small x too (no subtraction that cancels):
 * the chance that a byte-sampling gap of mean 1 ends inside x, one per sample (the profiler's
 * weight, prof.h). x = k ln 2 + r with r in [0, ln 2); 1 - e^-r = r (1 - r/2! + r^2/3! - ...)
 * by Horner's rule to its 17th term (the next one is below 2^-60 of the sum over that range),
 * multiply-adds over a table of the coefficients, with no division; then 1 - 2^-k e^-r,
 * which for k >= 1 is at least 1/2, so the subtraction loses nothing. */
static inline double _kite_one_minus_exp_neg(double x) {
  if (x > 700) return 1;
  int k = (int)(x * 1.4426950408889634); /* 1 / ln 2 */
  double r = k ? x - k * 0.6931471805599453 : x;
  if (r < 0) { k--; r += 0.6931471805599453; } /* the product's rounding */
  /* 1/17!, 1/16!, ..., 1/2!, 1/1!: the coefficients from the innermost out */
  static const double inv_fact[17] = {
      1.0 / 355687428096000.0, 1.0 / 20922789888000.0, 1.0 / 1307674368000.0, 1.0 / 87178291200.0,
      1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
      1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0};
  double y = -r, q = inv_fact[0];
  for (int i = 1; i < 17; i++) q = q * y + inv_fact[i];
  q *= r; /* 1 - e^-r */
  if (k == 0) return q;
  union { double d; uint64_t u; } v = {1 - q}; /* e^-r in (1/2, 1]: the exponent stays normal */
  v.u -= (uint64_t)k << 52;
  return 1 - v.d;
}
#endif
