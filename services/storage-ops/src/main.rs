//! The `storage-ops` binary: `storage-ops` serves, `storage-ops healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (docs/configuration.md lists every one).

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        storage_ops::NAME,
        storage_ops::DEFAULT_PORT,
        storage_ops::VARS,
        storage_ops::RENAMED,
        |env| async move { storage_ops::build(storage_ops::Config::from_env(&env)?).await },
    )
    .await
}
