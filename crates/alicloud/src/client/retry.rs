//! The retry loop every action runs in: the deadline, the rate limiter, jittered backoff (with
//! ECS's `TimeLeft` hint), which failures are retried and which use up attempts, and the metrics of
//! each attempt and retry.
//!
//! Apart because this is the policy of a call, not its content: whether and when to try again is
//! decided here from the error alone, whatever the action and however one attempt is made.

use metric_families::{Counter, DurationHistogram, Family};
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::EcsClient;
use crate::error::Error;
use crate::params::Params;

/// Histogram of one HTTP attempt's duration, by `action`.
pub const METRIC_DURATION: &str = "berth_ecs_request_duration_seconds";
/// Counter of HTTP attempts, by `action` and `result` (`ok` or the ECS error code / failure kind).
pub const METRIC_REQUESTS: &str = "berth_ecs_requests_total";
/// Counter of retries, by `action` and `reason`.
pub const METRIC_RETRIES: &str = "berth_ecs_retries_total";

static ATTEMPT_DURATION: Family<DurationHistogram> = Family::new(
    METRIC_DURATION,
    "Time one HTTP attempt to ECS took, by action.",
    &["action"],
);
static ATTEMPTS: Family<Counter> = Family::new(
    METRIC_REQUESTS,
    "HTTP attempts to ECS by action and result (ok, or the ECS error code or failure kind).",
    &["action", "result"],
);
static RETRIES: Family<Counter> = Family::new(
    METRIC_RETRIES,
    "Retried ECS calls by action and reason.",
    &["action", "reason"],
);

impl EcsClient {
    /// The retry loop around [`EcsClient::attempt`].
    pub(super) async fn call_typed<T: DeserializeOwned>(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<T, Error> {
        let span = tracing::debug_span!("ecs", action, region = %self.region);
        self.call_with_retries(action, params, deadline)
            .instrument(span)
            .await
    }

    async fn call_with_retries<T: DeserializeOwned>(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<T, Error> {
        let policy = &self.shared.config.retry;
        let mut counted_failures = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            if let Some(limiter) = &self.limiter
                && !limiter.acquire(deadline).await
            {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            let now = Instant::now();
            let timeout = self
                .shared
                .config
                .request_timeout
                .min(deadline.saturating_duration_since(now));
            let started = std::time::Instant::now();
            let result = self.attempt::<T>(action, &params, timeout).await;
            let elapsed = started.elapsed();
            let label = match &result {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.metric_result(),
            };
            // A series lookup takes a lock: nothing next to an HTTP round trip to ECS.
            ATTEMPT_DURATION.series(&[action]).record(elapsed);
            ATTEMPTS.series(&[action, &label]).increment(1);
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            // An attempt cut short by the caller's deadline is the deadline's doing, not ECS's.
            if matches!(err, Error::Timeout { .. }) && Instant::now() >= deadline {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            if !err.is_retryable() {
                return Err(err);
            }
            // Throttling is ECS saying "later", not "broken": it does not use up attempts.
            if !err.is_throttling() {
                counted_failures += 1;
                if counted_failures >= policy.max_attempts {
                    return Err(err);
                }
            }
            let backoff = policy.backoff(attempt);
            let wait = backoff.max(err.retry_after().unwrap_or_default());
            if Instant::now() + wait >= deadline {
                // Waiting cannot help: report what actually went wrong, not the deadline.
                return Err(err);
            }
            let reason = err.metric_result();
            tracing::debug!(
                action,
                attempt,
                reason = %reason,
                request_id = err.request_id().unwrap_or(""),
                wait_ms = wait.as_millis() as u64,
                "retrying ECS call"
            );
            RETRIES.series(&[action, &reason]).increment(1);
            tokio::time::sleep(wait).await;
        }
    }
}
