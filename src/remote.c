/* src/remote.c -- the remote-free protocol: how a thread frees a block of a small page it
 * does not own, and how the page's owner takes those blocks back (contract in remote.h).
 *
 * Two words take part: the block's entry links[i] (16 bits, types.h: LIVE, a free list's
 * next, or REMOTE|next) and the page's thread_free (64 bits: head index in bits 0..15, the
 * number of blocks on the list in bits 16..31, KITE_TF_ABANDONED in bit 63). A remote free
 * is two compare-and-swaps when nothing races it: the claim on the entry, the push on
 * thread_free.
 *
 * Invariants:
 *   R1. A thread that does not own the page takes a block only with one CAS of its entry
 *       from LIVE (the claim). Of two such frees of one block, the second's CAS fails: it
 *       is reported ("free(): invalid pointer or double free") and changes nothing. An
 *       entry that is not LIVE (free, uncarved: 0, the spare entry past the last block: 0,
 *       already claimed) fails the claim the same way.
 *   R2. The claim writes the block's link on thread_free in the same CAS: REMOTE|head, head
 *       the list's head read just before (END for an empty list). The push CAS installs
 *       (head i, count + 1) only over that head; when another push or the owner's take
 *       changed it, the claimer re-links its entry with a CAS from the value it wrote last,
 *       then tries again. A thread that does not own the page never writes an entry with a
 *       plain store.
 *   R3. The owner frees with plain accesses (free.c: read LIVE, store its local link). When
 *       another thread's claim lands between the owner's read and store (the owner and that
 *       thread free one block at once), the owner's store replaces the claim, and the block
 *       is on the owner's list, once. If the store lands before the claimer's push, the
 *       claimer sees it (it reads its entry back before the first push, and a re-link's CAS
 *       fails on it): it reports and pushes nothing. If it lands after the claimer's last
 *       look at the entry, the block is on thread_free with an entry that is not REMOTE:
 *       the owner's take (R4) reports it, and until then the page's thread_free count
 *       exceeds its REMOTE entries (kite_check says so). Either way one report, and the
 *       block is free once.
 *   R4. The owner (or heap_lock's holder, for an abandoned page) takes thread_free whole
 *       with one exchange and walks exactly its count of blocks; each entry must be
 *       REMOTE|next with next a carved block (or END for the last). The first that is not
 *       (R3, or a corrupt list) is reported and ends the walk: the blocks after it stay
 *       claimed and counted in used (leaked, never handed out).
 *   R5. KITE_TF_ABANDONED is set, under heap_lock, when the page's owner abandons it (heap.c,
 *       right after heap = NULL), and cleared, under heap_lock, when a heap adopts it. No
 *       push lands on a page with the bit set: the push CAS reads the bit in the same word
 *       it would write, so either the push comes first (and the abandoning thread's settle,
 *       which reads thread_free after setting the bit, sees the block) or the push sees the
 *       bit, sets its entry back to REMOTE|END and returns false, and the caller frees
 *       through heap_lock (heap.c pushes and settles the page: the free that empties an
 *       abandoned page releases it, however late it comes).
 *   R6. A claimed block counts in used until it is taken (R4): the page is not released,
 *       nor its link array reused, while a claimer still holds a block it has not pushed.
 *   R7. The take keeps the ABANDONED bit: only heap_lock's holders change it, and they are
 *       the only ones to take an abandoned page's list.
 * The claim and the push are inline in remote.h (the remote free's path, out of line in
 * free.c); the rest of the protocol is here.
 * Memory order: the claim acquires (the block's last user's writes happen before its
 * reuse); the push releases the entry's link to the owner's exchange, which acquires.
 */
#include "remote.h"
#include "page.h"
#include "message.h"

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_remote_read)(void *p);
void (*_kite_test_hook_remote_claimed)(void *p);
void (*_kite_test_hook_remote_push)(void *p);
void (*_kite_test_hook_remote_retry)(void *p);
#endif

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) {
  _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, i));
}

bool _kite_remote_push_claimed(kite_page_t *pg, uint32_t i, bool abandoned) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  uint16_t *e = &pg->links[i], mine = KITE_LINK_REMOTE | KITE_LINK_END, link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old);
  /* the entry links to the head read above before the push (R2) */
  if (link != mine && !__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    _kite_remote_invalid(pg, i);
    return true;
  }
  return _kite_remote_push(pg, e, i, link, old, abandoned);
}

void _kite_remote_push_again(kite_page_t *pg, uint32_t i, uint16_t mine, kite_remote_abandoned_fn abandoned) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  uint16_t *e = &pg->links[i], link = (uint16_t)(KITE_LINK_REMOTE + (uint16_t)old);
  /* R2: the entry links to the head read above before the push (R3: fails on the owner's
   * store) */
  if (!(old & KITE_TF_ABANDONED) && link != mine) {
    if (!__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      _kite_remote_invalid(pg, i);
      return;
    }
    mine = link;
  }
  if (!_kite_remote_push(pg, e, i, mine, old, false)) abandoned(pg, i);
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
  uint64_t bit = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) & KITE_TF_ABANDONED; /* R7 */
  uint64_t tf = __atomic_exchange_n(&pg->thread_free, KITE_TF_EMPTY | bit, __ATOMIC_ACQUIRE);
  return take_list(pg, KITE_TF_HEAD(tf), (uint32_t)KITE_TF_COUNT(tf));
}
