//! The `gateway` binary: `gateway` serves, `gateway healthcheck` probes a running one, and
//! `gateway token create` adds a token to its tokens file (the way back in inside a container).
//! Settings come from `BERTH_*` variables (docs/configuration.md lists every one).

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("token") {
        let env = service_kit::Env::from_process(gateway::VARS);
        return match gateway::mint::run(&args[1..], &env, &mut std::io::stdout()) {
            Ok(_) => std::process::ExitCode::SUCCESS,
            Err(e @ gateway::mint::MintError::Usage(_)) => {
                eprintln!("gateway token: {e}\n\n{}", gateway::mint::USAGE);
                std::process::ExitCode::from(2)
            }
            // A refused setting exits as a serving gateway's start does (2), so scripts tell a
            // configuration mistake from a file that could not be written.
            Err(e @ gateway::mint::MintError::Config(_)) => {
                eprintln!("gateway token: {e}");
                std::process::ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("gateway token: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    service_kit::server::run_binary(
        gateway::NAME,
        gateway::DEFAULT_PORT,
        gateway::VARS,
        gateway::RENAMED,
        |env| async move { gateway::build(gateway::Config::from_env(&env)?).await },
    )
    .await
}
