//! The driver calls' metrics and the wrapper every call runs in: apart so the handlers read as
//! what they do, and the series' names and help are in one place.

use std::future::Future;
use std::time::Instant;

use domain::{Code, Status};
use service_kit::ApiError;
use service_kit::extract::Json;
use service_kit::metrics::{Counter, DurationHistogram, Family};

use super::checks::driver_error;

/// Histogram of driver calls' duration, by `method` and `provider` (MCM's `driver_request_duration`).
pub const METRIC_DURATION: &str = "berth_driver_request_duration_seconds";
/// Counter of driver calls, by `method`, `provider` and `code` (the machine code's name, `OK` on
/// success), so failures are counted by kind (MCM's `requests_total` / `failed_total`).
pub const METRIC_REQUESTS: &str = "berth_driver_requests_total";

static CALL_DURATION: Family<DurationHistogram> = Family::new(
    METRIC_DURATION,
    "Time a driver call took, by method and provider.",
    &["method", "provider"],
);
static CALLS: Family<Counter> = Family::new(
    METRIC_REQUESTS,
    "Driver calls by method, provider and outcome (the machine code's name, OK on success).",
    &["method", "provider", "code"],
);

/// Runs one driver call and records its duration and outcome.
pub(super) async fn observed<T>(
    method: &'static str,
    provider: &str,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<Json<T>, ApiError> {
    let started = Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(s) => s.code,
    };
    // A series lookup takes a lock: nothing next to a driver call (a cloud or Engine round trip).
    CALL_DURATION
        .series(&[method, provider])
        .record(started.elapsed());
    CALLS.series(&[method, provider, code.name()]).increment(1);
    result.map(Json).map_err(driver_error)
}
