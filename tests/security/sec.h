/* tests/security/sec.h -- shared by the misuse programs of tests/security/.
 *
 * Each program is a standalone misuse case in the manner of hardened_malloc's test suite:
 * it uses only the standard malloc API, so it runs under any allocator (LD_PRELOAD), and
 * prints one verdict line on stdout when it survives the misuse:
 *   RESULT: SAFE        nothing was handed out twice, no foreign pointer was returned
 *   RESULT: DUPLICATE   one block was handed out twice (two live blocks at one address)
 *   RESULT: EXPLOITED   malloc returned the attacker's chosen address
 *   RESULT: CORRUPTION  another live block was damaged (unmapped, overlapped, changed)
 *   RESULT: WRONG       an API contract was broken (e.g. a pointer for an impossible size)
 * An allocator that stops the program (abort) prints no verdict: tools/security_matrix.py
 * classifies the run from the exit status and stderr. The programs write nothing to
 * stderr themselves, so anything there is the allocator's.
 */
#ifndef KITE_SEC_H
#define KITE_SEC_H
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline int sec_result(const char *verdict) {
  printf("RESULT: %s\n", verdict);
  fflush(stdout);
  return 0;
}

/* Are the n pointers of a pairwise distinct? (sorts a copy; n small) */
static inline int sec_distinct(void **a, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (a[i] && a[i] == a[j]) return 0;
  return 1;
}

/* An aligned static target an attacker would like malloc to return. */
static char sec_target[256] __attribute__((aligned(256)));

/* Allocate n blocks of size sz; EXPLOITED if one is inside sec_target, DUPLICATE if two
 * are equal; the blocks are written (a corrupt list shows) and freed. */
static inline const char *sec_drain(size_t n, size_t sz) {
  void **a = calloc(n, sizeof *a);
  const char *v = "SAFE";
  if (!a) return "WRONG";
  for (size_t i = 0; i < n; i++) {
    a[i] = malloc(sz);
    uintptr_t u = (uintptr_t)a[i];
    if (u >= (uintptr_t)sec_target && u < (uintptr_t)sec_target + sizeof sec_target) { v = "EXPLOITED"; break; }
    if (a[i]) memset(a[i], 0x5a, sz);
  }
  if (v[0] == 'S' && !sec_distinct(a, n)) v = "DUPLICATE";
  for (size_t i = 0; i < n; i++)
    if (!(v[0] == 'E' && i + 1 == n) && a[i] && !((uintptr_t)a[i] >= (uintptr_t)sec_target && (uintptr_t)a[i] < (uintptr_t)sec_target + sizeof sec_target))
      free(a[i]);
  free(a);
  return v;
}
#endif
