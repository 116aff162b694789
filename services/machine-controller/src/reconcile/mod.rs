//! The reconcilers: MCM's machine, machine-set and machine-deployment controllers, over the store
//! and the driver's REST API instead of Kubernetes' informers and the driver's gRPC.
//!
//! Every change the store commits queues its object (and the object that owns it) on one work
//! queue ([`queue`]); a periodic resync queues everything, which is also how a Running machine's
//! health is checked. Workers take keys and run one step of the key's reconcile, which says when
//! to look again. Each step reads the object afresh and writes back only through the store, so a
//! crash anywhere leaves the stored objects saying what is left to do:
//!
//! - [`machine`]: create (recorded as Creating before the driver is called), poll status,
//!   initialise, time out, delete behind a finalizer;
//! - [`set`]: keep `replicas` machines, replace failed ones with a growing backoff;
//! - [`deployment`]: one set per template, rolled within maxSurge/maxUnavailable;
//! - [`orphans`]: VMs this controller made that back no machine, deleted after two sightings.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use domain::resources::Kind;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde_json::Value;

use crate::objects::Writer;
use crate::store::Change;

pub mod deployment;
pub mod machine;
pub mod orphans;
pub mod queue;
pub mod set;

use queue::{Key, Queue};

/// Stored machines by their class's provider and their phase, as the last resync counted them.
/// Both labels are closed sets (a provider Berth has, `unknown` for a class that is gone; MCM's
/// phases), so the series stay few whatever callers name their objects.
static MACHINES: service_kit::metrics::Family<service_kit::metrics::Gauge> =
    service_kit::metrics::Family::new(
        "berth_controller_machines",
        "Stored machines by provider and phase, as the last resync counted them.",
        &["provider", "phase"],
    );

/// The series [`MACHINES`] set last.
static MACHINE_SERIES: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn namespace_of(body: &Value) -> String {
    body["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A class's provider as a label: one Berth has, else `other`.
fn provider_label(provider: Option<&str>) -> String {
    match provider {
        Some(p @ ("Alicloud" | "Docker")) => p.to_string(),
        _ => "other".to_string(),
    }
}

/// A machine's phase as a label: one of MCM's, else `Pending` (a machine not yet reconciled).
fn phase_label(phase: Option<&str>) -> &'static str {
    phase
        .and_then(domain::resources::MachinePhase::parse)
        .unwrap_or_default()
        .as_str()
}

/// How the reconcilers behave; every field has a `BERTH_CONTROLLER_*` setting.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A machine not Running this long after its creation began is Failed (MCM: 20 min).
    pub creation_timeout: Duration,
    /// A machine not healthy this long is Failed (MCM: 10 min).
    pub health_timeout: Duration,
    /// How often every object is looked at again (and Running machines' health checked).
    pub resync: Duration,
    /// The first retry's delay after a failed call; it doubles with each failure in a row.
    pub backoff_base: Duration,
    /// The longest retry delay.
    pub backoff_max: Duration,
    /// How long to wait after the cloud said it has no capacity or quota (ResourceExhausted,
    /// MCM #977) before asking again.
    pub exhausted_retry: Duration,
    /// Create and delete calls per second per class (MCM #706).
    pub class_calls_per_second: NonZeroU32,
    /// Reconciles run at once.
    pub workers: usize,
    /// Failed machines a set keeps for inspection instead of deleting (MCM #449); the set makes
    /// replacements beside them.
    pub keep_failed: u32,
    /// How often the orphan collector lists each class's VMs; a VM no machine owns is deleted
    /// once two listings at least this far apart have seen it so.
    pub orphan_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            creation_timeout: Duration::from_secs(20 * 60),
            health_timeout: Duration::from_secs(10 * 60),
            resync: Duration::from_secs(30),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(5 * 60),
            exhausted_retry: Duration::from_secs(10 * 60),
            class_calls_per_second: NonZeroU32::new(20).unwrap_or(NonZeroU32::MIN),
            workers: 32,
            keep_failed: 0,
            orphan_interval: Duration::from_secs(5 * 60),
        }
    }
}

impl Settings {
    /// The delay before retry number `failures` (1 = the first retry).
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// The reconcilers' shared parts.
pub struct Controller {
    /// The store, keys and driver client.
    pub writer: Writer,
    /// How they behave.
    pub settings: Settings,
    /// The work queue.
    pub queue: Arc<Queue>,
    calls: DefaultKeyedRateLimiter<(String, String)>,
    /// When each class, or the secret it names, last changed, by (namespace, class), as this
    /// process saw it: a machine's call that failed before is retried at once, not after its
    /// backoff, since the change may be the fix (a corrected secret waited out up to 5 minutes of
    /// backoff: a break-it finding).
    class_changes: std::sync::Mutex<ClassChanges>,
}

/// When each class, or the secret it names, last changed, by (namespace, class).
#[derive(Debug, Default)]
struct ClassChanges(std::collections::HashMap<(String, String), chrono::DateTime<chrono::Utc>>);

impl ClassChanges {
    /// Records that `classes` in `namespace` changed at `now`, forgetting changes older than
    /// `longest_wait`: a change only cuts short a wait that began before it, and no wait is longer,
    /// so an older entry can never matter again (and classes made and deleted by the thousand do
    /// not grow the map without end).
    fn record(
        &mut self,
        namespace: &str,
        classes: &[String],
        now: chrono::DateTime<chrono::Utc>,
        longest_wait: Duration,
    ) {
        let horizon = chrono::Duration::from_std(longest_wait).unwrap_or(chrono::Duration::MAX);
        self.0
            .retain(|_, changed| now.signed_duration_since(*changed) <= horizon);
        for class in classes {
            self.0.insert((namespace.to_string(), class.clone()), now);
        }
    }

    /// Whether `class` in `namespace` changed after `time`.
    fn since(&self, namespace: &str, class: &str, time: chrono::DateTime<chrono::Utc>) -> bool {
        self.0
            .get(&(namespace.to_string(), class.to_string()))
            .is_some_and(|changed| *changed > time)
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("settings", &self.settings)
            .finish()
    }
}

impl Controller {
    /// A controller over `writer`'s store and driver.
    pub fn new(writer: Writer, settings: Settings) -> Arc<Controller> {
        let calls = RateLimiter::keyed(Quota::per_second(settings.class_calls_per_second));
        Arc::new(Controller {
            writer,
            settings,
            queue: Queue::new(),
            calls,
            class_changes: Default::default(),
        })
    }

    /// Waits until a create or delete call for class `class` in `namespace` is within its rate.
    pub async fn pace(&self, namespace: &str, class: &str) {
        self.calls
            .until_key_ready(&(namespace.to_string(), class.to_string()))
            .await;
    }

    /// Runs the reconcilers until the process ends. Its tasks end with it: dropped (a test's
    /// abort), it leaves nothing running that holds the store.
    pub async fn run(self: Arc<Self>) {
        let mut changes = self.writer.store.feed().subscribe_now();
        self.resync().await;
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..self.settings.workers.max(1) {
            let me = self.clone();
            tasks.spawn(async move {
                loop {
                    let key = me.queue.take().await;
                    let again = me.reconcile(&key).await;
                    me.queue.done(&key);
                    if let Some(delay) = again {
                        me.queue.add_after(key, delay);
                    }
                }
            });
        }
        let me = self.clone();
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(me.settings.orphan_interval).await;
                if let Err(e) = orphans::collect(&me).await {
                    tracing::warn!(error = %e, "orphans: the collection failed");
                }
            }
        });
        let me = self.clone();
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(me.settings.resync).await;
                me.resync().await;
            }
        });
        loop {
            match changes.recv().await {
                Ok(change) => self.queue_change(&change).await,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.resync().await,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
        tasks.abort_all();
    }

    /// Queues every machine, set and deployment; counts the machines for `/metrics`.
    pub async fn resync(&self) {
        for kind in [Kind::MachineDeployment, Kind::MachineSet, Kind::Machine] {
            match self.writer.store.list(kind, None).await {
                Ok((objects, _)) => {
                    if kind == Kind::Machine {
                        self.count_machines(&objects).await;
                    }
                    for o in objects {
                        let namespace =
                            o.body["metadata"]["namespace"].as_str().unwrap_or_default();
                        self.queue
                            .add((kind, namespace.to_string(), o.name().to_string()));
                    }
                }
                Err(e) => tracing::warn!(error = %e, %kind, "resync: cannot list"),
            }
        }
    }

    /// Sets [`MACHINES`] from every stored machine, its provider read from its class. A series no
    /// longer counted is set to 0, not left at its old value.
    async fn count_machines(&self, machines: &[crate::store::Stored]) {
        let providers: std::collections::HashMap<(String, String), String> =
            match self.writer.store.list(Kind::MachineClass, None).await {
                Ok((classes, _)) => classes
                    .iter()
                    .map(|c| {
                        (
                            (namespace_of(&c.body), c.name().to_string()),
                            provider_label(c.body["provider"].as_str()),
                        )
                    })
                    .collect(),
                Err(_) => Default::default(),
            };
        let mut counts: std::collections::BTreeMap<(String, String), i64> = Default::default();
        for m in machines {
            let class = m.body["spec"]["class"]["name"].as_str().unwrap_or_default();
            let provider = providers
                .get(&(namespace_of(&m.body), class.to_string()))
                .cloned()
                .unwrap_or_else(|| "unknown".to_string());
            let phase = phase_label(m.body["status"]["phase"].as_str());
            *counts.entry((provider, phase.to_string())).or_default() += 1;
        }
        let mut series = MACHINE_SERIES.lock().unwrap_or_else(|p| p.into_inner());
        for gone in series.iter().filter(|s| !counts.contains_key(*s)) {
            MACHINES.series(&[&gone.0, &gone.1]).set(0);
        }
        for ((provider, phase), n) in &counts {
            MACHINES.series(&[provider, phase]).set(*n);
        }
        *series = counts.into_keys().collect();
    }

    /// Queues a changed object and what owns it; a class's change queues the deployments of
    /// its namespace (its generation is part of their template's hash).
    async fn queue_change(&self, change: &Change) {
        let name = change.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        match change.kind {
            Kind::Machine | Kind::MachineSet | Kind::MachineDeployment => {
                // An object's status is written only by its own reconcile (the API keeps what
                // callers send there out), which says itself when to look again: a status-only
                // change queues the owner, which counts it, not the object. (Each machine's
                // status change made its set write its status, and that write queued the set
                // once more for nothing, as the set's did its deployment.)
                if !change.status_only {
                    self.queue
                        .add((change.kind, change.scope.clone(), name.to_string()));
                }
                if let Some((kind, owner)) = owner_of(&change.object) {
                    self.queue.add((kind, change.scope.clone(), owner));
                }
            }
            Kind::MachineClass => {
                self.class_changed(&change.scope, &[name.to_string()]).await;
                if let Ok((deployments, _)) = self
                    .writer
                    .store
                    .list(Kind::MachineDeployment, Some(&change.scope))
                    .await
                {
                    for d in deployments {
                        self.queue.add((
                            Kind::MachineDeployment,
                            change.scope.clone(),
                            d.name().to_string(),
                        ));
                    }
                }
            }
            Kind::Secret => {
                let Ok((classes, _)) = self
                    .writer
                    .store
                    .list(Kind::MachineClass, Some(&change.scope))
                    .await
                else {
                    return;
                };
                let using: Vec<String> = classes
                    .iter()
                    .filter(|c| {
                        ["secretRef", "credentialsSecretRef"]
                            .iter()
                            .any(|r| c.body[*r]["name"].as_str() == Some(name))
                    })
                    .map(|c| c.name().to_string())
                    .collect();
                self.class_changed(&change.scope, &using).await;
            }
        }
    }

    /// Records that `classes` (or their secret) changed now, and queues their machines.
    async fn class_changed(&self, namespace: &str, classes: &[String]) {
        if classes.is_empty() {
            return;
        }
        let longest_wait = self.settings.backoff_max.max(self.settings.exhausted_retry);
        self.class_changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(namespace, classes, chrono::Utc::now(), longest_wait);
        if let Ok((machines, _)) = self.writer.store.list(Kind::Machine, Some(namespace)).await {
            for m in machines {
                let class = m.body["spec"]["class"]["name"].as_str().unwrap_or_default();
                if classes.iter().any(|c| c == class) {
                    self.queue
                        .add((Kind::Machine, namespace.to_string(), m.name().to_string()));
                }
            }
        }
    }

    /// Whether `class` in `namespace`, or its secret, changed after `time` (RFC 3339).
    pub fn class_changed_since(&self, namespace: &str, class: &str, time: &str) -> bool {
        let Ok(time) = chrono::DateTime::parse_from_rfc3339(time) else {
            return false;
        };
        self.class_changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .since(namespace, class, time.to_utc())
    }

    /// One step of `key`'s reconcile; says when to look again.
    async fn reconcile(self: &Arc<Self>, key: &Key) -> Option<Duration> {
        let (kind, namespace, name) = key;
        let outcome = match kind {
            Kind::Machine => machine::reconcile(self, namespace, name).await,
            Kind::MachineSet => set::reconcile(self, namespace, name).await,
            Kind::MachineDeployment => deployment::reconcile(self, namespace, name).await,
            Kind::Secret | Kind::MachineClass => Ok(None),
        };
        match outcome {
            Ok(again) => again,
            Err(e) => {
                tracing::warn!(error = %e, %kind, %namespace, %name, "reconcile failed; retrying");
                Some(self.settings.backoff(3))
            }
        }
    }
}

/// The controlling owner's kind and name.
pub fn owner_of(body: &Value) -> Option<(Kind, String)> {
    let owners = body["metadata"]["ownerReferences"].as_array()?;
    owners
        .iter()
        .find(|o| o["controller"] == Value::Bool(true))
        .and_then(|o| {
            Some((
                Kind::parse(o["kind"].as_str()?)?,
                o["name"].as_str()?.to_string(),
            ))
        })
}

/// Seconds since an RFC 3339 time (zero when it does not parse, or is in the future).
pub fn elapsed_since(time: Option<&str>) -> Duration {
    time.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| chrono::Utc::now().signed_duration_since(t))
        .and_then(|d| d.to_std().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_changes_past_the_longest_wait_are_forgotten() {
        let start = chrono::Utc::now();
        let minute = Duration::from_secs(60);
        let at = |seconds: i64| start + chrono::Duration::seconds(seconds);
        let mut changes = ClassChanges::default();
        changes.record("a", &["old".to_string()], at(0), minute);
        assert!(changes.since("a", "old", at(-1)));
        assert!(
            !changes.since("a", "old", at(0)),
            "a wait begun after it is not cut short"
        );
        assert!(!changes.since("b", "old", at(-1)), "namespaces are apart");

        changes.record("a", &["new".to_string()], at(60), minute);
        assert!(
            changes.since("a", "old", at(-1)),
            "still within the longest wait"
        );
        changes.record("a", &["new".to_string()], at(61), minute);
        assert!(!changes.since("a", "old", at(-1)), "forgotten past it");
        assert_eq!(changes.0.len(), 1);
    }
}
