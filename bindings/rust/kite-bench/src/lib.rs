//! The churn workload shared by the per-allocator binaries (src/bin/churn-*.rs); each
//! binary only picks its `#[global_allocator]` and calls [`main`].
//!
//! Every thread, round after round, builds a `BTreeMap<String, Vec<u32>>` (keys made with
//! `format!`, values grown one push at a time), takes half of its entries out by key and
//! sends them, boxed, in one batch to the next thread (a ring of channels), which frees
//! them; then it tears the map down. Allocations of 16 bytes to a few KiB, frees on the
//! allocating thread and on another one. Usage:
//!
//! `churn-<allocator> [THREADS [ROUNDS [KEYS]]]` (default 4 200 2000)
//!
//! It prints one line: `<allocator> threads=T rounds=R keys=K seconds=S checksum=C
//! peak_rss_kib=M`; the checksum depends only on T, R and K, so every allocator must print
//! the same one.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

type Entry = Box<(String, Vec<u32>)>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn consume(batch: Vec<Entry>) -> u64 {
    batch
        .iter()
        .map(|e| e.0.len() as u64 + e.1.iter().map(|&x| x as u64).sum::<u64>())
        .sum()
}

fn worker(
    t: usize,
    rounds: usize,
    keys: usize,
    tx: mpsc::Sender<Vec<Entry>>,
    rx: mpsc::Receiver<Vec<Entry>>,
) -> u64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
    let mut sum = 0u64;
    for r in 0..rounds {
        let mut map: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for k in 0..keys {
            let key = format!("t{t}-r{r}-k{:05}-{}", k, rng.next() % 1000);
            let len = (rng.next() % 40) as usize;
            let mut v = Vec::new();
            for i in 0..len {
                v.push((k + i) as u32);
            }
            map.insert(key, v);
        }
        // take every other key out (by lookup), and pass the entries on
        let wanted: Vec<String> = map.keys().step_by(2).cloned().collect();
        let mut batch: Vec<Entry> = Vec::with_capacity(wanted.len());
        for key in wanted {
            let v = map.remove(&key).expect("key present");
            batch.push(Box::new((key, v)));
        }
        tx.send(batch).expect("the next thread is alive");
        while let Ok(b) = rx.try_recv() {
            sum += consume(b);
        }
        sum += map.len() as u64;
        drop(map);
    }
    drop(tx);
    for b in rx {
        sum += consume(b);
    }
    sum
}

/// The process's peak resident set (VmHWM in /proc/self/status), in KiB; 0 if unknown.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Run the workload with the arguments of the command line and print the result line.
pub fn main(allocator: &str) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: churn-{allocator} [THREADS [ROUNDS [KEYS]]]   (default 4 200 2000)");
        return;
    }
    let arg = |i: usize, default: usize| -> usize {
        match args.get(i) {
            None => default,
            Some(s) => s.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| {
                eprintln!("churn-{allocator}: not a positive number: {s}");
                eprintln!(
                    "usage: churn-{allocator} [THREADS [ROUNDS [KEYS]]]   (default 4 200 2000)"
                );
                std::process::exit(2)
            }),
        }
    };
    if args.len() > 3 {
        eprintln!("usage: churn-{allocator} [THREADS [ROUNDS [KEYS]]]   (default 4 200 2000)");
        std::process::exit(2);
    }
    let (threads, rounds, keys) = (arg(0, 4), arg(1, 200), arg(2, 2000));

    let start = Instant::now();
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<Vec<Entry>>()).unzip();
    let mut handles = Vec::new();
    for (t, rx) in rxs.into_iter().enumerate() {
        let tx = txs[(t + 1) % threads].clone();
        handles.push(thread::spawn(move || worker(t, rounds, keys, tx, rx)));
    }
    drop(txs);
    let checksum: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("worker panicked"))
        .sum();
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{allocator} threads={threads} rounds={rounds} keys={keys} seconds={seconds:.4} checksum={checksum} peak_rss_kib={}",
        peak_rss_kib()
    );
}
