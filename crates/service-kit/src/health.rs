//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: its dependencies answer).

use std::sync::Arc;

use futures::future::BoxFuture;

/// One readiness check: a name and an async probe that says why it is not ready.
#[derive(Clone)]
pub struct Check {
    name: &'static str,
    probe: Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>,
}

impl Check {
    /// A check named `name` running `probe`.
    pub fn new<F, Fut>(name: &'static str, probe: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
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
