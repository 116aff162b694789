//! Protection: a token bucket per caller, and a circuit breaker per upstream.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Token-bucket settings: `rps` sustained, `burst` at once.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// Requests per second, sustained.
    pub rps: f64,
    /// Requests allowed at once.
    pub burst: f64,
}

/// One bucket per key (a token's name).
pub struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter with these settings.
    pub fn new(limit: RateLimit) -> Self {
        RateLimiter {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token from `key`'s bucket, or says how long until one is there.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        if !buckets.contains_key(key) {
            buckets.insert(key.to_string(), (self.limit.burst, now));
        }
        let (tokens, last) = buckets.get_mut(key).expect("inserted above");
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.limit.rps)
            .min(self.limit.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - *tokens) / self.limit.rps.max(f64::MIN_POSITIVE),
            ))
        }
    }
}

/// Circuit-breaker settings.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// How long it stays open before one probe is let through.
    pub open_for: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

/// A circuit breaker: after `failures` consecutive connection failures or timeouts, calls fail at once
/// for `open_for`; then one probe goes through, and its outcome closes or re-opens the breaker.
pub struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
    /// Whether the state is `Closed` with no failures counted: the state of nearly every call, so
    /// both checks read this one flag instead of taking a lock every worker thread shares.
    healthy: AtomicBool,
}

/// Whether the breaker lets a call through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed,
    /// Refused; retry after this long.
    Rejected(Duration),
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
            healthy: AtomicBool::new(true),
        }
    }

    /// Asks to make a call.
    pub fn admit(&self) -> Admission {
        if self.healthy.load(Ordering::Relaxed) {
            return Admission::Allowed;
        }
        let mut state = self.state.lock().expect("breaker lock");
        match *state {
            State::Closed { .. } => Admission::Allowed,
            State::Open { until } => {
                let now = Instant::now();
                if now >= until {
                    *state = State::HalfOpen;
                    Admission::Allowed
                } else {
                    Admission::Rejected(until - now)
                }
            }
            // One probe at a time; the others wait for its verdict.
            State::HalfOpen => {
                Admission::Rejected(self.config.open_for.min(Duration::from_secs(1)))
            }
        }
    }

    /// Records how an admitted call went: `false` for a connection failure or timeout.
    pub fn record(&self, healthy: bool) {
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
            (State::Closed { .. } | State::HalfOpen, false) => {
                tracing::warn!("circuit breaker opened");
                State::Open {
                    until: Instant::now() + self.config.open_for,
                }
            }
            (open @ State::Open { .. }, false) => open,
        };
        self.healthy
            .store(*state == State::Closed { failures: 0 }, Ordering::Relaxed);
    }

    /// Whether the breaker is open now (for readiness and metrics).
    pub fn is_open(&self) -> bool {
        matches!(*self.state.lock().expect("breaker lock"), State::Open { until } if Instant::now() < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_refuses_with_a_wait() {
        let l = RateLimiter::new(RateLimit {
            rps: 1.0,
            burst: 3.0,
        });
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        let wait = l.check("a").unwrap_err();
        assert!(
            wait > Duration::from_millis(500) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(l.check("b").is_ok(), "buckets are per key");
    }

    #[test]
    fn breaker_opens_after_failures_and_closes_after_a_good_probe() {
        let b = Breaker::new(BreakerConfig {
            failures: 2,
            open_for: Duration::from_millis(20),
        });
        b.record(false);
        assert_eq!(b.admit(), Admission::Allowed);
        b.record(false);
        assert!(matches!(b.admit(), Admission::Rejected(_)));
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.admit(), Admission::Allowed, "half-open probe");
        assert!(
            matches!(b.admit(), Admission::Rejected(_)),
            "only one probe"
        );
        b.record(true);
        assert_eq!(b.admit(), Admission::Allowed);
        assert!(!b.is_open());
    }
}
