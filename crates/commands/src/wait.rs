//! [`until`], the one loop every `--wait` runs, and the [`Step`] each look of it answers. Apart
//! because machines, volumes and objects all wait this one way: the deadline, the server's
//! `Retry-After` and what is said on stderr are decided here alone.

use std::future::Future;
use std::time::{Duration, Instant};

use client::ClientError;
use domain::{Code, Status};

use crate::CliError;

/// How often a `--wait` looks again when the server gives no `Retry-After`.
pub const POLL: Duration = Duration::from_millis(500);

/// One look of a `--wait`.
pub enum Step<T> {
    /// Finished, with this result.
    Done(T),
    /// Not yet: the state seen (said once on stderr when it changes) and when to look again.
    Pending {
        /// What the thing is doing now.
        state: String,
        /// When to look again.
        after: Duration,
    },
}

/// A failed look as a [`Step`]: a 503 or 429 (the server saying "not now") is pending for as long as
/// its `Retry-After` asks, and so is no answer at all or a gateway's 502 or 504 (a restart, a
/// service briefly gone: the wait is bounded by its timeout, and what it waits for goes on at the
/// server); any other failure ends the wait.
pub fn not_now<T>(e: ClientError) -> Result<Step<T>, CliError> {
    let unanswered = e.http_status.is_none() && e.code() != domain::Code::Internal;
    if unanswered || matches!(e.http_status, Some(429 | 502 | 503 | 504)) {
        Ok(Step::Pending {
            after: e.retry_after.unwrap_or(POLL),
            state: e.status.message,
        })
    } else {
        Err(e.into())
    }
}

/// Looks with `step` until it is done or `timeout` has passed, sleeping as each look asks; says on
/// stderr what it is waiting for whenever that changes.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut step: F) -> Result<T, CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step<T>, CliError>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_state = String::new();
    loop {
        let (state, after) = match step().await? {
            Step::Done(v) => return Ok(v),
            Step::Pending { state, after } => (state, after),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(CliError::Local(Status::new(
                Code::DeadlineExceeded,
                format!(
                    "gave up waiting for {what} after {}: {state} (a longer --timeout waits longer)",
                    humanise(timeout)
                ),
            )));
        }
        if state != last_state {
            eprintln!("waiting for {what}: {state}");
            last_state = state;
        }
        // Never past the deadline, so the last look happens in time to report it.
        tokio::time::sleep(after.min(deadline - now)).await;
    }
}

fn humanise(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else if secs > 0 {
        format!("{secs}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use client::ClientError;
    use domain::{Code, Status};

    use super::*;

    fn failed(code: Code, http_status: Option<u16>) -> ClientError {
        ClientError {
            status: Status::new(code, "what happened"),
            http_status,
            request_id: None,
            retry_after: None,
        }
    }

    /// A wait goes on through what passes (a restart, a service briefly gone) and ends on an
    /// answer that will not change by waiting.
    #[test]
    fn a_wait_goes_on_through_a_gateway_briefly_gone() {
        let pending = |e| matches!(not_now::<()>(e), Ok(Step::Pending { .. }));
        assert!(pending(failed(Code::Unavailable, None)), "no answer");
        assert!(pending(failed(Code::DeadlineExceeded, None)), "timed out");
        for status in [429, 502, 503, 504] {
            assert!(pending(failed(Code::Unavailable, Some(status))), "{status}");
        }
        assert!(
            !pending(failed(Code::Internal, None)),
            "a body that does not decode"
        );
        assert!(!pending(failed(Code::PermissionDenied, Some(403))));
        assert!(!pending(failed(Code::NotFound, Some(404))));
    }
}
