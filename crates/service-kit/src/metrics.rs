//! The HTTP metrics every service records, and its `/metrics` page.
//!
//! Metrics are declared and recorded one way in Berth, through the `metric-families` crate
//! (re-exported here): a `static` [`Family`], its series found once and kept. This module declares
//! the HTTP family (`http_requests_total`, `http_request_duration_seconds`, labelled by service,
//! method, route template and status) and records into it from the middleware stack.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use axum::response::Response;
pub use metric_families::{
    Counter, DurationHistogram, Family, Gauge, LATENCY_BUCKETS, Series, render, render_for,
};

/// Requests by service, method, route template and status, with their latency.
static HTTP_REQUESTS: Family<DurationHistogram> = Family::new(
    "http_request_duration_seconds",
    "Time to answer an HTTP request, until its head is ready.",
    &["service", "method", "route", "status"],
)
.with_count("http_requests_total", "HTTP requests answered.");

/// Series by route, then by (service, method, status). Finding a series in the family costs a lock
/// and allocated labels; a request only needs this map (the outer lookup borrows the route). Routes
/// are templates, so both maps stay small. Each thread keeps its own, so nothing here is shared.
/// Hashed with foldhash: the keys are a service's own templates and statuses, and SipHash (the
/// default, made to resist chosen keys) was most of this lookup's cost.
type SeriesCache = HashMap<
    String,
    HashMap<(&'static str, &'static str, u16), Arc<DurationHistogram>, FastHash>,
    FastHash,
>;
type FastHash = foldhash::fast::RandomState;

thread_local! {
    static HTTP_SERIES: RefCell<SeriesCache> = RefCell::default();
}

/// The `method` label: one of the methods HTTP defines, else `OTHER`. hyper accepts any token as a
/// method, so a caller's own would otherwise make a new series per request, without bound.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

/// Records `http_requests_total` and `http_request_duration_seconds` by service, method, route template
/// and status. No label comes from the caller: the route is a template (`unmatched` when none
/// matched), the method one of a closed set ([`method_label`]), the status one the service answered.
pub(crate) fn record(
    service: &'static str,
    method: &Method,
    route: &str,
    response: &Response,
    elapsed: Duration,
) {
    let status = response.status().as_u16();
    let method = method_label(method);
    let key = (service, method, status);
    let recorded = HTTP_SERIES.with_borrow(|cache| {
        let series = cache.get(route)?.get(&key)?;
        series.record(elapsed);
        Some(())
    });
    if recorded.is_some() {
        return;
    }
    let series = HTTP_REQUESTS.series(&[service, method, route, &status.to_string()]);
    series.record(elapsed);
    HTTP_SERIES.with_borrow_mut(|cache| {
        cache
            .entry(route.to_string())
            .or_default()
            .insert(key, series)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_series_are_labelled_by_service_method_route_and_status() {
        let response = Response::builder()
            .status(404)
            .body(axum::body::Body::empty())
            .unwrap();
        for _ in 0..3 {
            record(
                "metrics-test",
                &Method::from_bytes(b"BREW").unwrap(),
                "/v1/things/{id}",
                &response,
                Duration::from_millis(2),
            );
        }
        let page = render_for("metrics-test", &[]);
        let labels =
            r#"service="metrics-test",method="OTHER",route="/v1/things/{id}",status="404""#;
        assert!(
            page.lines()
                .any(|l| l == format!("http_requests_total{{{labels}}} 3")),
            "{page}"
        );
        assert!(!render_for("another-service", &[]).contains("metrics-test"));
    }
}
