//! The verdict: the checks' table ([`Report`]), the growth and volume-naming rules it applies, and
//! the summary of each phase's tally (ops, errors, p50/p99 latency, statuses).
//!
//! Apart because it is what a reader of the suite's output needs to trust: how a row is decided and
//! printed, free of the machinery that produced the numbers.

use std::collections::HashSet;

use crate::VOLUME_PREFIX;
use crate::mix::Tally;

/// Lines of `text` naming a volume this run made: its name (all share the prefix) or its uid as a
/// label value.
pub(crate) fn naming_volumes(text: &str, uids: &HashSet<String>) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.contains(VOLUME_PREFIX)
                || l.split('"')
                    .skip(1)
                    .step_by(2)
                    .any(|value| uids.contains(value))
        })
        .map(str::to_string)
        .collect()
}

/// The checks' table.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) passed: usize,
    pub(crate) failed: usize,
}

impl Report {
    pub(crate) fn row(&mut self, check: &str, measured: &str, limit: &str, ok: bool) {
        println!(
            "{check:<40} {measured:>44} {limit:>7}  {}",
            if ok { "passed" } else { "FAILED" }
        );
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
    }
}

pub(crate) fn growth(from: f64, to: f64) -> f64 {
    if from > 0.0 { to / from - 1.0 } else { 0.0 }
}

pub(crate) fn print_tally(phase: &str, t: &Tally) {
    println!(
        "{phase}: {:<32} {:>9} {:>7} {:>9} {:>9}",
        "operation", "ops", "errors", "p50 ms", "p99 ms"
    );
    for (kind, k) in &t.by_kind {
        let mut l = k.latencies_us.clone();
        l.sort_unstable();
        println!(
            "{phase}: {:<32} {:>9} {:>7} {:>9.2} {:>9.2}",
            kind.label(),
            k.ops,
            k.errors,
            percentile_ms(&l, 50),
            percentile_ms(&l, 99)
        );
    }
    let all = t.latencies();
    println!(
        "{phase}: {:<32} {:>9} {:>7} {:>9.2} {:>9.2}",
        "all",
        t.ops(),
        t.errors,
        percentile_ms(&all, 50),
        percentile_ms(&all, 99)
    );
    let statuses: Vec<String> = t
        .statuses
        .iter()
        .map(|(s, n)| {
            if *s == 0 {
                format!("no answer {n}")
            } else {
                format!("{s} {n}")
            }
        })
        .collect();
    println!(
        "{phase}: statuses {} (429 with Retry-After: {})",
        statuses.join(", "),
        t.limited
    );
    for e in t.examples.iter().take(10) {
        println!("      {e}");
    }
}

/// The `p`th percentile of sorted microseconds, in milliseconds.
fn percentile_ms(sorted: &[u32], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    f64::from(sorted[i]) / 1000.0
}
