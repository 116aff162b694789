//! The load soak: the stack under a steady 80 % of the gateway's measured capacity for ten minutes,
//! with mixed operations, makes no errors beyond the rate limit, does not grow in memory after
//! warm-up, and keeps its `/metrics` pages bounded.
//!
//! The stack runs as separate processes (`berth_tests::processes`), the gateway's rate limit set far
//! above anything this machine can send (so the limiter runs on every call but is never the
//! bottleneck). A few Alicloud machines are made on the ECS emulator first. Then:
//! - capacity: the mix at full speed from 32 keep-alive connections (a closed loop) for
//!   `--capacity-seconds`; the completed requests per second are the gateway's capacity here (the
//!   load comes from this machine too, so it is the capacity of the stack and its caller together);
//! - soak: the same mix at `--fraction` of that rate for `--seconds`, paced open-loop: every 2 ms
//!   the pacer dispatches the operations now due to a bounded pool of 64 workers. An operation whose
//!   due time finds every worker busy is dropped and counted, and one dispatched over 100 ms after
//!   it was due is counted late: the pacer never slows down to suit the stack, so a stack that cannot
//!   keep up shows as a missed rate, not as a gentler test;
//! - every 10 s: each process's RSS (`VmRSS`) and open file descriptors, and the size in bytes and
//!   series of each service's `/metrics` page (the emulator has none).
//!
//! The mix, per 100 operations: 15 `GET /v1/kinds`, 15 `GET /v1/orchestrators`, 10
//! `GET /v1/volumes?limit=100`, 20 reads of one volume, 10 MCM GetMachineStatus and 6 ListMachines
//! (machine driver → emulator), 12 AddStorage and 12 DeleteStorage on the `local` orchestrator (in
//! the stack's temporary data directory). Each volume name is new; at most 200 volumes live at once
//! (an AddStorage beyond that deletes instead, a DeleteStorage with none idle adds), and a volume
//! is read or deleted by one worker at a time, so every answer has one right status: 2xx.
//!
//! Warm-up is the soak's first third, at least 60 s, at most half the run (see [`warm_up`] for
//! why). Checks, a row each:
//! - errors beyond the rate limit, in the capacity run and in the soak: any answer but a 2xx or a
//!   429 with `Retry-After`, and any call with no answer within 10 s;
//! - memory, per Berth service: RSS at the end less than 20 % above RSS in the first sample after
//!   warm-up (the emulator's is shown, not judged: it keeps every request's signature nonce for 30
//!   minutes to refuse replays, as ECS does, so it grows with the calls during a soak by design);
//! - `/metrics`, per service: bytes at the end at most 20 % above the first sample after warm-up;
//!   and no line of any page names a volume this run made (its name or uid): labels must not grow
//!   with the volumes;
//! - load: the soak's completed operations per second at least 95 % of its target rate.
//!
//! ```text
//! load-soak [--bin-dir DIR] [--seconds N] [--capacity-seconds N] [--fraction F]
//! ```
//!
//! Defaults: 600 s, 10 s, 0.8. Prints a line per sample, a summary (target and achieved rates, ops
//! by kind with p50/p99 latency, statuses, RSS and `/metrics` at warm-up and end), a row per check,
//! and closes with `load: N passed, N failed`.
//!
//! # Layout
//! - this file: the constants, the options, [`warm_up`], the stack's start and stop, and the run
//!   from the capacity measurement to the last check;
//! - `mix`: the operations and the driver that sends them;
//! - `phases`: the capacity run and the paced soak;
//! - `sample`: RSS, file descriptors and `/metrics`, every `SAMPLE_EVERY`;
//! - `report`: the checks' table and the phases' summaries.

mod mix;
mod phases;
mod report;
mod sample;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};

use mix::Driver;
use phases::{capacity, soak};
use report::{Report, growth, naming_volumes, print_tally};
use sample::{Sample, Sampler, memory_kib, mib, print_sample};

const ADMIN_TOKEN: &str = "load-soak-admin-token";
const INTERNAL_TOKEN: &str = "load-soak-internal-credential";
const ECS_KEY_ID: &str = "LTAIloadsoak";
const ECS_KEY_SECRET: &str = "load-soak-secret";
const NAMESPACE: &str = "soak";
/// Every volume's name starts so: a `/metrics` line holding it names a volume.
const VOLUME_PREFIX: &str = "soak-vol-";
/// Volumes alive at once, at most.
const LIVE_VOLUMES: usize = 200;
/// Machines made before the load, for GetMachineStatus to read.
const MACHINES: usize = 4;
/// Connections of the capacity run.
const CONNECTIONS: usize = 32;
/// Workers of the soak: twice the capacity run's connections, so a passing hiccup is absorbed and
/// only a stack that really falls behind leaves operations undispatched.
const POOL: usize = 64;
/// How often the pacer dispatches what is due.
const PACER_TICK: Duration = Duration::from_millis(2);
/// An operation dispatched this long after its due time is late.
const LATE: Duration = Duration::from_millis(100);
/// One call's limit: past it the call counts as an error with no answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Growth allowed after warm-up, of RSS and of `/metrics`.
const GROWTH: f64 = 0.20;
/// The share of the target rate the soak must reach.
const RATE_FLOOR: f64 = 0.95;

#[derive(Debug, Clone)]
struct Options {
    bin_dir: PathBuf,
    seconds: u64,
    capacity_seconds: u64,
    fraction: f64,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        bin_dir: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf(),
        seconds: 600,
        capacity_seconds: 10,
        fraction: 0.8,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--bin-dir" => o.bin_dir = PathBuf::from(value()?),
            "--seconds" => o.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--capacity-seconds" => {
                o.capacity_seconds = value()?
                    .parse()
                    .map_err(|e| format!("--capacity-seconds: {e}"))?
            }
            "--fraction" => {
                o.fraction = value()?.parse().map_err(|e| format!("--fraction: {e}"))?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.seconds == 0 || o.capacity_seconds == 0 {
        return Err("--seconds and --capacity-seconds must be at least 1".into());
    }
    if !(o.fraction > 0.0 && o.fraction <= 1.0) {
        return Err("--fraction must be in (0, 1]".into());
    }
    Ok(o)
}

/// Warm-up: a third of the run (200 s of the long form's 600), at least 60 s, at most half of it
/// (so a short run still has samples after it to compare). A third, because that is how long the
/// stack takes to reach its working size under this load: storage-ops' RSS rises while each of its
/// SQLite connections fills a page cache of up to 2 MiB as the table and its indexes reach their
/// steady size, and the gateway's while its connections settle, then both level off. Measured from
/// 60 s, that filling read as a leak (the figures of the soak that showed it: RELIABILITY.md,
/// “Load”).
fn warm_up(run: Duration) -> Duration {
    Duration::from_secs(60).max(run / 3).min(run / 2)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load-soak: {e}");
            eprintln!(
                "usage: load-soak [--bin-dir DIR] [--seconds N] [--capacity-seconds N] [--fraction F]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = berth_tests::processes::check_built("load-soak", &o.bin_dir) {
        eprintln!("{e}");
        return std::process::ExitCode::from(2);
    }
    let data = match tempfile::Builder::new().prefix("berth-load-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("load-soak: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: ECS_KEY_ID.into(),
        ecs_key_secret: ECS_KEY_SECRET.into(),
    };
    // The limiters on, as in production, but far above what one machine can send: a 429 here
    // would measure the settings, not the stack (the in-flight cap above the pool's calls).
    let settings = [
        (Service::Gateway, "BERTH_RATE_LIMIT_RPS", "1000000"),
        (Service::Gateway, "BERTH_TOKEN_MAX_IN_FLIGHT", "100000"),
    ];
    let mut stack =
        match ProcessStack::start(&o.bin_dir, data.path(), &credentials, &settings).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("load-soak: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    let outcome = run(&o, &stack).await;
    stack.stop().await;
    match outcome {
        Ok(report) => {
            if report.failed > 0 {
                let kept = data.keep();
                eprintln!("load-soak: kept {} (logs of every service)", kept.display());
            }
            // The last line, which tests/reliability/run.sh tallies.
            println!("load: {} passed, {} failed", report.passed, report.failed);
            if report.failed == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("load-soak: {e}");
            let kept = data.keep();
            eprintln!("load-soak: kept {} (logs of every service)", kept.display());
            std::process::ExitCode::from(2)
        }
    }
}

/// Everything between the stack's start and its stop.
async fn run(o: &Options, stack: &ProcessStack) -> Result<Report, String> {
    let pids = stack.pids();
    if let Some(s) = Service::ALL.into_iter().find(|s| !pids.contains_key(s)) {
        return Err(format!("{} is not running", s.binary()));
    }
    let sampler = Sampler {
        http: reqwest::Client::new(),
        pids,
        pages: stack
            .urls()
            .into_iter()
            .filter(|(s, _)| *s != Service::Emulator)
            .collect(),
    };
    let driver = Arc::new(Driver::new(stack.gateway.clone())?);
    driver.make_machines().await?;
    // One scrape first: a page's own route is recorded after it is rendered, so the first scrape
    // adds its series to the next page, which would otherwise count as growth after warm-up.
    sampler.sample(Duration::ZERO, 0, 0.0).await;

    let soak_run = Duration::from_secs(o.seconds);
    let warm = warm_up(soak_run);
    println!(
        "== load suite: {} s at {:.0} % of the measured gateway capacity, mixed operations",
        o.seconds,
        o.fraction * 100.0
    );
    let capacity_rate = capacity(&driver, Duration::from_secs(o.capacity_seconds)).await;
    let capacity_tally = driver.take_tally();
    let target = capacity_rate * o.fraction;
    println!(
        "capacity: {:.1} operations/s over {} s from {CONNECTIONS} connections; soak target {target:.1}/s from a pool of {POOL}, warm-up {} s",
        capacity_rate,
        o.capacity_seconds,
        warm.as_secs()
    );
    println!(
        "{:>5} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "t s",
        "ops/s",
        "ecs",
        "reg",
        "stor",
        "mdrv",
        "mctl",
        "gw",
        "reg",
        "stor",
        "mdrv",
        "mctl",
        "gw"
    );
    println!(
        "{:>5} {:>8} {:^41} {:^44}",
        "", "", "RSS MiB", "/metrics bytes"
    );

    // The sampler runs beside the pacer, every SAMPLE_EVERY from the soak's start.
    let sampler = Arc::new(sampler);
    let completed_before = driver.completed.load(Ordering::Relaxed);
    let sampling = {
        let (sampler, driver) = (sampler.clone(), driver.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut samples: Vec<Sample> = Vec::new();
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + SAMPLE_EVERY, SAMPLE_EVERY);
            loop {
                tick.tick().await;
                let at = started.elapsed();
                // The last one is the end sample, taken once the soak is over.
                if at + Duration::from_secs(1) >= soak_run {
                    return samples;
                }
                let completed = driver.completed.load(Ordering::Relaxed) - completed_before;
                let (last_completed, last_at) = samples
                    .last()
                    .map_or((0, Duration::ZERO), |s| (s.completed, s.at));
                let rate = (completed - last_completed) as f64 / (at - last_at).as_secs_f64();
                let (sample, _) = sampler.sample(at, completed, rate).await;
                print_sample(&sample);
                samples.push(sample);
            }
        })
    };
    let pace = soak(&driver, target, soak_run).await;
    let samples = sampling
        .await
        .map_err(|e| format!("the sampler panicked: {e}"))?;
    let soak_tally = driver.take_tally();
    let achieved = soak_tally.ops() as f64 / pace.elapsed.as_secs_f64();
    let (last_completed, last_at) = samples
        .last()
        .map_or((0, Duration::ZERO), |s| (s.completed, s.at));
    let completed = driver.completed.load(Ordering::Relaxed) - completed_before;
    let end_rate =
        (completed - last_completed) as f64 / (pace.elapsed - last_at).as_secs_f64().max(1e-3);
    let (end, texts) = sampler.sample(pace.elapsed, completed, end_rate).await;
    print_sample(&end);
    let hwm: BTreeMap<Service, Option<u64>> = Service::ALL
        .into_iter()
        .map(|s| {
            (
                s,
                sampler
                    .pids
                    .get(&s)
                    .and_then(|p| memory_kib(*p))
                    .map(|m| m.1),
            )
        })
        .collect();
    // The first sample after warm-up; a run too short for one compares the end with itself.
    let base = samples.iter().find(|s| s.at >= warm).unwrap_or(&end);

    println!();
    println!(
        "soak: target {target:.1}/s ({:.0} % of {capacity_rate:.1}/s), achieved {achieved:.1}/s over {:.1} s; dispatched {}, dropped (every worker busy) {}, late (> {} ms) {}",
        o.fraction * 100.0,
        pace.elapsed.as_secs_f64(),
        pace.dispatched,
        pace.dropped,
        LATE.as_millis(),
        pace.late
    );
    print_tally("capacity", &capacity_tally);
    print_tally("soak", &soak_tally);
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "service",
        "RSS warm",
        "RSS end",
        "RSS peak",
        "fds warm",
        "fds end",
        "/metrics",
        "/metrics",
        "series",
        "series"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "", "MiB", "MiB", "MiB", "", "", "warm B", "end B", "warm", "end"
    );
    for s in Service::ALL {
        let count = |n: Option<usize>| n.map_or("-".to_string(), |n| n.to_string());
        let page = |sample: &Sample| sample.metrics.get(&s).copied().flatten();
        println!(
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
            s.binary(),
            mib(base.rss[&s]),
            mib(end.rss[&s]),
            mib(hwm[&s]),
            count(base.fds[&s]),
            count(end.fds[&s]),
            count(page(base).map(|p| p.bytes)),
            count(page(&end).map(|p| p.bytes)),
            count(page(base).map(|p| p.series)),
            count(page(&end).map(|p| p.series)),
        );
    }
    println!(
        "(warm = the first sample after the {} s warm-up, at {} s; end = after the soak, at {} s)",
        warm.as_secs(),
        base.at.as_secs(),
        end.at.as_secs()
    );
    println!();

    println!("{:<40} {:>44} {:>7}  result", "check", "measured", "limit");
    let mut report = Report::default();
    for (phase, t) in [("capacity run", &capacity_tally), ("soak", &soak_tally)] {
        report.row(
            &format!("errors beyond the rate limit: {phase}"),
            &format!("{} of {}", t.errors, t.ops()),
            "0",
            t.errors == 0 && t.ops() > 0,
        );
    }
    // Berth's four services; the emulator's RSS is shown above but not held to the rule: as ECS
    // does, it refuses replayed requests, so it remembers every signature nonce for twice its
    // 15-minute clock-skew allowance, and over a soak shorter than that its memory grows with the
    // machine calls by design (bounded by time, not a leak of Berth's).
    for s in Service::ALL.into_iter().filter(|s| *s != Service::Emulator) {
        let (from, to) = (base.rss[&s], end.rss[&s]);
        let (measured, ok) = match (from, to) {
            (Some(from), Some(to)) => {
                let g = growth(from as f64, to as f64);
                (
                    format!(
                        "{} → {} MiB ({:+.1} %)",
                        mib(Some(from)),
                        mib(Some(to)),
                        g * 100.0
                    ),
                    g < GROWTH,
                )
            }
            _ => ("the process is gone".into(), false),
        };
        report.row(
            &format!("RSS growth: {}", s.binary()),
            &measured,
            "< 20 %",
            ok,
        );
    }
    for (s, _) in &sampler.pages {
        let (from, to) = (base.metrics[s], end.metrics[s]);
        let (measured, ok) = match (from, to) {
            (Some(from), Some(to)) => {
                let g = growth(from.bytes as f64, to.bytes as f64);
                (
                    format!(
                        "{} → {} B ({:+.1} %), {} → {} series",
                        from.bytes,
                        to.bytes,
                        g * 100.0,
                        from.series,
                        to.series
                    ),
                    g <= GROWTH,
                )
            }
            _ => ("no page".into(), false),
        };
        report.row(
            &format!("/metrics growth: {}", s.binary()),
            &measured,
            "≤ 20 %",
            ok,
        );
    }
    let uids = driver.made_uids.lock().expect("uids").clone();
    let mut naming = Vec::new();
    let mut unread = Vec::new();
    for (s, text) in &texts {
        match text {
            Ok(text) => naming.extend(
                naming_volumes(text, &uids)
                    .into_iter()
                    .map(|l| format!("{}: {l}", s.binary())),
            ),
            Err(e) => unread.push(format!("{}: {e}", s.binary())),
        }
    }
    report.row(
        "no /metrics line names a volume made",
        &format!(
            "{} lines, {} volumes made, {} pages unread",
            naming.len(),
            uids.len(),
            unread.len()
        ),
        "0",
        naming.is_empty() && unread.is_empty() && !uids.is_empty(),
    );
    for l in naming.iter().chain(&unread).take(10) {
        println!("      {l}");
    }
    report.row(
        "achieved rate vs target",
        &format!(
            "{achieved:.1} of {target:.1}/s ({:.1} %)",
            achieved / target * 100.0
        ),
        "≥ 95 %",
        achieved >= target * RATE_FLOOR,
    );
    Ok(report)
}
