//! Protection: a rate limit per token and per address that keeps failing to authenticate, and a
//! circuit breaker per upstream.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use service_kit::metrics::{Counter, Family, Gauge};

use crate::auth::GrantEnds;

/// Token-bucket settings: `rps` sustained, `burst` at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateLimit {
    /// Requests per second, sustained.
    pub(crate) rps: f64,
    /// Requests allowed at once.
    pub(crate) burst: f64,
}

impl RateLimit {
    fn quota(self) -> Quota {
        let period = Duration::from_secs_f64(1.0 / self.rps.max(1e-6));
        let burst = NonZeroU32::new(self.burst.clamp(1.0, f64::from(u32::MAX)) as u32)
            .unwrap_or(NonZeroU32::MIN);
        Quota::with_period(period.max(Duration::from_nanos(1)))
            .expect("a period of at least 1 ns")
            .allow_burst(burst)
    }
}

/// A token bucket per key, lock-free on the hot path (governor's GCRA over a sharded map). Keys that
/// have refilled to a full bucket are forgotten every few seconds, so callers cannot grow it for good.
pub(crate) struct KeyedLimiter<K: Hash + Eq + Clone> {
    limiter: Arc<DefaultKeyedRateLimiter<K>>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedLimiter<K> {
    /// A limiter with these settings.
    pub(crate) fn new(limit: RateLimit) -> Self {
        let limiter = Arc::new(DefaultKeyedRateLimiter::keyed(limit.quota()));
        // Forgetting full buckets needs a sweep; a thread that ends with the limiter does it, off the
        // request path.
        let weak: Weak<DefaultKeyedRateLimiter<K>> = Arc::downgrade(&limiter);
        let _ = std::thread::Builder::new()
            .name("gateway-limiter-sweep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(5));
                    let Some(limiter) = weak.upgrade() else {
                        return;
                    };
                    limiter.retain_recent();
                    limiter.shrink_to_fit();
                }
            });
        KeyedLimiter { limiter }
    }

    /// Takes one request from `key`'s bucket, or says how long until one is there.
    pub(crate) fn check(&self, key: &K) -> Result<(), Duration> {
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// How many keys it holds now.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.limiter.len()
    }
}

/// The per-token limiter, keyed by the token's identity (its hash), never by a name two tokens could
/// share.
pub(crate) type RateLimiter = KeyedLimiter<[u8; 32]>;

/// The calls each token has in flight, capped: a rate limit bounds how often a token calls, not
/// how many of its calls are open at once, and a call whose body comes slowly holds an upstream
/// connection for as long as it takes. Without a cap, one token sending slow bodies within its
/// rate filled a service's connections, and other tokens' calls to it failed. Each token counts
/// in an atomic of its own entry, so a call takes no lock the worker threads share.
pub(crate) struct InFlight {
    cap: u32,
}

impl InFlight {
    pub(crate) fn new(cap: u32) -> Self {
        InFlight { cap: cap.max(1) }
    }

    /// One more call of the token counting in `count`, held until the guard is dropped; `None`
    /// when the token has its cap of calls open.
    pub(crate) fn enter(&self, count: &Arc<AtomicU32>) -> Option<InFlightCall> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()?;
        Some(InFlightCall(count.clone()))
    }

    pub(crate) fn cap(&self) -> u32 {
        self.cap
    }
}

/// One call counted in [`InFlight`] until it is dropped.
pub(crate) struct InFlightCall(Arc<AtomicU32>);

impl Drop for InFlightCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A watch's `response`, streamed until `stopping` is cancelled or the token's grant ends
/// (`grant_ends`: revoked, changed or expired). A watch would otherwise hold the gateway's drain for
/// as long as it was asked to last (the client watches again, elsewhere or after the restart), and
/// outlive its token by as long. `call`, when the token's calls in flight are capped, stays counted
/// until the body has been sent whole (or dropped), so a token's open watches are bounded by the
/// same cap as its other calls.
pub(crate) fn streamed_until_stopping(
    response: axum::response::Response,
    call: Option<InFlightCall>,
    stopping: tokio_util::sync::CancellationToken,
    grant_ends: GrantEnds,
) -> axum::response::Response {
    response.map(|body| {
        axum::body::Body::new(Holding {
            inner: body,
            _call: call,
            stopping: Box::pin(stopping.cancelled_owned()),
            grant_ends,
        })
    })
}

/// A watch's body, ended by the gateway's drain or its token's end, keeping its call counted while
/// it streams.
struct Holding {
    inner: axum::body::Body,
    _call: Option<InFlightCall>,
    stopping: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    grant_ends: GrantEnds,
}

impl hyper::body::Body for Holding {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.stopping.as_mut().poll(cx).is_ready()
            || this.grant_ends.as_mut().poll(cx).is_ready()
        {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The limiter of failed authentications, keyed by the caller's address: guessing tokens costs the
/// guesser a 429 long before it costs the gateway much.
pub(crate) type FailureLimiter = KeyedLimiter<IpAddr>;

/// Each upstream's breaker state.
static BREAKER_STATE: Family<Gauge> = Family::new(
    "berth_gateway_breaker_state",
    "Each upstream's circuit breaker: 0 closed, 1 open (calls refused), 2 half-open (one trial call out).",
    &["upstream"],
);

/// Calls the gateway refused before forwarding them, by why.
static REFUSALS: Family<Counter> = Family::new(
    "berth_gateway_refusals_total",
    "Calls the gateway refused before forwarding, by reason: unauthenticated (401), auth_failures_limited (429 to an address guessing tokens), rate_limited, in_flight (429 to a token), forbidden (403, the token's scope).",
    &["reason"],
);

/// Counts one refusal; `reason` is one of the closed set [`REFUSALS`] describes.
pub(crate) fn count_refusal(reason: &'static str) {
    REFUSALS.series(&[reason]).increment(1);
}

/// Circuit-breaker settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub(crate) failures: u32,
    /// How long it stays open before one trial call is let through.
    pub(crate) open_for: Duration,
    /// Whether an upstream's 5xx answer counts as a failure (refused connections, resets before an
    /// answer and timeouts of the upstream's answer always do).
    pub(crate) count_5xx: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// Trial call number `trial` is out since `since`; it expires after the trial limit.
    HalfOpen {
        since: Instant,
        trial: u64,
    },
}

/// A circuit breaker: after `failures` consecutive failures of the upstream, calls fail at once for
/// `open_for`; then one trial call goes through, and what the upstream does with it closes or re-opens
/// the breaker.
///
/// The trial is a [`Permit`]: if it ends without a verdict from the upstream (the caller's body
/// failed, the caller hung up and the call was dropped), the permit gives the trial back on drop, so
/// the next call is the trial. A trial that never ends at all expires after `trial_limit` (the
/// upstream's own timeout and a margin). Either way the half-open state always resolves.
pub(crate) struct Breaker {
    /// Where its state is published, once named ([`Breaker::publishing_as`]).
    published: Option<Arc<Gauge>>,
    config: BreakerConfig,
    trial_limit: Duration,
    state: Mutex<State>,
    /// The number of the last trial let through.
    trials: std::sync::atomic::AtomicU64,
    /// Whether the state is `Closed` with no failures counted: the state of nearly every call, so
    /// both checks read this one flag instead of taking a lock every worker thread shares.
    healthy: AtomicBool,
}

/// What the upstream did with a call, as far as the breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It answered.
    Healthy,
    /// It refused the connection, reset it before answering, did not answer in time, or (when
    /// configured) answered 5xx.
    Failed,
}

/// Leave to make one call through a breaker. Record what the upstream did with [`Permit::record`];
/// a permit dropped without a verdict says nothing about the upstream.
pub(crate) struct Permit<'a> {
    breaker: &'a Breaker,
    /// The number of the half-open trial this call is, if it is one.
    trial: Option<u64>,
}

impl Permit<'_> {
    /// Records the upstream's verdict on the call.
    pub(crate) fn record(mut self, verdict: Verdict) {
        self.trial = None;
        self.breaker.record(verdict);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(trial) = self.trial {
            self.breaker.release_trial(trial);
        }
    }
}

impl Breaker {
    /// A closed breaker; a trial call may take `trial_limit` before another is let through.
    pub(crate) fn new(config: BreakerConfig, trial_limit: Duration) -> Self {
        Breaker {
            published: None,
            config,
            trial_limit,
            state: Mutex::new(State::Closed { failures: 0 }),
            trials: std::sync::atomic::AtomicU64::new(0),
            healthy: AtomicBool::new(true),
        }
    }

    /// The breaker of `upstream`, its state published as `berth_gateway_breaker_state`.
    pub(crate) fn publishing_as(mut self, upstream: &'static str) -> Self {
        let gauge = BREAKER_STATE.series(&[upstream]);
        gauge.set(0);
        self.published = Some(gauge);
        self
    }

    fn publish(&self, state: &State) {
        if let Some(gauge) = &self.published {
            gauge.set(match state {
                State::Closed { .. } => 0,
                State::Open { .. } => 1,
                State::HalfOpen { .. } => 2,
            });
        }
    }

    /// Whether an upstream's answer with this status counts as a failure.
    pub(crate) fn counts_status(&self, status: u16) -> bool {
        self.config.count_5xx && status >= 500
    }

    /// Asks to make a call: a permit, or how long to wait.
    pub(crate) fn admit(&self) -> Result<Permit<'_>, Duration> {
        let permit = |trial: Option<u64>| Permit {
            breaker: self,
            trial,
        };
        if self.healthy.load(Ordering::Relaxed) {
            return Ok(permit(None));
        }
        let mut state = self.state.lock().expect("breaker lock");
        let now = Instant::now();
        match *state {
            State::Closed { .. } => Ok(permit(None)),
            State::Open { until } if now < until => Err(until - now),
            State::HalfOpen { since, .. } if now < since + self.trial_limit => {
                // One trial at a time; the others wait for its verdict.
                Err(self.config.open_for.min(Duration::from_secs(1)))
            }
            // Open and due, or a trial that outlived its limit: this call is the (new) trial.
            State::Open { .. } | State::HalfOpen { .. } => {
                let trial = self.trials.fetch_add(1, Ordering::Relaxed) + 1;
                *state = State::HalfOpen { since: now, trial };
                self.publish(&state);
                Ok(permit(Some(trial)))
            }
        }
    }

    fn record(&self, verdict: Verdict) {
        let healthy = verdict == Verdict::Healthy;
        if healthy && self.healthy.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.state.lock().expect("breaker lock");
        *state = match (*state, healthy) {
            (_, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < self.config.failures => {
                State::Closed {
                    failures: failures + 1,
                }
            }
            (State::Closed { .. } | State::HalfOpen { .. }, false) => {
                tracing::warn!("circuit breaker opened");
                State::Open {
                    until: Instant::now() + self.config.open_for,
                }
            }
            (open @ State::Open { .. }, false) => open,
        };
        self.publish(&state);
        self.healthy
            .store(*state == State::Closed { failures: 0 }, Ordering::Relaxed);
    }

    /// Trial `trial` ended without a verdict: unless a newer trial has taken its place, the next call
    /// may be the trial at once.
    fn release_trial(&self, trial: u64) {
        let mut state = self.state.lock().expect("breaker lock");
        if matches!(*state, State::HalfOpen { trial: current, .. } if current == trial) {
            *state = State::Open {
                until: Instant::now(),
            };
            self.publish(&state);
        }
    }

    /// Whether the breaker refuses calls now (for readiness and metrics).
    pub(crate) fn is_open(&self) -> bool {
        match *self.state.lock().expect("breaker lock") {
            State::Open { until } => Instant::now() < until,
            State::HalfOpen { since, .. } => Instant::now() < since + self.trial_limit,
            State::Closed { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(trial_limit: Duration) -> Breaker {
        Breaker::new(
            BreakerConfig {
                failures: 2,
                open_for: Duration::from_millis(20),
                count_5xx: false,
            },
            trial_limit,
        )
    }

    #[test]
    fn bucket_allows_burst_then_refuses_with_a_wait() {
        let l = RateLimiter::new(RateLimit {
            rps: 1.0,
            burst: 3.0,
        });
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(l.check(&a).is_ok());
        assert!(l.check(&a).is_ok());
        assert!(l.check(&a).is_ok());
        let wait = l.check(&a).unwrap_err();
        assert!(
            wait > Duration::from_millis(500) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(l.check(&b).is_ok(), "buckets are per key");
        assert_eq!(l.keys(), 2);
    }

    #[test]
    fn breaker_opens_after_failures_and_closes_after_a_good_trial() {
        let b = breaker(Duration::from_secs(10));
        b.admit().unwrap().record(Verdict::Failed);
        assert!(b.admit().is_ok());
        b.admit().unwrap().record(Verdict::Failed);
        assert!(b.admit().is_err());
        std::thread::sleep(Duration::from_millis(25));
        let trial = b.admit().expect("half-open trial");
        assert!(b.admit().is_err(), "only one trial");
        trial.record(Verdict::Healthy);
        assert!(b.admit().is_ok());
        assert!(!b.is_open());
    }

    #[test]
    fn a_trial_dropped_without_a_verdict_lets_the_next_call_be_the_trial() {
        let b = breaker(Duration::from_secs(10));
        b.admit().unwrap().record(Verdict::Failed);
        b.admit().unwrap().record(Verdict::Failed);
        std::thread::sleep(Duration::from_millis(25));
        // The caller hung up, or its body failed: no verdict.
        drop(b.admit().expect("trial"));
        let trial = b.admit().expect("the next call is the trial at once");
        trial.record(Verdict::Healthy);
        assert!(!b.is_open());
    }

    #[test]
    fn a_trial_that_never_ends_expires() {
        let b = breaker(Duration::from_millis(30));
        b.admit().unwrap().record(Verdict::Failed);
        b.admit().unwrap().record(Verdict::Failed);
        std::thread::sleep(Duration::from_millis(25));
        let stuck = b.admit().expect("trial");
        assert!(b.admit().is_err());
        std::thread::sleep(Duration::from_millis(35));
        let next = b.admit().expect("an expired trial lets another through");
        next.record(Verdict::Healthy);
        // The stuck one ending late changes nothing.
        drop(stuck);
        assert!(!b.is_open());
        assert!(b.admit().is_ok());
    }
}
