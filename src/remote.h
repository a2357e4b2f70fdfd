/* src/remote.h -- frees of a small page's blocks by threads that do not own the page. The
 * protocol and its invariants R1-R7 are at the top of remote.c; its claim and push are
 * inline here, for free.c's remote path (inline in kite_free), the rest is in remote.c.
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
 * claim's CAS (_read), between the claim and the push (_push), by the push's retry loop
 * before each of its CASes on thread_free (_retry), by the first re-link (out of line)
 * between its read of the entry and its CAS (_relink), and by the push that emptied an
 * abandoned page before it settles the page (_emptied). */
extern void (*_kite_test_hook_remote_read)(void *p);
extern void (*_kite_test_hook_remote_push)(void *p);
extern void (*_kite_test_hook_remote_retry)(void *p);
extern void (*_kite_test_hook_remote_relink)(void *p);
extern void (*_kite_test_hook_remote_emptied)(void *p);
#endif

/* What the remote free that empties an abandoned page does (R5): settle it (heap_abandon.c,
 * through a pointer: the heap layer is above this one). */
typedef void (*kite_remote_emptied_fn)(kite_page_t *pg);
/* Push block i, whose entry e holds `mine` (written by this thread, and the link to the
 * head of `old`, thread_free's value when read last), on thread_free (R2, R3, R5). true:
 * this push emptied an abandoned page (it set KITE_TF_EMPTIED: the caller settles it). */
static inline __attribute__((always_inline)) bool _kite_remote_push(kite_page_t *pg, uint16_t *e, uint32_t i, uint16_t mine, uint64_t old) {
  for (;;) {
    /* count + 1 (below 2^16: at most KITE_PAGE_MAX_BLOCKS), head i, the high bits kept */
    uint64_t nw = (old ^ ((uint16_t)old ^ (KITE_LINK_REMOTE + i))) + ((uint64_t)1 << 16);
    /* R5: on an abandoned page, the push whose count reaches the target empties it */
    bool emptied = (old & KITE_TF_ABANDONED) && (uint32_t)KITE_TF_COUNT(nw) == KITE_TF_TARGET(old);
    if (emptied) nw |= KITE_TF_EMPTIED;
#ifdef KITE_TEST_HOOKS
    void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_retry, __ATOMIC_ACQUIRE);
    if (hook) hook(_kite_page_block(pg, i));
#endif
    if (__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      return emptied;
    /* R2: the head moved: re-link; R3: fails when the owner's store replaced our value */
    uint16_t link = (uint16_t)old; /* REMOTE|head (types.h) */
    if (!__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      _kite_remote_invalid(pg, i);
      return false;
    }
    mine = link;
  }
}

/* The push of block i at b after its first try failed or found the page abandoned (its
 * entry holds what this thread wrote, REMOTE|next, unless the owner's store replaced it:
 * R3), and the call to emptied(pg) when the push empties an abandoned page: out of line,
 * so that the remote free's path stays straight and needs no stack frame, and from the
 * remote free's own arguments (b only for a test hook), so that the path keeps no value
 * for it and moves none. */
void _kite_remote_push_again(kite_page_t *pg, void *b, size_t i, kite_remote_emptied_fn emptied) KITE_NOINLINE;
/* Free block i (<= reserved, classify.h C1) at b of small page pg (head) from a thread that
 * does not own it, owned or abandoned: claim it and push it on thread_free, or report an
 * invalid or double free (R1, R3); the push that empties an abandoned page calls
 * emptied(pg). i is a size_t, as the push's fallback takes it: no zero-extension to keep.
 * sole (a constant): the caller has made itself the block's only freer before (the secure
 * build's canary claim, R8), so the claim is its check and a plain store, no CAS. */
static inline __attribute__((always_inline)) void _kite_remote_free_as(kite_page_t *pg, void *b, size_t i, kite_remote_emptied_fn emptied, bool sole) {
  /* thread_free read before the link array's base (two plain reads of fields that do not
   * order each other): so ordered, gcc keeps the base out of the register the claim's CAS
   * takes its expected value in, and addresses the entry in place (no address computed) */
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  uint16_t *e = &pg->links[i];
  /* the claim's read (R1): the value its CAS expects; LIVE without test hooks */
  uint16_t seen = KITE_LINK_LIVE, link = (uint16_t)old; /* REMOTE|head (types.h) */
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_read, __ATOMIC_ACQUIRE);
  if (hook) { /* the claim's read, then the hook, then its write (the CAS from what it read) */
    seen = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (seen != KITE_LINK_LIVE) {
      _kite_remote_invalid(pg, i);
      return;
    }
    hook(b);
  }
#endif
  if (sole) { /* R8: no other thread writes a LIVE entry of a block this thread claimed (a
               * plain read: one compare with the entry in memory) */
    if (unlikely(*e != seen)) {
      _kite_remote_invalid(pg, i);
      return;
    }
    __atomic_store_n(e, link, __ATOMIC_RELAXED);
  } else if (unlikely(!__atomic_compare_exchange_n(e, &seen, link, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) { /* R1 */
    _kite_remote_invalid(pg, i);
    return;
  }
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, b);
  KITE_TOOL_BLOCK_FREE(b, pg->block_size); /* before the push: the owner may pop it */
#ifdef KITE_TEST_HOOKS
  hook = __atomic_load_n(&_kite_test_hook_remote_push, __ATOMIC_ACQUIRE);
  if (hook) hook(b);
#endif
  /* the push, first try (R2), with no look back at the entry: an owner's store that landed
   * since the claim is the take's to report (R3, R4). It expects thread_free as read before
   * the claim less KITE_TF_ABANDONED, so that on an abandoned page (R5) it fails: a moved
   * head or an abandoned page goes out of line. */
  uint64_t want = old & ~KITE_TF_ABANDONED;
  uint64_t nw = (old & ~(uint64_t)0xFFFF) + ((uint64_t)1 << 16) + KITE_LINK_REMOTE + i; /* count + 1, REMOTE|i */
  if (likely(__atomic_compare_exchange_n(&pg->thread_free, &want, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)))
    return;
  _kite_remote_push_again(pg, b, i, emptied);
}
static inline __attribute__((always_inline)) void _kite_remote_free(kite_page_t *pg, void *b, size_t i, kite_remote_emptied_fn emptied) {
  _kite_remote_free_as(pg, b, i, emptied, false);
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
