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
//!
//! Layout: this file holds what a change is ([`Change`], [`EventType`], [`Gone`]) and the
//! settings' names; `feed` the feed, its per-scope ring and where a watch starts; `limits` the
//! operator's limits and the permits; `query` the checks of a list's watch parameters;
//! `filter` which changes a watch streams; `streaming` the stream itself, its BOOKMARK
//! heartbeats and its end.

use std::time::Duration;

use axum::http::StatusCode;
use domain::{Code, Status};
use serde_json::Value;

use crate::ApiError;

mod feed;
mod filter;
mod limits;
mod query;
mod streaming;

pub use feed::{Feed, Started, Subscription};
pub use filter::Filter;
pub use limits::{WatchLimits, admit};
pub use query::{check_timeout, parse_resource_version};
pub use streaming::{Draining, Watch, stream};

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
                "query parameter resourceVersion: too old; the oldest a watch can resume from is {}: list again and watch from the list's version",
                gone.oldest
            ),
        ))
        .with_http_status(StatusCode::GONE)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

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
            e.status()
                .message
                .starts_with("query parameter resourceVersion: "),
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
        let too_large = parse_resource_version(Some("99999999999999999999")).unwrap_err();
        assert!(
            too_large
                .status()
                .message
                .starts_with("query parameter resourceVersion: is larger than any version"),
            "{}",
            too_large.status().message
        );
    }
}
