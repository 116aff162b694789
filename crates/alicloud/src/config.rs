//! Client configuration, read once from `BERTH_ALICLOUD_*` variables (passed in as a map, so tests
//! never touch the process environment).

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng as _;

/// The names of the variables [`EcsConfig::from_vars`] reads (each crate keeps its own in a module
/// of this name).
pub mod env_vars {
    /// `BERTH_ALICLOUD_ENDPOINT`: send every call here instead of the regional endpoint
    /// (e.g. `http://127.0.0.1:8090` for the emulator).
    pub const ENDPOINT: &str = "BERTH_ALICLOUD_ENDPOINT";
    /// `BERTH_ALICLOUD_QPS`: calls a second allowed per (access key, region); unset or 0 = no limit.
    pub const QPS: &str = "BERTH_ALICLOUD_QPS";
    /// `BERTH_ALICLOUD_SIGNATURE`: `v1` (HMAC-SHA1, default) or `v3` (ACS3-HMAC-SHA256).
    pub const SIGNATURE: &str = "BERTH_ALICLOUD_SIGNATURE";
    /// `BERTH_ALICLOUD_TIMEOUT`: the longest a single HTTP attempt may take, in the duration form every
    /// Berth setting uses (`1500ms`, `30s`).
    pub const TIMEOUT: &str = "BERTH_ALICLOUD_TIMEOUT";
    /// `BERTH_ALICLOUD_TIMEOUT_MS`: [`TIMEOUT`] as a bare number of milliseconds. Deprecated: the
    /// program reading the variables carries it over to [`TIMEOUT`] for one release (the machine
    /// driver declares the rename, and the service kit's one mechanism for retiring a name applies it,
    /// with its warning and its refusal of both at once); this crate reads only [`TIMEOUT`].
    pub const TIMEOUT_MS: &str = "BERTH_ALICLOUD_TIMEOUT_MS";

    /// Every variable [`super::EcsConfig::from_vars`] reads.
    pub const ALL: [&str; 5] = [ENDPOINT, QPS, SIGNATURE, TIMEOUT, MAX_ATTEMPTS];
    /// `BERTH_ALICLOUD_MAX_ATTEMPTS`: attempts per call for retryable errors other than throttling.
    pub const MAX_ATTEMPTS: &str = "BERTH_ALICLOUD_MAX_ATTEMPTS";
}

/// Which signature the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignatureVersion {
    /// RPC signature V1: HMAC-SHA1 over the sorted parameters, in the `Signature` parameter.
    #[default]
    V1,
    /// V3: `ACS3-HMAC-SHA256` in the `Authorization` header, what current Alibaba SDKs send.
    V3,
}

/// When and how long to wait between attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts per call for retryable errors (5xx, timeouts, connection errors,
    /// `IncorrectInstanceStatus*`). Throttling does not count against this: ECS said "later", so the
    /// client waits as long as the caller's deadline allows.
    pub max_attempts: u32,
    /// The first backoff; doubled each attempt.
    pub base_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The backoff before attempt `attempt + 1` (attempt counts from 1), "equal jitter": half the
    /// exponential step plus a random share of the other half, so that synchronised callers spread
    /// out but never retry immediately.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let step = exp.min(self.max_backoff);
        let half = step / 2;
        half + half.mul_f64(rand::rng().random::<f64>())
    }
}

/// Configuration shared by every client of one [`crate::Ecs`].
#[derive(Debug, Clone, PartialEq)]
pub struct EcsConfig {
    /// Overrides the regional endpoint for every region (see [`env_vars::ENDPOINT`]).
    pub endpoint: Option<String>,
    /// Token-bucket rate per (access key id, region); `None` = unlimited (see [`env_vars::QPS`]).
    pub qps: Option<f64>,
    /// Bucket size; default one second's worth of `qps`.
    pub burst: Option<u32>,
    /// V1 or V3 signing.
    pub signature: SignatureVersion,
    /// The longest one HTTP attempt may take (further bounded by each call's deadline).
    pub request_timeout: Duration,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Retries.
    pub retry: RetryPolicy,
    /// The `User-Agent` sent.
    pub user_agent: String,
}

impl Default for EcsConfig {
    fn default() -> Self {
        EcsConfig {
            endpoint: None,
            qps: None,
            burst: None,
            signature: SignatureVersion::V1,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            user_agent: concat!("berth-alicloud/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// A variable that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} {message}")]
pub struct EcsConfigError {
    /// The variable.
    pub name: &'static str,
    /// What it was set to.
    pub value: String,
    /// What is wrong with it, without the value (a caller may show the value beside it).
    pub message: String,
}

impl EcsConfig {
    /// Defaults overridden by the `BERTH_ALICLOUD_*` variables in `vars`; empty values count as unset.
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Self, EcsConfigError> {
        let get = |name: &str| vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let bad = |name: &'static str, value: &str, message: &str| EcsConfigError {
            name,
            value: value.to_owned(),
            message: message.to_owned(),
        };
        let mut c = EcsConfig {
            endpoint: get(env_vars::ENDPOINT).map(str::to_owned),
            ..EcsConfig::default()
        };
        if let Some(v) = get(env_vars::QPS) {
            let q: f64 = v
                .parse()
                .map_err(|_| bad(env_vars::QPS, v, "is not a number"))?;
            if !q.is_finite() || q < 0.0 {
                return Err(bad(env_vars::QPS, v, "must be ≥ 0"));
            }
            c.qps = (q > 0.0).then_some(q);
        }
        if let Some(v) = get(env_vars::SIGNATURE) {
            c.signature = match v.to_ascii_lowercase().as_str() {
                "v1" | "1" | "hmac-sha1" => SignatureVersion::V1,
                "v3" | "3" | "acs3-hmac-sha256" => SignatureVersion::V3,
                _ => return Err(bad(env_vars::SIGNATURE, v, "is not v1 or v3")),
            };
        }
        if let Some(v) = get(env_vars::TIMEOUT) {
            c.request_timeout = domain::duration::parse_duration(v)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    bad(
                        env_vars::TIMEOUT,
                        v,
                        &format!(
                            "is not a positive duration: expected {}",
                            domain::duration::DURATION_FORM
                        ),
                    )
                })?;
        }
        if let Some(v) = get(env_vars::MAX_ATTEMPTS) {
            c.retry.max_attempts = v
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(env_vars::MAX_ATTEMPTS, v, "is not a positive integer"))?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_variables_and_rejects_nonsense() {
        let c = EcsConfig::from_vars(&vars(&[
            (env_vars::ENDPOINT, "http://127.0.0.1:8090"),
            (env_vars::QPS, "50"),
            (env_vars::SIGNATURE, "V3"),
            (env_vars::TIMEOUT, "1500ms"),
        ]))
        .unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:8090"));
        assert_eq!(c.qps, Some(50.0));
        assert_eq!(c.signature, SignatureVersion::V3);
        assert_eq!(c.request_timeout, Duration::from_millis(1500));
        assert_eq!(
            EcsConfig::from_vars(&vars(&[(env_vars::QPS, "0")]))
                .unwrap()
                .qps,
            None
        );
        assert_eq!(
            EcsConfig::from_vars(&vars(&[])).unwrap(),
            EcsConfig::default()
        );
        assert_eq!(
            EcsConfig::from_vars(&vars(&[(env_vars::QPS, "fast")]))
                .unwrap_err()
                .name,
            env_vars::QPS
        );
        assert!(EcsConfig::from_vars(&vars(&[(env_vars::SIGNATURE, "v2")])).is_err());
        assert!(EcsConfig::from_vars(&vars(&[(env_vars::QPS, "-1")])).is_err());
    }

    #[test]
    fn the_timeout_takes_a_duration_with_its_unit() {
        let timeout = |pairs: &[(&str, &str)]| EcsConfig::from_vars(&vars(pairs));
        assert_eq!(
            timeout(&[(env_vars::TIMEOUT, "2s")])
                .unwrap()
                .request_timeout,
            Duration::from_secs(2)
        );
        // `30000`, copied from the retired milliseconds variable, is no duration.
        for bad in ["0s", "soon", "1500x", "30000"] {
            let e = timeout(&[(env_vars::TIMEOUT, bad)]).unwrap_err();
            assert_eq!(e.name, env_vars::TIMEOUT, "{bad}: {e}");
            assert!(e.message.contains("like 30s"), "{e}");
            // The value is shown once, by the error, not again by its message.
            assert_eq!(e.to_string().matches(&format!("{bad:?}")).count(), 1, "{e}");
            assert_eq!(e.value, bad);
        }
    }

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let p = RetryPolicy {
            max_attempts: 5,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
        };
        for _ in 0..100 {
            let b1 = p.backoff(1);
            assert!(b1 >= Duration::from_millis(50) && b1 <= Duration::from_millis(100));
            let b3 = p.backoff(3);
            assert!(b3 >= Duration::from_millis(200) && b3 <= Duration::from_millis(400));
            let b10 = p.backoff(10);
            assert!(b10 >= Duration::from_millis(500) && b10 <= Duration::from_millis(1000));
        }
        assert!(p.backoff(64) <= Duration::from_millis(1000));
    }
}
