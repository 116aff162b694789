//! The `machine-driver` binary: `machine-driver` serves, `machine-driver healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (docs/configuration.md lists every one).

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        machine_driver::NAME,
        machine_driver::DEFAULT_PORT,
        machine_driver::VARS,
        machine_driver::RENAMED,
        |env| async move { machine_driver::build(machine_driver::Config::from_env(&env)?).await },
    )
    .await
}
