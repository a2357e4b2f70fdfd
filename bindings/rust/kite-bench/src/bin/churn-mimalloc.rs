//! The churn workload with the `mimalloc` crate as the global allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    kite_bench::main("mimalloc");
}
