//! The change feed: what a committed write publishes, and where watches and reconcilers follow it.
//! Apart because it is the one way changes leave the store: whatever a watch sees passes through
//! these few lines.

use std::sync::Arc;

use domain::resources::Kind;
use service_kit::watch::Feed;

use super::Store;

/// One committed change, as the feed carries it.
pub type Change = service_kit::watch::Change<Kind>;

/// How many changes the feed remembers for resuming watches.
pub const FEED_CAPACITY: usize = 10_000;

impl Store {
    /// The change feed.
    pub fn feed(&self) -> &Arc<Feed<Kind>> {
        &self.feed
    }
}
