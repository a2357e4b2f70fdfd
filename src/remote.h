/* src/remote.h -- frees of a small page's blocks by threads that do not own the page. The
 * protocol and its invariants R1-R9 are at the top of remote.c; the claim into this
 * thread's batch is inline here, for free.c's remote path (out of line there), the rest is
 * in remote.c.
 * Layer: part of the page module (page.c takes the remote frees through it).
 */
#ifndef KITE_REMOTE_H
#define KITE_REMOTE_H
#include "types.h"
#include "page.h"

/* thread_free's top bit (63): the page is abandoned (remote.c, R5) */
#define KITE_TF_ABANDONED ((uint64_t)1 << 63)
/* bit 62: frees into this page are pushed at once, never batched (remote.c R8): the page
 * of a first-class heap, which kite_heap_destroy may release with its blocks in flight */
#define KITE_TF_DIRECT ((uint64_t)1 << 62)
#define KITE_TF_FLAGS (KITE_TF_ABANDONED | KITE_TF_DIRECT)

/* A thread's batch of one page (remote.c R8): the blocks it claimed there and has not
 * pushed yet, idx[1..n] oldest first; idx[0] is thread_free's head when the batch began.
 * Each block's entry links to the index before it (R2). 128 bytes, the size of a page
 * descriptor: a slot is found with one mask of the page's address. */
#define KITE_REMOTE_SLOTS 8     /* pages a thread batches into at once (a power of 2) */
#define KITE_REMOTE_BATCH 57    /* blocks a batch holds at most */
#define KITE_REMOTE_BYTES 16384 /* and their bytes at most (one block, if larger) */
typedef struct {
  kite_page_t *page; /* NULL: empty (n == 0) */
  uint16_t n, limit; /* blocks held; pushed when n reaches limit */
  uint16_t idx[KITE_REMOTE_BATCH + 1];
} kite_remote_batch_t;
_Static_assert(sizeof(kite_remote_batch_t) == sizeof(kite_page_t), "a batch slot is as large as a descriptor");
extern __thread kite_remote_batch_t _kite_remote_batch[KITE_REMOTE_SLOTS] __attribute__((tls_model("initial-exec")));
/* The slot of pg: descriptors are 128 bytes apart, so bits 7..9 of its address (its unit's
 * index, modulo 8) tell neighbouring pages apart; pages of 8 units share a slot. */
static inline kite_remote_batch_t *_kite_remote_slot(const kite_page_t *pg) {
  return (kite_remote_batch_t *)((char *)_kite_remote_batch + ((uintptr_t)pg & ((KITE_REMOTE_SLOTS - 1) * sizeof(kite_page_t))));
}

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) KITE_COLD; /* the report */
#ifdef KITE_TEST_HOOKS
/* Test builds: called by a remote free between its read of the block's entry and the
 * claim's CAS (_read), right after the claim (_claimed), and by the push of a batch before
 * its CAS on thread_free (_push, with the batch's newest block). _kite_test_remote_rmw
 * counts the read-modify-writes of remote frees and pushes. */
extern void (*_kite_test_hook_remote_read)(void *p);
extern void (*_kite_test_hook_remote_claimed)(void *p);
extern void (*_kite_test_hook_remote_push)(void *p);
extern uint64_t _kite_test_remote_rmw;
#define KITE_REMOTE_RMW_COUNTED() __atomic_fetch_add(&_kite_test_remote_rmw, 1, __ATOMIC_RELAXED)
#else
#define KITE_REMOTE_RMW_COUNTED() ((void)0)
#endif

/* What a remote free does when it finds its page abandoned (R5): block i is claimed, its
 * entry REMOTE|END, not pushed; it is freed through heap_lock (free.c, heap.c). */
typedef void (*kite_remote_abandoned_fn)(kite_page_t *pg, uint32_t i);
/* Free block i of pg when this thread's slot for pg holds another page's batch or none, the
 * page takes no batch (R8), or the thread is exiting: out of line. */
void _kite_remote_free_generic(kite_page_t *pg, uint32_t i, kite_remote_abandoned_fn abandoned) KITE_NOINLINE;
/* Push batch b (not empty) on its page's thread_free (R9). all: every block, and the slot
 * is emptied; else (b is full) all but the newest, which stays as the slot's batch. */
void _kite_remote_flush(kite_remote_batch_t *b, bool all) KITE_NOINLINE;
/* Push every batch of this thread (thread exit, fork, trim, process exit). */
void _kite_remote_flush_all(void);

/* Free block i (<= reserved, classify.h C1) of small page pg (head) from a thread that does
 * not own it: claim it into this thread's batch of pg (one CAS, R1, R8), or report an
 * invalid or double free; a full batch is pushed (R9). */
static inline __attribute__((always_inline)) void _kite_remote_free(kite_page_t *pg, uint32_t i, kite_remote_abandoned_fn abandoned) {
  kite_remote_batch_t *b = _kite_remote_slot(pg);
  if (unlikely(b->page != pg)) {
    _kite_remote_free_generic(pg, i, abandoned);
    return;
  }
  uint16_t *e = &pg->links[i];
  size_t n = b->n; /* >= 1: a slot with a page holds a block of it (R8); size_t: no extension moves */
  /* the claim's read (R1): the value its CAS expects; LIVE without test hooks */
  uint16_t seen = KITE_LINK_LIVE, link = (uint16_t)(KITE_LINK_REMOTE | b->idx[n]);
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_read, __ATOMIC_ACQUIRE);
  if (hook) { /* the claim's read, then the hook, then its write (the CAS from what it read) */
    seen = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (seen != KITE_LINK_LIVE) {
      _kite_remote_invalid(pg, i);
      return;
    }
    hook(_kite_page_block(pg, i));
  }
  KITE_REMOTE_RMW_COUNTED();
#endif
  /* R1: the claim, which links the block to the batch's newest (R2); acquire: remote.c */
  if (unlikely(!__atomic_compare_exchange_n(e, &seen, link, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) {
    _kite_remote_invalid(pg, i);
    return;
  }
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, _kite_page_block(pg, i));
  KITE_TOOL_BLOCK_FREE(_kite_page_block(pg, i), pg->block_size); /* before the push: the owner may pop it */
#ifdef KITE_TEST_HOOKS
  hook = __atomic_load_n(&_kite_test_hook_remote_claimed, __ATOMIC_ACQUIRE);
  if (hook) hook(_kite_page_block(pg, i));
#endif
  /* R3: an owner's store that landed since the claim is seen here (a plain read: the store
   * may still land later, and then the take reports it) */
  if (unlikely(__atomic_load_n(e, __ATOMIC_RELAXED) != link)) {
    _kite_remote_invalid(pg, i);
    return;
  }
  n++;
  b->idx[n] = (uint16_t)i;
  b->n = (uint16_t)n;
  if (unlikely(n >= b->limit)) _kite_remote_flush(b, false);
}

/* Claim block i for a free that will push it under heap_lock (the page was seen abandoned):
 * LIVE -> REMOTE|END with one CAS (R1). false: reported (not handed out). */
static inline bool _kite_remote_claim_alone(kite_page_t *pg, uint32_t i) {
  uint16_t live = KITE_LINK_LIVE;
  if (unlikely(!__atomic_compare_exchange_n(&pg->links[i], &live, (uint16_t)(KITE_LINK_REMOTE | KITE_LINK_END), false,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) {
    _kite_remote_invalid(pg, i);
    return false;
  }
  void *b = _kite_page_block(pg, i);
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
  KITE_TOOL_BLOCK_FREE(b, pg->block_size);
  return true;
}
/* Push block i, claimed by this thread, whose entry still holds REMOTE|END (what a remote
 * free leaves for its abandoned call). abandoned: the caller holds heap_lock and pg is
 * abandoned (the push keeps the bit). true: pushed, or reported (R3); false: the page was
 * abandoned again (the entry is back at REMOTE|END). */
bool _kite_remote_push_claimed(kite_page_t *pg, uint32_t i, bool abandoned);
/* Take thread_free whole (keeping its flag bits) and put its blocks on the allocation list.
 * Returns the blocks moved. Owner only (or heap_lock's holder for an abandoned page). */
uint32_t _kite_remote_take(kite_page_t *pg);
/* Set (heap_lock held, heap just set to NULL) or clear (heap_lock held, before heap is set)
 * the ABANDONED bit. */
void _kite_remote_mark_abandoned(kite_page_t *pg, bool abandoned);

#endif
