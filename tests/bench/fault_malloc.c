/* tests/bench/fault_malloc.c -- deliberately broken "allocators" for the benchmark tests.
 *
 * Built twice as LD_PRELOAD libraries over glibc's own entry points (__libc_malloc ...):
 *   libkite-bench-crash.so (KITE_FAULT_CRASH): malloc raises SIGSEGV on its Nth call
 *     (N from KITE_BENCH_CRASH_AFTER, default 1000): the runner must report "CRASH sig 11"
 *     for it and go on with the other allocators.
 *   libkite-bench-wrong.so (KITE_FAULT_WRONG): every Nth malloc (N from
 *     KITE_BENCH_WRONG_EVERY, default 1000) flips a byte at the start of the block this
 *     thread got from the previous malloc, if that block is still live, as an allocator
 *     handing out overlapping memory would: the workloads' self-checks must notice
 *     ("WRONG", exit 3) while the process itself stays healthy. Real programs, whose
 *     output is all that is checked, are run with a small N: one flip in 1000 mallocs can
 *     land in a block whose contents never reach the output.
 *   libkite-bench-slow.so (KITE_FAULT_SLOW): a healthy but slow allocator: every malloc
 *     first spins KITE_BENCH_SLOW_SPIN (default 2000) rounds of arithmetic, so the runner's
 *     --ab mode has a pair of allocators whose verdict is known (glibc faster).
 * Only malloc and free are interposed; calloc, realloc and the rest stay glibc's, which is
 * consistent because the blocks are glibc's too.
 */
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);

#ifdef KITE_FAULT_CRASH
static unsigned long g_calls; /* racy on purpose-free grounds: any thread may crash first */
static unsigned long g_after;

void *malloc(size_t n) {
  if (!g_after) {
    const char *s = getenv("KITE_BENCH_CRASH_AFTER"); /* getenv does not allocate */
    g_after = s ? strtoul(s, NULL, 10) : 1000;
    if (!g_after) g_after = 1;
  }
  if (__atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED) >= g_after) raise(SIGSEGV);
  return __libc_malloc(n);
}
void free(void *p) { __libc_free(p); }
#endif

#ifdef KITE_FAULT_WRONG
static __thread unsigned char *t_last;
static __thread unsigned long t_calls;
static unsigned long g_every;

void *malloc(size_t n) {
  if (!g_every) {
    const char *s = getenv("KITE_BENCH_WRONG_EVERY");
    unsigned long e = s ? strtoul(s, NULL, 10) : 1000;
    __atomic_store_n(&g_every, e ? e : 1000, __ATOMIC_RELAXED);
  }
  if (++t_calls % g_every == 0 && t_last) t_last[0] ^= 0x40;
  unsigned char *p = (unsigned char *)__libc_malloc(n);
  t_last = n ? p : NULL;
  return p;
}
void free(void *p) {
  if (p && p == t_last) t_last = NULL;
  __libc_free(p);
}
#endif

#ifdef KITE_FAULT_SLOW
static unsigned long g_spin;

void *malloc(size_t n) {
  if (!g_spin) {
    const char *s = getenv("KITE_BENCH_SLOW_SPIN");
    unsigned long v = s ? strtoul(s, NULL, 10) : 2000;
    __atomic_store_n(&g_spin, v ? v : 1, __ATOMIC_RELAXED);
  }
  volatile unsigned long x = n;
  for (unsigned long i = 0; i < g_spin; i++) x = x * 2654435761ul + i;
  return __libc_malloc(n);
}
void free(void *p) { __libc_free(p); }
#endif
