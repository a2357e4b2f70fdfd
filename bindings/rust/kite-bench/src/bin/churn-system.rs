//! The churn workload with the system allocator (glibc malloc on Linux).
fn main() {
    kite_bench::main("system");
}
