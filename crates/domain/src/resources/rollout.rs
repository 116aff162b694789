//! How a machine deployment rolls its machines: the strategy and the maxSurge/maxUnavailable
//! arithmetic, rounded as Kubernetes rounds it. Apart because it is arithmetic a reader checks on
//! its own, against Kubernetes' rules, not a shape of a stored object.

use serde::{Deserialize, Serialize};

use crate::code::Status;

/// What a bad count or percentage is told (a negative or fractional number included, which
/// serde's untagged enums answered with "did not match any variant").
const INT_OR_PERCENT_RULE: &str = "must be a whole number or a percentage from 0% to 100%";

/// A count or a percentage of the desired replicas (`maxSurge: 1`, `maxUnavailable: "25%"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A count.
    Int(u32),
    /// `N%`, 0 to 100.
    Percent(String),
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IntOrPercent;
            // Read after serde's "invalid type: boolean `true`, expected ".
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number or a percentage from 0% to 100%")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<IntOrPercent, E> {
                u32::try_from(n)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::custom(INT_OR_PERCENT_RULE))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<IntOrPercent, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(INT_OR_PERCENT_RULE))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<IntOrPercent, E> {
                Err(E::custom(INT_OR_PERCENT_RULE))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<IntOrPercent, E> {
                // Checked with its field's name by `check`.
                Ok(IntOrPercent::Percent(text.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl IntOrPercent {
    /// The count this is of `total`: a percentage rounded up (surge) or down (unavailable), as
    /// Kubernetes rounds them.
    pub fn resolve(&self, total: u32, round_up: bool) -> u32 {
        match self {
            IntOrPercent::Int(n) => *n,
            IntOrPercent::Percent(text) => {
                let percent = parse_percent(text).unwrap_or(0);
                let scaled = u64::from(total) * u64::from(percent);
                let n = if round_up {
                    scaled.div_ceil(100)
                } else {
                    scaled / 100
                };
                u32::try_from(n).unwrap_or(u32::MAX)
            }
        }
    }

    /// Whether this is zero as written (`0`, `"0%"`), whatever it is of.
    pub fn is_zero(&self) -> bool {
        match self {
            IntOrPercent::Int(n) => *n == 0,
            IntOrPercent::Percent(text) => parse_percent(text) == Some(0),
        }
    }

    pub(super) fn check(&self, field: &str) -> Result<(), Status> {
        match self {
            IntOrPercent::Int(_) => Ok(()),
            IntOrPercent::Percent(text) => parse_percent(text)
                .map(|_| ())
                .ok_or_else(|| Status::invalid(field, INT_OR_PERCENT_RULE)),
        }
    }
}

fn parse_percent(text: &str) -> Option<u32> {
    let digits = text.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|n| *n <= 100)
}

/// How a deployment replaces machines of an old template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum StrategyType {
    /// A few at a time, within maxSurge and maxUnavailable.
    #[default]
    RollingUpdate,
    /// Every old machine first, then the new ones.
    Recreate,
}

/// `spec.strategy.rollingUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// How many machines may exist above `replicas` during a roll (default 1).
    #[serde(default = "one")]
    pub max_surge: IntOrPercent,
    /// How many of `replicas` may be unavailable during a roll (default 0).
    #[serde(default = "zero")]
    pub max_unavailable: IntOrPercent,
}

fn one() -> IntOrPercent {
    IntOrPercent::Int(1)
}

fn zero() -> IntOrPercent {
    IntOrPercent::Int(0)
}

impl Default for RollingUpdate {
    fn default() -> Self {
        RollingUpdate {
            max_surge: one(),
            max_unavailable: zero(),
        }
    }
}

/// `spec.strategy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStrategy {
    /// `RollingUpdate` (default) or `Recreate`.
    #[serde(default, rename = "type")]
    pub strategy_type: StrategyType,
    /// The rolling update's bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

impl DeploymentStrategy {
    /// `(maxSurge, maxUnavailable)` as counts of `replicas`; both zero would never progress, so
    /// the unavailable one is then 1 (Kubernetes' rule).
    pub fn bounds(&self, replicas: u32) -> (u32, u32) {
        let rolling = self.rolling_update.clone().unwrap_or_default();
        let surge = rolling.max_surge.resolve(replicas, true);
        let unavailable = rolling.max_unavailable.resolve(replicas, false);
        if surge == 0 && unavailable == 0 {
            (0, 1)
        } else {
            (surge, unavailable)
        }
    }
}
