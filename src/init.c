/* src/init.c -- process start-up and exit, and fork handling: entry points the runtime
 * calls (constructor, destructor, fork handlers), in the entry layer beside alloc.c.
 *
 * Nothing below the entry layer calls into it: lower layers read options lazily through
 * options.h (_kite_options_ensure) and need no other start-up (the size-class tables are
 * constants). The constructor runs _kite_process_init() (kite_heap_new calls it too; that
 * reference is also what links this file into programs that use libkite.a): it reads the
 * options and registers the fork handlers, which call each layer's own
 * prepare/parent/child hooks, top layer first on prepare (heap lock, then the huge cache
 * lock, then the arena lock: the order in which a thread may hold them) and in reverse
 * after the fork.
 */
#define _GNU_SOURCE
#include <kite.h>
#include "heap.h"
#include "huge.h"
#include "arena.h"
#include "links.h"
#include "options.h"
#include "purger.h"
#include "message.h"
#include "os.h"
#include "secret.h"
#include "guarded.h"
#include "prof.h"
#include <pthread.h>

static int process_init_done;

static void fork_prepare(void) {
  _kite_prof_fork_prepare(); /* never nested with another kite lock (types.h), so first is safe */
  _kite_guarded_fork_prepare();
  _kite_heap_fork_prepare();
  _kite_huge_fork_prepare();
  _kite_links_fork_prepare(); /* links_lock is taken before arena locks */
  _kite_arena_fork_prepare();
}
static void fork_parent(void) {
  _kite_links_fork_parent();
  _kite_arena_fork_parent();
  _kite_huge_fork_parent();
  _kite_heap_fork_parent();
  _kite_guarded_fork_parent();
  _kite_prof_fork_parent();
}
static void fork_child(void) {
  _kite_secret_fork_child(); /* first: the reseed below reads the secrets */
  _kite_os_thread_fork_child(); /* before anything captures a stack (its thread id) */
#if defined(KITE_SECURE) && KITE_SECURE
  _kite_random_reseed(); /* secret.h: the child draws its own layout */
#endif
  _kite_purger_fork_child();
  _kite_links_fork_child();
  _kite_arena_fork_child();
  _kite_huge_fork_child();
  _kite_heap_fork_child();
  _kite_os_faults_fork_child(); /* before anything can make the guarded region again */
  _kite_guarded_fork_child();
  _kite_prof_fork_child();
}

void _kite_process_init(void) {
  if (__atomic_exchange_n(&process_init_done, 1, __ATOMIC_ACQ_REL)) return;
  _kite_options_ensure();
  /* Registered only once the options are read (_kite_options_once DONE) and, within that,
   * the start-up stderr recorded (message.c): neither once-initialisation can be half done
   * in a child these handlers run in, unlike the secrets, the guarded region and the fault
   * handler, made on first use at any time (their child hooks above). */
  pthread_atfork(fork_prepare, fork_parent, fork_child); /* may call malloc: kite is ready */
  _kite_purger_enable((int)_kite_opt(KITE_OPT_BACKGROUND)); /* (and the collapse hook, purger.h) */
}

__attribute__((constructor)) static void kite_ctor(void) { _kite_process_init(); }

/* Programs often close stderr at exit (gnulib's close_stdout does), before library
 * destructors run: kite's message stream still reaches the start-up stderr through the
 * duplicate message.c keeps (message.h). */
__attribute__((destructor)) static void kite_dtor(void) {
  _kite_prof_exit(); /* prof.h: KITE_PROF's profile and KITE_PROF_LEAKS's line */
  if (_kite_opt(KITE_OPT_SHOW_STATS) == 2) kite_stats_print_json(KITE_MSG_FD);
  else if (_kite_opt(KITE_OPT_SHOW_STATS)) kite_stats_print(KITE_MSG_FD);
}
