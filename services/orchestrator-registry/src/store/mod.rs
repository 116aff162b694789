//! The registry's SQLite: registered orchestrators, the default flag and the resourceVersion sequence.
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction: it takes SQLite's write lock up front, so two
//! concurrent registrations queue on the busy timeout instead of both reading, then one failing to
//! upgrade its lock (`SQLITE_BUSY` that no timeout can cure). Switching the default clears the old one
//! and sets the new one in that same transaction, and a partial unique index makes a second default
//! impossible even if the code were wrong.
//!
//! Every committed change is published to the [`Feed`] a `watch=true` list follows. Writes take
//! the store's own write lock around their transaction and its publishing, so changes reach the
//! feed in the order of their versions.
//!
//! Layout: this file holds what a registration asks and answers, and [`Store`] itself; `open`
//! opening the database (its settings, migrations, the feed's start) and readiness; `reads` the
//! reads; `writes` registering and deregistering, with the checks and the version sequence they
//! run in their transaction; `bootstrap` the first start's default and a restored copy's
//! paths; `rows` the row codec; `error` the store's errors and their answers.

use std::sync::Arc;

use domain::OrchestratorKind;
use serde_json::Value;
use service_kit::watch::Feed;
use sqlx::SqlitePool;

mod bootstrap;
mod error;
mod open;
mod reads;
mod rows;
mod writes;

pub use error::StoreError;

/// What a registration asks for, already validated (name aside, which is the key).
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// The kind.
    pub kind: OrchestratorKind,
    /// The label (`""` when none).
    pub label: String,
    /// The region (`""` when none).
    pub region: String,
    /// The kind's config, normalised.
    pub config: Value,
    /// `Some(true)` makes it the default, `Some(false)` clears that, `None` keeps what it was.
    pub default: Option<bool>,
}

/// An `If-Match` precondition on a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// `If-Match: *`: the orchestrator must exist.
    Exists,
    /// `If-Match: "3", "4"`: its resourceVersion must be one of these.
    Versions(Vec<u64>),
}

/// What a registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The name was new.
    Created,
    /// The name existed with a different body, which replaced it.
    Replaced,
    /// The name existed with this very body; nothing changed.
    Unchanged,
}
/// The registry's database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Held from a write's `BEGIN` to its changes' publishing (see the module's words).
    write_lock: Arc<tokio::sync::Mutex<()>>,
    feed: Arc<Feed<()>>,
}
