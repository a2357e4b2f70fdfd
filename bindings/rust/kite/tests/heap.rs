//! First-class heaps through the safe wrapper (the system allocator stays the global one).

use kite::{Heap, HeapBox};
use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

#[test]
fn boxes_hold_their_values() {
    let heap = Heap::new();
    let mut boxes: Vec<HeapBox<'_, [u64; 4]>> = (0..10_000u64)
        .map(|i| heap.boxed([i, i + 1, i + 2, i + 3]))
        .collect();
    for (i, b) in boxes.iter().enumerate() {
        let i = i as u64;
        assert_eq!(**b, [i, i + 1, i + 2, i + 3]);
        assert!(kite::owns(&**b as *const [u64; 4]));
    }
    boxes[5][0] = 99;
    assert_eq!(boxes[5][0], 99);
    let b = boxes.pop().unwrap();
    assert_eq!(HeapBox::into_inner(b), [9999, 10000, 10001, 10002]);
    let big = heap.boxed([3u8; 100_000]); // a large block of the heap
    assert!(big.iter().all(|&x| x == 3));
    drop(boxes);
}

#[test]
fn dropping_a_box_runs_the_destructor_once() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Counted(#[allow(dead_code)] u32);
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
    let heap = Heap::new();
    let a = heap.boxed(Counted(1));
    let b = heap.boxed(Counted(2));
    let leaked: &mut Counted = HeapBox::leak(heap.boxed(Counted(3)));
    leaked.0 = 4;
    drop(a);
    assert_eq!(DROPS.load(Ordering::SeqCst), 1);
    drop(b);
    assert_eq!(DROPS.load(Ordering::SeqCst), 2);
    drop(heap); // the leaked value's memory goes with the heap, its destructor never runs
    assert_eq!(DROPS.load(Ordering::SeqCst), 2);
}

#[test]
fn raw_blocks_respect_layouts() {
    let heap = Heap::new();
    let mut blocks = Vec::new();
    for (k, align) in [1usize, 8, 16, 32, 64, 256, 4096, 65536]
        .into_iter()
        .enumerate()
    {
        for size in [0usize, 1, 24, 100, 5000, 70_000] {
            let layout = Layout::from_size_align(size, align).unwrap();
            let zeroed = heap.alloc_zeroed(layout).expect("alloc_zeroed");
            assert_eq!(zeroed.as_ptr() as usize % align, 0);
            let z = unsafe { std::slice::from_raw_parts(zeroed.as_ptr(), size) };
            assert!(z.iter().all(|&b| b == 0), "align {align} size {size}");
            let p = heap.alloc(layout).expect("alloc");
            assert_eq!(p.as_ptr() as usize % align, 0);
            unsafe { p.as_ptr().write_bytes(k as u8 + 1, size) };
            blocks.push((p, layout, k as u8 + 1));
            blocks.push((zeroed, layout, 0));
        }
    }
    for &(p, layout, fill) in &blocks {
        let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), layout.size()) };
        assert!(s.iter().all(|&b| b == fill));
    }
    // free half of them one by one; the heap's drop takes the rest
    for (p, layout, _) in blocks.into_iter().step_by(2) {
        unsafe { heap.dealloc(p, layout) };
    }
}

#[test]
fn drop_gives_the_memory_back() {
    // Many heaps filled and dropped: without kite_heap_destroy releasing everything,
    // committed memory would grow by ~8 MiB per round.
    let mut committed = Vec::new();
    for _ in 0..20 {
        let heap = Heap::new();
        for i in 0..2000usize {
            let p = heap
                .alloc(Layout::from_size_align(4096, 8).unwrap())
                .unwrap();
            unsafe { p.as_ptr().write_bytes(i as u8, 4096) };
        }
        drop(heap);
        committed.push(kite::stats().committed);
    }
    let first = committed[2];
    let last = *committed.last().unwrap();
    assert!(last <= first + (16 << 20), "committed grew: {committed:?}");
}

#[test]
fn a_heap_moves_between_threads_and_boxes_are_freed_elsewhere() {
    let heap = Heap::new();
    let heap = thread::spawn(move || {
        let v = heap.alloc(Layout::new::<[u8; 64]>()).unwrap();
        unsafe { heap.dealloc(v, Layout::new::<[u8; 64]>()) };
        heap
    })
    .join()
    .unwrap();
    let boxes: Vec<HeapBox<'_, String>> = (0..1000)
        .map(|i| heap.boxed(format!("value {i}")))
        .collect();
    thread::scope(|s| {
        let mut boxes = boxes;
        let second = boxes.split_off(500);
        s.spawn(move || {
            for (i, b) in second.into_iter().enumerate() {
                assert_eq!(*b, format!("value {}", 500 + i));
            }
        });
        // the heap keeps serving this thread while the other one frees its blocks
        let more: Vec<HeapBox<'_, u64>> = (0..1000u64).map(|i| heap.boxed(i)).collect();
        assert!(more.iter().enumerate().all(|(i, b)| **b == i as u64));
        drop(boxes);
    });
}
