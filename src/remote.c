/* src/remote.c -- the remote-free protocol: how a thread frees a block of a small page it
 * does not own, and how the page's owner takes those blocks back (contract in remote.h).
 *
 * Two words take part: the block's entry links[i] (16 bits, types.h: LIVE, a free list's
 * next, or REMOTE|next) and the page's thread_free (64 bits: head index in bits 0..15, the
 * number of blocks on the list in bits 16..31, KITE_TF_DIRECT in bit 62, KITE_TF_ABANDONED
 * in bit 63). A remote free is one compare-and-swap, the claim, which also links the block
 * into the freeing thread's batch of that page (R8); the batch goes onto thread_free with
 * one more CAS when it is full (R9): one read-modify-write a free and one a batch.
 *
 * Invariants:
 *   R1. A thread that does not own the page takes a block only with one CAS of its entry
 *       from LIVE (the claim). Of two such frees of one block, the second's CAS fails: it
 *       is reported ("free(): invalid pointer or double free") and changes nothing. An
 *       entry that is not LIVE (free, uncarved: 0, the spare entry past the last block: 0,
 *       already claimed) fails the claim the same way.
 *   R2. The claim writes the block's link in the same CAS: REMOTE|prev, prev the batch's
 *       newest block, or for a batch's first block thread_free's head read just before
 *       (END for an empty list). The push CAS installs (head = the batch's newest, count +
 *       n) only over that head; when another push or the owner's take changed it, the
 *       pusher re-links the oldest block's entry with a CAS from the value it wrote, then
 *       tries again. A thread that does not own the page never writes an entry with a
 *       plain store.
 *   R3. The owner frees with plain accesses (free.c: read LIVE, store its local link). When
 *       another thread's claim lands between the owner's read and store (the owner and that
 *       thread free one block at once), the owner's store replaces the claim, and the block
 *       is on the owner's list, once. If the store lands before the push, the pusher sees
 *       it (it reads every entry of its batch back before the push, and a re-link's CAS
 *       fails on it): it reports, and pushes the rest of the batch without that block. If
 *       it lands after the pusher's last look, the block is on thread_free with an entry
 *       that is not REMOTE: the owner's take (R4) reports it, and until then the page's
 *       thread_free count exceeds its REMOTE entries (kite_check says so). Either way one
 *       report, and the block is free once.
 *   R4. The owner (or heap_lock's holder, for an abandoned page) takes thread_free whole
 *       with one exchange and walks exactly its count of blocks; each entry must be
 *       REMOTE|next with next a carved block (or END for the last). The first that is not
 *       (R3, or a corrupt list) is reported and ends the walk: the blocks after it stay
 *       claimed and counted in used (leaked, never handed out).
 *   R5. KITE_TF_ABANDONED is set, under heap_lock, when the page's owner abandons it (heap.c,
 *       right after heap = NULL), and cleared, under heap_lock, when a heap adopts it. No
 *       push lands on a page with the bit set: the push CAS reads the bit in the same word
 *       it would write, so either the push comes first (and the abandoning thread's settle,
 *       which reads thread_free after setting the bit, sees the blocks) or the push sees the
 *       bit, sets each entry of its batch to REMOTE|END and hands each block to the
 *       caller's abandoned function, which frees it through heap_lock (heap.c pushes and
 *       settles the page: the free that empties an abandoned page releases it, however
 *       late it comes).
 *   R6. A claimed block counts in used until it is taken (R4): the page is not released,
 *       nor its link array reused, nor its page stolen (thread_free's count is below its
 *       capacity), while a thread holds a block it has not pushed.
 *   R7. The take keeps the flag bits: only heap_lock's holders change ABANDONED, and they
 *       are the only ones to take an abandoned page's list; DIRECT is set when a page is
 *       made (page.c) and lasts until it is made again.
 *   R8. Batches: each thread holds up to KITE_REMOTE_SLOTS batches (remote.h), one page
 *       each, in thread-local slots picked by the page's address. A slot with a page holds
 *       one block of it at least, so (R6) the page is the same page, with the same link
 *       array, for as long as the slot names it. A batch begins only on a page whose
 *       thread_free has neither flag: a first-class heap's page (DIRECT) may be released by
 *       kite_heap_destroy whatever its used count says, so a block freed into it is pushed
 *       at once (the claim and the push of the R2 protocol, one block); an abandoned one
 *       goes through heap_lock (R5). Threads that are exiting, or that cannot register
 *       their exit, push every free at once too.
 *   R9. A batch that holds KITE_REMOTE_BATCH blocks or KITE_REMOTE_BYTES bytes is pushed
 *       but for its newest block, which stays in the slot as the next batch's first (the
 *       slot keeps its page, R8; its entry links to the pushed chain's head, so the next
 *       push needs no re-link unless the owner took the list meanwhile). A batch is pushed
 *       whole when its slot is wanted for another page, when its thread exits (a thread key's
 *       destructor), before a fork (the forking thread's: no child inherits them
 *       unpushed), at malloc_trim and at process exit: a thread holds at most
 *       KITE_REMOTE_SLOTS x KITE_REMOTE_BATCH blocks of other threads' pages between its
 *       frees. Other threads' batches are not seen by a fork child: their blocks stay
 *       claimed there (leaked, never handed out twice).
 * Memory order: the claim acquires (the debug fill and the tools' note of the block stay
 * after it). The push releases: the owner's exchange (acquire) then sees every entry the
 * batch wrote and, before it hands a block out again, the writes to the block made before
 * its free (the claims come before the push in this thread's order, so one release covers
 * the batch; the re-links and the read-back are relaxed for the same reason). On weakly
 * ordered CPUs (aarch64) this is the pair that keeps a block's old contents from being
 * written after its new owner's writes.
 */
#include <pthread.h>
#include "remote.h"
#include "page.h"
#include "message.h"

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_remote_read)(void *p);
void (*_kite_test_hook_remote_claimed)(void *p);
void (*_kite_test_hook_remote_push)(void *p);
uint64_t _kite_test_remote_rmw;
#endif

__thread kite_remote_batch_t _kite_remote_batch[KITE_REMOTE_SLOTS] __attribute__((tls_model("initial-exec")));
/* 0: the thread's exit is not registered yet; 1: registered (it batches); 2: exiting, or
 * no key (it pushes every free at once, R8) */
static __thread uint8_t remote_state __attribute__((tls_model("initial-exec")));
static pthread_key_t remote_key;
static pthread_once_t remote_once = PTHREAD_ONCE_INIT;
static bool remote_key_ok;
/* what a push that finds its page abandoned does with each block (R5): free.c's, the same
 * function for every caller, kept here for the pushes at thread exit and fork */
static kite_remote_abandoned_fn remote_abandoned;

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) {
  _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, i));
}

/* A chain of claimed blocks of one page, idx[1..m] oldest first: idx[1]'s entry is
 * REMOTE|idx[0], each later one's REMOTE|(the one before). */
typedef struct {
  uint16_t *idx;
  uint32_t m;
} chain_t;

/* R1: claim block i with link `link`; false: reported. */
static bool claim(kite_page_t *pg, uint32_t i, uint16_t link) {
  uint16_t *e = &pg->links[i], seen = KITE_LINK_LIVE;
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
  KITE_REMOTE_RMW_COUNTED();
#endif
  if (unlikely(!__atomic_compare_exchange_n(e, &seen, link, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) {
    _kite_remote_invalid(pg, i);
    return false;
  }
  void *p = _kite_page_block(pg, i);
  if (KITE_DEBUG >= 3) _kite_block_fill_free(pg, p);
  KITE_TOOL_BLOCK_FREE(p, pg->block_size);
#ifdef KITE_TEST_HOOKS
  hook = __atomic_load_n(&_kite_test_hook_remote_claimed, __ATOMIC_ACQUIRE);
  if (hook) hook(p);
#endif
  return true;
}

/* R2, R5: push chain c on pg's thread_free. locked: the caller holds heap_lock and pg is
 * abandoned (the push keeps the bit). true: pushed (what was not reported); false: the page
 * is abandoned, c holds what is left, linked as before. */
static bool push_chain(kite_page_t *pg, chain_t *c, bool locked) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  for (;;) {
    if (unlikely(!locked && (old & KITE_TF_ABANDONED))) return false; /* R5 */
    if (KITE_TF_HEAD(old) != c->idx[0]) { /* R2: the head moved: re-link the oldest block */
      uint16_t mine = (uint16_t)(KITE_LINK_REMOTE | c->idx[0]), link = (uint16_t)(KITE_LINK_REMOTE | KITE_TF_HEAD(old));
      KITE_REMOTE_RMW_COUNTED();
      if (!__atomic_compare_exchange_n(&pg->links[c->idx[1]], &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        _kite_remote_invalid(pg, c->idx[1]); /* R3: the owner's store replaced it */
        c->idx++; /* the next block links to it: it becomes idx[0] */
        if (--c->m == 0) return true;
        continue;
      }
      c->idx[0] = (uint16_t)KITE_TF_HEAD(old);
    }
#ifdef KITE_TEST_HOOKS
    void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_push, __ATOMIC_ACQUIRE);
    if (hook) hook(_kite_page_block(pg, c->idx[c->m]));
    KITE_REMOTE_RMW_COUNTED();
#endif
    /* count + m (at most KITE_PAGE_MAX_BLOCKS in all: below 2^16), head the newest, the
     * flags kept; release: see the top of this file */
    uint64_t nw = (old & ~(uint64_t)0xFFFF) + ((uint64_t)c->m << 16) + c->idx[c->m];
    if (__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      return true;
  }
}

/* R5: the page of chain c is abandoned: each block's entry back to REMOTE|END, and the
 * block to remote_abandoned (heap_lock). The chain is copied first: the last block's free
 * may release the page, and nothing here reads the batch slot after a call out. */
static KITE_COLD void push_abandoned(kite_page_t *pg, const chain_t *c) {
  uint16_t idx[KITE_REMOTE_BATCH + 1];
  uint32_t m = c->m;
  kite_remote_abandoned_fn fn = __atomic_load_n(&remote_abandoned, __ATOMIC_RELAXED);
  for (uint32_t k = 0; k <= m; k++) idx[k] = c->idx[k];
  for (uint32_t k = 1; k <= m; k++) {
    uint16_t mine = (uint16_t)(KITE_LINK_REMOTE | idx[k - 1]), end = KITE_LINK_REMOTE | KITE_LINK_END;
    if (mine != end) {
      KITE_REMOTE_RMW_COUNTED();
      if (!__atomic_compare_exchange_n(&pg->links[idx[k]], &mine, end, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        _kite_remote_invalid(pg, idx[k]); /* R3 */
        continue;
      }
    }
    fn(pg, idx[k]);
  }
}

void _kite_remote_flush(kite_remote_batch_t *b, bool all) {
  kite_page_t *pg = b->page;
  uint32_t n = b->n;
  if (!all) { /* R8: the newest stays (the page stays this page), linked to the chain's head */
    uint16_t keep[2] = {b->idx[n - 1], b->idx[n]};
    chain_t c = {b->idx, n - 1};
    if (push_chain(pg, &c, false)) {
      b->n = 1;
      b->idx[0] = keep[0];
      b->idx[1] = keep[1];
      return;
    }
    /* abandoned: every block goes through heap_lock, the newest too */
    c.m++;
    b->page = NULL;
    b->n = 0;
    push_abandoned(pg, &c);
    return;
  }
  chain_t c = {b->idx, n};
  b->page = NULL; /* R8: empty before any call out */
  b->n = 0;
  if (!push_chain(pg, &c, false)) push_abandoned(pg, &c);
}

void _kite_remote_flush_all(void) {
  for (unsigned s = 0; s < KITE_REMOTE_SLOTS; s++)
    if (_kite_remote_batch[s].page) _kite_remote_flush(&_kite_remote_batch[s], true);
}

/* R9: the thread exits: its batches are pushed, and its later frees (other keys'
 * destructors) pushed at once. */
static void remote_thread_done(void *arg) {
  (void)arg;
  remote_state = 2;
  _kite_remote_flush_all();
}
static void remote_make_key(void) { remote_key_ok = pthread_key_create(&remote_key, remote_thread_done) == 0; }
/* The first batch of a thread registers its exit (R9); false: it cannot, and pushes every
 * free at once. pthread_setspecific may allocate: the state says "at once" meanwhile. */
static KITE_COLD bool remote_register(void) {
  remote_state = 2;
  pthread_once(&remote_once, remote_make_key);
  if (!remote_key_ok || pthread_setspecific(remote_key, (void *)1) != 0) return false;
  remote_state = 1;
  return true;
}

/* R8: one block pushed at once (the R2 protocol for one block) */
static void remote_free_direct(kite_page_t *pg, uint32_t i, uint64_t tf) {
  uint16_t two[2] = {(uint16_t)KITE_TF_HEAD(tf), (uint16_t)i};
  if (!claim(pg, i, (uint16_t)(KITE_LINK_REMOTE | two[0]))) return;
  /* R3: an owner's store that landed since the claim is seen here */
  if (__atomic_load_n(&pg->links[i], __ATOMIC_RELAXED) != (uint16_t)(KITE_LINK_REMOTE | two[0])) {
    _kite_remote_invalid(pg, i);
    return;
  }
  chain_t c = {two, 1};
  if (!push_chain(pg, &c, false)) push_abandoned(pg, &c);
}

void _kite_remote_free_generic(kite_page_t *pg, uint32_t i, kite_remote_abandoned_fn abandoned) {
  if (__atomic_load_n(&remote_abandoned, __ATOMIC_RELAXED) != abandoned)
    __atomic_store_n(&remote_abandoned, abandoned, __ATOMIC_RELAXED);
  uint64_t tf = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  if ((tf & KITE_TF_FLAGS) || (remote_state != 1 && (remote_state == 2 || !remote_register()))) {
    remote_free_direct(pg, i, tf); /* R8 */
    return;
  }
  kite_remote_batch_t *b = _kite_remote_slot(pg);
  if (b->page) _kite_remote_flush(b, true); /* R9: the slot is wanted */
  uint16_t seen = (uint16_t)KITE_TF_HEAD(tf);
  if (!claim(pg, i, (uint16_t)(KITE_LINK_REMOTE | seen))) return;
  if (__atomic_load_n(&pg->links[i], __ATOMIC_RELAXED) != (uint16_t)(KITE_LINK_REMOTE | seen)) {
    _kite_remote_invalid(pg, i); /* R3, as above */
    return;
  }
  uint32_t limit = KITE_REMOTE_BYTES / pg->block_size;
  b->page = pg;
  b->n = 1;
  b->idx[0] = seen;
  b->idx[1] = (uint16_t)i;
  b->limit = (uint16_t)(limit < 1 ? 1 : limit > KITE_REMOTE_BATCH ? KITE_REMOTE_BATCH : limit);
  if (b->limit == 1) _kite_remote_flush(b, true);
}

bool _kite_remote_push_claimed(kite_page_t *pg, uint32_t i, bool abandoned) {
  uint16_t two[2] = {KITE_LINK_END, (uint16_t)i}; /* its entry holds REMOTE|END */
  chain_t c = {two, 1};
  if (push_chain(pg, &c, abandoned)) return true;
  uint16_t mine = (uint16_t)(KITE_LINK_REMOTE | c.idx[0]), end = KITE_LINK_REMOTE | KITE_LINK_END;
  /* abandoned again: the entry back to REMOTE|END for the caller's push under heap_lock */
  if (mine != end && !__atomic_compare_exchange_n(&pg->links[i], &mine, end, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    _kite_remote_invalid(pg, i);
    return true;
  }
  return false;
}

void _kite_remote_mark_abandoned(kite_page_t *pg, bool abandoned) {
  if (abandoned) __atomic_fetch_or(&pg->thread_free, KITE_TF_ABANDONED, __ATOMIC_ACQ_REL);
  else __atomic_fetch_and(&pg->thread_free, ~KITE_TF_ABANDONED, __ATOMIC_ACQ_REL);
}

/* R4. Walk the list taken from thread_free (head i, n blocks) onto the allocation list.
 * One unsigned compare per block tells both "REMOTE" and "next is a carved block": an entry
 * minus REMOTE is below capacity only then (below REMOTE it wraps around); the list's last
 * entry (next == END) is the one expected exception. The list head, capacity and entries
 * stay in registers (a store to an entry could alias pg->free otherwise). */
static uint32_t take_list(kite_page_t *pg, size_t i, uint32_t n) {
  uint16_t *l = pg->links;
  size_t cap = pg->capacity, head = pg->free; /* size_t: no zero-extension moves */
  uint32_t k = n;
  if (k == 0) goto out;
  if (unlikely(i >= cap)) goto broken;
  for (;;) {
    uint16_t *e = &l[i];
    size_t next = (size_t)__atomic_load_n(e, __ATOMIC_RELAXED) - KITE_LINK_REMOTE;
    if (unlikely(next >= cap)) {
      if (next == KITE_LINK_END && k == 1) { /* the last block */
        __atomic_store_n(e, (uint16_t)head, __ATOMIC_RELAXED);
        head = i;
        k = 0;
        goto out;
      }
      if (next > KITE_LINK_END) { /* not REMOTE: R3's owner store */
        _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, (uint32_t)i));
        goto out;
      }
      /* REMOTE, but its next is not carved (or the list ends before its count): block i
       * goes back, the walk stops at the next one */
      __atomic_store_n(e, (uint16_t)head, __ATOMIC_RELAXED);
      head = i;
      k--;
      goto broken;
    }
    __atomic_store_n(e, (uint16_t)head, __ATOMIC_RELAXED); /* REMOTE: only the taker writes it */
    head = i;
    i = next;
    if (--k == 0) goto out;
  }
broken:
  _kite_report_invalid("free(): cross-thread free list of a page is broken (racing double free)", _kite_page_block(pg, 0));
out:
  pg->free = (uint16_t)head;
  return n - k;
}

uint32_t _kite_remote_take(kite_page_t *pg) {
  uint64_t bits = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) & KITE_TF_FLAGS; /* R7 */
  uint64_t tf = __atomic_exchange_n(&pg->thread_free, KITE_TF_EMPTY | bits, __ATOMIC_ACQUIRE);
  return take_list(pg, KITE_TF_HEAD(tf), (uint32_t)KITE_TF_COUNT(tf));
}
