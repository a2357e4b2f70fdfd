/* src/purger.h -- the background purger (KITE_BACKGROUND=1, or idle, the default): a
 * thread that runs the arena decay steps and expires the huge cache while something freed is still
 * committed, so memory goes back to the OS in a process that has stopped calling malloc.
 *
 * Layer: above arena and huge (it calls their purge functions; they reach it only through
 * _kite_arena_dirty_hook, which _kite_purger_enable installs). Below init and introspect.
 *
 * Life cycle: no thread until a free leaves committed free memory behind; the thread then
 * sleeps in steps of max(KITE_PURGE_DELAY_MS / 8, 5 ms), purging after each, and once
 * nothing is left to purge (after about KITE_PURGE_DELAY_MS, or up to 8 times that while
 * the decay keeps pages for a program in demand: decay.c) waits, with no timer, for the
 * next free that leaves memory behind, which wakes it; after a second of that wait it
 * exits (purger.c's PURGER_IDLE_MS), and the next such free starts it again. It is
 * detached, so it never keeps a process alive, and a program that never frees never has
 * one. A forked child starts without it (fork hook) and starts its own the same lazy way. Not started when the delay is negative (only
 * malloc_trim purges then) or zero (frees purge at once).
 * KITE_BACKGROUND=idle: started only once a free leaves 4 MiB free and committed in a
 * process with 16 MiB committed, and it steps only once the program has neither freed
 * runs nor claimed for 8 purge delays (purger.c).
 * The same thread runs the KITE_HUGEPAGES=dense collapse pass (arena.h), started by the
 * claim that marked a granule, whether KITE_BACKGROUND is on or not: a collapse costs
 * milliseconds of system time, which no request is to wait for.
 */
#ifndef KITE_PURGER_H
#define KITE_PURGER_H
#include "types.h"

/* Set the background purger's mode, KITE_BACKGROUND_* (off: a running thread finishes its
 * step, then only collapses wake it); either way the collapse hook is installed (init calls
 * it once). */
void _kite_purger_enable(int mode);
/* Fork: the child has no purger thread. */
void _kite_purger_fork_child(void);
#endif
