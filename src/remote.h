/* src/remote.h -- frees of a small page's blocks by threads that do not own the page. The
 * protocol and its invariants R1-R7 are at the top of remote.c; its claim and push are
 * inline here, for free.c's remote path (out of line there), the rest is in remote.c.
 * Layer: part of the page module (page.c takes the remote frees through it).
 */
#ifndef KITE_REMOTE_H
#define KITE_REMOTE_H
#include "types.h"
#include "page.h"

/* thread_free's top bit (63): the page is abandoned (remote.c, R5) */
#define KITE_TF_ABANDONED ((uint64_t)1 << 63)

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) KITE_COLD; /* the report */
#ifdef KITE_TEST_HOOKS
/* Test builds: called by a remote free between its read of the block's entry and the
 * claim's CAS (_read), between the claim and its read-back of the entry (_claimed), between
 * that read-back and the push (_push), and by the push's retry loop before each of its CASes
 * on thread_free (_retry). */
extern void (*_kite_test_hook_remote_read)(void *p);
extern void (*_kite_test_hook_remote_claimed)(void *p);
extern void (*_kite_test_hook_remote_push)(void *p);
extern void (*_kite_test_hook_remote_retry)(void *p);
#endif

/* What a remote free does when it finds its page abandoned (R5): block i is claimed, its
 * entry REMOTE|END, not pushed; it is freed through heap_lock (free.c, heap.c). */
typedef void (*kite_remote_abandoned_fn)(kite_page_t *pg, uint32_t i);
/* Push block i, whose entry e holds `mine` (written by this thread, and the link to the
 * head of `old`, thread_free's value when read last), on thread_free (R2, R3, R5). */
static inline __attribute__((always_inline)) bool _kite_remote_push(kite_page_t *pg, uint16_t *e, uint32_t i, uint16_t mine, uint64_t old, bool abandoned) {
  for (;;) {
    if (unlikely(!abandoned && (old & KITE_TF_ABANDONED))) break; /* R5 */
    /* count + 1 (below 2^16: at most KITE_PAGE_MAX_BLOCKS), head i, the bit kept */
    uint64_t nw = (old ^ ((uint16_t)old ^ i)) + ((uint64_t)1 << 16);
#ifdef KITE_TEST_HOOKS
    void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_retry, __ATOMIC_ACQUIRE);
    if (hook) hook(_kite_page_block(pg, i));
#endif
    if (__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      return true;
    /* R2: the head moved: re-link; R3: fails when the owner's store replaced our value */
    uint16_t link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old); /* head <= END < REMOTE */
    if (!__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      _kite_remote_invalid(pg, i);
      return true;
    }
    mine = link;
  }
  /* abandoned: the entry goes back to REMOTE|END for the caller's push under heap_lock */
  uint16_t end = KITE_LINK_REMOTE | KITE_LINK_END;
  if (mine != end && !__atomic_compare_exchange_n(e, &mine, end, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    _kite_remote_invalid(pg, i);
    return true;
  }
  return false;
}

/* The push of block i after its first try failed (its entry holds `mine`, written by this
 * thread), and the call to abandoned(pg, i) when the page is abandoned: out of line, so
 * that the remote free's path stays straight and needs no stack frame. */
void _kite_remote_push_again(kite_page_t *pg, uint32_t i, uint16_t mine, kite_remote_abandoned_fn abandoned) KITE_NOINLINE;
/* Free block i (<= reserved, classify.h C1) of small page pg (head) from a thread that does
 * not own it: claim it and push it on thread_free, or report an invalid or double free
 * (R1, R3), or, on an abandoned page, call abandoned(pg, i). */
static inline __attribute__((always_inline)) void _kite_remote_free(kite_page_t *pg, uint32_t i, kite_remote_abandoned_fn abandoned) {
  uint16_t *e = &pg->links[i];
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  /* the claim's read (R1): the value its CAS expects; LIVE without test hooks */
  uint16_t seen = KITE_LINK_LIVE, link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old);
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
#endif
  if (unlikely(!__atomic_compare_exchange_n(e, &seen, link, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) { /* R1 */
    _kite_remote_invalid(pg, i);
    return;
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
    return;
  }
#ifdef KITE_TEST_HOOKS
  hook = __atomic_load_n(&_kite_test_hook_remote_push, __ATOMIC_ACQUIRE);
  if (hook) hook(b);
#endif
  /* the push, first try (R2, R5); a moved head or the abandoned bit: out of line */
  uint64_t nw = (old & ~(uint64_t)0xFFFF) + ((uint64_t)1 << 16) + i; /* count + 1, head i */
  if (likely(!(old & KITE_TF_ABANDONED)) &&
      likely(__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)))
    return;
  _kite_remote_push_again(pg, i, link, abandoned);
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
/* Push block i, claimed by this thread, whose entry still holds REMOTE|END (what
 * _kite_remote_free leaves for its abandoned call). abandoned: the caller holds heap_lock
 * and pg is abandoned (the push keeps the bit). true: pushed, or reported (R3); false: the
 * page was abandoned again (the entry is back at REMOTE|END). */
bool _kite_remote_push_claimed(kite_page_t *pg, uint32_t i, bool abandoned);
/* Take thread_free whole (keeping its ABANDONED bit) and put its blocks on the allocation
 * list. Returns the blocks moved. Owner only (or heap_lock's holder for an abandoned page). */
uint32_t _kite_remote_take(kite_page_t *pg);
/* Set (heap_lock held, heap just set to NULL) or clear (heap_lock held, before heap is set)
 * the ABANDONED bit. */
void _kite_remote_mark_abandoned(kite_page_t *pg, bool abandoned);

#endif
