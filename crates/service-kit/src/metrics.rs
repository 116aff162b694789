//! Prometheus metrics: one recorder per process, HTTP metrics labelled by route template.
//!
//! The recorder is global (the `metrics` crate's design), so when `berth up` runs every service in one
//! process they share it; the `service` label keeps their series apart.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use axum::http::Method;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets (seconds) for every `*_duration_seconds` histogram: 100 µs to 30 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use. If another recorder was installed first (a test
/// harness, say), a private one still renders this crate's view, so `/metrics` never fails.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = || {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("duration_seconds".into()), LATENCY_BUCKETS)
                .expect("the bucket list is not empty")
        };
        builder()
            .install_recorder()
            .unwrap_or_else(|_| builder().build_recorder().handle())
    })
}

/// Renders every metric in the Prometheus text format.
pub fn render() -> String {
    handle().render()
}

/// The handles of one label set of the HTTP metrics.
type HttpHandles = (metrics::Counter, metrics::Histogram);

/// Handles by route, then by (service, method, status). Registering a label set costs a lookup with
/// four freshly allocated labels; a request only needs this map (the outer lookup borrows the route).
/// Routes are templates, so both maps stay small. Each thread keeps its own: a shared map's lock
/// would be written by every thread on every request, bouncing its cache line between cores.
type HandleCache = HashMap<String, HashMap<(&'static str, Method, u16), HttpHandles>>;

thread_local! {
    static HTTP_HANDLES: RefCell<HandleCache> = RefCell::default();
}

fn http_handles(service: &'static str, method: &Method, route: &str, status: u16) -> HttpHandles {
    let key = (service, method.clone(), status);
    if let Some(handles) = HTTP_HANDLES.with_borrow(|cache| {
        cache
            .get(route)
            .and_then(|by_key| by_key.get(&key))
            .cloned()
    }) {
        return handles;
    }
    let labels = [
        ("service", service.to_string()),
        ("method", method.to_string()),
        ("route", route.to_string()),
        ("status", status.to_string()),
    ];
    let handles = (
        metrics::counter!("http_requests_total", &labels),
        metrics::histogram!("http_request_duration_seconds", &labels),
    );
    HTTP_HANDLES.with_borrow_mut(|cache| {
        cache
            .entry(route.to_string())
            .or_default()
            .insert(key, handles.clone())
    });
    handles
}

/// Records `http_requests_total` and `http_request_duration_seconds` by service, method, route template
/// and status. The raw path is never a label: it would make one series per volume name.
pub(crate) fn record(
    service: &'static str,
    method: &Method,
    route: &str,
    response: &Response,
    elapsed: Duration,
) {
    let _ = handle();
    let (requests, latency) = http_handles(service, method, route, response.status().as_u16());
    requests.increment(1);
    latency.record(elapsed.as_secs_f64());
}
