//! The `secure` feature builds kite's secure build (docs/security.md): its randomized layout
//! hands out consecutive small blocks out of address order, where the default build hands
//! them out in address order. Run with `cargo test --features kite/secure`.
#![cfg(feature = "secure")]

#[test]
fn small_blocks_come_out_of_address_order() {
    let blocks: Vec<usize> = (0..64).map(|_| unsafe { kite_sys::kite_malloc(16) } as usize).collect();
    assert!(blocks.iter().all(|&p| p != 0), "kite_malloc(16) returned NULL");
    let ascending = blocks.windows(2).all(|w| w[0] < w[1]);
    for &p in &blocks {
        unsafe { kite_sys::kite_free(p as *mut std::ffi::c_void) };
    }
    assert!(!ascending, "64 blocks of 16 bytes in address order: not the secure build's layout");
}
