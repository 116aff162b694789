//! A token bucket per (access key id, region), shared by every client of one [`crate::Ecs`].
//!
//! ECS limits calls per account and region, so that is the key: clients built per request (the
//! machine driver builds one per call, from the request's secret) still share one bucket. The bucket
//! reserves tokens (the count may go negative), so waiters are served in arrival order and a burst
//! of callers spreads evenly instead of waking together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// One token bucket.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `qps` tokens a second, holding at most `burst` (at least 1).
    pub fn new(qps: f64, burst: u32) -> Self {
        let capacity = f64::from(burst.max(1));
        TokenBucket {
            rate: qps,
            capacity,
            state: Mutex::new(BucketState {
                tokens: capacity,
                last: Instant::now(),
            }),
        }
    }

    /// Takes one token, waiting for it if needed. Returns `false`, without taking a token, when the
    /// token would only come after `deadline`.
    pub async fn acquire(&self, deadline: Instant) -> bool {
        let wait = {
            let mut s = self.state.lock().expect("rate limiter lock poisoned");
            let now = Instant::now();
            let refill = now.saturating_duration_since(s.last).as_secs_f64() * self.rate;
            s.tokens = (s.tokens + refill).min(self.capacity);
            s.last = now;
            let wait = if s.tokens >= 1.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64((1.0 - s.tokens) / self.rate)
            };
            if now + wait > deadline {
                return false;
            }
            s.tokens -= 1.0;
            wait
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        true
    }
}

/// The buckets of one [`crate::Ecs`], by (access key id, region). `qps == None` means no limit.
#[derive(Debug, Default)]
pub(crate) struct RateLimiters {
    qps: Option<f64>,
    burst: u32,
    buckets: Mutex<HashMap<(String, String), Arc<TokenBucket>>>,
}

impl RateLimiters {
    pub(crate) fn new(qps: Option<f64>, burst: Option<u32>) -> Self {
        let qps = qps.filter(|q| q.is_finite() && *q > 0.0);
        RateLimiters {
            qps,
            // Default burst: one second's worth, so a steady QPS is never delayed.
            burst: burst.unwrap_or_else(|| qps.map_or(1, |q| q.ceil() as u32)),
            buckets: Mutex::default(),
        }
    }

    pub(crate) fn bucket(&self, access_key_id: &str, region: &str) -> Option<Arc<TokenBucket>> {
        let qps = self.qps?;
        let mut map = self.buckets.lock().expect("rate limiter lock poisoned");
        Some(
            map.entry((access_key_id.to_owned(), region.to_owned()))
                .or_insert_with(|| Arc::new(TokenBucket::new(qps, self.burst)))
                .clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn steady_rate_after_the_burst() {
        let b = TokenBucket::new(10.0, 2);
        let start = Instant::now();
        let far = start + Duration::from_secs(60);
        for _ in 0..12 {
            assert!(b.acquire(far).await);
        }
        // 2 immediately, then 10 more at 10/s.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(990), "{took:?}");
        assert!(took <= Duration::from_millis(1100), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_when_the_token_comes_after_the_deadline() {
        let b = TokenBucket::new(1.0, 1);
        let now = Instant::now();
        assert!(b.acquire(now + Duration::from_secs(5)).await);
        assert!(!b.acquire(Instant::now() + Duration::from_millis(100)).await);
        // The refusal took no token: the next caller with time to wait gets it after ~1 s.
        let t = Instant::now();
        assert!(b.acquire(t + Duration::from_secs(5)).await);
        assert!(t.elapsed() <= Duration::from_millis(1001));
    }

    #[test]
    fn buckets_are_per_key_and_region() {
        let l = RateLimiters::new(Some(5.0), None);
        let a = l.bucket("k1", "r1").unwrap();
        assert!(Arc::ptr_eq(&a, &l.bucket("k1", "r1").unwrap()));
        assert!(!Arc::ptr_eq(&a, &l.bucket("k1", "r2").unwrap()));
        assert!(!Arc::ptr_eq(&a, &l.bucket("k2", "r1").unwrap()));
        assert!(RateLimiters::new(None, None).bucket("k", "r").is_none());
        assert!(
            RateLimiters::new(Some(0.0), None)
                .bucket("k", "r")
                .is_none()
        );
    }
}
