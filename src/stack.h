/* src/stack.h -- call stacks: capture the return addresses of the calling thread, and
 * print them without allocating. For the sampled guarded allocations (guarded.c), and
 * meant for any sampled record of where memory was allocated (a heap profile).
 *
 * Capture follows the unwind tables (.eh_frame), not the frame-pointer chain: gcc's -O2
 * omits frame pointers, so in code built the usual way (Debian's libraries, kite itself,
 * the program) the chain skips callers or stops at once. On x86-64 glibc kite walks the
 * tables itself, keeping each return address's rule in a cache (stack.c), so a capture
 * costs a few dozen instructions a frame once its addresses have been seen; libgcc's
 * _Unwind_Backtrace (every rule, microseconds a capture) takes the captures the walk
 * cannot make (S4), and every capture on other targets. Paid only by sampled allocations.
 *
 * Invariants
 *   S1 Capture never calls malloc. Both the walk and libgcc's unwinder find a frame's
 *      tables with glibc's _dl_find_object (glibc 2.35 and later, gcc 12's libgcc and
 *      later: no lock, no allocation); older pairs go through dl_iterate_phdr, which takes
 *      the loader's lock (a capture in a thread that is inside dlopen then waits for it).
 *      Should anything in the unwinder allocate all the same, the allocation that re-enters
 *      kite sees the thread's capture flag: that allocation is not sampled, and the capture
 *      is counted in _kite_stack_reentered (tests assert it stays 0).
 *   S2 A capture holds no lock (the rule cache is one word an entry, read and written
 *      whole; the memo of CIEs has entries written once, by the thread that claims one,
 *      and published by a release store of their key), so it is safe in a forked child
 *      and in a thread's exit (its own frames end at the thread's start routine).
 *   S3 Printing (_kite_stack_print) is async-signal-safe: write(2) from a stack buffer, and
 *      each frame's module found with _dl_find_object (lock-free; without it, the raw
 *      address alone).
 *   S4 The walk stops where libgcc's unwinder stops (no unwind table for the address, or an
 *      undefined return address) and gives the same frames; a capture it cannot make (a
 *      CFA given by a DWARF expression, the frame pointer kept in another register, a
 *      signal frame, a stack whose bounds are not known) is made by libgcc's unwinder
 *      instead, whole, and counted in _kite_stack_by_libgcc. Code without unwind tables
 *      (built with -fno-asynchronous-unwind-tables) ends a stack at its first frame.
 *   S5 The walk reads the stack only inside [its stack pointer, the stack's top), a range
 *      checked to be mapped: a glibc thread's stack ends at its descriptor
 *      (pthread_self), the main thread's at __libc_stack_end. Every CFA it computes must
 *      lie above the last one and within that range, so a corrupt frame ends the stack
 *      instead of faulting.
 *   S6 In a fully static program (no unwind tables that glibc can find) nothing is
 *      captured: stacks are empty there.
 * Layer: bottom (uses os and message only).
 */
#ifndef KITE_STACK_H
#define KITE_STACK_H
#include "types.h"
#include "message.h"

#define KITE_STACK_FRAMES 24 /* return addresses kept per stack */

typedef struct kite_stack_s {
  uint32_t depth;                   /* frames in pc[] */
  uint32_t tid;                     /* the kernel id of the thread that captured it */
  void *pc[KITE_STACK_FRAMES];      /* return addresses, innermost first */
} kite_stack_t;

/* Capture the caller's stack into st, leaving out the innermost `skip` frames of the caller
 * (0: the caller of _kite_stack_capture is pc[0]). Returns the depth (0 when the thread is
 * already capturing: S1). Any thread, any time but a signal handler. */
uint32_t _kite_stack_capture(kite_stack_t *st, uint32_t skip);
/* The same, for an allocator hook: the frames inside kite's own shared object (the entry
 * point and everything below it, however it was inlined or tail-called) are left out, so
 * pc[0] is the return address in the program's function that called malloc. Linked into
 * the program, kite's frames stay (a reader prunes them by name: prof.h). */
uint32_t _kite_stack_capture_caller(kite_stack_t *st);
/* Print st, one frame a line: "    #I 0xADDR MODULE+0xOFFSET\n" with MODULE the object's path
 * (the program: its argv[0]) and OFFSET the address less the object's load bias, the
 * address `nm` and `addr2line -e MODULE` use. Return addresses point after their call.
 * Async-signal-safe (S3). */
void _kite_stack_print(kite_out_t *o, const kite_stack_t *st);
/* Captures that re-entered malloc (S1): 0 unless the unwinder allocates. */
extern uint64_t _kite_stack_reentered KITE_HIDDEN;
/* Captures handed whole to libgcc's unwinder (S4: a frame the walk cannot follow, or a
 * stack whose bounds are not known). */
extern uint64_t _kite_stack_by_libgcc KITE_HIDDEN;
/* Is the calling thread inside a capture? (an allocation it makes must not capture) */
bool _kite_stack_busy(void);
#ifdef KITE_TEST_HOOKS
/* The same stack as _kite_stack_capture(st, skip) (no tid), always by libgcc's unwinder. */
uint32_t _kite_stack_capture_libgcc(kite_stack_t *st, uint32_t skip);
/* The walk alone from return address pc, stack pointer sp (8-aligned) and frame pointer bp,
 * on a stack [sp, hi) that must be mapped: false when a frame needs libgcc's unwinder. */
bool _kite_stack_walk_test(kite_stack_t *st, uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t hi);
#endif
#endif
