/* src/types.h -- kite's core data structures, constants and the glossary.
 *
 * Glossary
 *   unit    64 KiB (KITE_UNIT_SIZE): the granule the buddy page heap hands out.
 *   arena   a 64 MiB reservation aligned to 64 MiB (KITE_ARENA_SIZE) = 1024 units. Its
 *           first units hold metadata between guard pages: a PROT_NONE page
 *           (KITE_ARENA_GUARD), the page descriptor table (one kite_page_t per unit), the
 *           arena header, the buddy heap's metadata, then PROT_NONE up to the first user
 *           unit. The rest is handed out by the buddy heap in runs of 2^k units.
 *           Only a prefix is mapped at first (1 MiB), doubled as the arena fills.
 *   page    a run of 2^k units used for one purpose: a slab of one size class (small
 *           page), or one large object (large run). Its descriptor is the descriptor of
 *           its first unit (the head); the other units' descriptors hold head_off (the
 *           distance back to the head) and never match any heap, so frees that land in
 *           them take the generic path.
 *   block   one object in a small page. kite never writes into a block: free lists and
 *           block states live in the page's link array (links.h), outside the pages.
 *   heap    per-thread state: for each size class a queue of pages with free blocks, a
 *           list of full pages, and direct[] (the page to allocate from for every size
 *           up to 1024 bytes, indexed by the size). Reached through one initial-exec TLS pointer.
 *   huge    an allocation above KITE_LARGE_MAX (or with an alignment no buddy run can
 *           give): its own OS mapping, which starts at a 64 MiB boundary with a header
 *           page; the user pointer follows at offset min(max(align, OS page), 64 MiB).
 *
 * Finding metadata from a pointer p (no per-object header):
 *   _kite_pagemap[p >> 26]  KITE_PM_ARENA / KITE_PM_HUGE / 0 (not ours): "is it ours?"
 *   arena  = p & ~(KITE_ARENA_SIZE-1)
 *   page   = (kite_page_t *)(arena + KITE_ARENA_GUARD) + ((p >> 16) & 1023), then minus
 *            head_off (_kite_unit_of). A descriptor's unit, and so its page's first byte,
 *            follow from the descriptor's own address (_kite_page_start): nothing stored in
 *            a descriptor says where its blocks are.
 *
 * Which file owns what (each module's header states its invariants and locks; the layers,
 * bottom up, with includes and calls only downward or sideways without a circle --
 * tools/layers.py checks both, docs/design.md draws them from the sources):
 *   os.h / os/linux.c     the only system calls
 *   message, options, stats, sizeclass, report, secret, secure_layout.h   the bottom:
 *                         assertions and formatting, KITE_* options, counters, size-class
 *                         tables, misuse reports, secrets; the secure build's block format
 *   buddy (kite/buddy.h)  the buddy page heap inside each arena: buddy_impl.h its data
 *                         structure and invariants I1-I5, buddy.c allocation and free,
 *                         buddy_range.c reserve/unreserve and allocation at a given place
 *   pagemap               "is this address kite's?" (one byte per 64 MiB)
 *   arena                 64 MiB reservations, runs of units (arena.c; arena_int.h the
 *                         module's shared header, arena_check.c its validators), the purge
 *                         policy (decay.c), the huge-page modes (thp.c)
 *   huge                  blocks with their own OS mapping, the huge cache
 *   purger                the optional background purger thread (KITE_BACKGROUND)
 *   links                 the small pages' link arrays (guarded maps of their own)
 *   page                  the small-page life cycle (carve, pop, collect, remote push)
 *   heap                  per-thread heaps, one module in four files (heap_impl.h shared):
 *                         heap.c queues, pin, direct[], generic malloc and local free;
 *                         heap_reclaim.c a fresh page (reclaim, steal, cache, new run);
 *                         heap_abandon.c abandonment, adoption, trim; heap_pool.c the heap
 *                         structs (one obtain, one retire), first-class heaps, stats walk
 *   prof, prof_write      the sampled heap profiler (KITE_PROF) and its pprof file format
 *   alloc / free          the public entry points (fast paths first)
 *   introspect, override  statistics and options API; the standard names
 *   visit                 live counts (statistics) and block walks (kite_heap_visit ...)
 *   tool.h, valgrind.c    memory-checker hooks: ASan build, libkite-valgrind.so (memcheck)
 *   init                  start-up, exit and fork (calls each layer's fork hooks); in the
 *                         entry layer: the runtime calls it, and so does kite_heap_new
 *   secure.c              the secure build's entry points (libkite-secure.so); its large
 *                         runs and huge blocks (guard pages, kept runs) in secure_large.c
 *
 * Build variants (compile definitions)
 *   KITE_OVERRIDE  1: malloc/free/... and C++ operators are defined (kite, kite-static)
 *                  0: only the kite_* API (kite-noover, used by the sanitizer builds)
 *   KITE_DEBUG     0..3 graded assertions (kite_assert ... kite_assert_expensive)
 */
#ifndef KITE_TYPES_H
#define KITE_TYPES_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "bits.h"

#ifndef KITE_DEBUG
/* Assertion level: 0 release, 1 cheap checks, 2 internal, 3 expensive validators. */
#define KITE_DEBUG 0
#endif
#ifndef KITE_OVERRIDE
/* Define the standard malloc family names (1) or only the kite_ API (0). */
#define KITE_OVERRIDE 0
#endif

/* A relaxed load of a word another thread may write, and a relaxed store of a word another
 * thread may read or compare-and-swap. Plain in release builds (aligned x86-64 loads and
 * stores are atomic, and the compiler may fold a load into a compare), atomics under TSan,
 * which sees them. */
#if defined(__SANITIZE_THREAD__)
#define KITE_LOAD_RELAXED(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define KITE_STORE_RELAXED(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#else
#define KITE_LOAD_RELAXED(x) (x)
#define KITE_STORE_RELAXED(x, v) ((x) = (v))
#endif
/* A stretch of code whose reads of words other threads write plainly are racy by contract
 * (the statistics walks: visit.c, _kite_live_collect and _kite_heap_live) runs under TSan with the recording of
 * this thread's reads and writes turned off, so the race is not reported whichever of the two
 * accesses TSan sees second. A suppression is not enough: it matches a stack, and TSan often
 * cannot restore the stack of the earlier access. Locks and atomics still synchronize. */
#if defined(__SANITIZE_THREAD__)
__attribute__((visibility("default"))) void AnnotateIgnoreReadsBegin(const char *file, int line);
__attribute__((visibility("default"))) void AnnotateIgnoreReadsEnd(const char *file, int line);
#define KITE_TSAN_IGNORE_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define KITE_TSAN_IGNORE_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define KITE_TSAN_IGNORE_BEGIN() ((void)0)
#define KITE_TSAN_IGNORE_END() ((void)0)
#endif
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define KITE_NOINLINE __attribute__((noinline))
#define KITE_COLD __attribute__((cold, noinline))
/* KITE_NO_IPA: the compiler may not use what it learns of the function's body at its call
 * sites (gcc's noipa: no dropped or reordered arguments, no no-return deduction); clang has
 * no such attribute and there it is empty (the functions that use it are noinline too) */
#if defined(__has_attribute)
#if __has_attribute(noipa)
#define KITE_NO_IPA __attribute__((noipa))
#endif
#endif
#ifndef KITE_NO_IPA
#define KITE_NO_IPA
#endif
/* Every extern declaration of kite's internal data carries KITE_HIDDEN: -fvisibility=hidden
 * covers definitions only, so without it a file that reads another file's global goes
 * through the GOT (the linker relaxes that load to an extra lea, still one more instruction
 * per access). The public API is KITE_API (include/kite.h's functions); no data is exported. */
#define KITE_HIDDEN __attribute__((visibility("hidden")))
#define KITE_API __attribute__((visibility("default")))

/* ---- geometry ---- */
#define KITE_UNIT_SHIFT 16
#define KITE_UNIT_SIZE ((size_t)1 << KITE_UNIT_SHIFT)
#define KITE_ARENA_SHIFT 26
#define KITE_ARENA_SIZE ((size_t)1 << KITE_ARENA_SHIFT)
#define KITE_ARENA_MASK (KITE_ARENA_SIZE - 1)
#define KITE_ARENA_UNITS (1u << (KITE_ARENA_SHIFT - KITE_UNIT_SHIFT))
/* Platform geometry (the os layer reads the values in force at start-up: os.h).
 * KITE_OS_PAGE_MAX: the largest OS page this build runs on. Layouts fixed at build time (an
 * arena's first guard, the guarded-sample region) use it, so they stay aligned for every
 * page up to it; a larger page is refused at start-up. x86-64's base page is 4 KiB; aarch64
 * kernels use 4, 16 or 64 KiB. */
#ifndef KITE_OS_PAGE_MAX
#if defined(__aarch64__)
#define KITE_OS_PAGE_MAX 65536
#else
#define KITE_OS_PAGE_MAX 4096
#endif
#endif
/* KITE_ADDR_BITS: the virtual address bits a mapping of kite's may use, what the kernel gives
 * a program that passes no hint above them (x86-64: 47, also with 5-level paging; aarch64: 48,
 * also with 52-bit kernels). The page map covers exactly these; an arena or huge map the
 * kernel places above is refused (unmapped, ENOMEM), and a pointer above is never kite's. */
#ifndef KITE_ADDR_BITS
#if defined(__aarch64__)
#define KITE_ADDR_BITS 48
#else
#define KITE_ADDR_BITS 47
#endif
#endif
/* The OS page size in force (a power of two, 4 KiB .. KITE_OS_PAGE_MAX), set once at
 * start-up by the os layer (_kite_os_init, before the first mapping) and constant after:
 * guard pages, decommit granules, mincore and page-rounded sizes follow it. */
extern size_t _kite_os_page_size KITE_HIDDEN;
#define KITE_OS_PAGE _kite_os_page_size
/* An arena's first OS page is PROT_NONE: the arena below it in the address space ends
 * with user blocks, and no overflow out of them may reach this arena's descriptors. */
#define KITE_ARENA_GUARD ((size_t)KITE_OS_PAGE_MAX)
#define KITE_SMALL_MAX ((size_t)65536)   /* largest small (slab) block; sizeclass.h */
#define KITE_SMALL_PAGE_MAX ((size_t)8 * KITE_SMALL_MAX) /* largest small page (8 blocks of the largest class) */
/* Large objects: buddy runs up to 2^KITE_LARGE_MAX_ORDER units; above: huge (OS map). */
#define KITE_LARGE_MAX_ORDER 8
#define KITE_LARGE_MAX (KITE_UNIT_SIZE << KITE_LARGE_MAX_ORDER) /* 16 MiB */

/* Unit kinds (kite_page_t.kind; a run's other units read HELD or what the run's user set):
 *   FREE    free in its arena (arena.c's is_free)
 *   META    the arena's own metadata (descriptor table, header, buddy heap)
 *   SMALL   the head of a small page; LARGE the head of a large block
 *   HELD    a run one thread holds with no block in it: just claimed from the arena (until
 *           the caller says what it is), or on its way back (a large block whose free won
 *           the claim, an emptied small page)
 *   CACHED  an empty small page (head unit) in a heap's page cache */
enum {
  KITE_KIND_FREE = 0,
  KITE_KIND_META = 1,
  KITE_KIND_SMALL = 2,
  KITE_KIND_LARGE = 3,
  KITE_KIND_HELD = 4,
  KITE_KIND_CACHED = 5,
};

/* ---- small pages: one link entry (uint16_t) per block, in the page's links[] array ----
 * An entry says where its block is, outside the block (links.h keeps the arrays away from
 * every block, so no write through a block pointer can change one):
 *   0 .. KITE_PAGE_MAX_BLOCKS - 1, or KITE_LINK_END: the block is free, on the allocation
 *          list (page->free) or the owner's local list (page->local_free); the value is the
 *          next block's index on that list. Uncarved blocks read 0 (not LIVE).
 *   KITE_LINK_LIVE: handed out.
 *   KITE_LINK_REMOTE | next (next <= KITE_LINK_END): freed by another thread and on the
 *          page's thread_free list; claimed with one compare-and-swap from LIVE, so of two
 *          racing frees of one block only one can succeed.
 * page->thread_free packs the list's head as the link a block pushed next stores,
 * KITE_LINK_REMOTE | head (low 16 bits: END for an empty list), and the number of blocks on
 * it (bits 16..31), so the owner learns the count without walking and a pusher's link is
 * the word's low half as it stands. */
#define KITE_PAGE_MAX_BLOCKS 4096 /* 64 KiB / 16 bytes: the most blocks a small page has */
#define KITE_LINK_END 0x1000u
#define KITE_LINK_LIVE 0xFFFFu
#define KITE_LINK_REMOTE 0x8000u
#define KITE_TF_EMPTY ((uint64_t)(KITE_LINK_REMOTE | KITE_LINK_END))
#define KITE_TF_HEAD(x) ((uint32_t)((x) & 0xFFFF) - KITE_LINK_REMOTE) /* wraps when not REMOTE|head */
#define KITE_TF_COUNT(x) ((int32_t)(((x) >> 16) & 0xFFFF))
static inline bool _kite_link_is_remote(uint32_t v) { return v >= KITE_LINK_REMOTE && v <= (KITE_LINK_REMOTE | KITE_LINK_END); }

struct kite_heap_s;

/* A large or huge block that belongs to a first-class heap (kite_heap_new): linked on the
 * heap's list so kite_heap_destroy can free it; unlinked when it is freed. owner == NULL for
 * every other block. Guarded by the heap lock. */
typedef struct kite_owned_s {
  struct kite_owned_s *next, *prev;
  struct kite_heap_s *owner;
  void *block;
} kite_owned_t;

/* The descriptor of one unit of an arena. Fields by the layer that writes them:
 *   arena: kind (FREE/META, HELD until a user sets SMALL/LARGE), head_off, order, heap = NULL
 *   page:  free, local_free, used, block_size, capacity, links, thread_free, div_magic,
 *          cls, reserved, links_cap (small pages)
 *   heap:  heap, owner_key (with heap), next/prev (queues), owned (first-class heaps)
 *   alloc: large_size (large runs) */
typedef struct kite_page_s {
  /* hot: the fast paths read only these (first cache line) */
  uint64_t thread_free;            /* atomic: freed by other threads; see KITE_TF_* */
  uint16_t free;                   /* allocation list: first block's index (owner only) */
  uint16_t local_free;             /* freed by the owner, not yet reusable (owner only) */
  int32_t used;                    /* see page.h (1 while on the full list) */
  uint32_t block_size;             /* small: class size; large: 0 */
  uint32_t capacity;               /* blocks carved */
  struct kite_heap_s *heap;        /* owner (relaxed atomic), NULL when none */
  uint16_t *links;                 /* one entry per block (links.h), or NULL */
  uint64_t div_magic;              /* ceil(2^64 / block_size): block-start test and index */
  uintptr_t owner_key;             /* its heap's thread key, 0 if none (heap.h); atomic: a key stored with release, read by free with acquire */
  uint16_t head_off;               /* units back to the head descriptor (0: a head) */
  uint8_t in_full;                 /* on its heap's full list (page.h) */
  uint8_t zero_tail;               /* small: its blocks past capacity are zero (page.h) */
  uint8_t kind, cls, order;
  uint8_t sampled;                 /* large: a block of the heap profiler (prof.h P1) */
  /* cold */
  struct kite_page_s *next, *prev; /* heap queue / abandoned list */
  size_t large_size;               /* large: usable size */
  uint32_t reserved;               /* blocks that fit */
  uint32_t links_cap;              /* entries links[] holds (0 when links == NULL) */
  kite_owned_t owned;              /* large run of a first-class heap (kite_heap_new) */
} kite_page_t;

_Static_assert(sizeof(kite_page_t) == 128, "page descriptors are 128 bytes");

/* ---- address arithmetic of the layout (see the glossary) ----
 * The one place that says where the descriptor of an address is (every caller, the free
 * fast path included, goes through _kite_unit_at or _kite_unit_of). */
/* Descriptor of the unit holding u, given base = u's arena (u & ~KITE_ARENA_MASK, however
 * the caller got it). */
static inline kite_page_t *_kite_unit_at(uintptr_t base, uintptr_t u) {
  return (kite_page_t *)(base + KITE_ARENA_GUARD +
                         ((u >> (KITE_UNIT_SHIFT - 7)) & ((uintptr_t)(KITE_ARENA_UNITS - 1) << 7)));
}
static inline kite_page_t *_kite_unit_of(uintptr_t u) { return _kite_unit_at(u & ~(uintptr_t)KITE_ARENA_MASK, u); }
static inline kite_page_t *_kite_page_head(kite_page_t *d) { return d - d->head_off; }

/* The calling thread's key: its thread pointer (one register read), unique among live
 * threads; where the compiler has no such builtin, its heap's address (heap.h says who
 * gets one and when it is dropped). */
#if defined(__has_builtin) && !defined(KITE_NO_THREAD_POINTER) /* (a test build of the fallback) */
#if __has_builtin(__builtin_thread_pointer)
#define KITE_THREAD_KEY() ((uintptr_t)__builtin_thread_pointer())
#endif
#endif
/* KITE_UNIT_SIZE / sizeof(kite_page_t) - 1 (511), defined in sizeclass.c where the
 * compiler cannot see it: the multiply below stays one imul (gcc would make a known 511
 * shift, move and subtract). In read-only data. */
extern const uintptr_t _kite_desc_ratio_m1 KITE_HIDDEN;
/* First byte of the memory a descriptor describes, from the descriptor's address alone: its
 * offset in the table, less KITE_ARENA_GUARD, times KITE_UNIT_SIZE / sizeof(kite_page_t)
 * (512), added to the arena base; written as d + (offset in the arena) * 511 - 512 * guard
 * (the same sum: a mask, a multiply and an add, no second copy of the base). For a
 * descriptor of a table, whatever it holds, the result is its unit's first byte. */
static inline uint8_t *_kite_page_start(const kite_page_t *pg) {
  uintptr_t u = (uintptr_t)pg;
  enum { R = KITE_UNIT_SIZE / sizeof(kite_page_t) };
  return (uint8_t *)(u + (u & KITE_ARENA_MASK) * _kite_desc_ratio_m1 - R * KITE_ARENA_GUARD);
}

/* ---- locks (pthread mutexes: held only on slow paths) ----
 * The lock order, stated here once (tools/gen_tables.py reads the lock-chain and lock-alone
 * lines below, and each kite_lock_t's `lock:` comment, into docs/design.md's lock table).
 * A thread that holds a lock of the chain takes only locks after it in the chain; an arena's
 * slot lock is held one at a time (fork_prepare alone holds them all, taken in slot order).
 * A lone lock is taken with no other lock of kite's held, and takes none. init.c's
 * fork_prepare takes them all, the chain's in its order. (A heap's full-list spin lock,
 * heap_impl.h, comes after _kite_heap_lock and is no kite_lock_t.)
 *   lock-chain: _kite_heap_lock links_lock _kite_arena_purge_lock _kite_arena_table_lock
 *   lock-chain: kite_arena_slot_t.lock
 *   lock-alone: huge_lock prof_lock make_lock slot_lock */
#include <pthread.h>
typedef pthread_mutex_t kite_lock_t;
#define KITE_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
static inline void _kite_lock(kite_lock_t *l) { pthread_mutex_lock(l); }
static inline void _kite_unlock(kite_lock_t *l) { pthread_mutex_unlock(l); }
static inline bool _kite_trylock(kite_lock_t *l) { return pthread_mutex_trylock(l) == 0; }
/* A forked child's handler: lock l, which this thread took in the fork's prepare handler,
 * is released. Not made anew with pthread_mutex_init: POSIX leaves initializing a locked
 * mutex undefined, and ThreadSanitizer keeps such a mutex owned by the forking thread, so
 * the next lock by another thread of the child (its purger) is reported as a double lock. */
static inline void _kite_lock_fork_child(kite_lock_t *l) { pthread_mutex_unlock(l); }

#endif
