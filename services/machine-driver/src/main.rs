//! The `machine-driver` binary: `machine-driver` serves, `machine-driver healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (see the README).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        machine_driver::NAME,
        machine_driver::DEFAULT_PORT,
        |env| async move { machine_driver::build(machine_driver::Config::from_env(&env)?).await },
    )
    .await
}
