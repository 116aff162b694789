//! Running the stack: from checking the environment to serving, then, on Ctrl-C or SIGTERM,
//! stopping tier by tier so no request in flight finds a service it needs gone. Apart because the
//! order of a start (credentials only once every port is bound) and of a stop is its own subject.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use service_kit::Env;
use tokio::sync::watch;

use super::UpOptions;
use super::banner::{orchestrator_lines, say};
use super::build::build_stack;
use super::config::stack_variables;
use super::credentials::ensure_admin_token;
use super::instance::DOCKER_INSTANCE;

/// SIGINT (Ctrl-C) and SIGTERM, listened for from the moment this is made.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => tracing::info!("SIGINT received; draining"),
            _ = self.terminate.recv() => tracing::info!("SIGTERM received; draining"),
        }
    }
}

/// Runs the stack until Ctrl-C or SIGTERM, then drains every service and exits 0.
pub async fn run(args: UpOptions) -> ExitCode {
    service_kit::memory::limit_footprint();
    let (reads, renamed) = stack_variables();
    let env = Env::from_process(&reads);
    match service_kit::config::check_names(&env, &reads, &renamed) {
        Ok(warnings) => warnings
            .iter()
            .for_each(|w| eprintln!("berth up: warning: {w}")),
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::from(2);
        }
    }
    let _telemetry = match service_kit::telemetry::init_or_exit("berth up", "berth", &env) {
        Ok(g) => g,
        Err(code) => return code,
    };
    // After telemetry, so the warnings for retired names are seen.
    let env = match env.migrate(&renamed) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::from(2);
        }
    };
    let mut built = match build_stack(&args, &env).await {
        Ok(built) => built,
        Err(e) => {
            eprintln!("berth up: {e}");
            // A refused setting is the command line's (and environment's) mistake, exit code 2 as
            // every service binary says it; anything else (a port taken, a disk) is 1.
            return if e
                .downcast_ref::<service_kit::config::ConfigError>()
                .is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            };
        }
    };
    // Every listener is bound: from here on the stack will serve, so a token made now will be shown.
    let new_admin_token = match ensure_admin_token(&built.tokens_file) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = built.add_gateway() {
        eprintln!("berth up: {e}");
        return ExitCode::FAILURE;
    }
    let addresses: Vec<(&'static str, SocketAddr)> = built
        .apps
        .iter()
        .map(|(name, app)| (*name, app.local_addr()))
        .collect();
    let gateway_url = addresses
        .iter()
        .find(|(n, _)| *n == gateway::NAME)
        .map(|(_, a)| format!("http://{a}"))
        .unwrap_or_default();

    // Listening for Ctrl-C and SIGTERM starts before the banner: whoever reads "Ctrl-C stops
    // everything" and presses it at once must get a drained stop, not the default kill.
    let mut stop_signals = match StopSignals::listen() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("berth up: cannot listen for Ctrl-C: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One stop signal and one set of tasks per tier of [`stop_tier`].
    let stops: Vec<_> = (0..STOP_TIERS).map(|_| watch::channel(false)).collect();
    let mut tiers: Vec<Vec<_>> = (0..STOP_TIERS).map(|_| Vec::new()).collect();
    let apps = std::mem::take(&mut built.apps);
    for (name, app) in apps {
        let tier = stop_tier(name);
        let mut stop = stops[tier].1.clone();
        tiers[tier].push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = app.run_until(shutdown).await {
                eprintln!("berth up: {name} failed: {e}");
            }
        }));
    }

    say(format!(
        "Berth is up. State lives in {}",
        args.data_dir.display()
    ));
    for (name, addr) in &addresses {
        say(format!("  {name:<22} http://{addr}"));
    }
    say(format!("gateway url: {gateway_url}"));
    say(format!(
        "api docs: {gateway_url}/docs (every operation, to browse and try with a token)"
    ));
    match &new_admin_token {
        Some(token) => {
            say(format!("admin token: {token}"));
            say(format!(
                "  (shown once; only its hash is kept, in {})",
                built.tokens_file.display()
            ));
        }
        None => say(format!(
            "tokens file: {} (the admin token was shown when it was created; lost it? `berth token create --admin --data-dir {}` adds a new one)",
            built.tokens_file.display(),
            args.data_dir.display()
        )),
    }
    say(format!(
        "  for the CLI and curl: export BERTH_URL={gateway_url} BERTH_TOKEN=<the admin token>"
    ));
    for line in orchestrator_lines(&built).await {
        say(line);
    }
    say("Machines go to a SIMULATED Alibaba Cloud: the embedded ECS emulator, not a real cloud.");
    say(format!("emulator access key id: {}", built.emulator_key.0));
    say(format!(
        "emulator access key secret: {}",
        built.emulator_key.1
    ));
    say(format!(
        "  (the emulator's local credentials, kept with its instances in {} across restarts; put them in your machine Secret)",
        built.data_dir.join("ecs-emulator").display()
    ));
    match &built.docker_instance {
        Some(instance) => say(format!(
            "docker instance: {instance} (this stack's Docker machines carry it, in their label berth.io/instance and as their container name's last part: <namespace>_<machine>_{instance}; another stack's are not this one's)"
        )),
        None => say(format!(
            "docker instance: none (this data directory's Docker machines were made before stacks had one; {DOCKER_INSTANCE} sets one, and then those made without it are no longer this stack's)"
        )),
    }
    say("The gateway is the front door; Ctrl-C stops everything.");

    stop_signals.recv().await;
    say("Stopping: draining in-flight requests…");
    // Tier by tier, each drained before the next is told to stop, all within one deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for ((stop, _), tasks) in stops.iter().zip(tiers) {
        let _ = stop.send(true);
        let drained = tokio::time::timeout_at(deadline, futures::future::join_all(tasks)).await;
        if drained.is_err() {
            eprintln!("berth up: some requests did not finish within 30s; exiting anyway");
            break;
        }
    }
    say("Stopped.");
    ExitCode::SUCCESS
}

/// How many tiers [`stop_tier`] puts the services in.
const STOP_TIERS: usize = 4;

/// When a service stops on Ctrl-C: the gateway first, then the services only it calls (storage-ops,
/// the machine controller), then the machine driver the controller calls, then the registry and
/// the ECS emulator. Each tier drains its in-flight requests before the next tier is
/// told to stop, so a request accepted before the signal never finds a service it still needs
/// already gone (stopped all at once, a volume add in flight could find the registry closed and be
/// answered 503).
fn stop_tier(name: &str) -> usize {
    match name {
        gateway::NAME => 0,
        storage_ops::NAME | machine_controller::NAME => 1,
        machine_driver::NAME => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each service stops only after everything that calls it has drained.
    #[test]
    fn services_stop_after_the_services_that_call_them() {
        for (caller, callee) in [
            (gateway::NAME, storage_ops::NAME),
            (gateway::NAME, machine_driver::NAME),
            (gateway::NAME, machine_controller::NAME),
            (machine_controller::NAME, machine_driver::NAME),
            (storage_ops::NAME, orchestrator_registry::NAME),
            (machine_driver::NAME, orchestrator_registry::NAME),
            (machine_driver::NAME, "ecs-emulator"),
        ] {
            assert!(
                stop_tier(caller) < stop_tier(callee),
                "{caller} before {callee}"
            );
            assert!(stop_tier(callee) < STOP_TIERS);
        }
    }
}
