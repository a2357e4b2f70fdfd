/* src/tool.h -- hooks for memory checkers, compiled in only where asked for.
 *
 * KITE_VALGRIND (the kite-valgrind library, cmake -DKITE_VALGRIND=ON; never libkite.so):
 * src/valgrind.c wraps the malloc family with memcheck's client requests (MALLOCLIKE /
 * FREELIKE), so freed blocks are inaccessible to memcheck (kite keeps nothing in a block:
 * its links are in the page's link array, links.h). When kite hands out a run
 * again (a fresh small page or a run for a new use), the hook below makes it addressable
 * again, so that carving new blocks over old freed ones is not reported.
 * ASan build: see below. In every other build the hooks are empty: nothing on any path.
 * Layer: bottom (included by the files that hand out runs).
 */
#ifndef KITE_TOOL_H
#define KITE_TOOL_H
#include "types.h"

#ifndef KITE_VALGRIND
/* Build with memcheck client requests (the kite-valgrind library only). */
#define KITE_VALGRIND 0
#endif

#if KITE_VALGRIND
#include <valgrind/memcheck.h>
/* [p, p+n) is kite's to write again (a run handed out anew). */
#define KITE_TOOL_RUN_FRESH(p, n) VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#define KITE_TOOL_BLOCK_LIVE(b, n) ((void)0)
#define KITE_TOOL_BLOCK_FREE(b, n) ((void)0)
#elif defined(__SANITIZE_ADDRESS__)
/* The ASan build (KITE_SANITIZE=address): a freed small block is poisoned whole, so a use after free of a kite block is an ASan report (use-after-poison); it is
 * unpoisoned when handed out again, and a run or huge map handed out anew is unpoisoned
 * (its range may have been an arena's, since unmapped: ASan keeps the shadow). A free
 * poisons before the block is pushed on a list: once pushed, its owner may hand it out. */
#include <sanitizer/asan_interface.h>
/* only where something is poisoned: writing the shadow of a whole large run would cost RSS */
#define KITE_TOOL_RUN_FRESH(p, n) \
  do { if (__asan_region_is_poisoned((p), (n))) ASAN_UNPOISON_MEMORY_REGION((p), (n)); } while (0)
#define KITE_TOOL_BLOCK_LIVE(b, n) ASAN_UNPOISON_MEMORY_REGION((b), (n))
#define KITE_TOOL_BLOCK_FREE(b, n) ASAN_POISON_MEMORY_REGION((b), (n))
#else
#define KITE_TOOL_RUN_FRESH(p, n) ((void)0)
#define KITE_TOOL_BLOCK_LIVE(b, n) ((void)0) /* small block b (n bytes) handed out */
#define KITE_TOOL_BLOCK_FREE(b, n) ((void)0) /* small block b (n bytes) about to be freed */
#endif
/* heap.h's direct_start[] as stored: in libkite-valgrind.so inverted, so that memcheck's
 * leak scan does not read it as a pointer to a page's first block (a leaked first block
 * would stay "reachable"); as it is everywhere else. Its own inverse. */
#if KITE_VALGRIND
#define KITE_TOOL_START(p) ((uint8_t *)~(uintptr_t)(p))
#else
#define KITE_TOOL_START(p) (p)
#endif
#endif
