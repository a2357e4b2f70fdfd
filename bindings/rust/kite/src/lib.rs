//! kite, a fast, thread-safe, hardened malloc, for Rust programs.
//!
//! * [`Kite`]: a [`GlobalAlloc`] that serves every `Box`, `Vec`, `String` and map of the
//!   program from kite:
//!   ```
//!   #[global_allocator]
//!   static GLOBAL: kite::Kite = kite::Kite;
//!   ```
//! * [`Heap`]: a first-class heap whose blocks are all released at once when it is dropped
//!   (an arena with real frees), with [`HeapBox`] for values that borrow it.
//! * [`stats`] (the counters, as a [`Stats`]), [`print_stats`], [`trim`], [`owns`].
//! * [`option_get`] / [`option_set`] for kite's run-time options ([`KiteOption`]).
//!
//! The allocator core is compiled from kite's C sources by the `kite-sys` crate; it exports
//! only the `kite_*` API, so C code in the same process keeps the system `malloc`.

#![deny(missing_docs)]

use core::alloc::{GlobalAlloc, Layout};
use core::cell::Cell;
use core::ffi::{c_long, c_void};
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use kite_sys as sys;

/// Every kite block is aligned to this many bytes: layouts that ask no more go through the
/// plain (and fastest) entry points.
pub const MIN_ALIGN: usize = 16;

/// kite as Rust's global allocator.
///
/// Alignments up to [`MIN_ALIGN`] use `kite_malloc`/`kite_calloc`/`kite_realloc`; larger
/// ones `kite_aligned_alloc` (up to any power of two: 4 KiB pages, 1 MiB, ...). Frees pass
/// the size and alignment back (`kite_free_sized`, `kite_free_aligned_sized`).
/// Allocation failure returns null, which Rust turns into `handle_alloc_error`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Kite;

unsafe impl GlobalAlloc for Kite {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            sys::kite_malloc(layout.size()) as *mut u8
        } else {
            sys::kite_aligned_alloc(layout.align(), layout.size()) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() <= MIN_ALIGN {
            sys::kite_free_sized(ptr as *mut c_void, layout.size())
        } else {
            sys::kite_free_aligned_sized(ptr as *mut c_void, layout.align(), layout.size())
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            sys::kite_calloc(1, layout.size()) as *mut u8
        } else {
            let p = self.alloc(layout);
            if !p.is_null() {
                p.write_bytes(0, layout.size());
            }
            p
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return sys::kite_realloc(ptr as *mut c_void, new_size) as *mut u8;
        }
        // kite_realloc keeps only the 16-byte alignment of malloc: move by hand.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        q
    }
}

/// Is `ptr` a live block that kite handed out? Never crashes, whatever the pointer.
pub fn owns<T: ?Sized>(ptr: *const T) -> bool {
    unsafe { sys::kite_owns(ptr as *const c_void) }
}

/// Give free memory back to the operating system now (instead of after the purge delay).
/// Returns whether some was released.
pub fn trim() -> bool {
    unsafe { sys::kite_malloc_trim(0) != 0 }
}

/// Run every validator of kite's internal structures (a debugging aid): `true` when all are
/// sound; otherwise `false`, with a `kite: check failed: ...` line on stderr per broken
/// invariant.
pub fn check() -> bool {
    unsafe { sys::kite_check() != 0 }
}

/// The version of the kite library linked in, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    // SAFETY: kite_version returns a static NUL-terminated ASCII string.
    unsafe { core::ffi::CStr::from_ptr(sys::kite_version()) }.to_str().unwrap_or("?")
}

/// Print kite's statistics summary to standard error (without allocating).
pub fn print_stats() {
    unsafe { sys::kite_stats_print(2) }
}

/// A snapshot of kite's counters (see [`stats`]). Counters only grow, except `committed`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Small blocks (up to 64 KiB) handed to allocation lists.
    pub small_allocs: u64,
    /// Large blocks: buddy runs of 64 KiB to 16 MiB.
    pub large_allocs: u64,
    /// Huge blocks: direct maps from the OS.
    pub huge_allocs: u64,
    /// Frees of blocks owned by another thread's heap.
    pub remote_frees: u64,
    /// Invalid pointers and double frees reported (and ignored, or aborted on).
    pub invalid_frees: u64,
    /// Bytes kite holds committed now.
    pub committed: u64,
    /// The most bytes kite has held committed at once.
    pub peak_committed: u64,
    /// Bytes given back to the OS so far.
    pub purged: u64,
    /// 64 MiB arenas reserved.
    pub arenas: u64,
}

/// kite's counters now (`kite_stats_get`): a snapshot, other threads keep running.
pub fn stats() -> Stats {
    let mut s = sys::kite_stats_t::default();
    unsafe { sys::kite_stats_get(&mut s) };
    Stats {
        small_allocs: s.small_allocs,
        large_allocs: s.large_allocs,
        huge_allocs: s.huge_allocs,
        remote_frees: s.remote_frees,
        invalid_frees: s.invalid_frees,
        committed: s.committed,
        peak_committed: s.peak_committed,
        purged: s.purged,
        arenas: s.arenas,
    }
}

/// kite's run-time options. Each is also read from the environment (`KITE_<NAME>`) when
/// kite starts; [`option_set`] changes it afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KiteOption {
    /// `KITE_SHOW_STATS` (default 0): print statistics at exit, 1 text, 2 JSON.
    ShowStats,
    /// `KITE_VERBOSE` (bool, default 0): report every allocation that fails for lack of memory.
    Verbose,
    /// `KITE_ABORT_ON_ERROR` (bool, default 0): abort after reporting an invalid or double free.
    AbortOnError,
    /// `KITE_PURGE_DELAY_MS` (default 10): how long a free run stays committed; 0 at once,
    /// negative only on [`trim`].
    PurgeDelayMs,
    /// `KITE_HUGEPAGES` (default 3, `dense`): 0 off, 1 whole arenas advised for transparent huge pages, 2 `auto` (dense granules advised at first claim), 3 `dense` (granules fully in use and resident collapsed onto huge pages by a background thread, once the process has 16 MiB committed).
    HugePages,
    /// `KITE_BACKGROUND` (default 2, `idle`): 0 off, 1 a background thread gives freed memory
    /// back to the OS, 2 the same thread, started only past 4 MiB freed in a process with
    /// 16 MiB committed and purging only while the process is idle.
    Background,
}

impl KiteOption {
    /// Every option, in `kite.h`'s order.
    pub const ALL: [KiteOption; 6] = [
        KiteOption::ShowStats,
        KiteOption::Verbose,
        KiteOption::AbortOnError,
        KiteOption::PurgeDelayMs,
        KiteOption::HugePages,
        KiteOption::Background,
    ];

    /// The environment variable that sets this option at start-up.
    pub fn env_name(self) -> &'static str {
        match self {
            KiteOption::ShowStats => "KITE_SHOW_STATS",
            KiteOption::Verbose => "KITE_VERBOSE",
            KiteOption::AbortOnError => "KITE_ABORT_ON_ERROR",
            KiteOption::PurgeDelayMs => "KITE_PURGE_DELAY_MS",
            KiteOption::HugePages => "KITE_HUGEPAGES",
            KiteOption::Background => "KITE_BACKGROUND",
        }
    }

    fn raw(self) -> sys::kite_option_t {
        match self {
            KiteOption::ShowStats => sys::KITE_OPTION_SHOW_STATS,
            KiteOption::Verbose => sys::KITE_OPTION_VERBOSE,
            KiteOption::AbortOnError => sys::KITE_OPTION_ABORT_ON_ERROR,
            KiteOption::PurgeDelayMs => sys::KITE_OPTION_PURGE_DELAY_MS,
            KiteOption::HugePages => sys::KITE_OPTION_HUGEPAGES,
            KiteOption::Background => sys::KITE_OPTION_BACKGROUND,
        }
    }
}

/// The current value of `option` (booleans are 0 or 1).
#[allow(clippy::useless_conversion)] // c_long is i64 here, i32 on 32-bit targets
pub fn option_get(option: KiteOption) -> i64 {
    unsafe { sys::kite_option_get(option.raw()) }.into()
}

/// [`option_set`]'s error: the value is outside the option's range (the table in kite's
/// README and kite(3)); the option kept its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    /// The option that was to be set.
    pub option: KiteOption,
    /// The value it refused.
    pub value: i64,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}: out of the option's range", self.option.env_name(), self.value)
    }
}

impl std::error::Error for OutOfRange {}

/// Set `option` to `value`, or leave it unchanged and return [`OutOfRange`] when `value`
/// is outside the option's range.
///
/// Options are atomic words that kite's threads read as they go: a thread already running
/// may act on the old value for a while.
pub fn option_set(option: KiteOption, value: i64) -> Result<(), OutOfRange> {
    let err = OutOfRange { option, value };
    let v = c_long::try_from(value).map_err(|_| err)?;
    if unsafe { sys::kite_option_set(option.raw(), v) } == 0 {
        Ok(())
    } else {
        Err(err)
    }
}

/// A first-class kite heap: blocks allocated from it are released all at once when it is
/// dropped (`kite_heap_destroy`), whether or not they were freed one by one before.
///
/// A heap is used by one thread at a time: it may be moved to another thread (`Send`) but
/// not shared (`!Sync`). Its blocks may be freed from any thread while it lives. The safe
/// way to use it is [`Heap::boxed`], whose [`HeapBox`] borrows the heap, so the compiler
/// rejects a box that would outlive it. [`Heap::alloc`] hands out raw blocks instead, valid
/// until they are passed to [`Heap::dealloc`] or the heap is dropped.
pub struct Heap {
    raw: NonNull<sys::kite_heap_t>,
    // !Sync (and, through the raw pointer, !Send until the impl below).
    _not_sync: PhantomData<Cell<()>>,
}

// A kite heap is not tied to the thread that made it: another thread may use it, as long
// as two threads never use it at the same time, which !Sync ensures.
unsafe impl Send for Heap {}

impl Heap {
    /// A new heap. Panics if kite cannot reserve one (out of memory): see [`Heap::try_new`].
    pub fn new() -> Heap {
        Heap::try_new().expect("kite: kite_heap_new failed (out of memory)")
    }

    /// A new heap, or `None` when kite is out of memory.
    pub fn try_new() -> Option<Heap> {
        let raw = NonNull::new(unsafe { sys::kite_heap_new() })?;
        Some(Heap {
            raw,
            _not_sync: PhantomData,
        })
    }

    /// The C heap, for calls through `kite-sys`. It stays owned by `self`.
    pub fn as_ptr(&self) -> *mut sys::kite_heap_t {
        self.raw.as_ptr()
    }

    /// A block for `layout` from this heap (any size, zero included, any alignment), or
    /// `None` when out of memory. The block is valid until [`Heap::dealloc`] or the drop of
    /// the heap, whichever comes first.
    pub fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        self.alloc_with(layout, false)
    }

    /// Like [`Heap::alloc`], with the block's bytes set to zero.
    pub fn alloc_zeroed(&self, layout: Layout) -> Option<NonNull<u8>> {
        self.alloc_with(layout, true)
    }

    fn alloc_with(&self, layout: Layout, zero: bool) -> Option<NonNull<u8>> {
        let h = self.raw.as_ptr();
        if layout.align() <= MIN_ALIGN {
            let p = unsafe {
                if zero {
                    sys::kite_heap_calloc(h, 1, layout.size())
                } else {
                    sys::kite_heap_malloc(h, layout.size())
                }
            };
            return NonNull::new(p as *mut u8);
        }
        // kite_heap_malloc only promises 16 bytes: take align more and keep the start of
        // the block in the word just below the aligned pointer (which is at least 16 bytes
        // in, as the block start is 16-aligned and align is a larger power of two).
        let total = layout.size().checked_add(layout.align())?;
        let base = unsafe { sys::kite_heap_malloc(h, total) } as *mut u8;
        if base.is_null() {
            return None;
        }
        let offset = layout.align() - (base as usize & (layout.align() - 1));
        unsafe {
            let p = base.add(offset);
            (p as *mut *mut u8).sub(1).write(base);
            if zero {
                p.write_bytes(0, layout.size());
            }
            Some(NonNull::new_unchecked(p))
        }
    }

    /// Free one block before the heap is dropped (optional: dropping the heap frees all).
    ///
    /// # Safety
    /// `ptr` must come from [`Heap::alloc`] or [`Heap::alloc_zeroed`] of this heap with the
    /// same `layout`, and not have been freed already.
    pub unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout) {
        free_heap_block(ptr.as_ptr(), layout)
    }

    /// Move `value` into a block of this heap. The box borrows the heap: it cannot outlive
    /// it. Dropping the box drops the value and frees the block.
    pub fn boxed<T>(&self, value: T) -> HeapBox<'_, T> {
        let layout = Layout::new::<T>();
        let p = match self.alloc(layout) {
            Some(p) => p.cast::<T>(),
            None => std::alloc::handle_alloc_error(layout),
        };
        unsafe { p.as_ptr().write(value) };
        HeapBox {
            ptr: p,
            _heap: PhantomData,
            _owns: PhantomData,
        }
    }
}

impl Default for Heap {
    fn default() -> Heap {
        Heap::new()
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        unsafe { sys::kite_heap_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Heap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Heap").field(&self.raw).finish()
    }
}

/// Free a block of a first-class heap given its layout (see `Heap::alloc_with`). kite_free
/// takes it back from any thread.
unsafe fn free_heap_block(ptr: *mut u8, layout: Layout) {
    let base = if layout.align() <= MIN_ALIGN {
        ptr
    } else {
        (ptr as *mut *mut u8).sub(1).read()
    };
    sys::kite_free(base as *mut c_void)
}

/// A value in a block of a [`Heap`], like a `Box` that borrows its heap.
///
/// Dropping it drops the value and frees the block (from whichever thread drops it);
/// [`HeapBox::leak`] instead keeps the value until the heap itself is dropped, without
/// running its destructor.
pub struct HeapBox<'h, T> {
    ptr: NonNull<T>,
    _heap: PhantomData<&'h ()>,
    _owns: PhantomData<T>,
}

// The box owns a T, and its block may be freed from any thread while the heap lives (the
// lifetime 'h guarantees it does).
unsafe impl<T: Send> Send for HeapBox<'_, T> {}
unsafe impl<T: Sync> Sync for HeapBox<'_, T> {}

impl<'h, T> HeapBox<'h, T> {
    /// Give up the box: the value stays in the heap, reachable for the heap's lifetime,
    /// and its destructor never runs.
    pub fn leak(b: HeapBox<'h, T>) -> &'h mut T {
        let p = b.ptr;
        core::mem::forget(b);
        unsafe { &mut *p.as_ptr() }
    }

    /// Move the value out and free the block.
    pub fn into_inner(b: HeapBox<'h, T>) -> T {
        let p = b.ptr;
        core::mem::forget(b);
        unsafe {
            let v = p.as_ptr().read();
            free_heap_block(p.as_ptr() as *mut u8, Layout::new::<T>());
            v
        }
    }
}

impl<T> Deref for HeapBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for HeapBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for HeapBox<'_, T> {
    fn drop(&mut self) {
        unsafe {
            ptr::drop_in_place(self.ptr.as_ptr());
            free_heap_block(self.ptr.as_ptr() as *mut u8, Layout::new::<T>());
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for HeapBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
