//! The watch benchmark: how long a change takes to reach many watchers through the gateway, and
//! what holding them open costs in memory. Prints figures; fails only when an event is missed or a
//! watcher could not be opened, never on speed.
//!
//! The stack runs as separate processes (`berth_tests::processes`), the gateway's rate limit off
//! and its per-token cap on calls in flight raised above the watchers (a watch is a call in flight
//! for as long as it streams). Through the gateway, with the admin token:
//! 1. one secret is made (`POST /v1/namespaces/watch-bench/secrets`) and the namespace's secrets
//!    listed, for the list's `resourceVersion`;
//! 2. the gateway's and the machine controller's RSS (`VmRSS`) is read;
//! 3. `--watchers` watches are opened,
//!    `GET /v1/namespaces/watch-bench/secrets?watch=true&resourceVersion=<list>&timeoutSeconds=600`,
//!    each on its own connection (the client keeps no idle connection, so none is shared), at most
//!    64 being opened at once; a watch counts as open when its answer's head (200) is in: the
//!    controller subscribed it to its change feed before answering, so it misses nothing after;
//! 4. once all are open, the RSS is read again (and the difference shared out per watcher);
//! 5. `--events` writes, one every `--pace-ms`, each a merge PATCH of the secret's label
//!    `seq=<n>`; the writer records when it sent each and when the 2xx answer came;
//! 6. each watcher records when it read the MODIFIED event carrying `seq=<n>`.
//!
//! The delay of an event at a watcher is the instant it read the event less the instant the write
//! was answered 2xx (a watcher may read the event before the writer reads its answer: that
//! delivery counts as 0 ms, and how many did is printed). The delay from the instant the write was
//! sent, which includes the write itself, is printed beside it. Everything runs on this machine:
//! the watchers' own reading shares its cores with the gateway and the controller.
//!
//! ```text
//! watch-bench [--watchers N] [--events M] [--pace-ms MS] [--bin-dir DIR]
//! ```
//!
//! Defaults: 1000 watchers, 200 events, 20 ms. Needs about `watchers + 256` open files: the soft
//! limit (`ulimit -n`) is raised to the hard one with `prlimit` when lower (the services, started
//! from here, inherit it); if the hard limit is lower the run stops and says what to set.
//!
//! # Layout
//! - this file: the constants, and starting and stopping the stack around the run;
//! - `options`: the command line and the open-files limit;
//! - `run`: the benchmark's steps and its report;
//! - `watcher`: one watcher;
//! - `figures`: `/proc` readings and quantiles.

use std::time::Duration;

use berth_tests::processes::{Credentials, ProcessStack, Service};

mod figures;
mod options;
mod run;
mod watcher;

use options::{enough_files, options};
use run::run;

const ADMIN_TOKEN: &str = "watch-bench-admin-token";
const INTERNAL_TOKEN: &str = "watch-bench-internal-credential";
const ECS_KEY_ID: &str = "LTAIwatchbench";
const ECS_KEY_SECRET: &str = "watch-bench-secret";
const NAMESPACE: &str = "watch-bench";
const SECRET: &str = "watched";
/// Watches being opened at once.
const OPENING: usize = 64;
/// How long the watchers may take, after the last write, to read the last event.
const GRACE: Duration = Duration::from_secs(15);
/// How long opening every watch may take.
const OPEN_LIMIT: Duration = Duration::from_secs(180);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("watch-bench: {e}");
            eprintln!(
                "usage: watch-bench [--watchers N] [--events M] [--pace-ms MS] [--bin-dir DIR]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = berth_tests::processes::check_built("watch-bench", &o.bin_dir) {
        eprintln!("{e}");
        return std::process::ExitCode::from(2);
    }
    // This process holds a connection per watcher; the gateway one per watcher each side.
    match enough_files(2 * o.watchers as u64 + 256) {
        Ok(said) => println!("{said}"),
        Err(e) => {
            eprintln!("watch-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let data = match tempfile::Builder::new().prefix("berth-watch-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("watch-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: ECS_KEY_ID.into(),
        ecs_key_secret: ECS_KEY_SECRET.into(),
    };
    // A watch is a call in flight for as long as it streams: the token's cap above the watchers.
    // Each listener's connection cap is set above them too, whatever the file limit's default.
    let in_flight = (o.watchers + 64).to_string();
    let connections = (o.watchers + 256).to_string();
    let max_watches = (o.watchers + 64).max(4096).to_string();
    let settings = [
        (
            Service::Gateway,
            "BERTH_TOKEN_MAX_IN_FLIGHT",
            in_flight.as_str(),
        ),
        (Service::Gateway, "BERTH_RATE_LIMIT_RPS", "0"),
        (
            Service::Gateway,
            "BERTH_MAX_CONNECTIONS",
            connections.as_str(),
        ),
        (
            Service::MachineController,
            "BERTH_MAX_CONNECTIONS",
            connections.as_str(),
        ),
        (
            Service::MachineController,
            "BERTH_MAX_WATCHES",
            max_watches.as_str(),
        ),
    ];
    println!(
        "watch-bench: {} watchers, {} events (one every {} ms), binaries from {}",
        o.watchers,
        o.events,
        o.pace.as_millis(),
        o.bin_dir.display()
    );
    let mut stack =
        match ProcessStack::start(&o.bin_dir, data.path(), &credentials, &settings).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("watch-bench: {e}");
                let kept = data.keep();
                eprintln!(
                    "watch-bench: kept {} (logs of every service)",
                    kept.display()
                );
                return std::process::ExitCode::from(2);
            }
        };
    let outcome = run(&o, &stack).await;
    stack.stop().await;
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            let kept = data.keep();
            eprintln!(
                "watch-bench: a watcher was not opened or missed an event; kept {} (logs of every service)",
                kept.display()
            );
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("watch-bench: {e}");
            let kept = data.keep();
            eprintln!(
                "watch-bench: kept {} (logs of every service)",
                kept.display()
            );
            std::process::ExitCode::from(2)
        }
    }
}
