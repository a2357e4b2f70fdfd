//! The sizes and enum values the C compiler saw in `kite.h` (a probe compiled by build.rs)
//! against the Rust declarations, and one call of each kind through the raw bindings.

use core::mem::{align_of, size_of};
use kite_sys::*;

#[test]
fn layouts_match_the_c_compiler() {
    unsafe {
        assert_eq!(
            abi_probe::kite_sys_abi_stats_size as usize,
            size_of::<kite_stats_t>()
        );
        assert_eq!(
            abi_probe::kite_sys_abi_stats_align as usize,
            align_of::<kite_stats_t>()
        );
        assert_eq!(
            abi_probe::kite_sys_abi_option_size as usize,
            size_of::<kite_option_t>()
        );
        assert_eq!(abi_probe::kite_sys_abi_option_count, 6);
        let rust = [
            KITE_OPTION_SHOW_STATS,
            KITE_OPTION_VERBOSE,
            KITE_OPTION_ABORT_ON_ERROR,
            KITE_OPTION_PURGE_DELAY_MS,
            KITE_OPTION_HUGEPAGES,
            KITE_OPTION_BACKGROUND,
        ];
        for (c, r) in abi_probe::kite_sys_abi_options.iter().zip(rust) {
            assert_eq!(*c, r as core::ffi::c_long);
        }
    }
}

#[test]
fn raw_calls_reach_kite() {
    unsafe {
        let p = kite_malloc(100) as *mut u8;
        assert!(!p.is_null());
        assert!(kite_owns(p as *const _));
        assert!(kite_malloc_usable_size(p as *const _) >= 100);
        p.write_bytes(0xab, 100);
        let q = kite_realloc(p as *mut _, 5000) as *mut u8;
        assert!(!q.is_null());
        assert_eq!(*q.add(99), 0xab);
        kite_free_sized(q as *mut _, 5000);

        let a = kite_aligned_alloc(4096, 10) as *mut u8;
        assert_eq!(a as usize % 4096, 0);
        kite_free_aligned_sized(a as *mut _, 4096, 10);

        let mut out = core::ptr::null_mut();
        assert_eq!(kite_posix_memalign(&mut out, 3, 8), libc_einval());

        let z = kite_calloc(1000, 8) as *const u8;
        assert!((0..8000).all(|i| *z.add(i) == 0));
        kite_free(z as *mut _);

        let h = kite_heap_new();
        assert!(!h.is_null());
        let b = kite_heap_calloc(h, 10, 10) as *const u8;
        assert!(kite_owns(b as *const _));
        kite_heap_destroy(h);

        let mut st = kite_stats_t::default();
        kite_stats_get(&mut st);
        assert!(
            st.small_allocs > 0 && st.committed > 0 && st.arenas > 0,
            "{st:?}"
        );
    }
}

/// EINVAL on Linux (the crate does not depend on libc for one constant).
fn libc_einval() -> core::ffi::c_int {
    22
}
