//! The change feed: what a committed write publishes, and where watches and reconcilers follow it.
//! Apart because it is the one way changes leave the store: whatever a watch sees passes through
//! these few lines.

use std::sync::Arc;

use domain::resources::Kind;
use serde_json::Value;

use service_kit::watch::{EventType, Feed};

use super::{Store, Stored};

/// One committed change, as the feed carries it.
pub type Change = service_kit::watch::Change<Kind>;

/// How many changes the feed remembers for resuming watches.
pub const FEED_CAPACITY: usize = 10_000;

impl Store {
    /// The change feed.
    pub fn feed(&self) -> &Arc<Feed<Kind>> {
        &self.feed
    }

    pub(super) fn publish(
        &self,
        event: EventType,
        stored: &Stored,
        namespace: &str,
        status_only: bool,
    ) {
        self.publish_change(event, stored, namespace, status_only, None);
    }

    pub(super) fn publish_change(
        &self,
        event: EventType,
        stored: &Stored,
        namespace: &str,
        status_only: bool,
        previous_labels: Option<Value>,
    ) {
        self.feed.publish(Change {
            event,
            kind: stored.kind,
            scope: namespace.to_string(),
            resource_version: stored.resource_version,
            object: stored.body.clone(),
            status_only,
            previous_labels,
        });
    }
}
