//! The churn workload with the `tikv-jemallocator` crate as the global allocator.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    kite_bench::main("jemalloc");
}
