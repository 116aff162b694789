//! The benchmark's sequence against a started stack: the secret, memory before, the watchers
//! opened, memory with them open, the writes, every watcher's events; then the figures and the
//! verdict.
//!
//! Apart from `main` (which starts and stops the stack and keeps its logs on failure) because this
//! is the measurement itself, steps 1 to 6 of the crate's doc in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_tests::processes::{ProcessStack, Service};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::figures::{cpu_seconds, millis, quantile, row, rss_kib};
use crate::options::Options;
use crate::watcher::watcher;
use crate::{ADMIN_TOKEN, GRACE, NAMESPACE, OPEN_LIMIT, OPENING, SECRET};

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

pub(crate) async fn run(o: &Options, stack: &ProcessStack) -> Result<bool, String> {
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
