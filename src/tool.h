/* src/tool.h -- hooks for memory checkers, compiled in only where asked for.
 *
 * KITE_VALGRIND (the kite-valgrind library, cmake -DKITE_VALGRIND=ON; never libkite.so):
 * src/valgrind.c wraps the malloc family with memcheck's client requests (MALLOCLIKE /
 * FREELIKE), so freed blocks are inaccessible to memcheck except their first
 * KITE_TOOL_LINK_BYTES, where kite keeps its free-list links. When kite hands out a run
 * again (a fresh small page or a run for a new use), the hook below makes it addressable
 * again, so that carving new blocks over old freed ones is not reported.
 * In every other build the hooks are empty: nothing on any path.
 * Layer: bottom (included by the files that hand out runs).
 */
#ifndef KITE_TOOL_H
#define KITE_TOOL_H
#include "types.h"

#ifndef KITE_VALGRIND
/* Build with memcheck client requests (the kite-valgrind library only). */
#define KITE_VALGRIND 0
#endif
#define KITE_TOOL_LINK_BYTES 16 /* a free block's words kite itself reads and writes */

#if KITE_VALGRIND
#include <valgrind/memcheck.h>
/* [p, p+n) is kite's to write again (a run handed out anew). */
#define KITE_TOOL_RUN_FRESH(p, n) VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#else
#define KITE_TOOL_RUN_FRESH(p, n) ((void)0)
#endif
#endif
