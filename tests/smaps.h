/* tests/smaps.h -- what /proc/self/smaps says of the mapping that holds an address, for the
 * tests of huge-page advice (test_hugepages, test_core_internals). */
#ifndef KITE_TESTS_SMAPS_H
#define KITE_TESTS_SMAPS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In /proc/self/smaps, the mapping that holds p: does its VmFlags line have `flag` (1/0),
 * and its AnonHugePages (KiB) in *ahp (if not NULL); -1 if p is in no mapping or there is
 * no VmFlags line. */
static inline int smaps_vma_flag(const void *p, const char *flag, long *ahp) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[1024], want[16];
  snprintf(want, sizeof want, " %s", flag);
  int inside = 0, r = -1;
  uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && ahp && strncmp(line, "AnonHugePages:", 14) == 0) *ahp = atol(line + 14);
    if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      r = strstr(line, want) != NULL;
      break;
    }
  }
  fclose(f);
  return r;
}
#endif
