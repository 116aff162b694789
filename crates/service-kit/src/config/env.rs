//! The variables a service was started with ([`Env`]), the typed reading of one value (a duration,
//! a byte quantity, anything `FromStr`, a secret) and what a bad value fails with ([`ConfigError`]).
//!
//! Apart because every other part of the configuration builds on it: the name checks read the map,
//! the service settings read values through it, and nothing here knows a variable's name.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::Renamed;

/// A configuration error: which variable, what was wrong.
/// Shown as `configuration: VAR="value" problem`, or `configuration: VAR problem` when there is no
/// value worth showing (an unknown name, an empty value); the problem never repeats the value.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {var}{} {problem}", shown(value))]
pub struct ConfigError {
    /// The variable.
    pub var: String,
    /// What it was set to (never printed for secrets: those are not parsed here).
    pub value: String,
    /// The rule it broke.
    pub problem: String,
}

fn shown(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        format!("={value:?}")
    }
}

/// The variables a service was started with.
#[derive(Debug, Clone, Default)]
pub struct Env(pub(super) BTreeMap<String, String>);

impl Env {
    /// The process environment: its `BERTH_*` and `OTEL_*` variables, and those named in `others`,
    /// the variables of other programs a service reads (the registry's detection inputs, say:
    /// `KUBERNETES_SERVICE_HOST`). Each service declares its own; the kit knows none of them.
    pub fn from_process(others: &[&str]) -> Self {
        Env(std::env::vars()
            .filter(|(k, _)| {
                k.starts_with("BERTH_") || k.starts_with("OTEL_") || others.contains(&k.as_str())
            })
            .collect())
    }

    /// A map of variables, for tests and for `berth up`.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Env(pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect())
    }

    /// Applies `renamed` ([`Renamed`]): a retired name's value moves to the new name (warning once),
    /// both set is refused, and the old name is dropped, so what reads the settings sees only new
    /// names and applying it again changes nothing.
    pub fn migrate(mut self, renamed: &[Renamed]) -> Result<Env, ConfigError> {
        for r in renamed {
            let new = self.get(r.new).map(str::to_string);
            let old = self.get(r.old).map(str::to_string);
            if let Some(value) = r.resolve(new.as_deref(), old.as_deref())? {
                self.0.insert(r.new.to_string(), value);
            }
            self.0.remove(r.old);
        }
        Ok(self)
    }

    /// The names set, for checks over the whole environment.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Sets a variable (builder style).
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    /// The raw value, if set and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The value parsed as `T`, or `default` when unset.
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e: T::Err| ConfigError {
                var: key.to_string(),
                value: v.to_string(),
                problem: e.to_string(),
            }),
        }
    }

    /// A duration (`250ms`, `30s`, `5m`, `1h`; a bare number only as `0`), or `default` when unset.
    pub fn duration_or(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_duration(v).ok_or_else(|| ConfigError {
                var: key.to_string(),
                value: v.to_string(),
                problem: format!(
                    "is not a duration: expected {}",
                    domain::duration::DURATION_FORM
                ),
            }),
        }
    }

    /// A byte size (`1048576`, `1Mi`, `10M`), or `default` when unset.
    pub fn bytes_or(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<domain::Quantity>()
                .map(|q| q.bytes())
                .map_err(|e| ConfigError {
                    var: key.to_string(),
                    value: v.to_string(),
                    problem: e.message,
                }),
        }
    }

    /// A secret value, wrapped so it cannot be printed.
    pub fn secret(&self, key: &str) -> Option<SecretString> {
        self.get(key).map(SecretString::new)
    }

    /// Whether a variable is set at all (even empty), for detection rules.
    pub fn is_set(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare `0` (domain's one duration form).
pub use domain::duration::{DURATION_FORM, parse_duration};

pub use domain::SecretString;
