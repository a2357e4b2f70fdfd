/* Case 1: two threads free the same small block at the same moment.
 * usage: race_double_free [ITERATIONS] [remote|owner]
 *   remote (default): two other threads free the main thread's block together;
 *   owner: the main thread and one other thread free it together.
 * After each race the program allocates 8 blocks of the same size and checks they are
 * distinct; at the end 4000 more (a looping free list returns one address again and again).
 *
 * Making the frees overlap: the two freeing threads are pinned to two different CPUs when
 * the process may run on two or more, and each round they meet at a start line: each adds
 * itself to `arrived` and spins until both are there, then frees at once. The spin does
 * not yield (a yield would let the other thread's free run alone) for SPIN_ALONE turns,
 * well past the time a wake-up takes when the other thread's CPU is free. Between rounds
 * the racers sleep in a barrier in remote mode, so that the main thread, a third, never
 * competes with them for the two CPUs while they spin; in owner mode the two threads have
 * a CPU each and the rounds' gates spin as well (no wake-up to wait for). On a single CPU
 * no overlap is possible and every spin yields.
 *
 * What is checked: the outcome. Under kite (its malloc_info prints
 * `<frees ... invalid="N"/>`) the double frees reported so far are counted after each of
 * the first 1,000 races, after every 100th (malloc_info walks the pages: too slow for
 * every race) and at the end: remote, exactly one a race; owner, at most one (least()
 * says why); else RESULT: WRONG. Under any allocator no block may be handed out twice.
 * How often the two frees really overlapped depends on the scheduler (a loaded machine
 * may run them apart), so it is printed, not checked: "overlapped: K of N rounds" counts
 * the rounds in which one thread entered its free while the other was still inside its
 * own. */
#include "sec.h"
#include <sched.h>
#include <stdatomic.h>

static pthread_barrier_t round_start, round_end; /* remote: the rounds' gates */
static atomic_uint begun, finished; /* owner: the rounds' gates (the last round begun, ended) */
static atomic_uint arrived;    /* freeing threads at the start line, all rounds together */
static atomic_int inside;      /* freeing threads between the start line and free's return */
static atomic_uint overlapped; /* rounds in which a thread found the other one inside */
static void *volatile victim;
static int iterations = 100000, owner;
static int spin_yields;        /* one usable CPU: the other thread can only run if we yield */
/* Turns a spin takes before it yields: some tens of microseconds, well past the time the
 * wake-up of the other thread takes when its CPU is free; past it, that CPU is busy (a
 * loaded machine) and the spinning would only take time from whoever runs there. */
#define SPIN_ALONE (1u << 16)
static int cpus[2] = {-1, -1}; /* the two CPUs the freeing threads are pinned to */

static void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void spin_until(atomic_uint *v, unsigned want) {
  for (unsigned n = 0; atomic_load(v) < want; n++)
    if (spin_yields || n > SPIN_ALONE) sched_yield();
}

/* The race itself, run by both freeing threads in round `round` (1-based). */
static void race_free(unsigned round) {
  atomic_fetch_add(&arrived, 1);
  spin_until(&arrived, 2 * round);
  if (atomic_fetch_add(&inside, 1) == 1) atomic_fetch_add(&overlapped, 1);
  free(victim);
  atomic_fetch_sub(&inside, 1);
}

static void *racer(void *arg) {
  pin(cpus[(intptr_t)arg]);
  for (unsigned i = 1; i <= (unsigned)iterations; i++) {
    if (owner) spin_until(&begun, i);
    else pthread_barrier_wait(&round_start);
    race_free(i);
    if (owner) atomic_store(&finished, i);
    else pthread_barrier_wait(&round_end);
  }
  return NULL;
}

/* kite's count of reported invalid and double frees, from its malloc_info; -1 under an
 * allocator whose malloc_info has no such figure. */
static long long reported_frees(void) {
  static char buf[1 << 16];
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  if (!f) return -1;
  int rc = malloc_info(0, f);
  long pos = ftell(f);
  fclose(f);
  if (rc != 0 || pos <= 0) return -1;
  buf[pos < (long)sizeof buf - 1 ? pos : (long)sizeof buf - 1] = '\0';
  const char *p = strstr(buf, "<frees ");
  p = p ? strstr(p, "invalid=\"") : NULL;
  return p ? atoll(p + 9) : -1;
}

/* Reports due after `races` races. remote: both frees claim the entry with a CAS, the
 * second claim fails and is reported in its own free (remote.c R1): exactly one a race.
 * owner: when the owner's plain store overwrites the other thread's claim, the report comes
 * later, from the owner's take of the cross-thread list (R3, R4), and a take that stops at
 * the first bad entry leaves later ones on that list unreported: at most one a race. */
static int least(int races) { return owner ? 0 : races; }

/* After `races` races, between least(races) and `races` reports since `base`, else WRONG. */
static const char *check_reports(long long base, int races) {
  long long n = reported_frees() - base;
  if (n >= least(races) && n <= races) return "SAFE";
  printf("after %d races: %lld double frees reported (%d..%d expected)\n", races, n, least(races),
         races);
  return "WRONG";
}

int main(int argc, char **argv) {
  if (argc > 1) iterations = atoi(argv[1]);
  owner = argc > 2 && strcmp(argv[2], "owner") == 0;
  int nthreads = owner ? 1 : 2;
  cpu_set_t allowed;
  int usable = 0;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE && usable < 2; c++)
      if (CPU_ISSET(c, &allowed)) cpus[usable++] = c;
  if (usable < 2) cpus[0] = cpus[1] = -1;
  spin_yields = usable < 2;
  pthread_barrier_init(&round_start, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&round_end, NULL, (unsigned)nthreads + 1);
  /* owner: the main thread is the first freeing thread, the racer the second */
  if (owner) pin(cpus[0]);
  pthread_t t[2];
  for (int k = 0; k < nthreads; k++)
    pthread_create(&t[k], NULL, racer, (void *)(intptr_t)(owner ? 1 : k));
  const char *v = "SAFE";
  long long base = reported_frees();
  int i;
  for (i = 1; i <= iterations && v[0] == 'S'; i++) {
    victim = malloc(48);
    memset(victim, 1, 48);
    if (owner) { /* two threads on two CPUs: the gates spin too, no wake-up to wait for */
      atomic_store(&begun, (unsigned)i);
      race_free((unsigned)i);
      spin_until(&finished, (unsigned)i);
    } else {
      pthread_barrier_wait(&round_start);
      pthread_barrier_wait(&round_end);
    }
    if (base >= 0 && (i <= 1000 || i % 100 == 0)) v = check_reports(base, i);
    void *a[8];
    for (int k = 0; k < 8; k++) a[k] = malloc(48);
    if (!sec_distinct(a, 8) && v[0] == 'S') v = "DUPLICATE";
    for (int k = 0; k < 8; k++) free(a[k]);
  }
  i--;
  if (v[0] == 'S') v = sec_drain(4000, 48);
  if (v[0] == 'S' && base >= 0) v = check_reports(base, i);
  printf("overlapped: %u of %d rounds", atomic_load(&overlapped), i);
  if (base >= 0) printf("; double frees reported: %lld", reported_frees() - base);
  printf("\n");
  _exit(sec_result(v)); /* after an early stop the racers wait at a gate: do not join */
}
