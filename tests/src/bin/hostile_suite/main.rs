//! The hostile-input suite: what a caller who wants to break Berth sends, to the gateway and to every
//! service's own port, ends in a 4xx problem (or a closed connection), never a 5xx, a hang, a crash or
//! a connection held forever.
//!
//! The stack runs as separate processes (`berth_tests::processes`). Every operation of each target is
//! taken from its committed OpenAPI document (`openapi/<service>.json`), so a new route is attacked
//! without this file changing. Scenarios, each against the gateway (with the admin token) and each
//! service (with the internal credential):
//! - deep JSON: arrays and objects nested 100,000 and 10,000 deep in every request body;
//! - invalid UTF-8: in a JSON string of every body, in the path, in a header value;
//! - huge heads: one header of 1 MiB, and 2,000 headers;
//! - garbage: seeded random bytes as every body, and as the request line;
//! - slow loris: 64 connections that send a request head a byte every 500 ms, while ordinary calls
//!   must still be answered within 2 s; every such connection must be closed by the server within
//!   its head/idle limit (5 s here) plus slack.
//!
//! After each scenario every target must still answer `/healthz`.
//!
//! Then the hostile machines (module [`machine`]): a machine driver of its own (in this process,
//! against the local Docker Engine, with a host directory allowed for mounts) and containers that
//! write everything Berth could read back, with every trick: exec ids that walk to another
//! container's start or to the machine's own export (beside a 256 MiB file), a real id of another
//! container's exec, bytes that are not UTF-8, exit codes that are huge, not numbers, a directory
//! or a link; a writable mount around another machine's mount (whose source it could swap); limits
//! asked above the operator's ceilings. Every call must be answered as due (never a 5xx), nothing
//! but the machine's own bootstrap may start, the driver's memory must stay flat, and no mount may
//! reach outside its root. Without an Engine the part is skipped, saying so (and fails under
//! `BERTH_REQUIRE_DOCKER=1`).
//!
//! ```text
//! hostile-suite [--bin-dir DIR]
//! ```
//!
//! Closes with `hostile-suite: N passed, N failed` (a scenario a line).
//!
//! # Layout
//! - this file: the targets (from the OpenAPI documents), the run and the report;
//! - `tally`: what a scenario saw, and the rule a raw answer is held to;
//! - `raw`: requests as raw bytes, and the head of the answer;
//! - `http_attacks`: deep JSON, invalid UTF-8, huge heads, garbage, and the `/healthz` check after
//!   each;
//! - `slow_loris`: the slow loris;
//! - `machine`: the hostile machines (`machine/attacks.rs` holds their three attacks).

use std::path::Path;
use std::time::Duration;

use berth_tests::processes::{Credentials, ProcessStack, Service};

#[path = "../../../../services/machine-driver/tests/support/mod.rs"]
mod support;
use serde_json::Value;

mod http_attacks;
mod machine;
mod raw;
mod slow_loris;
mod tally;

use http_attacks::{all_alive, deep_json, garbage, huge_heads, invalid_utf8};
use slow_loris::slow_loris;
use tally::Tally;

const ADMIN_TOKEN: &str = "hostile-suite-admin-token";
const INTERNAL_TOKEN: &str = "hostile-suite-internal-credential";
/// How long a request head or an idle connection may take here (set on every process).
const HEAD_LIMIT: Duration = Duration::from_secs(5);
/// How long any one answer may take.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// One process under attack: where it listens, its credential, and the operations its document
/// lists (method, path with parameters filled in, whether it takes a body).
struct Target {
    name: &'static str,
    addr: String,
    token: &'static str,
    operations: Vec<(String, String, bool)>,
}

/// Every operation of `document`, parameters filled with a valid name.
fn operations(document: &Path) -> Result<Vec<(String, String, bool)>, String> {
    let text = std::fs::read_to_string(document).map_err(|e| format!("{document:?}: {e}"))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{document:?}: {e}"))?;
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let filled: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "hostile" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for (method, op) in item.as_object().into_iter().flatten() {
            if !matches!(method.as_str(), "get" | "put" | "post" | "delete" | "head") {
                continue;
            }
            ops.push((
                method.to_uppercase(),
                filled.clone(),
                op.get("requestBody").is_some(),
            ));
        }
    }
    Ok(ops)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let bin_dir = match berth_tests::processes::bin_dir_from_args("hostile-suite") {
        Ok(d) => d,
        Err(usage) => {
            eprintln!("{usage}");
            return std::process::ExitCode::from(2);
        }
    };
    let documents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi");
    let data = match tempfile::Builder::new().prefix("berth-hostile-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hostile-suite: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: "LTAIhostilesuite".into(),
        ecs_key_secret: "hostile-suite-secret".into(),
    };
    let head_limit = format!("{}s", HEAD_LIMIT.as_secs());
    let settings: Vec<_> = [
        Service::Gateway,
        Service::Registry,
        Service::StorageOps,
        Service::MachineDriver,
        Service::MachineController,
    ]
    .into_iter()
    .map(|s| (s, "BERTH_IDLE_TIMEOUT", head_limit.as_str()))
    .collect();
    let mut stack = match ProcessStack::start(&bin_dir, data.path(), &credentials, &settings).await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hostile-suite: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut targets = Vec::new();
    for (service, url) in stack.urls() {
        let (name, document, token) = match service {
            Service::Gateway => ("gateway", "gateway.json", ADMIN_TOKEN),
            Service::Registry => (
                "orchestrator-registry",
                "orchestrator-registry.json",
                INTERNAL_TOKEN,
            ),
            Service::StorageOps => ("storage-ops", "storage-ops.json", INTERNAL_TOKEN),
            Service::MachineDriver => ("machine-driver", "machine-driver.json", INTERNAL_TOKEN),
            Service::MachineController => (
                "machine-controller",
                "machine-controller.json",
                INTERNAL_TOKEN,
            ),
            Service::Emulator => continue,
        };
        let operations = match operations(&documents.join(document)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("hostile-suite: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        targets.push(Target {
            name,
            addr: url.trim_start_matches("http://").to_string(),
            token,
            operations,
        });
    }

    println!(
        "== hostile suite: hostile input ends in a 4xx problem or a closed connection, never a 5xx"
    );
    println!(
        "{:<36} {:>8} {:>8} {:>7} {:>5} {:>6}",
        "scenario", "requests", "as due", "closed", "5xx", "wrong"
    );
    let (mut passed, mut failed, mut server_errors) = (0, 0, 0);
    let mut report = |name: &str, t: Tally| {
        println!(
            "{name:<36} {:>8} {:>8} {:>7} {:>5} {:>6}",
            t.requests,
            t.as_due,
            t.closed,
            t.server_errors,
            t.wrong.len()
        );
        for w in t.wrong.iter().take(10) {
            println!("      {w}");
        }
        server_errors += t.server_errors;
        if t.wrong.is_empty() {
            passed += 1;
        } else {
            failed += 1;
        }
    };

    let mut t = Tally::default();
    deep_json(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("deep JSON", t);

    let mut t = Tally::default();
    invalid_utf8(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("invalid UTF-8", t);

    let mut t = Tally::default();
    huge_heads(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("huge heads", t);

    let mut t = Tally::default();
    garbage(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("random bodies and request lines", t);

    let mut t = Tally::default();
    slow_loris(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("slow loris", t);

    stack.stop().await;

    match machine::Machines::start().await {
        Ok(Some(m)) => {
            let mut t = Tally::default();
            m.planted_state(&mut t).await;
            report("hostile machine: planted state", t);
            let mut t = Tally::default();
            m.symlink_swap(&mut t).await;
            report("hostile machine: symlink swap", t);
            let mut t = Tally::default();
            m.limits(&mut t).await;
            report("hostile machine: limits", t);
            m.finish();
        }
        Ok(None) => println!("hostile machine: SKIPPED (no Docker Engine answers)"),
        Err(e) => {
            let mut t = Tally::default();
            t.wrong(format!("hostile machine: {e}"));
            report("hostile machine", t);
        }
    }

    println!("hostile-suite: 5xx from hostile input: {server_errors}");
    println!("hostile-suite: {passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        let kept = data.keep();
        eprintln!(
            "hostile-suite: kept {} (logs of every service)",
            kept.display()
        );
        std::process::ExitCode::FAILURE
    }
}
