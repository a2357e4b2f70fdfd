/* include/kite.h -- kite's public API.
 *
 * Link with -lkite (build/libkite.so or build/libkite.a) or preload build/libkite.so:
 * either way the standard malloc family is served by kite. The kite_-prefixed functions
 * below are always kite's, whichever malloc the process uses, and follow exactly the C/POSIX
 * semantics of their standard namesakes (errno values included).
 */
#ifndef KITE_H
#define KITE_H
#include <stddef.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The standard family, kite's own entry points. */
void *kite_malloc(size_t size);
void kite_free(void *p);
void *kite_calloc(size_t count, size_t size);
void *kite_realloc(void *p, size_t size);
void *kite_reallocarray(void *p, size_t count, size_t size);
int kite_posix_memalign(void **out, size_t alignment, size_t size);
void *kite_aligned_alloc(size_t alignment, size_t size);
void *kite_memalign(size_t alignment, size_t size);
void *kite_valloc(size_t size);
void *kite_pvalloc(size_t size);
size_t kite_malloc_usable_size(const void *p);
int kite_malloc_trim(size_t pad);

/* Sized / aligned frees (what C++ sized and aligned delete use). size and alignment must
 * be those the block was allocated with. */
void kite_free_sized(void *p, size_t size);
void kite_free_aligned_sized(void *p, size_t alignment, size_t size);

/* Is p a block kite handed out (and not yet freed)? Never crashes on foreign pointers. */
bool kite_owns(const void *p);

/* First-class heaps: kite_heap_destroy frees every block of the heap at once. A heap is
 * used by one thread at a time (its malloc/calloc/destroy calls must not overlap); its
 * blocks may be freed with kite_free from any thread before the heap is destroyed, and
 * kite_realloc of one may move it to the calling thread's own heap.
 * A kite_heap_t pointer is an opaque handle (never dereference it). The handle of a
 * destroyed heap stays invalid, also after a new heap took its place: kite_heap_destroy of
 * it prints "kite: kite_heap_destroy(): invalid or stale heap: 0x..." and does nothing;
 * kite_heap_malloc and kite_heap_calloc print the same with their own name and return NULL
 * with errno EINVAL; kite_heap_visit prints it and returns false. (Each is counted as an
 * invalid free, and aborts with KITE_ABORT_ON_ERROR, as the secure build always does. A
 * handle is recognised as stale until its heap's memory has been reused by 65536 more
 * heaps.) kite_heap_destroy(NULL) does nothing. */
typedef struct kite_heap_s kite_heap_t;
kite_heap_t *kite_heap_new(void);             /* NULL + ENOMEM on failure */
void kite_heap_destroy(kite_heap_t *heap);
void *kite_heap_malloc(kite_heap_t *heap, size_t size);
void *kite_heap_calloc(kite_heap_t *heap, size_t count, size_t size);

/* Statistics: print a summary to the given fd (2 = stderr) without allocating; each line
 * says what its figures count (docs/stats.md). */
void kite_stats_print(int fd);
/* The same, and live figures per size class and per heap, as one JSON object (a stable
 * schema, docs/stats.md) followed by a newline; written without allocating. */
void kite_stats_print_json(int fd);

/* Every figure of the two printers as numbers (a snapshot; other threads keep running).
 * Like the printers it walks every arena's runs under the arena lock for the live figures:
 * not for a hot loop. Fields are only ever added at the end. What each counts: docs/stats.md. */
typedef struct kite_stats_s {
  unsigned long long small_allocs;  /* small blocks handed to allocation lists */
  unsigned long long large_allocs;  /* buddy runs (64 KiB .. 16 MiB) */
  unsigned long long huge_allocs;   /* direct OS maps */
  unsigned long long remote_frees;  /* frees of blocks owned by another thread's heap (counted when taken back) */
  unsigned long long invalid_frees; /* invalid pointers and double frees given to free */
  unsigned long long committed;     /* bytes kite holds committed now */
  unsigned long long peak_committed;
  unsigned long long purged;        /* bytes given back to the OS so far */
  unsigned long long arenas;        /* 64 MiB arenas reserved */
  unsigned long long live_blocks;   /* blocks handed out and not freed: small + large + huge */
  unsigned long long live_bytes;    /* their usable sizes */
  unsigned long long small_live_blocks;
  unsigned long long small_live_bytes;
  unsigned long long small_pages;
  unsigned long long large_live_blocks;
  unsigned long long large_live_bytes;
  unsigned long long huge_live_blocks;
  unsigned long long huge_live_bytes;
  unsigned long long pages_abandoned; /* pages of exited threads put on the abandoned lists */
  unsigned long long pages_adopted;   /* abandoned pages another thread took over */
} kite_stats_t;
void kite_stats_get(kite_stats_t *out);

/* Validate kite's structures (the calling thread's heap with every page and free list in
 * it, abandoned pages, the huge cache, every arena with its buddy heap, the page map, the
 * size-class tables): 1 when all are sound, else 0 after one "kite: check failed: ..." line
 * per broken invariant on stderr. Takes kite's locks one at a time; other threads may keep
 * allocating (their own heaps are not read). Costs a walk of every arena: for tests and
 * debugging. Builds with KITE_DEBUG >= 2 run the same validators after each slow-path
 * operation (see docs/design.md). */
int kite_check(void);

/* Heap introspection. The visitor is called with each live block (handed out, not freed)
 * and its usable size; it returns false to stop the walk, and the walk returns false if it
 * was stopped. The visitor must not allocate or free through kite.
 * kite_heap_visit: the small blocks of heap (NULL: the calling thread's heap) and, for a
 * first-class heap, its large and huge blocks (a destroyed heap's handle: reported, false).
 * Only the thread that owns the heap may call it; blocks that other threads free meanwhile
 * may be reported live.
 * kite_visit_all: every live block of the process (every heap, abandoned pages, large and
 * huge blocks). Other threads must be quiescent (not allocating or freeing), as for a
 * debugger's walk; the arena lock is held throughout. */
typedef bool (*kite_block_visitor_t)(void *block, size_t usable_size, void *arg);
bool kite_heap_visit(kite_heap_t *heap, kite_block_visitor_t visitor, void *arg);
bool kite_visit_all(kite_block_visitor_t visitor, void *arg);

/* Options: read from the environment (KITE_<NAME>) at start-up; these read and change
 * them at run time (atomic words: another thread may act on the old value for a while).
 * kite_option_set returns 0, or -1 with errno EINVAL for an unknown option or a value out
 * of the option's range (the option keeps its value); kite_option_get returns -1 with
 * EINVAL for an unknown option. The table of options and ranges: README.md, kite(3). */
typedef enum kite_option_e {
  KITE_OPTION_SHOW_STATS,      /* statistics at exit: 0 no, 1 text, 2 JSON */
  KITE_OPTION_VERBOSE,         /* report requests that fail for lack of memory: 0 or 1 */
  KITE_OPTION_ABORT_ON_ERROR,  /* abort after reporting an invalid or double free: 0 or 1 */
  KITE_OPTION_PURGE_DELAY_MS,  /* ms a free run stays committed (-2^31 .. 86400000); 0 at once; < 0 never */
  KITE_OPTION_HUGEPAGES,       /* transparent huge pages: 0 off, 1 whole arenas, 2 auto, 3 dense */
  KITE_OPTION_BACKGROUND,      /* background purger thread for idle processes: 0, 1, 2 (idle) */
  KITE_OPTION_GUARDED_SAMPLE,  /* one in N allocations guarded (KITE_GUARDED_SAMPLE): 0 (off) .. 2^31-1 */
  KITE_OPTION_PROF_SAMPLE,     /* heap profiler: mean bytes between samples, 1 .. 2^40 */
  KITE_OPTION_PROF_LEAKS,      /* heap profiler: leak summary at exit: 0 or 1 (read at start-up) */
  KITE_OPTION_PROF_PEAK,       /* heap profiler: a profile every N MiB of new live peak, 0 off (start-up) */
} kite_option_t;
long kite_option_get(kite_option_t option);
int kite_option_set(kite_option_t option, long value);

/* Heap profiler (KITE_PROF, docs/profiling.md): write the sampled heap profile to path in
 * pprof's format (profile.proto, uncompressed): allocations since start and the blocks live
 * now, by call stack. Without KITE_PROF (or KITE_PROF_LEAKS, KITE_PROF_PEAK) in the
 * environment nothing is sampled and the profile has no samples. Returns 0, or -1 with errno
 * set (the file could not be opened or written). Allocates nothing. */
int kite_prof_dump(const char *path);

/* The loaded library's version, "MAJOR.MINOR.PATCH" (compile-time: <kite/version.h>). */
const char *kite_version(void);

#ifdef __cplusplus
}
#endif
#endif
