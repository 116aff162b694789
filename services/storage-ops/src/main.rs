//! The `storage-ops` binary: `storage-ops` serves, `storage-ops healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (see the README).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        storage_ops::NAME,
        storage_ops::DEFAULT_PORT,
        |env| async move { storage_ops::build(storage_ops::Config::from_env(&env)?).await },
    )
    .await
}
