//! Watch: every committed write, in resourceVersion order, streamed to whoever follows a list, with
//! Kubernetes' semantics. One implementation for every service that stores objects (the machine
//! controller, storage-ops' volumes, the registry's orchestrators).
//!
//! - [`Feed`]: the change feed a store publishes each committed change to, in version order. The
//!   last changes, kept per scope (the noisiest scope gives up its oldest when the feed is full),
//!   let a watcher resume from a version it saw; one older than those (or
//!   than this process's start, whose ring starts empty) is [`Gone`], Kubernetes' 410, and lists
//!   again. Versions are compared within a *scope* (a namespace): a service whose namespaces have
//!   sequences of their own (storage-ops) keeps a floor per scope, so another tenant's writes never
//!   tell a watcher anything but that its own version is too old.
//! - [`WatchLimits`]: the operator's settings (`BERTH_WATCH_HEARTBEAT`, `BERTH_WATCH_MAX_DURATION`,
//!   `BERTH_MAX_WATCHES`) and the permits that bound open watches.
//! - [`stream`]: the answer, newline-delimited JSON events `{"type": "ADDED"|"MODIFIED"|"DELETED"|
//!   "BOOKMARK"|"ERROR", "object": …}`: what was asked for first, then live changes; a BOOKMARK
//!   carrying the latest version whenever the stream was quiet for the heartbeat (so proxies keep
//!   it and a client resumes from there); an ERROR with code 410 to a watcher so slow the feed
//!   passed it; the end after `timeoutSeconds`, cut to the operator's ceiling.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::{Code, Status};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};
use tokio::time::Instant;

use crate::ApiError;
use crate::config::{ConfigError, Env};

/// The longest a watch streams, and the default of `BERTH_WATCH_MAX_DURATION`.
pub const MAX_WATCH: Duration = Duration::from_secs(1800);

/// The variables [`WatchLimits::from_env`] reads, for the services that serve watches.
pub mod vars {
    /// How often a quiet watch sends a BOOKMARK.
    pub const WATCH_HEARTBEAT: &str = "BERTH_WATCH_HEARTBEAT";
    /// The longest one watch streams, whatever `timeoutSeconds` asks.
    pub const WATCH_MAX_DURATION: &str = "BERTH_WATCH_MAX_DURATION";
    /// The most watches a service has open at once.
    pub const MAX_WATCHES: &str = "BERTH_MAX_WATCHES";
    /// All three.
    pub const ALL: &[&str] = &[WATCH_HEARTBEAT, WATCH_MAX_DURATION, MAX_WATCHES];
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// It was made.
    Added,
    /// It changed.
    Modified,
    /// It is gone (the object is its last state).
    Deleted,
}

impl EventType {
    /// The name a watch stream says (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change of an object of kind `K` (a service's own kinds; `()` for a service of one).
#[derive(Debug, Clone)]
pub struct Change<K> {
    /// What happened.
    pub event: EventType,
    /// The object's kind.
    pub kind: K,
    /// Its scope: its namespace ("" for objects of none).
    pub scope: String,
    /// The version this change made.
    pub resource_version: u64,
    /// The object after the change (its last state, for a delete), as a read answers it.
    pub object: Value,
    /// Only `status` changed: what a reconciler writes, which must not wake the object's own
    /// reconcile again (a failing call would otherwise retry at once, past its backoff).
    pub status_only: bool,
    /// For a change of labels, the labels before it (`metadata.labels`): a watch with a
    /// selector sees an object leave it as DELETED and enter it as ADDED, as Kubernetes' does.
    pub previous_labels: Option<Value>,
}

/// Why a watch cannot start where it was asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// The oldest version a watch of that scope can resume from now.
    pub oldest: u64,
}

impl From<Gone> for ApiError {
    fn from(gone: Gone) -> ApiError {
        ApiError::new(Status::new(
            Code::OutOfRange,
            format!(
                "resourceVersion: too old; the oldest a watch can resume from is {}: list again and watch from the list's version",
                gone.oldest
            ),
        ))
        .with_http_status(StatusCode::GONE)
    }
}

/// The feed.
#[derive(Debug)]
pub struct Feed<K> {
    sender: broadcast::Sender<Arc<Change<K>>>,
    ring: Mutex<Ring<K>>,
    capacity: usize,
}

/// The remembered changes, kept per scope, at most the feed's capacity in all. When it is full the
/// scope that holds the most gives up its oldest: the noisiest tenant pays for its own writes, and
/// a quiet one's watches are not made to list again (nor told, by a 410, how much others wrote).
/// Among scopes that hold as many, the one whose oldest change came first gives it up, so the
/// feed is a plain first-in first-out one when every scope writes alike (as when more scopes
/// write than the feed holds changes: then some must list again, as on a compacted etcd).
#[derive(Debug)]
struct Ring<K> {
    /// Each scope's changes, oldest first, with the order the feed was given them in (versions
    /// of scopes with sequences of their own do not compare).
    scopes: HashMap<String, VecDeque<Held<K>>>,
    /// How many changes were ever published: the next one's place in that order.
    published: u64,
    held: usize,
    /// Every scope's changes after this version are held, unless `evicted` says otherwise.
    floor: u64,
    /// Per scope, the newest version that fell out (or that the scope was at when the feed
    /// started).
    evicted: HashMap<String, u64>,
}

/// A change the feed holds, with its place in the order the feed was given them.
type Held<K> = (u64, Arc<Change<K>>);

impl<K> Ring<K> {
    fn floor_of(&self, scope: &str) -> u64 {
        self.evicted
            .get(scope)
            .copied()
            .unwrap_or(0)
            .max(self.floor)
    }

    /// The newest version `scope` is known to be at: its newest change held, or its floor.
    fn current_of(&self, scope: &str) -> u64 {
        let newest = self
            .scopes
            .get(scope)
            .and_then(|changes| changes.back())
            .map_or(0, |(_, change)| change.resource_version);
        newest.max(self.floor_of(scope))
    }

    fn push(&mut self, change: Arc<Change<K>>, capacity: usize) {
        self.scopes
            .entry(change.scope.clone())
            .or_default()
            .push_back((self.published, change));
        self.published += 1;
        self.held += 1;
        while self.held > capacity {
            let Some(noisiest) = self
                .scopes
                .iter()
                .max_by_key(|(_, changes)| {
                    let first_published = changes.front().map_or(0, |(order, _)| *order);
                    (changes.len(), std::cmp::Reverse(first_published))
                })
                .map(|(scope, _)| scope.clone())
            else {
                return;
            };
            let Some(changes) = self.scopes.get_mut(&noisiest) else {
                return;
            };
            if let Some((_, out)) = changes.pop_front() {
                self.held -= 1;
                let floor = self.evicted.entry(noisiest.clone()).or_default();
                *floor = (*floor).max(out.resource_version);
            }
            if changes.is_empty() {
                self.scopes.remove(&noisiest);
            }
        }
    }
}

/// A started watch: the changes it missed since its version, then the live ones.
#[derive(Debug)]
pub struct Subscription<K> {
    /// Changes after the asked version that were already committed.
    pub backlog: Vec<Arc<Change<K>>>,
    /// Changes from now on.
    pub live: broadcast::Receiver<Arc<Change<K>>>,
}

impl<K> Feed<K> {
    /// A feed that remembers `capacity` changes, for a store whose versions are at `current` when
    /// it opens (nothing older can be resumed from), and whose scopes with sequences of their own
    /// are at `scopes`.
    pub fn new(
        capacity: usize,
        current: u64,
        scopes: impl IntoIterator<Item = (String, u64)>,
    ) -> Arc<Feed<K>> {
        // A slow watcher that falls this far behind is cut off (it resumes or lists again).
        let (sender, _) = broadcast::channel(capacity.clamp(16, 65_536));
        Arc::new(Feed {
            sender,
            ring: Mutex::new(Ring {
                scopes: HashMap::new(),
                published: 0,
                held: 0,
                floor: current,
                evicted: scopes.into_iter().collect(),
            }),
            capacity: capacity.max(1),
        })
    }

    /// How many changes the feed remembers.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Publishes a committed change. The store calls it in version order (under its write lock,
    /// or from its one writer), so watchers see changes in that order.
    pub fn publish(&self, change: Change<K>) {
        let change = Arc::new(change);
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.push(change.clone(), self.capacity);
        // No receiver is no error: nobody watches.
        let _ = self.sender.send(change);
    }

    /// The changes from now on, with no backlog (what a reconciler follows).
    pub fn subscribe_now(&self) -> broadcast::Receiver<Arc<Change<K>>> {
        self.sender.subscribe()
    }

    /// The newest version `scope` is known to be at.
    pub fn current_of(&self, scope: &str) -> u64 {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .current_of(scope)
    }

    /// Starts a watch of `scope` after version `from`: [`Gone`] when that scope's changes after
    /// it are no longer all known.
    pub fn subscribe(&self, scope: &str, from: u64) -> Result<Subscription<K>, Gone> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let floor = ring.floor_of(scope);
        if from < floor {
            return Err(Gone { oldest: floor });
        }
        // Subscribed under the ring's lock, which `publish` holds while it sends: no change falls
        // between the backlog and the live stream.
        let live = self.sender.subscribe();
        let backlog = ring
            .scopes
            .get(scope)
            .into_iter()
            .flatten()
            .map(|(_, change)| change)
            .filter(|c| c.resource_version > from)
            .cloned()
            .collect();
        Ok(Subscription { backlog, live })
    }
}

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

/// `timeoutSeconds`, checked on the list (1 to 1800, as the most a watch streams).
pub fn check_timeout(timeout_seconds: Option<u64>) -> Result<(), ApiError> {
    if timeout_seconds.is_some_and(|t| !(1..=MAX_WATCH.as_secs()).contains(&t)) {
        return Err(ApiError::new(Status::invalid(
            "timeoutSeconds",
            "must be from 1 to 1800",
        )));
    }
    Ok(())
}

/// `resourceVersion` as a watch takes it: `None` (absent, empty or `0`) to start with every
/// current object, else the version to stream changes after.
pub fn parse_resource_version(text: Option<&str>) -> Result<Option<u64>, ApiError> {
    let refused = || {
        ApiError::new(Status::invalid(
            "resourceVersion",
            "must be a version a list or an event answered (digits, no leading zero)",
        ))
    };
    match text {
        None | Some("" | "0") => Ok(None),
        // Digits only, as versions are written: `u64`'s parser would also take a sign (`+3`) or
        // a leading zero (`03`), which would make two spellings of one version.
        Some(text) if !text.bytes().all(|b| b.is_ascii_digit()) || text.starts_with('0') => {
            Err(refused())
        }
        Some(text) => text.parse::<u64>().map(Some).map_err(|_| refused()),
    }
}

/// Which changes of its scope a watch streams: objects of its kinds whose labels match.
pub struct Filter<K> {
    /// Whether the watch follows this kind.
    pub kind: Box<dyn Fn(&K) -> bool + Send>,
    /// Whether an object's `metadata.labels` match the watch's selector.
    pub labels: Box<dyn Fn(&Value) -> bool + Send>,
}

impl<K> Filter<K> {
    /// Every object of every kind.
    pub fn everything() -> Filter<K> {
        Filter {
            kind: Box::new(|_| true),
            labels: Box::new(|_| true),
        }
    }

    /// The event `change` is to this watch, if any: a change that takes an object into the
    /// selector is its ADDED, one that takes it out its DELETED.
    fn event(&self, change: &Change<K>) -> Option<&'static str> {
        if !(self.kind)(&change.kind) {
            return None;
        }
        let now = (self.labels)(&change.object["metadata"]["labels"]);
        let before = match (&change.event, &change.previous_labels) {
            (EventType::Modified, Some(labels)) => (self.labels)(labels),
            _ => now,
        };
        match (change.event, before, now) {
            (EventType::Modified, false, true) => Some("ADDED"),
            (EventType::Modified, true, false) => Some("DELETED"),
            (event, _, true) => Some(event.as_str()),
            _ => None,
        }
    }
}

/// Where a watch starts ([`Feed::start`]).
pub struct Started<K> {
    /// The changes after the start.
    pub subscription: Subscription<K>,
    /// The version the watch starts after.
    pub after: u64,
    /// The current objects, when the watch started without a version: streamed first as ADDED.
    pub initial: Vec<Value>,
    /// Whether the caller may see the scope at all: one it may not gets a stream of bookmarks
    /// carrying only the version it asked for, as a scope with nothing in it does, and no
    /// version of it is ever too old.
    pub visible: bool,
}

impl<K> Feed<K> {
    /// Starts a watch of `scope` after `from`; without a version, `current` reads the scope's
    /// objects (already filtered as the watch asks) and the version they are at, and those come
    /// first. A caller who may not see the scope (`visible` false) is read nothing.
    pub async fn start<F, Fut>(
        &self,
        scope: &str,
        from: Option<u64>,
        visible: bool,
        current: F,
    ) -> Result<Started<K>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Vec<Value>, u64), ApiError>>,
    {
        let (initial, after) = match from {
            Some(v) if visible => {
                self.reached(scope, v).await?;
                (Vec::new(), v)
            }
            Some(v) => (Vec::new(), v),
            None if visible => current().await?,
            None => (Vec::new(), 0),
        };
        let subscription = if visible {
            self.subscribe(scope, after)?
        } else {
            Subscription {
                backlog: Vec::new(),
                live: self.subscribe_now(),
            }
        };
        Ok(Started {
            subscription,
            after,
            initial,
            visible,
        })
    }
}

impl<K> Feed<K> {
    /// Waits, briefly, for `scope` to reach version `from`: a version a list answered may be
    /// committed a moment before its change reaches the feed. One the scope has not reached by
    /// then was never answered (a watch from it would stream versions older than it asked, as if
    /// they were new): refused. Only a scope the caller may see is asked, so the refusal tells
    /// nothing of another tenant's writes.
    async fn reached(&self, scope: &str, from: u64) -> Result<(), ApiError> {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let current = self.current_of(scope);
            if from <= current {
                return Ok(());
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(ApiError::new(Status::invalid(
                    "resourceVersion",
                    format!(
                        "{from} is newer than any version answered here (the newest is {current}): watch from a version a list or an event answered"
                    ),
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Cancelled when the server a request came in by starts to drain (the kit's server puts it in
/// every request's extensions): a watch then ends, as Kubernetes' API server ends its watches at
/// shutdown, and its client watches again.
#[derive(Debug, Clone, Default)]
pub struct Draining(pub tokio_util::sync::CancellationToken);

/// A handler takes the drain of the server its request came in by (one never cancelled when it
/// came in by another: a test's router called directly).
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Draining {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Draining>()
            .cloned()
            .unwrap_or_default())
    }
}

/// What a watch streams, as its service decided it.
pub struct Watch<K> {
    /// The drain of the server the request came in by.
    pub draining: Draining,
    /// Where it starts.
    pub started: Started<K>,
    /// The scope it follows: the versions its BOOKMARKs carry are this scope's.
    pub scope: String,
    /// Which changes of the scope belong in this stream (its kinds and labels).
    pub filter: Filter<K>,
    /// The kind its BOOKMARKs name.
    pub kind: &'static str,
    /// How long it streams (`timeoutSeconds`, already checked).
    pub timeout_seconds: Option<u64>,
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

fn line(event: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The streamed answer to `watch`, holding `permit` for as long as it streams.
pub fn stream<K: Send + Sync + 'static>(
    watch: Watch<K>,
    limits: &WatchLimits,
    permit: OwnedSemaphorePermit,
) -> Response {
    let Watch {
        draining,
        started:
            Started {
                subscription,
                after,
                initial,
                visible,
            },
        scope,
        filter,
        kind,
        timeout_seconds,
    } = watch;
    let limit = timeout_seconds.map_or(limits.max_duration, |s| {
        Duration::from_secs(s).min(limits.max_duration)
    });
    let mut pending: VecDeque<Bytes> = if visible {
        initial.iter().map(|o| line("ADDED", o)).collect()
    } else {
        VecDeque::new()
    };
    if visible {
        pending.extend(
            subscription
                .backlog
                .iter()
                .filter(|c| c.scope == scope)
                .filter_map(|c| Some(line(filter.event(c)?, &c.object))),
        );
    }
    let latest = match subscription.backlog.last() {
        Some(c) if visible => c.resource_version,
        _ => after,
    };
    let streaming = Streaming {
        pending,
        live: subscription.live,
        scope,
        filter,
        visible,
        kind,
        latest,
        deadline: Instant::now() + limit,
        heartbeat: limits.heartbeat,
        last_sent: Instant::now(),
        draining: Box::pin(draining.0.cancelled_owned()),
        done: false,
        _permit: permit,
    };
    let body = futures::stream::unfold(streaming, |mut s| async move {
        let next = s.next().await?;
        Some((Ok::<_, std::convert::Infallible>(next), s))
    });
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

struct Streaming<K> {
    pending: VecDeque<Bytes>,
    live: broadcast::Receiver<Arc<Change<K>>>,
    scope: String,
    filter: Filter<K>,
    visible: bool,
    kind: &'static str,
    latest: u64,
    deadline: Instant,
    heartbeat: Duration,
    /// When the stream last sent a line: a BOOKMARK follows a heartbeat of its own silence, never
    /// of the feed's (other scopes' changes must not tell a watcher when they happen).
    last_sent: Instant,
    draining: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    done: bool,
    _permit: OwnedSemaphorePermit,
}

impl<K> Streaming<K> {
    async fn next(&mut self) -> Option<Bytes> {
        let next = self.next_line().await;
        self.last_sent = Instant::now();
        next
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        if let Some(line) = self.pending.pop_front() {
            return Some(line);
        }
        if self.done {
            return None;
        }
        loop {
            let quiet_until = self.last_sent + self.heartbeat;
            tokio::select! {
                () = self.draining.as_mut() => return None,
                received = self.live.recv() => match received {
                    // Another scope's versions are another sequence (and another tenant's), and a
                    // scope the caller may not see tells it nothing, its versions neither.
                    Ok(change) if self.visible && change.scope == self.scope => {
                        self.latest = self.latest.max(change.resource_version);
                        if let Some(event) = self.filter.event(&change) {
                            return Some(line(event, &change.object));
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        // Kubernetes' answer to a watcher the feed outran: an ERROR event, then
                        // the end; the client lists again.
                        self.done = true;
                        return Some(line("ERROR", &json!({
                            "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
                            "reason": "Expired",
                            "message": "the watch fell too far behind the changes; list again and watch from the list's version",
                        })));
                    }
                    Err(RecvError::Closed) => return None,
                },
                () = tokio::time::sleep_until(quiet_until.min(self.deadline)) => {
                    if Instant::now() >= self.deadline {
                        return None;
                    }
                    return Some(line("BOOKMARK", &json!({
                        "apiVersion": domain::resources::API_VERSION,
                        "kind": self.kind,
                        "metadata": {"resourceVersion": self.latest.to_string()},
                    })));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(scope: &str, v: u64) -> Change<()> {
        Change {
            event: EventType::Modified,
            kind: (),
            scope: scope.into(),
            resource_version: v,
            object: Value::Null,
            status_only: false,
            previous_labels: None,
        }
    }

    #[test]
    fn a_selector_sees_objects_enter_and_leave_it() {
        let filter: Filter<()> = Filter {
            kind: Box::new(|_| true),
            labels: Box::new(|labels| labels["app"] == "x"),
        };
        let labelled = |event, now: &str, before: Option<&str>| Change {
            event,
            kind: (),
            scope: "a".into(),
            resource_version: 1,
            object: json!({"metadata": {"labels": {"app": now}}}),
            status_only: false,
            previous_labels: before.map(|b| json!({"app": b})),
        };
        use EventType::*;
        assert_eq!(filter.event(&labelled(Added, "x", None)), Some("ADDED"));
        assert_eq!(filter.event(&labelled(Added, "y", None)), None);
        assert_eq!(
            filter.event(&labelled(Modified, "x", None)),
            Some("MODIFIED")
        );
        assert_eq!(
            filter.event(&labelled(Modified, "y", Some("x"))),
            Some("DELETED")
        );
        assert_eq!(
            filter.event(&labelled(Modified, "x", Some("y"))),
            Some("ADDED")
        );
        assert_eq!(filter.event(&labelled(Modified, "y", Some("z"))), None);
        assert_eq!(filter.event(&labelled(Deleted, "x", None)), Some("DELETED"));
        assert_eq!(filter.event(&labelled(Deleted, "y", None)), None);
    }

    #[tokio::test]
    async fn a_watch_resumes_within_the_ring_and_is_gone_before_it() {
        let feed = Feed::new(3, 10, []);
        assert_eq!(feed.subscribe("a", 9).unwrap_err(), Gone { oldest: 10 });
        let mut early = feed.subscribe("a", 10).unwrap();
        for v in 11..=14 {
            feed.publish(change("a", v));
        }
        // 11 was evicted: a watch after 10 would miss it.
        assert_eq!(feed.subscribe("a", 10).unwrap_err(), Gone { oldest: 11 });
        let from_11 = feed.subscribe("a", 11).unwrap();
        let versions: Vec<u64> = from_11.backlog.iter().map(|c| c.resource_version).collect();
        assert_eq!(versions, [12, 13, 14]);
        assert!(feed.subscribe("a", 14).unwrap().backlog.is_empty());
        // The early watcher got every change live, in order.
        for v in 11..=14 {
            assert_eq!(early.live.recv().await.unwrap().resource_version, v);
        }
    }

    #[test]
    fn scopes_with_sequences_of_their_own_have_floors_of_their_own() {
        // Two namespaces whose versions are their own: "a" at 5 and "b" at 100 when the feed
        // started; a namespace made later starts above the store's floor (1).
        let feed = Feed::new(2, 1, [("a".to_string(), 5), ("b".to_string(), 100)]);
        assert_eq!(feed.subscribe("a", 4).unwrap_err(), Gone { oldest: 5 });
        assert!(feed.subscribe("a", 5).is_ok());
        assert!(feed.subscribe("new", 1).is_ok());
        feed.publish(change("a", 6));
        feed.publish(change("b", 101));
        feed.publish(change("b", 102));
        // The feed is full (2): b, the noisiest, gave up its own oldest; a's 6 is still there.
        assert_eq!(
            feed.subscribe("a", 5).unwrap().backlog.len(),
            1,
            "another scope's writes never make a quiet one list again"
        );
        assert_eq!(feed.subscribe("b", 100).unwrap_err(), Gone { oldest: 101 });
        let b: Vec<u64> = feed
            .subscribe("b", 101)
            .unwrap()
            .backlog
            .iter()
            .map(|c| c.resource_version)
            .collect();
        assert_eq!(b, [102]);
    }

    #[test]
    fn scopes_that_hold_as_many_give_up_the_oldest_first() {
        // Four scopes of one change each in a feed of three: the first written falls out, not
        // whichever a hash map happens to list first.
        let feed = Feed::new(3, 0, []);
        for scope in ["d", "c", "b", "a"] {
            feed.publish(change(scope, 1));
        }
        assert_eq!(feed.subscribe("d", 0).unwrap_err(), Gone { oldest: 1 });
        for scope in ["c", "b", "a"] {
            assert_eq!(
                feed.subscribe(scope, 0).unwrap().backlog.len(),
                1,
                "{scope}"
            );
        }
    }

    #[tokio::test]
    async fn a_version_never_answered_is_refused_and_one_just_committed_awaited() {
        let feed: Arc<Feed<()>> = Feed::new(8, 5, []);
        let current = || async { Ok((Vec::new(), 5)) };
        let e = match feed.start("a", Some(u64::MAX), true, current).await {
            Err(e) => e,
            Ok(_) => panic!("a version past every answer was taken"),
        };
        assert!(
            e.status().message.starts_with("resourceVersion: "),
            "{}",
            e.status().message
        );
        // The caller may not see the scope: nothing is said of its versions.
        assert!(
            feed.start("a", Some(u64::MAX), false, current)
                .await
                .is_ok()
        );
        // A version committed a moment before it reaches the feed is waited for.
        let later = feed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            later.publish(change("a", 6));
        });
        let started = feed.start("a", Some(6), true, current).await;
        assert!(started.is_ok());
    }

    #[test]
    fn timeouts_and_versions_are_checked() {
        assert!(check_timeout(Some(0)).is_err());
        assert!(check_timeout(Some(1801)).is_err());
        assert!(check_timeout(Some(1800)).is_ok());
        assert_eq!(parse_resource_version(Some("0")).unwrap(), None);
        assert_eq!(parse_resource_version(Some("17")).unwrap(), Some(17));
        assert!(parse_resource_version(Some("-1")).is_err());
        assert!(parse_resource_version(Some("1e3")).is_err());
        assert!(parse_resource_version(Some("+3")).is_err());
        assert!(parse_resource_version(Some("03")).is_err());
        assert!(parse_resource_version(Some("99999999999999999999")).is_err());
    }
}
