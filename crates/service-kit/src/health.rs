//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: its dependencies answer).

use std::sync::Arc;

use futures::future::BoxFuture;

/// Why a dependency is not ready, in words `/readyz` may show anyone: what is wrong, never where
/// (no internal host, port or path; the check logs those itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(String);

impl NotReady {
    /// A reason the caller may read.
    pub fn new(reason: impl Into<String>) -> Self {
        NotReady(reason.into())
    }
}

/// One readiness check: a name and an async probe that says why it is not ready.
#[derive(Clone)]
pub struct Check {
    name: &'static str,
    probe: Arc<dyn Fn() -> BoxFuture<'static, Result<(), NotReady>> + Send + Sync>,
}

impl Check {
    /// A check named `name` running `probe`.
    pub fn new<F, Fut>(name: &'static str, probe: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), NotReady>> + Send + 'static,
    {
        Check {
            name,
            probe: Arc::new(move || Box::pin(probe())),
        }
    }
}

/// The readiness checks of a service; ready when all pass.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<Check>,
}

impl Readiness {
    /// Adds a check.
    pub fn with(mut self, check: Check) -> Self {
        self.checks.push(check);
        self
    }

    /// Runs every check concurrently; the failures, as `name: reason`.
    pub async fn failures(&self) -> Vec<String> {
        let results = futures::future::join_all(self.checks.iter().map(|c| (c.probe)())).await;
        self.checks
            .iter()
            .zip(results)
            .filter_map(|(c, r)| r.err().map(|why| format!("{}: {why}", c.name)))
            .collect()
    }
}
