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
 * kite_realloc of one may move it to the calling thread's own heap. */
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

/* The same counters as numbers (a snapshot; other threads keep running). */
typedef struct kite_stats_s {
  unsigned long long small_allocs;  /* small blocks handed to allocation lists */
  unsigned long long large_allocs;  /* buddy runs (64 KiB .. 16 MiB) */
  unsigned long long huge_allocs;   /* direct OS maps */
  unsigned long long remote_frees;  /* frees of blocks owned by another thread's heap (counted when taken back) */
  unsigned long long invalid_frees; /* invalid pointers and double frees reported */
  unsigned long long committed;     /* bytes kite holds committed now */
  unsigned long long peak_committed;
  unsigned long long purged;        /* bytes given back to the OS so far */
  unsigned long long arenas;        /* 64 MiB arenas reserved */
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
 * first-class heap, its large and huge blocks. Only the thread that owns the heap may call
 * it; blocks that other threads free meanwhile may be reported live.
 * kite_visit_all: every live block of the process (every heap, abandoned pages, large and
 * huge blocks). Other threads must be quiescent (not allocating or freeing), as for a
 * debugger's walk; the arena lock is held throughout. */
typedef bool (*kite_block_visitor_t)(void *block, size_t usable_size, void *arg);
bool kite_heap_visit(kite_heap_t *heap, kite_block_visitor_t visitor, void *arg);
bool kite_visit_all(kite_block_visitor_t visitor, void *arg);

/* Options: read from the environment (KITE_<NAME>) at start-up; these change them at run
 * time (plain stores: set them before starting threads). See docs/design.md for the table. */
typedef enum kite_option_e {
  KITE_OPTION_SHOW_STATS,      /* statistics at exit: 0 no, 1 text, 2 JSON */
  KITE_OPTION_VERBOSE,         /* extra messages (bool) */
  KITE_OPTION_ABORT_ON_ERROR,  /* abort after reporting an invalid or double free (bool) */
  KITE_OPTION_PURGE_DELAY_MS,  /* ms a free run stays committed; 0 at once; < 0 never */
  KITE_OPTION_HUGEPAGES,       /* transparent huge pages: 0 off, 1 whole arenas, 2 auto, 3 dense */
  KITE_OPTION_BACKGROUND,      /* background purger thread for idle processes (bool) */
  KITE_OPTION_GUARDED_SAMPLE,  /* one in N allocations guarded (KITE_GUARDED_SAMPLE); 0 off */
} kite_option_t;
long kite_option_get(kite_option_t option);
void kite_option_set(kite_option_t option, long value);

/* The loaded library's version, "MAJOR.MINOR.PATCH" (compile-time: <kite/version.h>). */
const char *kite_version(void);

#ifdef __cplusplus
}
#endif
#endif
