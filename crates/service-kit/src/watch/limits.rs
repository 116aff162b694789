//! The operator's limits on watches and the permits that bound how many are open: apart because
//! they are configuration, read once, and shared by every watch of a service.

use std::sync::Arc;
use std::time::Duration;

use domain::Code;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{MAX_WATCH, vars};
use crate::ApiError;
use crate::config::{ConfigError, Env};

/// The operator's settings for watches, and the permits that bound how many are open.
#[derive(Debug, Clone)]
pub struct WatchLimits {
    /// How often a quiet watch sends a BOOKMARK (default 10s).
    pub heartbeat: Duration,
    /// The longest one watch streams (default and most 30 minutes): a longer `timeoutSeconds` is
    /// cut to it, as Kubernetes' API server cuts a watch to its request timeout.
    pub max_duration: Duration,
    /// Watches open now, of the most allowed (default 4096).
    pub permits: Arc<Semaphore>,
}

impl WatchLimits {
    /// Reads [`vars::ALL`]; unset ones take their defaults.
    pub fn from_env(env: &Env) -> Result<WatchLimits, ConfigError> {
        let positive = |var: &str, default: Duration| {
            let value = env.duration_or(var, default)?;
            if value.is_zero() {
                return Err(ConfigError {
                    var: var.into(),
                    value: "0".into(),
                    problem: "must be more than zero".into(),
                });
            }
            Ok(value)
        };
        let most: usize = env.parse_or(vars::MAX_WATCHES, 4096usize)?;
        if most == 0 {
            return Err(ConfigError {
                var: vars::MAX_WATCHES.into(),
                value: "0".into(),
                problem: "must be at least 1".into(),
            });
        }
        Ok(WatchLimits {
            heartbeat: positive(vars::WATCH_HEARTBEAT, Duration::from_secs(10))?,
            max_duration: positive(vars::WATCH_MAX_DURATION, MAX_WATCH)?.min(MAX_WATCH),
            permits: Arc::new(Semaphore::new(most)),
        })
    }

    /// The defaults.
    pub fn defaults() -> WatchLimits {
        WatchLimits::from_env(&Env::default()).expect("the defaults are valid")
    }
}

/// Takes a permit for one more watch of `service`, or says it has too many (429 with Retry-After).
pub fn admit(limits: &WatchLimits, service: &str) -> Result<OwnedSemaphorePermit, ApiError> {
    limits.permits.clone().try_acquire_owned().map_err(|_| {
        ApiError::from_code(
            Code::ResourceExhausted,
            format!("too many watches are open on the {service}; retry shortly"),
        )
        .with_retry_after(Duration::from_secs(5))
    })
}
