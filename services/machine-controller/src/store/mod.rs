//! The controller's SQLite: every stored object, a resourceVersion sequence per namespace, and the orphan
//! collector's sightings.
//!
//! Objects are kept as the JSON a read answers (a secret's values apart, sealed in their own
//! column), keyed by (kind, namespace, name). Every write runs on one writing connection, in a
//! batch that shares one `BEGIN IMMEDIATE … COMMIT` (group commit, `commit`), and
//! publishes its change to the [`Feed`] once committed, in the order the writes ran, so watchers
//! see changes in version order. A write that changes nothing writes nothing: a reconcile that
//! finds all as it was makes no version and no event.
//!
//! What the API and the reconcilers may change is theirs to say (each passes a closure that edits
//! the object); the store keeps the fields it owns: uid, creationTimestamp, resourceVersion, and
//! generation, which it bumps when `spec` (or, for kinds without one, anything but `status` and
//! `metadata`) changed. An object whose deletion was asked and whose finalizers are all gone is
//! removed in the same write.
//!
//! # Layout
//! This file holds [`Store`] itself and the clock the objects are stamped with; its methods are
//! spread over a file per concern:
//! - `open`: opening the database, its migrations, readiness.
//! - `commit`: the writer, which runs every write and commits them in batches, and what it keeps in
//!   memory so a write costs few trips to the database (the rows it wrote, the sequences).
//! - `rows`: [`Stored`] and [`Sealed`], and how a row of `objects` is written, removed and decoded.
//! - `reads`: `get`, `list`, `owned`, and `owned_machines`, the few fields a set counts by.
//! - `writes`: `create`, `update`, `delete`, and what decides a new generation.
//! - `feed`: the change feed watches and reconcilers follow.
//! - `secrets`: listing and resealing sealed values after a key rotation.
//! - `orphans`: the orphan collector's records (machines made, VMs seen backing none).
//! - `error`: [`StoreError`] and the answer each failure becomes.

use std::sync::Arc;

use domain::resources::Kind;
use sqlx::SqlitePool;

use service_kit::watch::Feed;

mod commit;
mod error;
mod feed;
mod open;
mod orphans;
mod reads;
mod rows;
mod secrets;
#[cfg(test)]
mod tests;
mod writes;

pub use error::StoreError;
pub use feed::{Change, FEED_CAPACITY};
pub use reads::OwnedMachine;
pub use rows::{Sealed, Stored};
pub use writes::{Edit, Written};

/// The controller's database.
#[derive(Debug, Clone)]
pub struct Store {
    /// For reads; every write goes to the writer.
    pool: SqlitePool,
    jobs: commit::Jobs,
    feed: Arc<Feed<Kind>>,
}

/// The current time as the objects write it (RFC 3339, seconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
