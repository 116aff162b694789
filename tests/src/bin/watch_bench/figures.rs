//! Readings of a process from `/proc` (memory, CPU time) and the quantiles of a list of delays, as
//! the report prints them.
//!
//! Apart because they are arithmetic and file parsing with no part in the benchmark's sequence:
//! the run reads a figure, these say how it is read and shown.

use std::time::Duration;

/// `VmRSS` of a process, in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// User and system CPU time a process has used, in seconds (clock ticks of 1/100 s, Linux's
/// `USER_HZ`).
pub(crate) fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: state is the first, utime the 12th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// The `q`-quantile (nearest rank) of sorted figures.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50, p90, p99 and max of `figures` (sorted here), in a table row.
pub(crate) fn row(label: &str, figures: &mut [f64]) -> String {
    figures.sort_by(f64::total_cmp);
    format!(
        "{label:<34} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        quantile(figures, 0.50),
        quantile(figures, 0.90),
        quantile(figures, 0.99),
        figures.last().copied().unwrap_or(f64::NAN),
    )
}
