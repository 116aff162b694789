//! The `orchestrator-registry` binary: `orchestrator-registry` serves, `orchestrator-registry healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (docs/configuration.md lists every one).

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        orchestrator_registry::NAME,
        orchestrator_registry::DEFAULT_PORT,
        orchestrator_registry::VARS,
        orchestrator_registry::RENAMED,
        |env| async move {
            orchestrator_registry::build(orchestrator_registry::Config::from_env(&env)?).await
        },
    )
    .await
}
