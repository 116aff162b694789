//! The `orchestrator-registry` binary: `orchestrator-registry` serves, `orchestrator-registry healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (see the README).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(
        orchestrator_registry::NAME,
        orchestrator_registry::DEFAULT_PORT,
        |env| async move {
            orchestrator_registry::build(orchestrator_registry::Config::from_env(&env)?).await
        },
    )
    .await
}
