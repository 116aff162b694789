//! The change feed and where a watch starts on it: apart because it is the one shared state of
//! watching (a store publishes to it, every watch subscribes), and its ring decides which versions
//! can still be resumed from.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::Status;
use serde_json::Value;
use tokio::sync::broadcast;

use super::{Change, Gone};
use crate::ApiError;

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
                return Err(ApiError::new(Status::invalid_query(
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
