//! The crash suite: every acknowledged change survives a SIGKILL of the service that made it.
//!
//! Each round (one seed) starts the five binaries as separate processes on one data directory —
//! the ECS emulator (keeping its account in a state directory, as a cloud keeps its VMs), the
//! registry, storage-ops, the machine driver and the gateway — and drives mixed operations through
//! the gateway from several workers: volumes created, read and deleted, machines created, inspected
//! and deleted. Meanwhile a killer SIGKILLs storage-ops, the registry or the machine driver, alone or
//! all three together, at random moments, and starts them again on the same data.
//!
//! A worker counts an operation as acknowledged only when it was answered 2xx; anything else (a
//! refused connection, a 502/503/504, a timeout) leaves that name's state unknown, and the worker
//! remembers what it meant to do, as a controller would. At the end the suite, like a controller,
//! repeats each unacknowledged intent until it is acknowledged, then checks:
//! - data lost: a volume or machine acknowledged as made is missing (or was seen missing by a read
//!   in the run), or one acknowledged as deleted is back;
//! - half-made: a volume still Pending, Provisioning, Deleting or Failed once reconciled;
//! - orphans: a backend directory no volume owns, a volume storage-ops reports at `/v1/orphans`, an
//!   ECS disk or network interface left by a machine that is gone;
//! - duplicate VMs: more than one ECS instance for one machine;
//! - secrets: the planted ECS key, user data, admin token or internal credential in a Berth
//!   service's log (its crates at debug level), on a `/metrics` page, or in an answer (every read's,
//!   and every refusal's problem+json).
//!
//! ```text
//! crash-suite [--seeds N] [--first-seed S] [--ops N] [--workers N] [--bin-dir DIR]
//!             [--kubernetes-seeds N] [--kubernetes-ops N]
//! ```
//!
//! After those rounds, `--kubernetes-seeds` (default 1) rounds put the volumes on a `kubernetes`
//! orchestrator: the stand-in API server (`kube-standin`) runs in this process with a PV controller
//! binding every claim, `--kubernetes-ops` (default 200) volume operations run while storage-ops
//! alone is killed, and the claims are checked against the volumes: one claim per volume
//! acknowledged as made, none for one acknowledged as deleted, no claim of Berth's without a
//! volume.
//!
//! Then `--scale-seeds` (default 5) rounds of the machine controller ([`scale`]): a
//! MachineDeployment scaled 0 → 30 → 5 → 20 on the emulator while the controller and the driver
//! are killed; at rest exactly 20 machines run, one VM each, and no VM is left without a machine.
//!
//! The binaries are looked for beside this one (build them in the same profile:
//! `tests/reliability/run.sh` does). Prints a table per round and a summary, and closes with
//! `N passed, N failed` (a round passes when every count above is zero).

//!
//! # Layout
//! - this file: options, one round (start, run, settle, check, stop) and the summary;
//! - [`model`]: what the suite knows of each name, the counts, the requests it sends;
//! - [`workload`]: the workers and the killer;
//! - [`checks`]: the controller's repeats at the end of a round, and every check;
//! - [`scale`]: the machine controller's rounds.
//!
//! The processes themselves are `berth_tests::processes`.

mod checks;
#[path = "../../../../services/machine-driver/tests/support/mod.rs"]
mod docker_support;
mod model;
mod scale;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::Mutex;

use model::{Counts, NameState, clients};
use workload::{Shared, killer};

pub(crate) const INTERNAL_TOKEN: &str = "crash-suite-internal-credential";
pub(crate) const ADMIN_TOKEN: &str = "crash-suite-admin-token";
pub(crate) const ECS_KEY_ID: &str = "LTAIcrashsuite";
pub(crate) const ECS_KEY_SECRET: &str = "crash-suite-secret";
/// The user data every machine carries: a secret too (it holds bootstrap tokens in real use).
pub(crate) const USER_DATA: &str = "#!/bin/sh\necho planted-user-data-d41d8cd9\n";
pub(crate) const NAMESPACE: &str = "crash";
pub(crate) const VOLUME_NAMES: usize = 40;
pub(crate) const MACHINE_NAMES: usize = 12;
/// How long the end of a round may take to settle an intent or to finish reconciling.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Options {
    seeds: u64,
    first_seed: u64,
    ops: usize,
    workers: usize,
    bin_dir: PathBuf,
    /// Rounds on a `kubernetes` orchestrator (the stand-in API server, in this process), after the
    /// others: volumes only, storage-ops killed.
    kubernetes_seeds: u64,
    kubernetes_ops: usize,
    /// The machine controller's rounds (a deployment scaled while it and the driver are killed).
    scale_seeds: u64,
}

/// Where a round's volumes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The default `local` orchestrator, with machines beside the volumes.
    Local,
    /// Claims on the stand-in API server.
    Kubernetes,
}

/// The claims' namespace of a Kubernetes round.
pub(crate) const CLAIMS_NAMESPACE: &str = "berth-volumes";

fn options() -> Result<Options, String> {
    let mut o = Options {
        seeds: 20,
        first_seed: 1,
        ops: 500,
        workers: 4,
        kubernetes_seeds: 1,
        kubernetes_ops: 200,
        scale_seeds: 5,
        bin_dir: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seeds" => o.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--first-seed" => {
                o.first_seed = value()?.parse().map_err(|e| format!("--first-seed: {e}"))?
            }
            "--ops" => o.ops = value()?.parse().map_err(|e| format!("--ops: {e}"))?,
            "--workers" => {
                o.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?;
                if o.workers == 0 {
                    return Err("--workers must be at least 1".into());
                }
            }
            "--bin-dir" => o.bin_dir = PathBuf::from(value()?),
            "--kubernetes-seeds" => {
                o.kubernetes_seeds = value()?
                    .parse()
                    .map_err(|e| format!("--kubernetes-seeds: {e}"))?
            }
            "--kubernetes-ops" => {
                o.kubernetes_ops = value()?
                    .parse()
                    .map_err(|e| format!("--kubernetes-ops: {e}"))?
            }
            "--scale-seeds" => {
                o.scale_seeds = value()?
                    .parse()
                    .map_err(|e| format!("--scale-seeds: {e}"))?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// Berth's own crates log at debug level, so the secret check below reads everything they say;
/// libraries stay at info (sqlx would log every statement).
fn verbose_logs() -> Vec<(Service, &'static str, &'static str)> {
    const FILTER: &str = "info,gateway=debug,machine_driver=debug,alicloud=debug,storage_ops=debug,orchestrator_registry=debug,service_kit=debug";
    [
        Service::Registry,
        Service::StorageOps,
        Service::MachineDriver,
        Service::Gateway,
    ]
    .into_iter()
    .map(|s| (s, "BERTH_LOG", FILTER))
    .collect()
}

async fn round(o: &Options, seed: u64, backend: Backend) -> Result<Counts, String> {
    // A Kubernetes round's cluster: the stand-in, in this process (it is the cluster, not Berth:
    // never killed), with a PV controller binding every claim soon after it is made.
    let standin = match backend {
        Backend::Local => None,
        Backend::Kubernetes => Some(Arc::new(
            kube_standin::StandIn::start(&[CLAIMS_NAMESPACE]).await,
        )),
    };
    let binder = standin.clone().map(|s| {
        tokio::spawn(async move {
            loop {
                s.bind_pending(CLAIMS_NAMESPACE);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    });
    let mut settings = verbose_logs();
    if let Some(s) = &standin {
        // The processes' settings outlive this round's borrow of the URL.
        let url: &'static str = Box::leak(s.url.clone().into_boxed_str());
        for service in [Service::Registry, Service::StorageOps] {
            settings.push((service, "BERTH_KUBERNETES_SERVERS", url));
        }
    }
    let data = tempfile::Builder::new()
        .prefix("berth-crash-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: ECS_KEY_ID.into(),
        ecs_key_secret: ECS_KEY_SECRET.into(),
    };
    let stack = ProcessStack::start(&o.bin_dir, data.path(), &credentials, &settings).await?;
    if let Some(s) = &standin {
        register_cluster(&stack.gateway, &s.url).await?;
    }
    let (machine_names, ops, victims) = match backend {
        Backend::Local => (
            MACHINE_NAMES,
            o.ops,
            vec![
                Service::StorageOps,
                Service::Registry,
                Service::MachineDriver,
            ],
        ),
        Backend::Kubernetes => (0, o.kubernetes_ops, vec![Service::StorageOps]),
    };
    let shared = Arc::new(Shared {
        seed,
        clients: clients(&stack.gateway),
        volumes: (0..VOLUME_NAMES)
            .map(|_| Mutex::new(NameState::new()))
            .collect(),
        machines: (0..machine_names)
            .map(|_| Mutex::new(NameState::new()))
            .collect(),
        next_op: AtomicUsize::new(0),
        ops,
        counts: std::sync::Mutex::new(Counts::default()),
        victims,
    });
    let stack = Arc::new(Mutex::new(stack));
    let killing = tokio::spawn(killer(
        stack.clone(),
        shared.clone(),
        StdRng::seed_from_u64(seed),
    ));
    let workers: Vec<_> = (0..o.workers)
        .map(|w| tokio::spawn(shared.clone().worker(w, o.workers)))
        .collect();
    for w in workers {
        w.await.map_err(|e| format!("a worker panicked: {e}"))?;
    }
    killing
        .await
        .map_err(|e| format!("the killer panicked: {e}"))?;
    // Everything up again (the killer restarts what it killed, but a restart may have failed).
    let mut stack = Arc::try_unwrap(stack)
        .map_err(|_| "the stack is still shared".to_string())?
        .into_inner();
    for s in [
        Service::Registry,
        Service::StorageOps,
        Service::MachineDriver,
    ] {
        let p = stack.process(s);
        p.kill().await;
        p.start().await?;
    }
    checks::settle_and_check(&shared, &stack).await;
    if let Some(s) = &standin {
        checks::claims_match_volumes(&shared, s).await;
    }
    if let Some(b) = binder {
        b.abort();
    }
    checks::no_secret_anywhere(&shared, &stack, data.path()).await;
    stack.stop().await;
    let counts = shared.counts.lock().expect("counts").clone();
    if !counts.passed() {
        // Keep the data directory and the logs of a failed round to look at.
        let kept = data.keep();
        eprintln!("round {seed}: kept {}", kept.display());
    }
    Ok(counts)
}

/// Registers the stand-in's cluster as the default orchestrator, through the gateway.
async fn register_cluster(gateway: &str, server: &str) -> Result<(), String> {
    let body = serde_json::json!({"kind": "kubernetes", "default": true,
        "config": {"server": server, "namespace": CLAIMS_NAMESPACE}});
    let answer = reqwest::Client::new()
        .put(format!("{gateway}/v1/orchestrators/cluster"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("registering the cluster: {e}"))?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "registering the cluster: {} {}",
            answer.status(),
            answer.text().await.unwrap_or_default()
        ))
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("crash-suite: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = berth_tests::processes::check_built("crash-suite", &o.bin_dir) {
        eprintln!("{e}");
        return std::process::ExitCode::from(2);
    }
    println!(
        "== crash suite: {} seeds from {}, {} operations each over {} workers",
        o.seeds, o.first_seed, o.ops, o.workers
    );
    println!(
        "{:>5} {:>6} {:>6} {:>8} {:>6} {:>10} {:>10} {:>8} {:>10} {:>8} {:>8}",
        "seed",
        "ops",
        "acked",
        "unacked",
        "kills",
        "data lost",
        "half-made",
        "orphans",
        "dup. VMs",
        "secrets",
        "seconds"
    );
    let mut total = Counts::default();
    let (mut passed, mut failed) = (0, 0);
    let rounds = (o.first_seed..o.first_seed + o.seeds)
        .map(|seed| (seed, Backend::Local))
        .chain(
            (o.first_seed..o.first_seed + o.kubernetes_seeds)
                .map(|seed| (seed, Backend::Kubernetes)),
        );
    for (seed, backend) in rounds {
        let started = Instant::now();
        if backend == Backend::Kubernetes {
            println!(
                "      kubernetes: seed {seed}, {} volume operations on claims, storage-ops killed",
                o.kubernetes_ops
            );
        }
        match round(&o, seed, backend).await {
            Ok(c) => {
                println!(
                    "{seed:>5} {:>6} {:>6} {:>8} {:>6} {:>10} {:>10} {:>8} {:>10} {:>8} {:>8.1}",
                    c.operations,
                    c.acknowledged,
                    c.unacknowledged,
                    c.kills,
                    c.data_lost,
                    c.half_made,
                    c.orphans,
                    c.duplicate_vms,
                    c.secrets_leaked,
                    started.elapsed().as_secs_f64()
                );
                let why: Vec<String> = c
                    .unacknowledged_by
                    .iter()
                    .map(|(k, n)| format!("{n}× {k}"))
                    .collect();
                if !why.is_empty() {
                    println!("      unacknowledged: {}", why.join(", "));
                }
                for f in &c.findings {
                    println!("      {f}");
                }
                if c.passed() {
                    passed += 1;
                } else {
                    failed += 1;
                }
                total.operations += c.operations;
                total.acknowledged += c.acknowledged;
                total.unacknowledged += c.unacknowledged;
                total.kills += c.kills;
                total.data_lost += c.data_lost;
                total.half_made += c.half_made;
                total.orphans += c.orphans;
                total.duplicate_vms += c.duplicate_vms;
                total.secrets_leaked += c.secrets_leaked;
            }
            Err(e) => {
                println!("{seed:>5} could not run: {e}");
                failed += 1;
            }
        }
    }
    println!(
        "total {:>6} {:>6} {:>8} {:>6} {:>10} {:>10} {:>8} {:>10} {:>8}",
        total.operations,
        total.acknowledged,
        total.unacknowledged,
        total.kills,
        total.data_lost,
        total.half_made,
        total.orphans,
        total.duplicate_vms,
        total.secrets_leaked
    );
    if o.scale_seeds > 0 {
        let (p, f) = scale_rounds(&o).await;
        passed += p;
        failed += f;
    }
    println!("crash-suite: {passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// The machine controller's rounds, on the emulator and then on Docker, with their own table;
/// answers (passed, failed). Without a Docker Engine its rounds are skipped, saying so, unless
/// `BERTH_REQUIRE_DOCKER=1` makes that a failure.
async fn scale_rounds(o: &Options) -> (usize, usize) {
    println!(
        "== machine controller: a deployment scaled {} through the gateway, the controller and the driver killed",
        std::iter::once("0".to_string())
            .chain(scale::STEPS.iter().map(u64::to_string))
            .collect::<Vec<_>>()
            .join(" → ")
    );
    println!(
        "{:>6} {:>5} {:>6} {:>9} {:>5} {:>8} {:>6} {:>7} {:>9} {:>8}",
        "cloud",
        "seed",
        "kills",
        "machines",
        "VMs",
        "missing",
        "extra",
        "leaked",
        "dup. VMs",
        "seconds"
    );
    let (mut passed, mut failed) = (0, 0);
    let mut clouds = vec![scale::Cloud::Emulator];
    if docker_support::local_engine().await.is_some() {
        clouds.push(scale::Cloud::Docker);
    } else if std::env::var("BERTH_REQUIRE_DOCKER").as_deref() == Ok("1") {
        println!("Docker: FAILED: BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers");
        failed += 1;
    } else {
        println!(
            "Docker: SKIPPED: no Docker Engine answers (BERTH_REQUIRE_DOCKER=1 fails instead)"
        );
    }
    for cloud in clouds {
        for seed in o.first_seed..o.first_seed + o.scale_seeds {
            let started = Instant::now();
            match scale::round(&o.bin_dir, seed, cloud).await {
                Ok(c) => {
                    println!(
                        "{cloud:>6} {seed:>5} {:>6} {:>9} {:>5} {:>8} {:>6} {:>7} {:>9} {:>8.1}",
                        c.kills,
                        c.machines,
                        c.vms,
                        c.missing,
                        c.extra,
                        c.leaked,
                        c.duplicate_vms,
                        started.elapsed().as_secs_f64()
                    );
                    for f in &c.findings {
                        println!("      {f}");
                    }
                    if c.passed() {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                }
                Err(e) => {
                    println!("{cloud:>6} {seed:>5} could not run: {e}");
                    failed += 1;
                }
            }
        }
    }
    (passed, failed)
}
