//! `berth`: the Berth CLI, and `berth up`, the whole stack in one process.
//!
//! Run `berth --help` for the commands; `cargo run --release -p berth -- up` starts everything.

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    berth::run(std::env::args_os()).await
}
