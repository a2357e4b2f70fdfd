/* src/remote.h -- frees of a small page's blocks by threads that do not own the page. The
 * protocol and its invariants R1-R7 are at the top of remote.c; its claim and push are
 * inline here, for free.c's remote path (out of line there), the rest is in remote.c.
 * Layer: part of the page module (page.c takes the remote frees through it).
 */
#ifndef KITE_REMOTE_H
#define KITE_REMOTE_H
#include "types.h"
#include "page.h"

/* thread_free's high bits (remote.c, R5): bit 63, the page is abandoned; bits 32..47, while
 * it is, the target: its used count, which the pushes' count reaches when every block is
 * free; bit 62, the push that reached it set it (the page's settle is that thread's). */
#define KITE_TF_ABANDONED ((uint64_t)1 << 63)
#define KITE_TF_EMPTIED ((uint64_t)1 << 62)
#define KITE_TF_TARGET_SHIFT 32
#define KITE_TF_TARGET(x) ((uint32_t)(((x) >> KITE_TF_TARGET_SHIFT) & 0xFFFF))
#define KITE_TF_STATE (KITE_TF_ABANDONED | KITE_TF_EMPTIED | ((uint64_t)0xFFFF << KITE_TF_TARGET_SHIFT))
/* the list's part of thread_free (head and count): KITE_TF_EMPTY when it holds no block */
#define KITE_TF_LIST(x) ((uint32_t)(x))

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) KITE_COLD; /* the report */
#ifdef KITE_TEST_HOOKS
/* Test builds: called by a remote free between its read of the block's entry and the
 * claim's CAS (_read), between the claim and its read-back of the entry (_claimed), between
 * that read-back and the push (_push), by the push's retry loop before each of its CASes
 * on thread_free (_retry), and by the push that emptied an abandoned page before it
 * settles the page (_emptied). */
extern void (*_kite_test_hook_remote_read)(void *p);
extern void (*_kite_test_hook_remote_claimed)(void *p);
extern void (*_kite_test_hook_remote_push)(void *p);
extern void (*_kite_test_hook_remote_retry)(void *p);
extern void (*_kite_test_hook_remote_emptied)(void *p);
#endif

/* What the remote free that empties an abandoned page does (R5): settle it (heap_abandon.c,
 * through a pointer: the heap layer is above this one). */
typedef void (*kite_remote_emptied_fn)(kite_page_t *pg);
/* Push the chain head .. tail of n blocks (one block: head == tail, n == 1), whose tail's
 * entry e holds `mine` (written by this thread, and the link to the head of `old`,
 * thread_free's value when read last), on thread_free (R2, R3, R5, B1). true: this push
 * emptied an abandoned page (it set KITE_TF_EMPTIED: the caller settles it). */
static inline __attribute__((always_inline)) bool _kite_remote_push(kite_page_t *pg, uint16_t *e, uint32_t tail, uint16_t mine,
                                                                    uint64_t old, uint32_t head, uint32_t n) {
  for (;;) {
    /* count + n (below 2^16: at most KITE_PAGE_MAX_BLOCKS), head, the high bits kept */
    uint64_t nw = (old ^ ((uint16_t)old ^ head)) + ((uint64_t)n << 16);
    /* R5: on an abandoned page, the push whose count reaches the target empties it */
    bool emptied = (old & KITE_TF_ABANDONED) && (uint32_t)KITE_TF_COUNT(nw) == KITE_TF_TARGET(old);
    if (emptied) nw |= KITE_TF_EMPTIED;
#ifdef KITE_TEST_HOOKS
    void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_retry, __ATOMIC_ACQUIRE);
    if (hook) hook(_kite_page_block(pg, tail));
#endif
    if (__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      return emptied;
    /* R2: the head moved: re-link; R3: fails when the owner's store replaced our value */
    uint16_t link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old); /* head <= END < REMOTE */
    if (!__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      _kite_remote_invalid(pg, tail);
      return false;
    }
    mine = link;
  }
}

/* The push of the chain head .. tail of n blocks (the tail's entry holds `mine`, written by
 * this thread): a block whose first try failed or found the page abandoned, or a batch's
 * flush (B1); and the call to emptied(pg) when the push empties an abandoned page: out of
 * line, so that the remote free's path stays straight and needs no stack frame. */
void _kite_remote_push_again(kite_page_t *pg, uint32_t head, uint32_t tail, uint16_t mine, uint32_t n,
                             kite_remote_emptied_fn emptied) KITE_NOINLINE;
/* R1, R3: claim block i (<= reserved, classify.h C1) of small page pg for a thread that
 * does not own it, writing `link` (REMOTE|next) over LIVE with one CAS, then read the entry
 * back. false: reported (it was not LIVE, or the owner's store has landed since). */
static inline __attribute__((always_inline)) bool _kite_remote_claim(kite_page_t *pg, uint32_t i, uint16_t link) {
  uint16_t *e = &pg->links[i];
  /* the claim's read (R1): the value its CAS expects; LIVE without test hooks */
  uint16_t seen = KITE_LINK_LIVE;
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_read, __ATOMIC_ACQUIRE);
  if (hook) { /* the claim's read, then the hook, then its write (the CAS from what it read) */
    seen = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (seen != KITE_LINK_LIVE) {
      _kite_remote_invalid(pg, i);
      return false;
    }
    hook(_kite_page_block(pg, i));
  }
#endif
  if (unlikely(!__atomic_compare_exchange_n(e, &seen, link, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) { /* R1 */
    _kite_remote_invalid(pg, i);
    return false;
  }
  void *b = _kite_page_block(pg, i);
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
  KITE_TOOL_BLOCK_FREE(b, pg->block_size); /* before the push: the owner may pop it */
#ifdef KITE_TEST_HOOKS
  hook = __atomic_load_n(&_kite_test_hook_remote_claimed, __ATOMIC_ACQUIRE);
  if (hook) hook(b);
#endif
  /* R3: an owner's store that landed since the claim is seen here, before the push (a
   * plain read: the store may still land later, and then the take reports it) */
  if (unlikely(__atomic_load_n(e, __ATOMIC_RELAXED) != link)) {
    _kite_remote_invalid(pg, i);
    return false;
  }
  return true;
}

/* Free block i (<= reserved, C1) of small page pg (head) from a thread that does not own
 * it, owned or abandoned, at once: claim it and push it on thread_free, or report an
 * invalid or double free (R1, R3); the push that empties an abandoned page calls
 * emptied(pg). */
static inline __attribute__((always_inline)) void _kite_remote_free(kite_page_t *pg, uint32_t i, kite_remote_emptied_fn emptied) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  uint16_t link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old);
  if (!_kite_remote_claim(pg, i, link)) return;
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_push, __ATOMIC_ACQUIRE);
  if (hook) hook(_kite_page_block(pg, i));
#endif
  /* the push, first try (R2); a moved head or an abandoned page (R5): out of line */
  uint64_t nw = (old & ~(uint64_t)0xFFFF) + ((uint64_t)1 << 16) + i; /* count + 1, head i */
  if (likely(!(old & KITE_TF_ABANDONED)) &&
      likely(__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)))
    return;
  _kite_remote_push_again(pg, i, i, link, 1, emptied);
}

/* A thread's batch of remote frees (B1-B5, remote.c): blocks of one page, each claimed
 * (R1), chained head -> ... -> tail through their entries, not yet on thread_free. Only
 * its thread reads or writes it (it lives in the thread's heap). */
#define KITE_REMOTE_BATCH 64 /* the most blocks a batch holds (B3) */
/* A thread's batches: one per slot, a page's slot by its class (B3): a power of two */
#define KITE_REMOTE_SLOTS 16
#define KITE_REMOTE_SLOT(cls) ((cls) & (KITE_REMOTE_SLOTS - 1))
typedef struct kite_remote_batch_s {
  kite_page_t *page;  /* NULL: empty; _kite_remote_armed(pg): empty, pg's last free pushed */
  uint16_t head;      /* the block claimed last */
  uint16_t tail;      /* the block claimed first */
  uint16_t tail_link; /* what the tail's claim wrote: REMOTE|thread_free's head then */
  uint16_t room;      /* blocks it may still take: KITE_REMOTE_BATCH less those chained */
} kite_remote_batch_t;

/* The mark of a slot whose last free went to pg and was pushed at once (B5): the next one
 * into pg starts a batch. Never equal to a descriptor's address (they are aligned). */
static inline kite_page_t *_kite_remote_armed(const kite_page_t *pg) { return (kite_page_t *)((uintptr_t)pg | 1); }
/* Push b's chain on its page's thread_free with one CAS (B1; the tail re-linked first when
 * the head moved, R2) and empty b; the push that empties an abandoned page calls
 * emptied(pg). Nothing but that when b is empty or armed. */
void _kite_remote_flush(kite_remote_batch_t *b, kite_remote_emptied_fn emptied) KITE_NOINLINE;
/* The same for a full batch (B3), leaving b armed for its page (B5): the next free into it
 * starts the next batch. */
void _kite_remote_flush_full(kite_remote_batch_t *b, kite_remote_emptied_fn emptied) KITE_NOINLINE;
/* Start b (empty or armed) with block i of pg, a thread heap's page: claim it linked to
 * thread_free's head (R1, R2); on a failed claim (reported), b is left empty. */
void _kite_remote_begin(kite_remote_batch_t *b, kite_page_t *pg, uint32_t i) KITE_NOINLINE;
/* Free block i of b's page pg into b: claim it linked to b's head (R1, B1), and flush b when
 * it is full (B3). */
static inline __attribute__((always_inline)) void _kite_remote_free_batched(kite_remote_batch_t *b, kite_page_t *pg, uint32_t i,
                                                                            kite_remote_emptied_fn emptied) {
  if (!_kite_remote_claim(pg, i, (uint16_t)(KITE_LINK_REMOTE + b->head))) return;
  b->head = (uint16_t)i;
  if (unlikely(--b->room == 0)) _kite_remote_flush_full(b, emptied);
}

/* Take thread_free whole and put its blocks on the allocation list. Returns the blocks
 * moved. Owner only, or, for an abandoned page, heap_lock's holder settling it (R6): the
 * ABANDONED bit stays, the target and KITE_TF_EMPTIED go (R7). */
uint32_t _kite_remote_take(kite_page_t *pg);
/* The page's owner gives it up (heap_lock held, heap and owner_key just cleared): with used
 * (its count, unpinned, off the full list) above the blocks on thread_free, set ABANDONED
 * and the target used (R5) and return true. false: every block is free already (no free
 * can come); the page stays the caller's to collect and release. */
bool _kite_remote_abandon(kite_page_t *pg, uint32_t used);
/* A heap adopts abandoned page pg (heap_lock held): clear ABANDONED and the target; false,
 * and nothing changed, when a push emptied it (KITE_TF_EMPTIED: its pusher settles it). */
bool _kite_remote_adopt(kite_page_t *pg);
/* The settle of an abandoned page (heap_lock held) left used blocks claimed (a racing double
 * free broke its list, R4): make used the target again. true: the pushes already reached
 * it (KITE_TF_EMPTIED set again: the caller settles once more). */
bool _kite_remote_retarget(kite_page_t *pg, uint32_t used);

#endif
