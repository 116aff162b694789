//! One way to declare and record a metric in Berth: a [`Family`] declared as a `static`, its series
//! found once by label values and kept, then recorded into without a lock; and one Prometheus text
//! page rendered from every family the process declared ([`render`], [`render_for`]).
//!
//! Everything that measures (the services' HTTP metrics in service-kit, the gateway's upstream
//! metrics, the machine driver's calls, the ECS client's attempts) declares its metrics here, so a
//! crate that measures needs only this one (std only: no web server, no exporter), and the page is
//! one store rendered one way.
//!
//! Series are sharded: a series keeps one set of cells per shard, each on its own cache line; a
//! thread writes the shard of its own and rendering adds the shards up. A shared atomic written on
//! every request moves its cache line between cores each time, which showed in the gateway's profile
//! under `bench/gateway.sh`; so did the per-sample bookkeeping of the `metrics` crate's Prometheus
//! recorder this replaced (whose histograms also kept every sample until summarised).
//!
//! The families are global, so when `berth up` runs every service in one process they share them;
//! a `service` label keeps their series apart, and [`render_for`] renders one service's page.
//!
//! # Layout
//! - [`Counter`], [`DurationHistogram`] (over [`LATENCY_BUCKETS`]), [`Gauge`]: the kinds of series.
//! - [`Family`]: a named metric with label names, holding a series per label set; [`Series`] is
//!   what it can hold.
//! - [`render`], [`render_for`]: the Prometheus text page.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Latency buckets (seconds) for every `*_duration_seconds` histogram: 100 µs to 30 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Renders every family in the Prometheus text format.
pub fn render() -> String {
    render_page(None)
}

/// The page of one service: its own series of the families labelled by `service` (the HTTP
/// metrics), and the families whose names start with one of `prefixes` (those the service declares
/// as its own, such as `berth_gateway_`). When `berth up` runs every service in one process, each
/// port serves its own service's page, not the whole process's.
pub fn render_for(service: &str, prefixes: &[&str]) -> String {
    render_page(Some((service, prefixes)))
}

fn render_page(only: Option<(&str, &[&str])>) -> String {
    let mut out = String::new();
    let mut families = FAMILIES.lock().expect("families lock").clone();
    families.sort_by_key(|family| family.name());
    for family in families {
        match only {
            None => family.render(&mut out, None),
            Some((service, prefixes)) => {
                if family.has_label("service") {
                    family.render(&mut out, Some(("service", service)));
                } else if prefixes.iter().any(|p| family.name().starts_with(p)) {
                    family.render(&mut out, None);
                }
            }
        }
    }
    out
}

/// Cells padded to a cache line of their own (128 bytes: adjacent-line prefetching pairs lines on
/// x86), so two shards never share one.
#[repr(align(128))]
struct Padded<T>(T);

/// Shards per series: a power of two, about one per core.
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .next_power_of_two()
            .min(64)
    })
}

/// This thread's shard, in any series. Threads are numbered as they first record, so the few
/// threads that carry a process's requests (the engine's workers, the runtime's) get shards of
/// their own; more threads than shards share them, which costs contention, never correctness.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index) & (shard_count() - 1)
}

fn shards<T>(make: impl Fn() -> T) -> Box<[Padded<T>]> {
    (0..shard_count()).map(|_| Padded(make())).collect()
}

/// A counter series, sharded.
pub struct Counter {
    shards: Box<[Padded<AtomicU64>]>,
}

impl Counter {
    fn new() -> Self {
        Counter {
            shards: shards(|| AtomicU64::new(0)),
        }
    }

    /// Adds `n`.
    pub fn increment(&self, n: u64) {
        self.shards[shard_index()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The total over all shards.
    pub fn value(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }
}

/// A gauge series: a value set from time to time (a count taken by a periodic pass), not on every
/// request, so one cell rather than shards.
pub struct Gauge {
    value: AtomicI64,
}

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.value.store(value, Ordering::Relaxed);
    }

    /// The value.
    pub fn value(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A sample's label set as the exposition format writes it: `{a="b"}`, or nothing when there are
/// no labels.
struct Braced<'a>(&'a str);

impl std::fmt::Display for Braced<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "{{{}}}", self.0)
        }
    }
}

impl Series for Gauge {
    fn empty() -> Self {
        Gauge {
            value: AtomicI64::new(0),
        }
    }
    const TYPE: &'static str = "gauge";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{} {}", Braced(labels), self.value());
    }
    fn count(&self) -> u64 {
        u64::try_from(self.value()).unwrap_or(0)
    }
}

/// One shard of a [`DurationHistogram`]: a count per bucket of [`LATENCY_BUCKETS`] (not cumulative;
/// the last counts what is above them all) and the sum in nanoseconds.
struct HistogramCells {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// A latency histogram series over [`LATENCY_BUCKETS`], sharded.
pub struct DurationHistogram {
    shards: Box<[Padded<HistogramCells>]>,
}

impl DurationHistogram {
    fn new() -> Self {
        DurationHistogram {
            shards: shards(|| HistogramCells {
                buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                sum_nanos: AtomicU64::new(0),
            }),
        }
    }

    /// Records one duration.
    pub fn record(&self, elapsed: Duration) {
        let cells = &self.shards[shard_index()].0;
        let seconds = elapsed.as_secs_f64();
        // Prometheus buckets are "less than or equal": the first bound not below the value.
        let bucket = LATENCY_BUCKETS.partition_point(|bound| *bound < seconds);
        cells.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        cells.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Counts per bucket (not cumulative) and the sum in seconds, over all shards.
    fn totals(&self) -> ([u64; LATENCY_BUCKETS.len() + 1], f64) {
        let mut buckets = [0u64; LATENCY_BUCKETS.len() + 1];
        let mut nanos = 0u64;
        for shard in &self.shards {
            for (total, cell) in buckets.iter_mut().zip(&shard.0.buckets) {
                *total += cell.load(Ordering::Relaxed);
            }
            nanos = nanos.wrapping_add(shard.0.sum_nanos.load(Ordering::Relaxed));
        }
        (buckets, nanos as f64 / 1e9)
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.totals().0.iter().sum()
    }
}

/// What a [`Family`] can hold.
pub trait Series: Send + Sync + 'static {
    /// A new, empty series.
    fn empty() -> Self;
    /// Its Prometheus type.
    const TYPE: &'static str;
    /// Writes its sample lines; `labels` is the rendered label set (`a="1",b="2"`, maybe empty).
    fn write(&self, name: &str, labels: &str, out: &mut String);
    /// How many events it counted.
    fn count(&self) -> u64;
}

impl Series for Counter {
    fn empty() -> Self {
        Counter::new()
    }
    const TYPE: &'static str = "counter";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{} {}", Braced(labels), self.value());
    }
    fn count(&self) -> u64 {
        self.value()
    }
}

impl Series for DurationHistogram {
    fn empty() -> Self {
        DurationHistogram::new()
    }
    const TYPE: &'static str = "histogram";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let (buckets, sum) = self.totals();
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&buckets) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += buckets[LATENCY_BUCKETS.len()];
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(out, "{name}_sum{} {sum}", Braced(labels));
        let _ = writeln!(out, "{name}_count{} {cumulative}", Braced(labels));
    }
    fn count(&self) -> u64 {
        DurationHistogram::count(self)
    }
}

/// A family renders itself into the page.
trait Rendered: Send + Sync {
    fn name(&self) -> &'static str;
    fn has_label(&self, label: &str) -> bool;
    /// Renders its series, or with `only = (label, value)` those whose label has that value.
    fn render(&self, out: &mut String, only: Option<(&str, &str)>);
}

static FAMILIES: Mutex<Vec<&'static dyn Rendered>> = Mutex::new(Vec::new());

/// A metric and its series, one per label set; declared as a `static`.
///
/// [`Family::series`] finds or makes a series, under a lock: callers keep the series they use (a
/// field, a per-thread cache) and record through it without one.
pub struct Family<S: Series> {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    /// For a histogram: a counter rendered from its counts, under this name and help.
    count_as: Option<(&'static str, &'static str)>,
    series: Mutex<Vec<(Vec<String>, Arc<S>)>>,
    registered: OnceLock<()>,
}

impl<S: Series> Family<S> {
    /// A family named `name` with these label names.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Self {
        Family {
            name,
            help,
            label_names,
            count_as: None,
            series: Mutex::new(Vec::new()),
            registered: OnceLock::new(),
        }
    }

    /// The series for `values` (one per label name, in order), made on first use.
    pub fn series(&'static self, values: &[&str]) -> Arc<S> {
        assert_eq!(
            values.len(),
            self.label_names.len(),
            "{}: one value per label",
            self.name
        );
        self.registered.get_or_init(|| {
            FAMILIES.lock().expect("families lock").push(self);
        });
        let mut series = self.series.lock().expect("family lock");
        if let Some((_, found)) = series.iter().find(|(v, _)| v.iter().eq(values.iter())) {
            return found.clone();
        }
        let made = Arc::new(S::empty());
        series.push((values.iter().map(|v| v.to_string()).collect(), made.clone()));
        made
    }

    fn labels(&self, values: &[String]) -> String {
        let mut text = String::new();
        for (i, (name, value)) in self.label_names.iter().zip(values).enumerate() {
            if i > 0 {
                text.push(',');
            }
            let _ = write!(text, "{name}=\"");
            // The text format's escapes for label values.
            for c in value.chars() {
                match c {
                    '\\' => text.push_str("\\\\"),
                    '"' => text.push_str("\\\""),
                    '\n' => text.push_str("\\n"),
                    c => text.push(c),
                }
            }
            text.push('"');
        }
        text
    }
}

impl Family<DurationHistogram> {
    /// A latency family that also renders its counts as the counter `name` (as
    /// `http_requests_total` is the count of `http_request_duration_seconds`): one record per
    /// request keeps both.
    pub const fn with_count(mut self, name: &'static str, help: &'static str) -> Self {
        self.count_as = Some((name, help));
        self
    }
}

impl<S: Series> Rendered for Family<S> {
    fn name(&self) -> &'static str {
        self.count_as.map_or(self.name, |(name, _)| name)
    }

    fn has_label(&self, label: &str) -> bool {
        self.label_names.contains(&label)
    }

    fn render(&self, out: &mut String, only: Option<(&str, &str)>) {
        let position =
            only.and_then(|(label, _)| self.label_names.iter().position(|n| *n == label));
        let mut series: Vec<(String, Arc<S>)> = self
            .series
            .lock()
            .expect("family lock")
            .iter()
            .filter(|(values, _)| match (position, only) {
                (Some(at), Some((_, wanted))) => values[at] == wanted,
                _ => true,
            })
            .map(|(values, s)| (self.labels(values), s.clone()))
            .collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((count_name, count_help)) = self.count_as {
            let _ = writeln!(out, "# HELP {count_name} {count_help}");
            let _ = writeln!(out, "# TYPE {count_name} counter");
            for (labels, s) in &series {
                let _ = writeln!(out, "{count_name}{} {}", Braced(labels), s.count());
            }
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, S::TYPE);
        for (labels, s) in &series {
            s.write(self.name, labels, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST_LATENCY: Family<DurationHistogram> =
        Family::new("test_latency_seconds", "Test.", &["who"]).with_count("test_total", "Test.");
    static TEST_COUNTER: Family<Counter> = Family::new("test_events_total", "Test.", &["kind"]);
    static TEST_GAUGE: Family<Gauge> = Family::new("test_things", "Test.", &["phase"]);

    #[test]
    fn a_gauge_renders_its_last_value() {
        let ready = TEST_GAUGE.series(&["Ready"]);
        ready.set(5);
        ready.set(3);
        let text = render();
        assert!(text.contains("# TYPE test_things gauge\n"), "{text}");
        assert!(
            text.lines().any(|l| l == "test_things{phase=\"Ready\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn shards_add_up_across_threads_and_render_as_prometheus_text() {
        let fast = TEST_LATENCY.series(&["a \"quoted\"\nname"]);
        let events = TEST_COUNTER.series(&["x"]);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        fast.record(Duration::from_micros(300));
                        events.increment(1);
                    }
                });
            }
        });
        TEST_LATENCY
            .series(&["a \"quoted\"\nname"])
            .record(Duration::from_secs(60));
        assert_eq!(fast.count(), 4001);
        assert_eq!(events.value(), 4000);
        let text = render();
        let labels = r#"who="a \"quoted\"\nname""#;
        for want in [
            "# TYPE test_latency_seconds histogram".to_string(),
            "# TYPE test_total counter".to_string(),
            format!("test_total{{{labels}}} 4001"),
            format!("test_latency_seconds_bucket{{{labels},le=\"0.00025\"}} 0"),
            format!("test_latency_seconds_bucket{{{labels},le=\"0.0005\"}} 4000"),
            format!("test_latency_seconds_bucket{{{labels},le=\"30\"}} 4000"),
            format!("test_latency_seconds_bucket{{{labels},le=\"+Inf\"}} 4001"),
            format!("test_latency_seconds_sum{{{labels}}} 61.2"),
            format!("test_latency_seconds_count{{{labels}}} 4001"),
            "test_events_total{kind=\"x\"} 4000".to_string(),
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "{want} missing from\n{text}"
            );
        }
    }

    #[test]
    fn a_value_on_a_bound_falls_in_that_bucket() {
        let h = DurationHistogram::new();
        h.record(Duration::from_millis(1));
        let (buckets, _) = h.totals();
        let at = LATENCY_BUCKETS.iter().position(|b| *b == 0.001).unwrap();
        assert_eq!(buckets[at], 1);
    }
}
