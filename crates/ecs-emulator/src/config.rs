//! What an emulator is configured with: accepted credentials, lifecycle delays and faults.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An access key the emulator accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKey {
    /// The access key id.
    pub id: String,
    /// The secret requests are signed with.
    pub secret: String,
    /// When set, requests must carry this STS token (`SecurityToken` / `x-acs-security-token`).
    pub security_token: Option<String>,
}

impl AccessKey {
    /// A long-lived key pair.
    pub fn new(id: impl Into<String>, secret: impl Into<String>) -> Self {
        AccessKey {
            id: id.into(),
            secret: secret.into(),
            security_token: None,
        }
    }
}

impl fmt::Debug for AccessKey {
    // The secret and token never show in logs or panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .field("secret", &"[redacted]")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// How long instances spend in each transitional state. Zero is allowed (the next Describe sees
/// the next state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Pending → Starting, in milliseconds.
    pub pending_ms: u64,
    /// Starting → Running, in milliseconds.
    pub starting_ms: u64,
    /// Stopping → Stopped, in milliseconds.
    pub stopping_ms: u64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            pending_ms: 1000,
            starting_ms: 1000,
            stopping_ms: 1000,
        }
    }
}

impl Lifecycle {
    /// Every transition immediate.
    pub fn instant() -> Self {
        Lifecycle {
            pending_ms: 0,
            starting_ms: 0,
            stopping_ms: 0,
        }
    }

    pub(crate) fn pending(&self) -> Duration {
        Duration::from_millis(self.pending_ms)
    }
    pub(crate) fn starting(&self) -> Duration {
        Duration::from_millis(self.starting_ms)
    }
    pub(crate) fn stopping(&self) -> Duration {
        Duration::from_millis(self.stopping_ms)
    }
}

/// Injected faults. Rates are probabilities in `[0, 1]` applied to each authenticated action call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// Share of calls answered `Throttling` (HTTP 400) with `x-ratelimit-*` headers.
    pub throttle_rate: f64,
    /// The `TimeLeft` (milliseconds) a throttled answer advertises.
    pub throttle_time_left_ms: u64,
    /// Share of calls answered `InternalError` (500) or `ServiceUnavailable` (503), before acting.
    pub server_error_rate: f64,
    /// Latency added to every call, in milliseconds.
    pub latency_ms: u64,
    /// Zones where RunInstances answers `OperationDenied.NoStock`.
    pub no_stock_zones: BTreeSet<String>,
    /// When set, deleting an instance leaves its disks and network interface behind, detached (as a
    /// partly failed release does), so leftover cleanup can be tested.
    pub leak_on_delete: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            throttle_rate: 0.0,
            throttle_time_left_ms: 50,
            server_error_rate: 0.0,
            latency_ms: 0,
            no_stock_zones: BTreeSet::new(),
            leak_on_delete: false,
        }
    }
}

/// A fault rate outside `[0, 1]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field} must be between 0 and 1, got {rate}")]
pub struct FaultsError {
    /// The field (`throttleRate`, `serverErrorRate`).
    pub field: &'static str,
    /// What it was set to.
    pub rate: f64,
}

impl Faults {
    /// Rejects rates outside `[0, 1]`.
    pub fn validate(&self) -> Result<(), FaultsError> {
        for (field, rate) in [
            ("throttleRate", self.throttle_rate),
            ("serverErrorRate", self.server_error_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(FaultsError { field, rate });
            }
        }
        Ok(())
    }
}

/// Everything an emulator starts with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Accepted access keys.
    pub access_keys: Vec<AccessKey>,
    /// Lifecycle delays.
    pub lifecycle: Lifecycle,
    /// Initial faults (also what `/_emulator/reset` returns to).
    pub faults: Faults,
    /// The largest accepted clock difference of `Timestamp`/`x-acs-date` (ECS: 15 minutes).
    pub max_clock_skew: Duration,
    /// The region used when a request does not name one (admin seeding).
    pub default_region: String,
    /// Where [`crate::Emulator::open`] keeps the account (instances with their ids, statuses and
    /// tags, disks, network interfaces, ClientTokens), so a restart finds it again; `None` keeps
    /// it in memory only. See [`crate::persist`] for the files and [`crate::stored_access_key`]
    /// for keeping a generated access key there too.
    pub state_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            access_keys: vec![AccessKey::new("emulator", "emulator-secret")],
            lifecycle: Lifecycle::default(),
            faults: Faults::default(),
            max_clock_skew: Duration::from_secs(15 * 60),
            default_region: "cn-shanghai".into(),
            state_dir: None,
        }
    }
}

impl Config {
    /// A config accepting exactly one key pair, with instant lifecycle and no faults: what tests want.
    pub fn for_tests(id: impl Into<String>, secret: impl Into<String>) -> Self {
        Config {
            access_keys: vec![AccessKey::new(id, secret)],
            lifecycle: Lifecycle::instant(),
            ..Config::default()
        }
    }

    /// Sets the lifecycle delays.
    pub fn with_lifecycle(mut self, lifecycle: Lifecycle) -> Self {
        self.lifecycle = lifecycle;
        self
    }

    /// Sets the initial faults.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Keeps the account in `dir` (see [`Config::state_dir`]).
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Accepts another key.
    pub fn with_access_key(mut self, key: AccessKey) -> Self {
        self.access_keys.push(key);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_key_debug_is_redacted() {
        let mut k = AccessKey::new("id", "top-secret");
        k.security_token = Some("tok-secret".into());
        let s = format!("{k:?}");
        assert!(
            !s.contains("top-secret") && !s.contains("tok-secret"),
            "{s}"
        );
    }

    #[test]
    fn fault_rates_are_checked() {
        assert!(Faults::default().validate().is_ok());
        let f = Faults {
            throttle_rate: 1.5,
            ..Faults::default()
        };
        assert_eq!(
            f.validate(),
            Err(FaultsError {
                field: "throttleRate",
                rate: 1.5
            })
        );
    }
}
