/* Case 13: a linear overflow out of the block that ends where the next 64 MiB region of the
 * heap begins (where kite starts an arena: its page descriptors). Blocks of SIZE bytes
 * (argument, default 1000) are allocated until one ends less than a page below a 64 MiB
 * boundary with memory mapped there. From that block's end the overflow runs 128 KiB on: a
 * word holding a 64 KiB aligned address inside the 64 MiB above the boundary (in kite's
 * layout: a descriptor's first-block address) is replaced by the attacker's target, every
 * other word is written back with what it held (an attacker who knows the layout writes
 * it unchanged). Then every small size and SIZE are allocated a few times (a block of each
 * small size was allocated first, as a program at work has): EXPLOITED when one comes back
 * inside the target. When the overflow faults on an inaccessible page (a guard page),
 * the SIGSEGV handler says STOPPED: the program would have died there, before anything
 * was changed. SAFE when no block ends at such a boundary or nothing comes back there. */
#include "sec.h"
#include <signal.h>
#include <sys/mman.h>

#define REGION ((uintptr_t)64 << 20)
#define REACH ((uintptr_t)128 << 10)
#define MAX_BYTES ((size_t)320 << 20)

static char target[1 << 20] __attribute__((aligned(65536)));
static uintptr_t fault_lo, fault_hi;

static void on_segv(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  uintptr_t a = (uintptr_t)si->si_addr;
  if (a >= fault_lo && a < fault_hi) {
    static const char msg[] = "RESULT: STOPPED\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(0);
  }
  signal(sig, SIG_DFL); /* not the overflow's fault: die of it */
}

static int mapped(uintptr_t a) {
  unsigned char vec[1];
  return mincore((void *)(a & ~(uintptr_t)4095), 4096, vec) == 0;
}

int main(int argc, char **argv) {
  size_t sz = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000;
  if (sz == 0) return sec_result("WRONG");
  uintptr_t end = 0, boundary = 0;
  for (size_t n = 16; n <= 1024; n += 16) /* a program at work: a block of every small size */
    if (!malloc(n)) return sec_result("WRONG");
  for (size_t total = 0; total < MAX_BYTES && !boundary; total += sz) {
    char *p = malloc(sz);
    if (!p) return sec_result("WRONG");
    uintptr_t e = (uintptr_t)p + sz, b = (e + REGION - 1) & ~(REGION - 1);
    if (b - e < 4096 && mapped(b)) { end = e; boundary = b; }
  }
  if (!boundary) return sec_result("SAFE"); /* no block ends at such a boundary */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  fault_lo = end;
  fault_hi = boundary + REACH;
  volatile unsigned char *c = (volatile unsigned char *)end;
  while ((uintptr_t)c < boundary) { *c = *c; c++; } /* the slack up to the boundary */
  for (volatile uintptr_t *w = (volatile uintptr_t *)boundary; (uintptr_t)w < boundary + REACH; w++) {
    uintptr_t v = *w;
    *w = (v > boundary && v < boundary + REGION && (v & 0xFFFF) == 0) ? (uintptr_t)target : v;
  }
  for (size_t n = 16; n <= 1024 + 16; n += 16)
    for (int k = 0; k < 8; k++) {
      uintptr_t u = (uintptr_t)malloc(n <= 1024 ? n : sz); /* last: the filler's size */
      if (u >= (uintptr_t)target && u < (uintptr_t)target + sizeof target) return sec_result("EXPLOITED");
    }
  return sec_result("SAFE");
}
