/* include/kite/buddy.h -- kite's buddy page heap, usable on its own.
 *
 * A buddy allocator over an abstract range of `units` units (any count, not only a power
 * of two; the caller decides what a unit is: a 4 KiB page frame, a 64 KiB arena page ...).
 * It never touches the units themselves: all its state lives in metadata memory the caller
 * provides (kite_buddy_meta_size() says how much: about 0.41 byte per unit plus a 1 KiB
 * header, so under 1 byte per unit for ranges of 1,800 units or more).
 *
 * Blocks have an order k and span 2^k units starting at a multiple of 2^k. Freeing needs only
 * the first unit's index: the allocator remembers each block's order. Freed buddies coalesce
 * automatically, so freeing everything gives back the largest possible blocks.
 *
 * Not thread-safe: callers serialize access (kite's core holds an arena lock).
 * No function allocates memory; no function recurses.
 *
 * Errors: every function that can fail returns 0 on success or a negative kite_buddy_err
 * value, and leaves the allocator unchanged on failure. kite_buddy_strerror() names it.
 * Any of them returns KITE_BUDDY_EINVAL for a NULL heap (or NULL index for alloc); the
 * queries return 0 (or -1 for kite_buddy_largest_free_order) for a NULL heap.
 *
 * Cost: alloc and free are O(log units) in the worst case and touch a few tree nodes on
 * average; reserve and unreserve are O(log^2 units) plus the number of blocks already inside
 * the range. The tree is described in src/buddy_impl.h; docs/buddy.md has the measurements.
 */
#ifndef KITE_BUDDY_H
#define KITE_BUDDY_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest order a block can have: 2^KITE_BUDDY_MAX_ORDER units. */
#define KITE_BUDDY_MAX_ORDER 40
/* Largest unit count a buddy heap can manage. */
#define KITE_BUDDY_MAX_UNITS ((uint64_t)1 << KITE_BUDDY_MAX_ORDER)

typedef struct kite_buddy_s kite_buddy_t; /* lives at the start of the caller's metadata */

enum kite_buddy_err {
  KITE_BUDDY_OK = 0,
  KITE_BUDDY_ENOMEM = -1,     /* no free block of that order (range exhausted or fragmented) */
  KITE_BUDDY_EORDER = -2,     /* order > KITE_BUDDY_MAX_ORDER or larger than the range */
  KITE_BUDDY_ERANGE = -3,     /* index or range outside [0, units) */
  KITE_BUDDY_ENOTSTART = -4,  /* free: index is inside an allocated block but not its start */
  KITE_BUDDY_EFREE = -5,      /* free: index is not allocated (double free, or never allocated) */
  KITE_BUDDY_ERESERVED = -6,  /* free: index is in a reserved hole, not an allocated block */
  KITE_BUDDY_EBUSY = -7,      /* reserve: part of the range is allocated;
                                 unreserve: part of the range is not reserved */
  KITE_BUDDY_EINVAL = -8,     /* init: units == 0, units > KITE_BUDDY_MAX_UNITS,
                                 metadata too small or misaligned; NULL pointer arguments */
};

/* Bytes of metadata needed for `units` units (0 if units is 0 or too large). */
size_t kite_buddy_meta_size(uint64_t units);

/* Initialize a buddy heap over [0, units) in `meta` (meta_size bytes, 16-byte aligned, at
 * least kite_buddy_meta_size(units)). All units start free. On success *out points into
 * meta. Returns 0 or KITE_BUDDY_EINVAL. */
int kite_buddy_init(kite_buddy_t **out, void *meta, size_t meta_size, uint64_t units);

/* Allocate a block of 2^order units; its first unit index goes to *index. The lowest
 * suitable free block is used (address-ordered, keeps fragmentation low).
 * Returns 0, KITE_BUDDY_EORDER or KITE_BUDDY_ENOMEM. O(log units). */
int kite_buddy_alloc(kite_buddy_t *b, unsigned order, uint64_t *index);

/* Free the block that starts at `index`; its order is recovered, and written to *order if
 * order is not NULL. Returns 0, KITE_BUDDY_ERANGE, KITE_BUDDY_ENOTSTART, KITE_BUDDY_EFREE or
 * KITE_BUDDY_ERESERVED. O(log units). */
int kite_buddy_free(kite_buddy_t *b, uint64_t index, unsigned *order);

/* Order of the allocated block that starts at index (for realloc-like callers).
 * Returns the order (>= 0) or the same errors as kite_buddy_free. */
int kite_buddy_block_order(const kite_buddy_t *b, uint64_t index);

/* Allocate exactly the block of 2^order units at index (a multiple of 2^order), if all its
 * units are free (a caller that knows where it wants memory: growing a block into its free
 * buddy is kite_buddy_free of the block, then this at the same index with a larger order,
 * under the caller's lock). Returns 0, KITE_BUDDY_EORDER, KITE_BUDDY_ERANGE (index outside
 * the range or not aligned) or KITE_BUDDY_EBUSY (some unit is allocated or reserved).
 * O(log units). */
int kite_buddy_alloc_at(kite_buddy_t *b, uint64_t index, unsigned order);

/* Mark [start, start+count) unusable (a hole in a memory map). The range must be entirely
 * free or already reserved. Returns 0, KITE_BUDDY_ERANGE or KITE_BUDDY_EBUSY. */
int kite_buddy_reserve(kite_buddy_t *b, uint64_t start, uint64_t count);

/* Make a reserved range [start, start+count) free again; it coalesces with free
 * neighbours. Every unit must be reserved. Returns 0, KITE_BUDDY_ERANGE or KITE_BUDDY_EBUSY.
 * For both: ERANGE when start > units or start + count > units; count 0 is a no-op. */
int kite_buddy_unreserve(kite_buddy_t *b, uint64_t start, uint64_t count);

/* Queries (O(1) except free_blocks, which is O(1) per order from kept counters). */
uint64_t kite_buddy_units(const kite_buddy_t *b);        /* size of the range */
uint64_t kite_buddy_free_units(const kite_buddy_t *b);   /* units in free blocks */
uint64_t kite_buddy_free_blocks(const kite_buddy_t *b, unsigned order); /* nr_free[order] */
int kite_buddy_largest_free_order(const kite_buddy_t *b); /* -1 when nothing is free */

/* Validate every invariant (tree values, counters, coalescing); 0 if sound, else a
 * negative value naming the first broken invariant (see the CHK_* codes in src/buddy.c).
 * O(units): for tests and debugging. */
int kite_buddy_check(const kite_buddy_t *b);

/* Static message for an error code, e.g. "double free or block never allocated". */
const char *kite_buddy_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
