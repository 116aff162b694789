//! The `gateway` binary: `gateway` serves, `gateway healthcheck` probes a running one.
//! Settings come from `BERTH_*` variables (see the README).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::server::run_binary(gateway::NAME, gateway::DEFAULT_PORT, |env| async move {
        gateway::build(gateway::Config::from_env(&env)?).await
    })
    .await
}
