//! Which changes of its scope a watch streams, and as what event: apart because a selector turns
//! a MODIFIED into an ADDED or a DELETED, a rule of its own that every service's watch shares.

use serde_json::Value;

use super::{Change, EventType};

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
    pub(super) fn event(&self, change: &Change<K>) -> Option<&'static str> {
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
