//! Prometheus metrics: one recorder per process, HTTP metrics labelled by route template.
//!
//! The recorder is global (the `metrics` crate's design), so when `berth up` runs every service in one
//! process they share it; the `service` label keeps their series apart.

use std::sync::OnceLock;
use std::time::Duration;

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

/// The route template a handler reports for its answer when axum's matched path cannot say it (the
/// gateway's one fallback serves every proxied route). Put it in the response's extensions.
#[derive(Debug, Clone, Copy)]
pub struct RouteLabel(pub &'static str);

/// Records `http_requests_total` and `http_request_duration_seconds` by service, method, route template
/// and status. The raw path is never a label: it would make one series per volume name.
pub(crate) fn record(
    service: &'static str,
    method: &str,
    route: &str,
    response: &Response,
    elapsed: Duration,
) {
    let _ = handle();
    let route = match response.extensions().get::<RouteLabel>() {
        Some(RouteLabel(template)) => template,
        None => route,
    };
    let labels = [
        ("service", service.to_string()),
        ("method", method.to_string()),
        ("route", route.to_string()),
        ("status", response.status().as_u16().to_string()),
    ];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels).record(elapsed.as_secs_f64());
}
