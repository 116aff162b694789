//! The `machine-controller` binary: `machine-controller` serves, `machine-controller healthcheck`
//! probes a running one. Settings come from `BERTH_*` variables (docs/configuration.md lists every one).

/// The binary picks the allocator, not a library it links (as every service binary does).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        machine_controller::NAME,
        machine_controller::DEFAULT_PORT,
        machine_controller::VARS,
        machine_controller::RENAMED,
        |env| async move {
            machine_controller::build(machine_controller::Config::from_env(&env)?).await
        },
    )
    .await
}
