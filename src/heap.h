/* src/heap.h -- per-thread heaps: page queues per size class, the direct[] table the
 * malloc fast path indexes, thread-exit abandonment and adoption of pages, first-class heaps.
 * Layer: above page (and huge, arena for runs); below alloc/free. One module in four files
 * (heap.c says which does what; heap_impl.h is what they share).
 *
 * Ownership: a heap is touched only by its thread (and, after the thread exited, by
 * nobody: it goes back to the heap pool). Pages in a heap's queues have page->heap == it.
 * direct[n] is always the first page of the queue of class_of(n), or the static empty
 * page (whose free list is NULL) so a miss lands in the generic path without a branch;
 * direct_start[n] is that page's first byte.
 * The first page of each queue is "pinned": its used count carries +1, so freeing its
 * last block does not leave the fast path (malloc/free of one block in a loop never reaches
 * the slow path); the bias moves whenever another page becomes first.
 */
#ifndef KITE_HEAP_H
#define KITE_HEAP_H
#include "types.h"
#include "sizeclass.h"
#include "stats.h"
#include "options.h"
#include "secure_layout.h"
#include "page.h"

typedef struct kite_pageq_s { kite_page_t *first, *last; } kite_pageq_t;

typedef struct kite_heap_s {
  kite_page_t *direct[KITE_DIRECT_SLOTS];
  /* _kite_page_start(direct[n]) where direct[n] is a page (anything beside the empty page:
   * never read there): the malloc fast path's blocks are found from here (heap structs sit
   * between guard pages), not from a descriptor field */
  uint8_t *direct_start[KITE_DIRECT_SLOTS];
  kite_pageq_t queue[KITE_CLASSES]; /* pages that may have free blocks; first = current */
  kite_pageq_t full[KITE_CLASSES];  /* pages found full (in_full set, page.h) */
  kite_page_t *pinned[KITE_CLASSES]; /* == queue[c].first, whose used carries a +1 bias */
  uint32_t full_count[KITE_CLASSES];
  uint32_t scan_credit[KITE_CLASSES];  /* full-list pages full_scan may still visit */
  uint64_t issued[KITE_CLASSES];    /* stats: blocks handed to allocation lists */
  uint64_t remote_frees;             /* stats: blocks of its pages freed by other threads */
  kite_page_t *cache;               /* empty small pages kept for reuse (I-C1, heap.c) */
  uint32_t cache_count;             /* units of those pages */
  struct kite_heap_s *next_all, *prev_all;
  bool user;                        /* a first-class heap (kite_heap_new): never adopts */
  kite_owned_t *owned;              /* user heaps: its large and huge blocks */
  uint32_t reclaim_cls;             /* next class heap_reclaim looks at (heap_reclaim.c) */
  uint64_t reclaim_idle[2];         /* bit c: class c's current page was empty at the last look */
  uint8_t steal_skip[KITE_CLASSES]; /* refills of class c left before heap_steal looks again */
  uint8_t steal_miss[KITE_CLASSES]; /* heap_steal's looks in a row that found no dead page */
  /* The thread key (types.h) of the heap's thread, 0 for a first-class heap and for a heap
   * made after its thread's exit began (heap_pool.c): pages of h carry it in owner_key, and
   * the free fast path takes a page whose owner_key is the calling thread's key. Keys of
   * threads that cannot run again (exited, or other threads in a forked child) are dropped
   * from every page before another thread may get the same key (heap_pool.c), but for a
   * heap registered in the last round of key destructors: the next thread with its key
   * retires it at its first heap_obtain or at its first free into one of its pages
   * (heap_pool.c I-H4). */
  uintptr_t key;
  /* Who made a thread's heap, as I-H4 compares it (heap_pool.c heap_self: the thread pointer,
   * or pthread_self() where there is none), 0 for a first-class heap, a heap made after its
   * thread's exit began and, in a forked child, the parent's other threads' heaps. */
  uintptr_t self;
  /* Guards full[] and full_count[] (heap_reclaim.c: another thread's heap_steal takes dead
   * pages off them): a spin lock (0 free, 1 held; heap_impl.h's list_lock). The owner holds
   * it only around its own changes of those lists and never takes _kite_heap_lock while
   * holding it; heap_steal only tries it, under _kite_heap_lock. */
  uint32_t lock;
#if KITE_SECURE
  kite_secure_heap_t secure; /* a thread heap's quarantine and kept runs (secure_layout.h) */
#endif
  /* First-class heaps' handle generation (heap_pool.c, I-H1): the handle kite_heap_new gives out
   * carries its low 16 bits; kite_heap_destroy adds 1 (atomic: a stale handle's check may
   * race with the struct's reuse). Kept by heap_reset. */
  uint32_t handle_gen;
} kite_heap_t;

extern __thread kite_heap_t *_kite_heap_tls __attribute__((tls_model("initial-exec")));
extern kite_heap_t _kite_heap_empty KITE_HIDDEN;
extern kite_page_t _kite_page_empty KITE_HIDDEN;

/* The calling thread's key, what owner_key holds on its pages (types.h KITE_THREAD_KEY: the
 * thread pointer, or else the heap's address). */
static inline uintptr_t _kite_this_key(void) {
#ifdef KITE_THREAD_KEY
  return KITE_THREAD_KEY();
#else
  return (uintptr_t)_kite_heap_tls;
#endif
}

/* The current page of class cls with a free block on its allocation list, the page's own
 * frees made that list first if it had none (the quick refill: no collect of other threads'
 * frees, no statistics, so not when KITE_SHOW_STATS counts them); NULL when the class has
 * no current page or it has no free block (the generic path's work). Owner only. */
static inline kite_page_t *_kite_heap_current_page(kite_heap_t *h, unsigned cls) {
  kite_page_t *pg = h->queue[cls].first;
  if (likely(pg != NULL && pg->free != KITE_LINK_END)) return pg;
  if (!pg || pg->local_free == KITE_LINK_END || _kite_opt(KITE_OPT_SHOW_STATS)) return NULL;
  pg->free = pg->local_free;
  pg->local_free = KITE_LINK_END;
  return pg;
}
/* Generic malloc for n <= KITE_SMALL_MAX (any heap, including the empty one): NULL+ENOMEM. */
void *_kite_malloc_small_generic(kite_heap_t *h, size_t n) KITE_NOINLINE;
/* The same for a request of class cls (the caller computed it: guarded.c's sampler). */
void *_kite_malloc_small_cls(kite_heap_t *h, unsigned cls) KITE_NOINLINE;
/* The generic refill of class cls of thread heap h (the caller is its thread; not the
 * empty heap), charged to a countdown: the class's current page (pinned, heap.c I-P1) is
 * given a free block on its allocation list and an empty local list (_kite_heap_list_join);
 * when its count, |free| with the block this request takes, is at most *left, *left drops
 * by it and that block is returned; else nothing is charged or popped and the result is
 * over(pg)'s. NULL + ENOMEM when no page can be had. (guarded.c's sampler: the lists the
 * fast path is handed are counted whole, from the page's counts, before their first pop.) */
void *_kite_heap_refill_charged(kite_heap_t *h, unsigned cls, int64_t *left, void *(*over)(kite_page_t *pg)) KITE_NOINLINE;
/* The local list of pg, a current page of h (owner only), joined to its allocation list
 * (other threads' frees collected there too), so that a refill's count is of the one list
 * the fast path is handed: a generic refill may take a page from further down the queue
 * whose collect put other threads' frees on the allocation list and left the page's own on
 * the local list, which the quick refill after it hands out (and counts) again. */
void _kite_heap_list_join(kite_heap_t *h, kite_page_t *pg) KITE_NOINLINE;
/* The blocks a refill hands the fast path on pg, the class's current page: |free| +
 * |local_free| by page.h's invariant on used, less the pin's +1 (heap.c I-P1: the queue's
 * first page is the pinned one). A page in the class's queue is never on the full list
 * (check_queue: in_full set exactly there), so its used field is its count as it stands. */
static inline int64_t _kite_heap_list_count(const kite_page_t *pg) {
  return (int64_t)pg->capacity + 1 - (int64_t)__atomic_load_n(&pg->used, __ATOMIC_RELAXED);
}
/* Allocate one block of class cls from the calling thread's heap. NULL + ENOMEM. */
void *_kite_malloc_class(unsigned cls);
/* The calling thread's heap, created on first use; NULL + ENOMEM if it cannot be, and NULL
 * after the thread's exit teardown (the small generic path serves those requests). */
kite_heap_t *_kite_heap_get(void);
/* Local free hit a page whose used count reached 0 or that sits on the full list. */
void _kite_free_local_slow(kite_heap_t *h, kite_page_t *pg) KITE_NOINLINE;
/* Free block i at p of small page pg, whose heap is h, the calling thread's: the owner's
 * plain stores (remote.c R3) once the block's entry reads LIVE, else a double or invalid
 * free, reported: free.c's free_small for its own thread's block, and the secure build's
 * quarantine (secure.c), which found pg and i itself. */
static inline __attribute__((always_inline)) void _kite_heap_free_local(kite_heap_t *h, kite_page_t *pg, void *p, uint32_t i) {
  if (unlikely(pg->links[i] != KITE_LINK_LIVE)) {
    _kite_report_invalid("free(): invalid pointer or double free", p);
    return;
  }
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, p);
  KITE_TOOL_BLOCK_FREE(p, pg->block_size); /* after the fill writes it */
  __atomic_store_n(&pg->links[i], pg->local_free, __ATOMIC_RELAXED);
  pg->local_free = (uint16_t)i;
  if (--pg->used == 0) _kite_free_local_slow(h, pg); /* emptied, or on the full list */
}
/* Settle abandoned page pg, whose last block the caller's remote free just pushed (remote.c
 * R5: its push set KITE_TF_EMPTIED): under _kite_heap_lock, its frees merged, the page kept
 * empty for the next thread or given back to the arena. */
void _kite_heap_settle_abandoned(kite_page_t *pg);
#ifndef KITE_THREAD_KEY
/* Without a thread pointer, a heapless thread's free that leaves the fast path: once a
 * thread, retire the heap a dead thread with the same pthread_self() left (heap_pool.c
 * I-H4), which that thread's frees, remote ones, would otherwise never retire. */
void _kite_heap_retire_left_by_self(void) KITE_NOINLINE KITE_COLD;
#endif

/* First-class heaps (kite_heap_new / kite_heap_destroy). The public kite_heap_t pointer is
 * a handle, not the struct (heap_pool.c, I-H1): _kite_heap_new_user returns a handle (NULL +
 * ENOMEM), and every entry point that takes one turns it into the struct with
 * _kite_heap_of_handle, which reports an invalid or stale handle as "kite: WHAT: invalid or
 * stale heap: 0x..." (_kite_report_invalid) and returns NULL; errno is then EINVAL. */
kite_heap_t *_kite_heap_new_user(void);
kite_heap_t *_kite_heap_of_handle(kite_heap_t *handle, const char *what);
void _kite_heap_destroy_user(kite_heap_t *h);
/* Link a large/huge block into h's list, or unlink it (no-op if it has no owner). */
void _kite_heap_own(kite_heap_t *h, kite_owned_t *o, void *block);
void _kite_heap_disown(kite_owned_t *o);

/* Release empty cached pages and abandoned empty pages; returns bytes released. */
size_t _kite_heap_trim(void);
/* Merge the counters of every heap into out (global ones included). */
void _kite_heap_collect_stats(kite_gstats_t *out);
/* Call fn for every live heap (threads' and first-class), under the heap lock: fn must not
 * create or destroy heaps. Reading another thread's queues is racy (introspection only). */
void _kite_heap_foreach(void (*fn)(kite_heap_t *h, void *arg), void *arg);
#if KITE_SECURE
/* Set by secure.c: called when a thread's heap is retired, once its pages are abandoned
 * (its thread's exit, or heap_pool.c I-H4's retirement of a heap left behind), from any
 * thread: gives back what h->secure holds. */
extern void (*_kite_heap_retire_hook)(kite_heap_t *h) KITE_HIDDEN;
#endif
void _kite_heap_fork_prepare(void);
void _kite_heap_fork_parent(void);
void _kite_heap_fork_child(void);
#ifdef KITE_TEST_HOOKS
/* Test builds (heap_pool.c): a thread's heap creation acts as if pthread_setspecific failed
 * while this is set; the hook runs in every heap_retire (a thread's exit, kite_heap_destroy)
 * right before the heap leaves the live list (its pages already given up). */
extern bool _kite_test_fail_setspecific KITE_HIDDEN;
/* _kite_heap_lock sections taken to abandon exiting heaps' pages (under that lock). */
extern uint64_t _kite_test_abandon_lock_sections KITE_HIDDEN;
/* _kite_heap_lock sections taken to obtain heap structs (heap_pool.c, under that lock). */
extern uint64_t _kite_test_obtain_lock_sections KITE_HIDDEN;
extern void (*_kite_test_hook_heap_abandon)(void) KITE_HIDDEN;
/* heap_abandon.c: empty abandoned pages kept (beyond, a settle gives the page back); the
 * hook runs in a settle right after it lets _kite_heap_lock go (pg: the page settled). */
extern uint32_t _kite_test_abandoned_empty_max KITE_HIDDEN;
extern void (*_kite_test_hook_settle_unlocked)(void *pg) KITE_HIDDEN;
#endif

/* ---- validators (KITE_DEBUG >= 2 after slow-path operations; kite_check) ----
 * Class cls of heap h (the caller is h's thread): pinned == queue first with its +1, the
 * direct[] slots of the class point at it (or at the empty page); depth >= 1 also walks the
 * queue and the full list (links, owner, class, in_full flags, full_count, each page's
 * geometry); depth >= 2 checks every page's free lists too. */
bool _kite_heap_check_class(const kite_heap_t *h, unsigned cls, int depth);
/* Every class of h at depth 2 and its page cache. */
bool _kite_heap_check(const kite_heap_t *h);
/* The calling thread's heap, and every abandoned page (takes _kite_heap_lock). Other threads'
 * heaps are not read: only their threads may. */
bool _kite_heap_check_all(void);
#endif
