/* src/remote.c -- the remote-free protocol: how a thread frees a block of a small page it
 * does not own, and how the page's owner takes those blocks back (contract in remote.h).
 *
 * Two words take part: the block's entry links[i] (16 bits, types.h: LIVE, a free list's
 * next, or REMOTE|next) and the page's thread_free (64 bits: REMOTE|head in bits 0..15,
 * the link the next block pushed stores (types.h), the number of blocks on the list in
 * bits 16..31; for an abandoned page KITE_TF_ABANDONED in bit 63, the target in bits
 * 32..47 and KITE_TF_EMPTIED in bit 62, remote.h). A remote free
 * is two compare-and-swaps when nothing races it, whether the page has an owner or not:
 * the claim on the entry, the push on thread_free, and no other access to the entry.
 *
 * Invariants:
 *   R1. A thread that does not own the page takes a block only with one CAS of its entry
 *       from LIVE (the claim). Of two such frees of one block, the second's CAS fails: it
 *       is reported ("free(): invalid pointer or double free") and changes nothing. An
 *       entry that is not LIVE (free, uncarved: 0, the spare entry past the last block: 0,
 *       already claimed) fails the claim the same way. (The secure build's release from
 *       its quarantine claims with a checked plain store instead: R8.)
 *   R2. The claim writes the block's link on thread_free in the same CAS: REMOTE|head, head
 *       the list's head read just before (END for an empty list). The push CAS installs
 *       (head i, count + 1) only over that head; when another push or the owner's take
 *       changed it, the claimer re-links its entry with a CAS, then tries again: from the
 *       value it wrote last, or, for the first re-link (out of line, given only the page
 *       and the index), from the entry as read there, which must be REMOTE|next (R3). A
 *       thread that does not own the page never writes an entry with a plain store (but R8's
 *       claim).
 *   R3. The owner frees with plain accesses (free.c: read LIVE, store its local link). When
 *       another thread's claim lands between the owner's read and store (the owner and that
 *       thread free one block at once), the owner's store replaces the claim, and the block
 *       is on the owner's list, once. The claimer does not look at its entry again before
 *       its first push: if that push lands, the block is on thread_free with an entry that
 *       is not REMOTE, and the owner's take reports it (R4); until then the page's
 *       thread_free count exceeds its REMOTE entries (kite_check says so). If the first
 *       push fails (the head moved), the first re-link reads the entry and refuses one that
 *       is not REMOTE|next (a local link, or LIVE once the block is handed out again), and a
 *       later re-link's CAS fails on the store: it reports and pushes nothing. Either way
 *       the block is free once; the report is one, but for a take's list that holds two
 *       such blocks: R4 stops at the first (the owner's store erased the link to the
 *       blocks pushed before it), so the second, behind it, is not reported. (In the secure build this race does not
 *       arise: the owner's free and the other thread's are one canary claim's winner, R8.)
 *   R4. The owner (or heap_lock's holder, for an abandoned page) takes thread_free whole
 *       with one exchange and walks exactly its count of blocks; each entry must be
 *       REMOTE|next with next a carved block (or END for the last). The first that is not
 *       (R3, or a corrupt list) is reported and ends the walk: the blocks after it stay
 *       claimed and counted in used (leaked, never handed out). The walk stores each entry
 *       it takes as next, without REMOTE, so a block met twice in one walk (R3's block, handed
 *       out again and freed by another thread before the take: on the list twice) is
 *       reported at its second visit, and taken once.
 *   R5. A page whose owner exits with blocks still out is abandoned: under heap_lock, its
 *       owner sets KITE_TF_ABANDONED and the target, its used count (the blocks handed out,
 *       claimed or on thread_free), in one CAS that fails if the count on thread_free is
 *       already used (then every block is free and no free can come: the owner releases
 *       the page instead). Frees into an abandoned page are remote frees like any other,
 *       with no lock: claim, push. The push CAS reads the bit and the target in the word
 *       it writes, so exactly one push reaches the target: it sets KITE_TF_EMPTIED in the
 *       same CAS, and its thread settles the page under heap_lock (takes the list, gives
 *       the page back or keeps it empty for the next thread), however late it comes. A
 *       heap adopts an abandoned page only by a CAS that clears the bit and the target
 *       and fails on KITE_TF_EMPTIED (heap_lock held): an emptied page is its settler's,
 *       and a push that read the bit before the adoption fails its CAS and pushes again
 *       as to any owned page.
 *   R6. A claimed block counts in used until it is taken (R4): the page is not released,
 *       nor its link array reused, while a claimer still holds a block it has not pushed;
 *       so an abandoned page's pushes reach its target only when every block is free.
 *   R7. The ABANDONED bit changes only under heap_lock (abandon, adopt); the take keeps it,
 *       and clears the target and KITE_TF_EMPTIED (only a settle, heap_lock held, takes an
 *       abandoned page's list).
 *   R8. The secure build (secure.c) frees a small block in the core only after its own
 *       claim, one CAS of the block's canary (secure_layout.h: of two frees of one hand-out,
 *       exactly one wins; the loser is reported there and never reaches the core), and
 *       the block stays LIVE in the core until its winner releases it from the quarantine.
 *       So no two threads free one block in the core at once, and while the winner holds
 *       it no other thread writes its entry (an entry leaves LIVE only by a free; the
 *       owner's pop and carve write only free and uncarved entries; the take, only
 *       claimed ones). Its remote free (_kite_core_free_remote, remote.h's sole claim)
 *       therefore claims with a plain read, refusing an entry that is not LIVE (reported,
 *       nothing changed, as R1), and a plain store of REMOTE|head: no CAS. R2 and R4-R7
 *       hold as stated; the default build, and every core free not behind the canary
 *       claim (the secure build's floor, KITE_SECURE_FLOOR, included), keep R1's CAS.
 * The claim and the push are inline in remote.h (the remote free's path, out of line in
 * free.c); the rest of the protocol is here.
 * Memory order: the claim acquires (the block's last user's writes happen before its
 * reuse; R8's plain claim: the canary claim's CAS acquired, on the same thread); the push
 * releases the entry's link to the owner's exchange, which acquires.
 */
#include "remote.h"
#include "page.h"
#include "message.h"
#include "links.h"

#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_remote_read)(void *p);
void (*_kite_test_hook_remote_push)(void *p);
void (*_kite_test_hook_remote_retry)(void *p);
void (*_kite_test_hook_remote_relink)(void *p);
void (*_kite_test_hook_remote_emptied)(void *p);
#endif

void _kite_remote_invalid(const kite_page_t *pg, uint32_t i) {
  _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, i));
}

void _kite_remote_push_again(kite_page_t *pg, void *b, size_t i, kite_remote_emptied_fn emptied) {
  uint16_t *e = &pg->links[i], mine = __atomic_load_n(e, __ATOMIC_RELAXED);
  /* R3: the owner's store (a local list's link, or LIVE once the block is handed out
   * again) is not REMOTE|next: this free and the owner's were of one block */
  if (unlikely((uint16_t)(mine - KITE_LINK_REMOTE) > KITE_LINK_END)) {
    _kite_remote_invalid(pg, i);
    return;
  }
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED);
  uint16_t link = (uint16_t)old; /* REMOTE|head (types.h) */
  /* R2: the entry links to the head read above before the push (R3: fails on the owner's
   * store) */
  if (link != mine) {
#ifdef KITE_TEST_HOOKS
    void (*relink)(void *) = __atomic_load_n(&_kite_test_hook_remote_relink, __ATOMIC_ACQUIRE);
    if (relink) relink(b);
#endif
    if (!__atomic_compare_exchange_n(e, &mine, link, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      _kite_remote_invalid(pg, i);
      return;
    }
    mine = link;
  }
  if (!_kite_remote_push(pg, e, i, mine, old)) return;
#ifdef KITE_TEST_HOOKS
  void (*hook)(void *) = __atomic_load_n(&_kite_test_hook_remote_emptied, __ATOMIC_ACQUIRE);
  if (hook) hook(b);
#endif
  (void)b;
  emptied(pg); /* R5: this push emptied the abandoned page */
}

bool _kite_remote_abandon(kite_page_t *pg, uint32_t used) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED), nw;
  do {
    if ((uint32_t)KITE_TF_COUNT(old) == used) return false; /* every block is free */
    nw = (old & ~KITE_TF_STATE) | KITE_TF_ABANDONED | ((uint64_t)used << KITE_TF_TARGET_SHIFT);
  } while (!__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return true;
}

bool _kite_remote_adopt(kite_page_t *pg) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_ACQUIRE);
  do {
    if (old & KITE_TF_EMPTIED) return false; /* R5: its settler's */
  } while (!__atomic_compare_exchange_n(&pg->thread_free, &old, old & ~KITE_TF_STATE, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return true;
}

bool _kite_remote_retarget(kite_page_t *pg, uint32_t used) {
  uint64_t old = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED), nw;
  bool emptied;
  do {
    emptied = (uint32_t)KITE_TF_COUNT(old) == used;
    nw = (old & ~KITE_TF_STATE) | KITE_TF_ABANDONED | ((uint64_t)used << KITE_TF_TARGET_SHIFT) | (emptied ? KITE_TF_EMPTIED : 0);
  } while (!__atomic_compare_exchange_n(&pg->thread_free, &old, nw, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return emptied;
}

/* R4. Walk the list taken from thread_free (head i, n blocks) onto the allocation list, in
 * its own order: each entry REMOTE|next becomes next, and the last block taken links to the
 * allocation list as it was. One unsigned compare per block tells both "REMOTE" and "next
 * is a carved block": an entry minus REMOTE is below capacity only then (below REMOTE it
 * wraps around); the list's last entry (next == END) is the one expected exception, taken
 * out of the loop. The entry is stored as it was computed, so a step is a load, a
 * subtraction, a compare and a store, with no value kept for the step after it. Three
 * steps to a round, so that the blocks' three roles (the one before, this one, the next)
 * rotate through three variables without moves between them (its store goes through ls,
 * the same array: see take_list); the count is checked once a
 * round while four or more blocks are left. A step that finds its entry odd leaves k at
 * the blocks left, this one included (`left`: the steps of the round before it), and
 * `last` at the block taken before it (NONE: none). */
#define NONE (~(size_t)0)
#define TAKE_STEP(prv, cur, nxt, left)                                                   \
  nxt = (size_t)__atomic_load_n(&l[cur], __ATOMIC_RELAXED) ^ rm;                        \
  if (unlikely(nxt >= cap)) {                                                            \
    i = cur;                                                                             \
    last = prv;                                                                          \
    next = nxt;                                                                          \
    k -= left;                                                                           \
    goto odd;                                                                            \
  }                                                                                      \
  __atomic_store_n(&ls[cur], (uint16_t)nxt, __ATOMIC_RELAXED); /* REMOTE: the taker's */
static uint32_t take_list(kite_page_t *pg, size_t i, uint32_t n) {
  uint16_t *l = pg->links;
  /* the same array, for the steps' stores: a second read of the base, which the compiler
   * cannot prove equal to l (an atomic read is not merged), so that a step addresses its
   * load and its store each from a base and the index, and computes no address to share
   * between them; the page's owner alone writes links, before the page is shared */
  uint16_t *ls = __atomic_load_n(&pg->links, __ATOMIC_RELAXED);
  size_t rm = _kite_link_remote_word; /* KITE_LINK_REMOTE (links.h: why a word) */
  size_t cap = pg->capacity, next, last, first = i; /* size_t: no zero-extension moves */
  uint32_t k = n;
  if (k == 0) return 0;
  if (unlikely(i >= cap)) goto broken;
  size_t a = i, b, c = NONE; /* a: the next block to take, c: the one taken before it */
  for (; k >= 4; k -= 3) {
    TAKE_STEP(c, a, b, 0)
    TAKE_STEP(a, b, c, 1)
    TAKE_STEP(b, c, a, 2)
  }
  for (; k > 1; k--) {
    TAKE_STEP(c, a, b, 0)
    c = a;
    a = b;
  }
  /* the last block the count takes: its entry's next is not followed */
  next = (size_t)__atomic_load_n(&l[a], __ATOMIC_RELAXED) ^ KITE_LINK_REMOTE;
  if (unlikely(next >= cap && next != KITE_LINK_END)) {
    i = a;
    last = c;
    goto odd;
  }
  __atomic_store_n(&l[a], (uint16_t)pg->free, __ATOMIC_RELAXED);
  pg->free = (uint16_t)first;
  return n;
odd: /* block i's entry less REMOTE is next, not a carved block; last: the block before it */
  if (next > KITE_LINK_END) { /* not REMOTE: R3's owner store */
    _kite_report_invalid("free(): invalid pointer or double free", _kite_page_block(pg, (uint32_t)i));
    goto cut;
  }
  /* REMOTE, but its next is not carved (or the list ends before its count): block i is
   * taken, the walk stops at the next one */
  last = i;
  k--;
  _kite_report_invalid("free(): cross-thread free list of a page is broken (racing double free)", _kite_page_block(pg, 0));
cut: /* the blocks taken, first .. last, go before the allocation list */
  if (last != NONE) {
    __atomic_store_n(&l[last], (uint16_t)pg->free, __ATOMIC_RELAXED);
    pg->free = (uint16_t)first;
  }
  return n - k;
broken:
  _kite_report_invalid("free(): cross-thread free list of a page is broken (racing double free)", _kite_page_block(pg, 0));
  return 0;
}
#undef TAKE_STEP
#undef NONE

uint32_t _kite_remote_take(kite_page_t *pg) {
  /* R7: the bit stays (only heap_lock's holders change it, and they alone take an abandoned
   * page's list); the target and KITE_TF_EMPTIED go */
  uint64_t bit = __atomic_load_n(&pg->thread_free, __ATOMIC_RELAXED) & KITE_TF_ABANDONED;
  uint64_t tf = __atomic_exchange_n(&pg->thread_free, KITE_TF_EMPTY | bit, __ATOMIC_ACQUIRE);
  return take_list(pg, KITE_TF_HEAD(tf), (uint32_t)KITE_TF_COUNT(tf));
}
