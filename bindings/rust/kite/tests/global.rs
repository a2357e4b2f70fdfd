//! kite as the global allocator of this test program: collections, zeroed and over-aligned
//! layouts, realloc, and blocks freed by other threads, each checked for content and shown
//! to be kite's (kite::owns, and kite::stats growing).

use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::thread;

#[global_allocator]
static GLOBAL: kite::Kite = kite::Kite;

/// A seeded generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pattern(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) % 251) as u8
}

fn patterned(seed: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| pattern(seed, i)).collect()
}

#[test]
fn boxes_and_collections_are_served_by_kite() {
    let before = kite::stats();
    let b = Box::new([7u8; 40]);
    assert!(kite::owns(&*b as *const [u8; 40]));
    let mut v: Vec<u64> = Vec::new();
    for i in 0..200_000u64 {
        v.push(i * 3);
    }
    assert!(kite::owns(v.as_ptr()));
    assert_eq!(v.iter().sum::<u64>(), 3 * (200_000 * 199_999 / 2));
    let mut s = String::new();
    for i in 0..20_000 {
        s.push_str(&i.to_string());
        s.push(',');
    }
    assert!(kite::owns(s.as_ptr()));
    assert_eq!(s.split(',').filter(|x| !x.is_empty()).count(), 20_000);
    assert!(s.starts_with("0,1,2,3,") && s.ends_with("19998,19999,"));

    let mut bt = BTreeMap::new();
    let mut hm = HashMap::new();
    for i in 0..50_000u32 {
        bt.insert(format!("key{i:06}"), i);
        hm.insert(i, vec![i as u8; (i % 100) as usize]);
    }
    assert_eq!(bt.len(), 50_000);
    assert_eq!(bt.get("key012345"), Some(&12345));
    assert_eq!(bt.keys().next().map(String::as_str), Some("key000000"));
    assert_eq!(hm[&4321].len(), 21);
    assert!(hm[&4321].iter().all(|&x| x == (4321u32 as u8)));
    for i in (0..50_000u32).step_by(2) {
        bt.remove(&format!("key{i:06}"));
        hm.remove(&i);
    }
    assert_eq!(bt.len(), 25_000);
    assert_eq!(hm.len(), 25_000);
    assert!(bt.keys().all(|k| k[3..].parse::<u32>().unwrap() % 2 == 1));
    let after = kite::stats();
    assert!(
        after.small_allocs > before.small_allocs,
        "{before:?} -> {after:?}"
    );
    // the 1.6 MB vector went through a large run
    assert!(
        after.large_allocs > before.large_allocs,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn zeroed_allocations_are_zero() {
    let mut rng = Rng(0x5eed_0001);
    // Dirty some memory first, so a recycled block would show through.
    for _ in 0..100 {
        let n = 1 + rng.below(100_000) as usize;
        let v = vec![0xffu8; n];
        assert_eq!(v[n - 1], 0xff);
    }
    let zeros = vec![0u8; 17 << 20];
    for size in [
        1usize,
        15,
        16,
        17,
        100,
        1000,
        4096,
        65536,
        65537,
        1 << 20,
        17 << 20,
    ] {
        for align in [1usize, 8, 16, 64, 4096] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0);
                assert!(kite::owns(p));
                assert!(
                    std::slice::from_raw_parts(p, size) == &zeros[..size],
                    "size {size} align {align}"
                );
                p.write_bytes(0xee, size);
                dealloc(p, layout);
            }
        }
    }
    let v = vec![0u8; 3 << 20];
    assert!(v[..] == zeros[..3 << 20]);
}

#[test]
fn over_aligned_layouts_up_to_one_mib() {
    let mut rng = Rng(0x5eed_0002);
    let mut live = Vec::new();
    let mut align = 32usize;
    while align <= 1 << 20 {
        for _ in 0..4 {
            let size = 1 + rng.below(3 * align as u64) as usize;
            let layout = Layout::from_size_align(size, align).unwrap();
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "align {align} size {size}");
            assert!(kite::owns(p));
            let seed = live.len();
            let reference = patterned(seed, size);
            unsafe { std::slice::from_raw_parts_mut(p, size) }.copy_from_slice(&reference);
            live.push((p, layout, reference));
        }
        align *= 2;
    }
    for (p, layout, reference) in &live {
        let got = unsafe { std::slice::from_raw_parts(*p, layout.size()) };
        assert!(
            got == &reference[..],
            "overwritten: align {}",
            layout.align()
        );
    }
    for (p, layout, _) in live {
        unsafe { dealloc(p, layout) };
    }

    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let pages: Vec<Box<Page>> = (0..10).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert!(p.0.iter().all(|&b| b == i as u8));
    }
}

#[test]
fn realloc_keeps_the_contents() {
    // small -> small, small -> large (> 64 KiB), large -> huge (> 16 MiB), and back down
    let sizes = [
        24usize,
        100,
        1000,
        30_000,
        70_000,
        1 << 20,
        20 << 20,
        3 << 20,
        5000,
        40,
        8,
    ];
    let reference = patterned(7, 20 << 20);
    for align in [8usize, 16, 64, 4096] {
        let mut layout = Layout::from_size_align(sizes[0], align).unwrap();
        let p0 = unsafe { alloc(layout) };
        assert!(!p0.is_null());
        unsafe { std::slice::from_raw_parts_mut(p0, layout.size()) }
            .copy_from_slice(&reference[..layout.size()]);
        let mut p = p0;
        for &n in &sizes[1..] {
            let q = unsafe { realloc(p, layout, n) };
            assert!(!q.is_null());
            assert_eq!(q as usize % align, 0);
            assert!(kite::owns(q));
            let kept = layout.size().min(n);
            let got = unsafe { std::slice::from_raw_parts_mut(q, n) };
            assert!(
                got[..kept] == reference[..kept],
                "align {align}: {} -> {n}: contents lost",
                layout.size()
            );
            got[kept..].copy_from_slice(&reference[kept..n]);
            p = q;
            layout = Layout::from_size_align(n, align).unwrap();
        }
        unsafe { dealloc(p, layout) };
    }
    // Vec growth by push and shrink_to_fit
    let mut v: Vec<u32> = Vec::with_capacity(1);
    for i in 0..1_000_000 {
        v.push(i);
    }
    v.truncate(1000);
    v.shrink_to_fit();
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
}

#[test]
fn threads_free_each_others_blocks() {
    let before = kite::stats();
    const THREADS: usize = 4;
    const ROUNDS: usize = 2000;
    // Block contents are windows of one reference buffer (checked with memcmp: fast in a
    // debug build too); the window's start depends on the sender and the round.
    let reference: std::sync::Arc<Vec<u8>> = std::sync::Arc::new(patterned(3, 210_000));
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::channel::<(usize, Box<[u8]>, String)>())
        .unzip();
    let mut handles = Vec::new();
    for (t, rx) in rxs.into_iter().enumerate() {
        let next = txs[(t + 1) % THREADS].clone();
        let reference = reference.clone();
        handles.push(thread::spawn(move || {
            let mut rng = Rng(0x5eed_1000 + t as u64);
            let mut received = 0usize;
            let check = |seed: usize, block: &[u8], text: &str| {
                let start = seed % 10_000;
                assert!(
                    block == &reference[start..start + block.len()],
                    "block {seed} changed"
                );
                assert!(text.starts_with("from "));
            };
            for r in 0..ROUNDS {
                let n = 1 + rng.below(if r % 50 == 0 { 200_000 } else { 2000 }) as usize;
                let seed = t * ROUNDS + r;
                let start = seed % 10_000;
                let block: Box<[u8]> = reference[start..start + n].into();
                next.send((seed, block, format!("from {t} round {r}")))
                    .unwrap();
                while let Ok((seed, block, text)) = rx.try_recv() {
                    check(seed, &block, &text);
                    received += 1;
                }
            }
            drop(next);
            for (seed, block, text) in rx.iter() {
                check(seed, &block, &text);
                received += 1;
            }
            received
        }));
    }
    drop(txs);
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, THREADS * ROUNDS);
    let after = kite::stats();
    assert!(
        after.remote_frees > before.remote_frees,
        "{before:?} -> {after:?}"
    );
}
