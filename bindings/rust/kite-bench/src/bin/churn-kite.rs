//! The churn workload with kite as the global allocator.
#[global_allocator]
static GLOBAL: kite::Kite = kite::Kite;

fn main() {
    kite_bench::main("kite");
}
