//! Statistics and options through the safe wrappers.

use kite::{KiteOption, Stats};
use std::alloc::Layout;
use std::sync::Mutex;

/// The counters are process-wide: the tests that compare them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn stats_follow_allocations() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = kite::stats();
    let heap = kite::Heap::new();
    let large = heap
        .alloc(Layout::from_size_align(1 << 20, 16).unwrap())
        .unwrap();
    let huge = heap
        .alloc(Layout::from_size_align(40 << 20, 16).unwrap())
        .unwrap();
    unsafe {
        large.as_ptr().write_bytes(1, 1 << 20);
        huge.as_ptr().write_bytes(2, 40 << 20);
    }
    for _ in 0..1000 {
        heap.alloc(Layout::from_size_align(48, 16).unwrap())
            .unwrap();
    }
    let during = kite::stats();
    assert!(
        during.small_allocs > before.small_allocs,
        "{before:?} -> {during:?}"
    );
    assert!(
        during.large_allocs > before.large_allocs,
        "{before:?} -> {during:?}"
    );
    assert!(
        during.huge_allocs > before.huge_allocs,
        "{before:?} -> {during:?}"
    );
    assert!(during.committed >= 41 << 20, "{during:?}");
    assert!(during.peak_committed >= during.committed);
    assert!(during.arenas >= 1);
    assert_eq!(during.invalid_frees, before.invalid_frees);
    drop(heap);
    kite::trim(); // freed runs and huge maps stay committed a while; trim ends that
    let after = kite::stats();
    assert!(
        after.committed < during.committed,
        "{during:?} -> {after:?}"
    );
    assert_ne!(during, Stats::default());
}

#[test]
fn owns_tells_kite_blocks_from_others() {
    let heap = kite::Heap::new();
    let b = heap.boxed(5u32);
    assert!(kite::owns(&*b as *const u32));
    let on_stack = 7u32;
    assert!(!kite::owns(&on_stack as *const u32));
    let system = Box::new(9u32); // the system allocator serves this test program
    assert!(!kite::owns(&*system as *const u32));
    assert!(!kite::owns(std::ptr::null::<u8>()));
}

#[test]
fn options_round_trip() {
    // Defaults, as documented (this process sets no KITE_* variable, see below).
    if std::env::vars().all(|(k, _)| !k.starts_with("KITE_")) {
        assert_eq!(kite::option_get(KiteOption::ShowStats), 0);
        assert_eq!(kite::option_get(KiteOption::AbortOnError), 0);
        assert_eq!(kite::option_get(KiteOption::PurgeDelayMs), 10);
    }
    let saved: Vec<i64> = KiteOption::ALL
        .iter()
        .map(|&o| kite::option_get(o))
        .collect();
    kite::option_set(KiteOption::PurgeDelayMs, 250).unwrap();
    assert_eq!(kite::option_get(KiteOption::PurgeDelayMs), 250);
    kite::option_set(KiteOption::PurgeDelayMs, -1).unwrap();
    assert_eq!(kite::option_get(KiteOption::PurgeDelayMs), -1);
    kite::option_set(KiteOption::Verbose, 1).unwrap();
    assert_eq!(kite::option_get(KiteOption::Verbose), 1);
    // out of range: refused, nothing changed
    let e = kite::option_set(KiteOption::PurgeDelayMs, 86_400_001).unwrap_err();
    assert_eq!(e.value, 86_400_001);
    assert_eq!(kite::option_get(KiteOption::PurgeDelayMs), -1);
    assert!(kite::option_set(KiteOption::Verbose, 2).is_err());
    assert!(kite::option_set(KiteOption::PurgeDelayMs, i64::MAX).is_err());
    assert_eq!(kite::option_get(KiteOption::Verbose), 1);
    for (&o, v) in KiteOption::ALL.iter().zip(saved.clone()) {
        kite::option_set(o, v).unwrap();
    }
    let now: Vec<i64> = KiteOption::ALL
        .iter()
        .map(|&o| kite::option_get(o))
        .collect();
    assert_eq!(now, saved);
    assert_eq!(KiteOption::HugePages.env_name(), "KITE_HUGEPAGES");
}

#[test]
fn trim_releases_free_memory() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let heap = kite::Heap::new();
    for _ in 0..64 {
        let p = heap
            .alloc(Layout::from_size_align(512 << 10, 16).unwrap())
            .unwrap();
        unsafe { p.as_ptr().write_bytes(1, 512 << 10) };
    }
    let before = kite::stats().purged;
    drop(heap);
    kite::trim();
    // 32 MiB of runs were freed: whether the purge delay or trim gave them back, they are
    // purged now
    let after = kite::stats().purged;
    assert!(after >= before + (16 << 20), "purged {before} -> {after}");
}

#[test]
fn check_and_version() {
    let v: Vec<Box<[u8; 100]>> = (0..1000).map(|i| Box::new([i as u8; 100])).collect();
    assert!(kite::check(), "every structure of kite validates");
    drop(v);
    assert!(kite::check());
    let version = kite::version();
    let parts: Vec<&str> = version.split('.').collect();
    assert_eq!(parts.len(), 3, "MAJOR.MINOR.PATCH: {version}");
    assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()), "numeric parts: {version}");
}
