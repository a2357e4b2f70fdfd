//! Raw FFI bindings to kite's public C API (`include/kite.h`).
//!
//! Building this crate compiles kite's allocator core from the repository's C sources (see
//! `build.rs`) into a static library linked into the Rust program. Only the `kite_*` API is
//! exported: the process's own `malloc` stays in place, and Rust code reaches kite through
//! these functions, or through the safe `kite` crate (its `Kite` global allocator, heaps,
//! statistics and options).
//!
//! Every function here follows exactly the contract written in `kite.h`; the declarations
//! are kept in step with that header by the crate's tests (`tests/header.rs` fails when a
//! `kite_*` function of the header has no binding, `tests/abi.rs` compares the sizes and
//! enum values the C compiler sees with the ones declared here).
#![no_std]
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_long, c_void};

/// An opaque first-class heap (`struct kite_heap_s`); only ever used behind a pointer.
#[repr(C)]
pub struct kite_heap_t {
    _opaque: [u8; 0],
    // Neither Send, Sync nor Unpin: the C object is used by one thread at a time.
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// The counters of `kite_stats_get` (`struct kite_stats_s`), field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct kite_stats_t {
    /// Small blocks handed to allocation lists.
    pub small_allocs: u64,
    /// Buddy runs (64 KiB .. 16 MiB).
    pub large_allocs: u64,
    /// Direct OS maps.
    pub huge_allocs: u64,
    /// Frees of blocks owned by another thread's heap.
    pub remote_frees: u64,
    /// Invalid pointers and double frees reported.
    pub invalid_frees: u64,
    /// Bytes kite holds committed now.
    pub committed: u64,
    /// The most bytes kite has held committed at once.
    pub peak_committed: u64,
    /// Bytes given back to the OS so far.
    pub purged: u64,
    /// 64 MiB arenas reserved.
    pub arenas: u64,
    /// Blocks handed out and not freed: small + large + huge.
    pub live_blocks: u64,
    /// Their usable sizes.
    pub live_bytes: u64,
    /// Small blocks live.
    pub small_live_blocks: u64,
    /// Their bytes.
    pub small_live_bytes: u64,
    /// Small pages of every heap and abandoned ones.
    pub small_pages: u64,
    /// Large blocks in use.
    pub large_live_blocks: u64,
    /// Their usable sizes.
    pub large_live_bytes: u64,
    /// Huge blocks in use.
    pub huge_live_blocks: u64,
    /// Their mapped sizes.
    pub huge_live_bytes: u64,
    /// Pages of exited threads put on the abandoned lists.
    pub pages_abandoned: u64,
    /// Abandoned pages another thread took over.
    pub pages_adopted: u64,
}

/// `kite_block_visitor_t`: called with a live block and its usable size; returns false to
/// stop the walk.
pub type kite_block_visitor_t =
    Option<unsafe extern "C" fn(block: *mut c_void, usable_size: usize, arg: *mut c_void) -> bool>;

/// `enum kite_option_e`: the run-time options of `kite_option_get` / `kite_option_set`.
pub type kite_option_t = c_int;
/// Statistics at exit: 0 no, 1 text, 2 JSON.
pub const KITE_OPTION_SHOW_STATS: kite_option_t = 0;
/// Extra messages (bool).
pub const KITE_OPTION_VERBOSE: kite_option_t = 1;
/// Abort after reporting an invalid or double free (bool).
pub const KITE_OPTION_ABORT_ON_ERROR: kite_option_t = 2;
/// Milliseconds a free run stays committed; 0 at once; < 0 never.
pub const KITE_OPTION_PURGE_DELAY_MS: kite_option_t = 3;
/// Advise transparent huge pages on new arenas (bool).
pub const KITE_OPTION_HUGEPAGES: kite_option_t = 4;
/// Background purger thread for idle processes (bool).
pub const KITE_OPTION_BACKGROUND: kite_option_t = 5;
/// One in N allocations guarded (KITE_GUARDED_SAMPLE); 0 off.
pub const KITE_OPTION_GUARDED_SAMPLE: kite_option_t = 6;
/// Heap profiler: mean bytes between samples (KITE_PROF_SAMPLE), 1 .. 2^40.
pub const KITE_OPTION_PROF_SAMPLE: kite_option_t = 7;
/// Heap profiler: leak summary at exit (KITE_PROF_LEAKS, bool; read at start-up).
pub const KITE_OPTION_PROF_LEAKS: kite_option_t = 8;
/// Heap profiler: a profile every N MiB of new live peak (KITE_PROF_PEAK); 0 off.
pub const KITE_OPTION_PROF_PEAK: kite_option_t = 9;

extern "C" {
    /// `malloc`: NULL and `errno = ENOMEM` on failure.
    pub fn kite_malloc(size: usize) -> *mut c_void;
    /// `free`: NULL is a no-op; an invalid pointer or double free is reported and ignored.
    pub fn kite_free(p: *mut c_void);
    /// `calloc`: zeroed memory; NULL and `ENOMEM` on overflow or failure.
    pub fn kite_calloc(count: usize, size: usize) -> *mut c_void;
    /// `realloc`: keeps the contents up to the smaller size; the block may move.
    pub fn kite_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    /// `reallocarray`: `realloc` with an overflow-checked `count * size`.
    pub fn kite_reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void;
    /// `posix_memalign`: 0, `EINVAL` or `ENOMEM` (errno untouched).
    pub fn kite_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    /// `aligned_alloc`: alignment a power of two (any size).
    pub fn kite_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    /// `memalign`: alignment a power of two.
    pub fn kite_memalign(alignment: usize, size: usize) -> *mut c_void;
    /// `valloc`: page-aligned.
    pub fn kite_valloc(size: usize) -> *mut c_void;
    /// `pvalloc`: page-aligned, size rounded up to whole pages.
    pub fn kite_pvalloc(size: usize) -> *mut c_void;
    /// `malloc_usable_size`: the bytes usable in the block at `p`.
    pub fn kite_malloc_usable_size(p: *const c_void) -> usize;
    /// `malloc_trim`: give free memory back to the OS; 1 if some was released.
    pub fn kite_malloc_trim(pad: usize) -> c_int;

    /// Free a block allocated with `size` bytes (alignment <= 16).
    pub fn kite_free_sized(p: *mut c_void, size: usize);
    /// Free a block allocated with this `alignment` and `size`.
    pub fn kite_free_aligned_sized(p: *mut c_void, alignment: usize, size: usize);

    /// Is `p` a block kite handed out and not yet freed? Never crashes on foreign pointers.
    pub fn kite_owns(p: *const c_void) -> bool;

    /// A new first-class heap; NULL and `ENOMEM` on failure.
    pub fn kite_heap_new() -> *mut kite_heap_t;
    /// Free every block of the heap at once, and the heap itself.
    pub fn kite_heap_destroy(heap: *mut kite_heap_t);
    /// `malloc` from this heap (16-byte aligned blocks).
    pub fn kite_heap_malloc(heap: *mut kite_heap_t, size: usize) -> *mut c_void;
    /// `calloc` from this heap.
    pub fn kite_heap_calloc(heap: *mut kite_heap_t, count: usize, size: usize) -> *mut c_void;

    /// Print a statistics summary to file descriptor `fd` (2 = stderr) without allocating.
    pub fn kite_stats_print(fd: c_int);
    /// The statistics as one JSON object and a newline (schema: docs/stats.md), without
    /// allocating.
    pub fn kite_stats_print_json(fd: c_int);

    /// Call `visitor(block, usable_size, arg)` for each live block of `heap` (NULL: the
    /// calling thread's heap; owner thread only); false if the visitor stopped the walk.
    /// The visitor must not allocate or free through kite.
    pub fn kite_heap_visit(
        heap: *mut kite_heap_t,
        visitor: kite_block_visitor_t,
        arg: *mut c_void,
    ) -> bool;
    /// The same for every live block of the process (other threads quiescent).
    pub fn kite_visit_all(visitor: kite_block_visitor_t, arg: *mut c_void) -> bool;

    /// Heap profiler (KITE_PROF): write the sampled heap profile to `path` in pprof's
    /// format; 0, or -1 with errno set. Allocates nothing.
    pub fn kite_prof_dump(path: *const c_char) -> c_int;

    /// The loaded library's version, "MAJOR.MINOR.PATCH" (a static NUL-terminated string).
    pub fn kite_version() -> *const c_char;

    /// Run every validator of kite's structures: 1 when all are sound, else 0 (with a
    /// `kite: check failed: ...` line on stderr per broken invariant).
    pub fn kite_check() -> c_int;
    /// A snapshot of the counters.
    pub fn kite_stats_get(out: *mut kite_stats_t);

    /// The current value of an option.
    pub fn kite_option_get(option: kite_option_t) -> c_long;
    /// Change an option (an atomic store): 0, or -1 with errno `EINVAL` for a value out of
    /// the option's range (the option keeps its value) or an unknown option.
    pub fn kite_option_set(option: kite_option_t, value: c_long) -> c_int;
}

/// What the C compiler saw in `kite.h` when the crate was built (from a probe compiled
/// into the same library by `build.rs`); the crate's tests compare these with the Rust
/// declarations above. Not part of kite's API.
#[doc(hidden)]
pub mod abi_probe {
    use core::ffi::{c_long, c_ulong};
    extern "C" {
        pub static kite_sys_abi_stats_size: c_ulong;
        pub static kite_sys_abi_stats_align: c_ulong;
        pub static kite_sys_abi_option_size: c_ulong;
        pub static kite_sys_abi_options: [c_long; 5];
        pub static kite_sys_abi_option_count: c_ulong;
    }
}
