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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};

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

#[derive(Debug, Clone)]
struct Options {
    watchers: usize,
    events: usize,
    pace: Duration,
    bin_dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        watchers: 1000,
        events: 200,
        pace: Duration::from_millis(20),
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
            "--watchers" => {
                o.watchers = value()?.parse().map_err(|e| format!("--watchers: {e}"))?;
                if o.watchers == 0 {
                    return Err("--watchers must be at least 1".into());
                }
            }
            "--events" => {
                o.events = value()?.parse().map_err(|e| format!("--events: {e}"))?;
                if o.events == 0 {
                    return Err("--events must be at least 1".into());
                }
            }
            "--pace-ms" => {
                o.pace =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--pace-ms: {e}"))?)
            }
            "--bin-dir" => o.bin_dir = PathBuf::from(value()?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// The soft and hard limits on open files, from `/proc/self/limits` (`None` for unlimited).
fn file_limits() -> Result<(Option<u64>, Option<u64>), String> {
    let limits = std::fs::read_to_string("/proc/self/limits").map_err(|e| e.to_string())?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or("/proc/self/limits has no \"Max open files\"")?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    let mut next = || -> Result<Option<u64>, String> {
        match fields.next() {
            Some("unlimited") => Ok(None),
            Some(n) => n.parse().map(Some).map_err(|e| format!("{n:?}: {e}")),
            None => Err(format!("cannot read {line:?}")),
        }
    };
    Ok((next()?, next()?))
}

/// Makes sure this process (and so the services it starts) may open `needed` files: raises the
/// soft limit to the hard one with `prlimit` when it is lower than `needed`.
fn enough_files(needed: u64) -> Result<String, String> {
    let (soft, hard) = file_limits()?;
    let show = |l: Option<u64>| l.map_or("unlimited".to_string(), |n| n.to_string());
    if soft.is_none_or(|s| s >= needed) {
        return Ok(format!(
            "open files: soft limit {} (needed {needed})",
            show(soft)
        ));
    }
    if hard.is_some_and(|h| h < needed) {
        return Err(format!(
            "open files: the hard limit is {} and this run needs {needed}; raise it (as root: ulimit -Hn {needed}; ulimit -n {needed}) or ask for fewer --watchers",
            show(hard)
        ));
    }
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={}:{}", show(hard), show(hard)))
        .status()
        .map_err(|e| format!("prlimit: {e}; set ulimit -n {needed} before running"))?;
    let (raised, _) = file_limits()?;
    if !status.success() || raised.is_some_and(|s| s < needed) {
        return Err(format!(
            "open files: soft limit {} and prlimit could not raise it ({status}); set ulimit -n {needed} before running",
            show(soft)
        ));
    }
    Ok(format!(
        "open files: soft limit raised from {} to {} (needed {needed})",
        show(soft),
        show(raised)
    ))
}

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// User and system CPU time a process has used, in seconds (clock ticks of 1/100 s, Linux's
/// `USER_HZ`).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: state is the first, utime the 12th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// What one watcher saw.
#[derive(Default)]
struct Watched {
    /// When the event of write `n` was read, by `n`.
    seen: Vec<Option<Instant>>,
    bookmarks: usize,
    /// Why the stream ended before every event was read, if it did.
    ended: Option<String>,
}

/// One watch: reports to `opened` when its answer's head is in, then reads events until it has
/// seen every write's, its stream ends, or `stop` says so.
async fn watcher(
    http: reqwest::Client,
    url: String,
    events: usize,
    opening: Arc<Semaphore>,
    opened: mpsc::UnboundedSender<Result<(), String>>,
    mut stop: watch::Receiver<bool>,
) -> Watched {
    let mut w = Watched {
        seen: vec![None; events],
        ..Watched::default()
    };
    let mut response = {
        let _permit = opening.acquire().await;
        match http.get(&url).bearer_auth(ADMIN_TOKEN).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let _ = opened.send(Err(format!("{status}: {body}")));
                w.ended = Some(format!("refused: {status}"));
                return w;
            }
            Err(e) => {
                let _ = opened.send(Err(e.to_string()));
                w.ended = Some(format!("not opened: {e}"));
                return w;
            }
        }
    };
    let _ = opened.send(Ok(()));
    let mut buffer: Vec<u8> = Vec::new();
    let mut read = 0;
    while read < events {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            _ = stop.changed() => {
                w.ended = Some("stopped after the grace period".into());
                break;
            }
        };
        let bytes = match chunk {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                w.ended = Some("the stream ended".into());
                break;
            }
            Err(e) => {
                w.ended = Some(format!("the stream broke: {e}"));
                break;
            }
        };
        let now = Instant::now();
        buffer.extend_from_slice(&bytes);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                w.ended = Some(format!(
                    "not JSON: {}",
                    String::from_utf8_lossy(&line).trim_end()
                ));
                return w;
            };
            match event["type"].as_str() {
                Some("MODIFIED") => {
                    let seq = event["object"]["metadata"]["labels"]["seq"]
                        .as_str()
                        .and_then(|s| s.parse::<usize>().ok());
                    if let Some(slot) = seq.and_then(|n| w.seen.get_mut(n))
                        && slot.is_none()
                    {
                        *slot = Some(now);
                        read += 1;
                    }
                }
                Some("BOOKMARK") => w.bookmarks += 1,
                Some("ERROR") => {
                    w.ended = Some(format!("ERROR event: {}", event["object"]));
                    return w;
                }
                _ => {}
            }
        }
    }
    w
}

/// The `q`-quantile (nearest rank) of sorted figures.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50, p90, p99 and max of `figures` (sorted here), in a table row.
fn row(label: &str, figures: &mut [f64]) -> String {
    figures.sort_by(f64::total_cmp);
    format!(
        "{label:<34} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        quantile(figures, 0.50),
        quantile(figures, 0.90),
        quantile(figures, 0.99),
        figures.last().copied().unwrap_or(f64::NAN),
    )
}

/// A write through the gateway, answered 2xx, or why not.
async fn send(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let answer = request
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    let body = answer.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("{status}, not JSON ({e}): {body}"))
}

async fn run(o: &Options, stack: &ProcessStack) -> Result<bool, String> {
    let pids = stack.pids();
    let gateway_pid = pids[&Service::Gateway];
    let controller_pid = pids[&Service::MachineController];
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())?;
    let collection = format!("{}/v1/namespaces/{NAMESPACE}/secrets", stack.gateway);
    let item = format!("{collection}/{SECRET}");

    // 1. The secret, and the version to watch from.
    send(http.post(&collection).json(&json!({
        "apiVersion": "berth.io/v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "labels": {"seq": "start"}},
        "stringData": {"token": "watch-bench"},
    })))
    .await
    .map_err(|e| format!("making the secret: {e}"))?;
    let list = send(http.get(&collection))
        .await
        .map_err(|e| format!("listing: {e}"))?;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .ok_or(format!("the list has no resourceVersion: {list}"))?
        .to_string();

    // 2. Memory before.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = (rss_kib(gateway_pid), rss_kib(controller_pid));

    // 3. The watchers.
    let watch_url = format!("{collection}?watch=true&resourceVersion={version}&timeoutSeconds=600");
    let watch_http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let opening = Arc::new(Semaphore::new(OPENING));
    let (opened_tx, mut opened_rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let started_opening = Instant::now();
    let handles: Vec<_> = (0..o.watchers)
        .map(|_| {
            tokio::spawn(watcher(
                watch_http.clone(),
                watch_url.clone(),
                o.events,
                opening.clone(),
                opened_tx.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();
    drop(opened_tx);
    let mut open = 0;
    let mut refused = Vec::new();
    let deadline = tokio::time::Instant::now() + OPEN_LIMIT;
    while open + refused.len() < o.watchers {
        match tokio::time::timeout_at(deadline, opened_rx.recv()).await {
            Ok(Some(Ok(()))) => open += 1,
            Ok(Some(Err(e))) => refused.push(e),
            Ok(None) | Err(_) => break,
        }
    }
    let open_time = started_opening.elapsed();
    println!(
        "watchers open: {open} of {} in {:.2} s ({} refused)",
        o.watchers,
        open_time.as_secs_f64(),
        refused.len()
    );
    for e in refused.iter().take(5) {
        println!("  refused: {e}");
    }

    // 4. Memory with every watch open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_open = (rss_kib(gateway_pid), rss_kib(controller_pid));

    // 5. The writes.
    let cpu = |pid: u32| cpu_seconds(&pid.to_string());
    let cpu_before = (cpu(gateway_pid), cpu(controller_pid), cpu_seconds("self"));
    let writes_started = Instant::now();
    let mut written: Vec<(Instant, Instant)> = Vec::with_capacity(o.events);
    let mut ticks = tokio::time::interval(o.pace);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0..o.events {
        ticks.tick().await;
        let sent = Instant::now();
        send(
            http.patch(&item)
                .header("content-type", "application/merge-patch+json")
                .body(json!({"metadata": {"labels": {"seq": n.to_string()}}}).to_string()),
        )
        .await
        .map_err(|e| format!("write {n}: {e}"))?;
        written.push((sent, Instant::now()));
    }
    let writes_took = writes_started.elapsed();

    // 6. Every watcher's events (or the grace period's end).
    let mut all = std::pin::pin!(futures::future::join_all(handles));
    let joined = tokio::select! {
        joined = &mut all => joined,
        () = tokio::time::sleep(GRACE) => {
            let _ = stop_tx.send(true);
            all.await
        }
    };
    let delivered_in = writes_started.elapsed();
    let cpu_after = (cpu(gateway_pid), cpu(controller_pid), cpu_seconds("self"));
    let after_events = (rss_kib(gateway_pid), rss_kib(controller_pid));
    drop(stop_tx);

    let mut from_answer = Vec::with_capacity(o.watchers * o.events);
    let mut from_sent = Vec::with_capacity(o.watchers * o.events);
    let mut before_answer = 0usize;
    let mut missed = 0usize;
    let mut bookmarks = 0usize;
    let mut endings: std::collections::BTreeMap<String, usize> = Default::default();
    // Per event: the first and last watcher's read, for the spread of one fan-out.
    let mut first_last: Vec<Option<(Instant, Instant)>> = vec![None; o.events];
    for w in joined {
        let w = w.map_err(|e| format!("a watcher panicked: {e}"))?;
        bookmarks += w.bookmarks;
        if let Some(why) = &w.ended {
            *endings.entry(why.clone()).or_default() += 1;
        }
        for (n, seen) in w.seen.iter().enumerate() {
            let Some(at) = *seen else {
                missed += 1;
                continue;
            };
            let (sent, answered) = written[n];
            if at < answered {
                before_answer += 1;
            }
            from_answer.push(millis(at.saturating_duration_since(answered)));
            from_sent.push(millis(at.saturating_duration_since(sent)));
            let span = first_last[n].get_or_insert((at, at));
            span.0 = span.0.min(at);
            span.1 = span.1.max(at);
        }
    }
    let mut write_latency: Vec<f64> = written.iter().map(|(s, a)| millis(*a - *s)).collect();
    let mut spreads: Vec<f64> = first_last
        .iter()
        .flatten()
        .map(|(first, last)| millis(*last - *first))
        .collect();
    let deliveries = from_answer.len();

    println!(
        "events: {} writes (merge PATCH of label seq, one every {} ms) in {:.2} s; every delivery read {:.2} s after the first write",
        o.events,
        o.pace.as_millis(),
        writes_took.as_secs_f64(),
        delivered_in.as_secs_f64()
    );
    println!(
        "deliveries: {deliveries} of {} (watcher, event) pairs; missed {missed}; read before the write's answer: {before_answer}; bookmarks {bookmarks}",
        o.watchers * o.events
    );
    for (why, n) in &endings {
        println!("  {n} watcher(s) ended early: {why}");
    }
    println!();
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9}",
        "ms", "p50", "p90", "p99", "max"
    );
    println!(
        "{}",
        row("delay from the write's 2xx answer", &mut from_answer)
    );
    println!("{}", row("delay from the write's send", &mut from_sent));
    println!("{}", row("the write (send to 2xx)", &mut write_latency));
    println!(
        "{}",
        row("fan-out spread (last - first read)", &mut spreads)
    );
    println!();
    let show = |k: Option<u64>| k.map_or("-".to_string(), |k| k.to_string());
    let per_watcher = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if open > 0 => format!("{:.1}", (b as f64 - a as f64) / open as f64),
        _ => "-".into(),
    };
    println!(
        "{:<20} {:>12} {:>12} {:>14} {:>18}",
        "RSS (KiB)", "before", "all open", "after events", "KiB per watcher"
    );
    println!(
        "{:<20} {:>12} {:>12} {:>14} {:>18}",
        "gateway",
        show(before.0),
        show(after_open.0),
        show(after_events.0),
        per_watcher(before.0, after_open.0)
    );
    println!(
        "{:<20} {:>12} {:>12} {:>14} {:>18}",
        "machine-controller",
        show(before.1),
        show(after_open.1),
        show(after_events.1),
        per_watcher(before.1, after_open.1)
    );
    let used = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2} s", b - a),
        _ => "-".into(),
    };
    println!();
    println!(
        "CPU from the first write to the last delivery ({:.2} s on {} cores): gateway {}, machine-controller {}, this benchmark (the watchers) {}",
        delivered_in.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        used(cpu_before.0, cpu_after.0),
        used(cpu_before.1, cpu_after.1),
        used(cpu_before.2, cpu_after.2),
    );
    // `row` sorted them.
    let verdict = |p99: f64| if p99 <= 100.0 { "met" } else { "NOT met" };
    let (p99, p99_sent) = (quantile(&from_answer, 0.99), quantile(&from_sent, 0.99));
    println!();
    println!(
        "goal p99 <= 100 ms, from the write's 2xx answer: {} (p99 {p99:.2} ms); from its send, the stricter: {} (p99 {p99_sent:.2} ms)",
        verdict(p99),
        verdict(p99_sent)
    );
    Ok(open == o.watchers && missed == 0)
}

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
