//! The change feed: every committed write, in resourceVersion order, to whoever watches.
//!
//! The store publishes each change while it still holds the write lock, so changes arrive in the
//! order of their versions. A ring of the last [`Feed::capacity`] changes lets a watcher resume from
//! a version it saw; one older than the ring (or than the start of this process, whose ring starts
//! empty) is told it is gone, Kubernetes' 410, and lists again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use domain::resources::Kind;
use serde_json::Value;
use tokio::sync::broadcast;

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

/// One committed change.
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub event: EventType,
    /// The object's kind.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// The version this change made.
    pub resource_version: u64,
    /// The object after the change (before it, for a delete), as a read answers it.
    pub object: Value,
    /// Only `status` changed: what the reconcilers themselves write, which must not wake the
    /// object's own reconcile again (a failing call would otherwise retry at once, past its
    /// backoff), though it still wakes the owner that sums it up.
    pub status_only: bool,
}

/// Why a watch cannot start where it was asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// The oldest version a watch can resume from now.
    pub oldest: u64,
}

/// The feed.
#[derive(Debug)]
pub struct Feed {
    sender: broadcast::Sender<Arc<Change>>,
    ring: Mutex<Ring>,
    capacity: usize,
}

#[derive(Debug)]
struct Ring {
    changes: VecDeque<Arc<Change>>,
    /// Changes after this version are all in `changes`.
    floor: u64,
}

/// A started watch: the changes it missed since its version, then the live ones.
#[derive(Debug)]
pub struct Subscription {
    /// Changes after the asked version that were already committed.
    pub backlog: Vec<Arc<Change>>,
    /// Changes from now on.
    pub live: broadcast::Receiver<Arc<Change>>,
}

impl Feed {
    /// A feed that remembers `capacity` changes, starting at `current` (the store's version when
    /// it opened: nothing older can be resumed from).
    pub fn new(capacity: usize, current: u64) -> Arc<Feed> {
        // A slow watcher that falls this far behind is cut off (it resumes or lists again).
        let (sender, _) = broadcast::channel(capacity.clamp(16, 65_536));
        Arc::new(Feed {
            sender,
            ring: Mutex::new(Ring {
                changes: VecDeque::with_capacity(capacity.min(4096)),
                floor: current,
            }),
            capacity: capacity.max(1),
        })
    }

    /// How many changes the feed remembers.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Publishes a committed change (called by the store under its write lock).
    pub fn publish(&self, change: Change) {
        let change = Arc::new(change);
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.changes.len() == self.capacity
            && let Some(evicted) = ring.changes.pop_front()
        {
            ring.floor = evicted.resource_version;
        }
        ring.changes.push_back(change.clone());
        // No receiver is no error: nobody watches.
        let _ = self.sender.send(change);
    }

    /// The changes from now on, with no backlog (what the reconcilers follow).
    pub fn subscribe_now(&self) -> broadcast::Receiver<Arc<Change>> {
        self.sender.subscribe()
    }

    /// Starts a watch after version `from`: [`Gone`] when changes after it are no longer all known.
    pub fn subscribe(&self, from: u64) -> Result<Subscription, Gone> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if from < ring.floor {
            return Err(Gone { oldest: ring.floor });
        }
        // Subscribed under the ring's lock, which `publish` holds while it sends: no change falls
        // between the backlog and the live stream.
        let live = self.sender.subscribe();
        let backlog = ring
            .changes
            .iter()
            .filter(|c| c.resource_version > from)
            .cloned()
            .collect();
        Ok(Subscription { backlog, live })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(v: u64) -> Change {
        Change {
            event: EventType::Modified,
            kind: Kind::Machine,
            namespace: "default".into(),
            resource_version: v,
            object: Value::Null,
            status_only: false,
        }
    }

    #[tokio::test]
    async fn a_watch_resumes_within_the_ring_and_is_gone_before_it() {
        let feed = Feed::new(3, 10);
        assert_eq!(feed.subscribe(9).unwrap_err(), Gone { oldest: 10 });
        let mut early = feed.subscribe(10).unwrap();
        for v in 11..=14 {
            feed.publish(change(v));
        }
        // 11 was evicted: a watch after 10 would miss it.
        assert_eq!(feed.subscribe(10).unwrap_err(), Gone { oldest: 11 });
        let from_11 = feed.subscribe(11).unwrap();
        let versions: Vec<u64> = from_11.backlog.iter().map(|c| c.resource_version).collect();
        assert_eq!(versions, [12, 13, 14]);
        assert!(feed.subscribe(14).unwrap().backlog.is_empty());
        // The early watcher got every change live, in order.
        for v in 11..=14 {
            assert_eq!(early.live.recv().await.unwrap().resource_version, v);
        }
    }
}
