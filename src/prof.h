/* src/prof.h -- the sampled heap profiler (KITE_PROF, KITE_PROF_LEAKS, KITE_PROF_PEAK;
 * docs/profiling.md): which call sites hold the live heap, which allocated most since
 * start, what is still live at exit. Profiles are pprof's profile.proto (prof_write.c).
 *
 * Sampling by bytes: each thread counts allocated bytes down from a random gap drawn from
 * the exponential distribution of mean KITE_PROF_SAMPLE; the allocation the count crosses
 * zero in is sampled: its stack (stack.h), its size and its weight 1 / P(sampled) =
 * 1 / (1 - e^(-s/mean)) are recorded, so weighted sums estimate the true totals without
 * bias (s: the block's class size for small requests, the request for larger ones). Two
 * counts a thread, independent gaps of the same law: small requests of every class (counted
 * by whole allocation lists, guarded.c's method, in bytes), and the rest.
 *
 * Where the sampled blocks live: each in a large run of its own (one 64 KiB unit for a
 * small request, of which only the pages it spans are ever touched), marked by its
 * descriptor's `sampled` byte, or a huge block. free's fast path only takes small blocks,
 * so a sampled block's free always reaches free_generic, which looks at the byte: the
 * profiler costs free nothing on its fast path, and nothing at all while off.
 *
 * Hooks (each one call, marked "prof.h" where it stands):
 *   alloc.c  malloc_generic_quiet: small requests go through _kite_prof_malloc_small while
 *            profiling (options.h's _kite_small_route: the fast path is never consulted);
 *            alloc_large: _kite_prof_large_due / _kite_prof_record; realloc_generic never
 *            resizes a sampled block in place (its record would go stale). Small aligned
 *            requests take a block of the counted list, else go the small way with their
 *            class's size; a first-class heap's requests (no fast path: each one passes)
 *            are counted one by one on the large count, and its sampled blocks are owned
 *            by it; kite_heap_destroy forgets the heap's sampled blocks first (P1).
 *   secure.c the secure build's wrappers call the core with the canary's or the guard's
 *            bytes added (alloc.c records the program's request); its slow path leaves
 *            the quick refill to the core while profiling (the list must be counted); a
 *            sampled small block comes back as a run, which it guards as a large one.
 *   free.c   free_generic: a large run with `sampled` set, and huge blocks while any huge
 *            one is sampled, go to _kite_prof_free.
 *   heap.c   heap_reclaim leaves the current pages alone while profiling (as for guarded).
 *   init.c   fork hooks; the destructor calls _kite_prof_exit.
 *
 * Invariants
 *   P1 A live record exists for block p iff p is a sampled block not yet freed: large runs
 *      carry `sampled` == 1 exactly while their record exists; huge ones are counted in
 *      _kite_prof_huge_live.
 *   P4 A kept run (the cache of _kite_prof_free_run) is one unit, kind HELD, owned by no
 *      heap, in no arena list, and nowhere else: it is handed out once.
 *   P2 prof_lock guards the stack table, the live table, the run cache and the totals; it is a leaf but
 *      for the file writes of a dump (no kite lock is taken under it, nothing allocates).
 *   P3 Stacks are captured before the lock, with no lock of kite's held (stack.h S2).
 *   P5 A stack's live figures are the sums over its records in the live table (live_k of
 *      them, the figures exactly 0 when there is none): kept as records come and go, so a
 *      dump or the leak line reads them without walking the table.
 *   P7 A class whose last list was cut (the gap ended inside it, at the block its next visit
 *      takes) has its bit in the thread's `cut`, which sends that visit to the rare path
 *      (the quick refill of _kite_prof_counted_page and _kite_prof_malloc_small test it);
 *      only that visit clears it. The thread's count is below every class's size until the
 *      thread is seeded, so its first visit takes the rare path too.
 *   P6 The blocks on the current list of a class of thread heap h, while profiling, are
 *      counted (a list is counted whole, up to where it was cut, before the fast path or
 *      prof_small may take from it): taking one needs no count.
 * Every allocating entry point is sampled, in the default and the secure build. While
 * profiling, KITE_GUARDED_SAMPLE samples nothing (one sampler owns the allocation lists'
 * count).
 * Layer: beside guarded (above heap: it counts and cuts the heap's allocation lists).
 */
#ifndef KITE_PROF_H
#define KITE_PROF_H
#include "types.h"
#include "options.h"
#include "heap.h"
#include "page.h"

struct kite_heap_s;

/* A thread's sampling state (prof.c), one block: one thread-pointer offset for all of it.
 * left_small: bytes to the next sample of the thread's small requests, every class on one
 * count (the lists are counted as the slow path hands them out, P6); negative only for the
 * blocks behind a sample that a list which could not be cut handed out after it. left_large:
 * the same for every larger request. cut: classes whose next visit is the sampled
 * allocation (P7). rng: 0 until the thread is seeded (left_small is 0 until then too). */
typedef struct {
  int64_t left_small, left_large;
  uint64_t cut[(KITE_CLASSES + 63) / 64];
  uint64_t rng;
} kite_prof_thread_t;
extern __thread kite_prof_thread_t _kite_prof_thread __attribute__((tls_model("initial-exec")));

/* malloc(n), n <= KITE_SMALL_MAX, while profiling, the common case of the slow path: the
 * page of thread heap h whose current list of n's class c has a block to pop, counted; or NULL
 * (_kite_prof_malloc_small's work: a list to refill otherwise, a gap that ends inside the
 * list, a cut class, the thread's first visit). Two cases, both what the slow path would do
 * itself:
 *  - the current list has a block (sizes above the direct range come here every time): it
 *    was counted whole when it was handed out (P6), so the pop needs no count;
 *  - the list is empty and the page's local frees refill it (_kite_heap_current_page's
 *    quick refill): the new list's bytes, this block included, are taken from the thread's
 *    count with one subtract and compare when the gap does not end inside them (and the
 *    class is not cut); else nothing is changed and _kite_prof_malloc_small samples or cuts. */
static inline kite_page_t *_kite_prof_counted_page(struct kite_heap_s *h, unsigned c) {
  kite_page_t *pg = h->queue[c].first;
  if (unlikely(pg == NULL)) return NULL;
  if (pg->free != KITE_LINK_END) return pg;
  if (pg->local_free == KITE_LINK_END || _kite_opt(KITE_OPT_SHOW_STATS)) return NULL;
  /* |local_free| by page.h's invariant on used (the pin's +1 included) */
  int64_t k = (int64_t)pg->capacity + (h->pinned[c] == pg) - (int64_t)_kite_page_used(pg);
  int64_t left = _kite_prof_thread.left_small - k * (int64_t)_kite_class_size_[c];
  if (left < 0 || ((_kite_prof_thread.cut[c / 64] >> (c % 64)) & 1)) return NULL; /* P7 */
  _kite_prof_thread.left_small = left;
  pg->free = pg->local_free;
  pg->local_free = KITE_LINK_END;
  return pg;
}

/* malloc(n), n <= KITE_SMALL_MAX (class c), from the slow path of thread heap h while
 * profiling, after _kite_prof_counted_page found no block: a block, counted; or NULL with *weigh set to the bytes to weigh the sample by when this
 * allocation is the sampled one (the caller serves it with a run of its own and calls
 * _kite_prof_record). NULL and *weigh 0: out of memory. */
void *_kite_prof_malloc_small(struct kite_heap_s *h, size_t n, unsigned c, size_t *weigh) KITE_NOINLINE;
/* A request of n > KITE_SMALL_MAX bytes (or a small aligned one served by a run): true
 * when it is sampled (its gap crossed). */
bool _kite_prof_large_due(size_t n);
/* Record sampled block p (a large run's start or a huge block) of n requested bytes,
 * weighed by `weigh` bytes, with the caller's stack. */
void _kite_prof_record(void *p, size_t n, size_t weigh) KITE_NOINLINE;
/* Sampled block p is being freed (its run claimed, or a huge block): forget its record. */
void _kite_prof_free(void *p) KITE_NOINLINE;
/* The same for a sampled large run pg (its head, claimed: kind HELD) at p: true when the
 * profiler keeps the run (one unit, for the next sampled small block: a free and a new
 * run would each pass through the arena's purge); false: the caller frees it. */
bool _kite_prof_free_run(void *p, kite_page_t *pg) KITE_NOINLINE;
/* A run kept by _kite_prof_free_run (kind HELD, its pages as the last block left them),
 * or NULL. Counted in the statistics as the block it was (one allocation, one free). */
kite_page_t *_kite_prof_cached_run(void);
/* Sampled huge blocks live (free_generic asks _kite_prof_free only while this is not 0). */
extern uint64_t _kite_prof_huge_live KITE_HIDDEN;
/* Is huge block p a sampled one? (realloc: never resized in place) */
bool _kite_prof_sampled_huge(const void *p);
/* Write the profile to path: 0, or an errno value (nothing is allocated). */
int _kite_prof_dump(const char *path);
/* At exit: the profile KITE_PROF asks for and the KITE_PROF_LEAKS line. */
void _kite_prof_exit(void);
void _kite_prof_fork_prepare(void);
void _kite_prof_fork_parent(void);
void _kite_prof_fork_child(void);

/* ---- the writer (prof_write.c) ---- */
typedef struct kite_prof_row_s {
  uint32_t depth;
  void *const *pc;                /* return addresses, innermost first */
  double alloc_n, alloc_b;        /* weighted allocations since start: objects, bytes */
  double live_n, live_b;          /* weighted live blocks, bytes */
} kite_prof_row_t;
/* Write a profile.proto message to fd: sample types alloc_objects/count, alloc_space/bytes,
 * inuse_objects/count, inuse_space/bytes (Go's heap profiles' names), one sample per row
 * that next() yields (false: no more), the executable mappings its addresses lie in, one
 * location per distinct address (mapped, unsymbolized: pprof symbolizes from the files),
 * period `period` bytes. At most max_pcs distinct addresses. 0 or an errno value. */
int _kite_prof_write(int fd, bool (*next)(void *arg, kite_prof_row_t *row), void *arg, size_t max_pcs,
                     uint64_t period);
#endif
