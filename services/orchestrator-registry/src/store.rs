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

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use domain::{Code, Orchestrator, OrchestratorKind, Status};
use serde_json::Value;
use service_kit::ApiError;
use service_kit::watch::{Change, EventType, Feed};
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, SqlitePool, SqliteTransaction};

/// How long a writer waits for another writer's lock before the request is answered 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const COLUMNS: &str = "name, kind, label, region, config, is_default, resource_version";

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

/// A store failure, turned into the right answer by `From<StoreError> for ApiError`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An `If-Match` precondition did not hold (412, code 9).
    #[error("{0}")]
    PreconditionFailed(String),
    /// The database refused a write for a constraint (409, code 10: a concurrent change).
    #[error("constraint violated: {0}")]
    Conflict(sqlx::Error),
    /// The database stayed locked past the busy timeout (503, code 14).
    #[error("database busy: {0}")]
    Busy(sqlx::Error),
    /// The registration breaks a rule about other registrations (409, code 6): the status names
    /// the field, the other orchestrator and the rule.
    #[error("{}", .0.message)]
    Clash(Status),
    /// Anything else (500).
    #[error("database: {0}")]
    Db(sqlx::Error),
    /// A row that does not decode (500).
    #[error("corrupt row for {name:?}: {why}")]
    Corrupt {
        /// The row's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            if db.is_unique_violation() || db.is_check_violation() {
                return StoreError::Conflict(e);
            }
            // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with or without an extended code.
            let code = db
                .code()
                .and_then(|c| c.parse::<u32>().ok())
                .map(|c| c & 0xff);
            if matches!(code, Some(5 | 6)) {
                return StoreError::Busy(e);
            }
        }
        StoreError::Db(e)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::PreconditionFailed(message) => {
                ApiError::new(Status::new(Code::FailedPrecondition, message))
            }
            StoreError::Clash(status) => ApiError::new(status),
            StoreError::Conflict(cause) => ApiError::from_code(
                Code::Aborted,
                "the registration conflicted with a concurrent change; retry it",
            )
            .with_cause(cause),
            StoreError::Busy(cause) => ApiError::from_code(
                Code::Unavailable,
                "the registry database is busy; retry shortly",
            )
            .with_cause(cause),
            e @ (StoreError::Db(_) | StoreError::Corrupt { .. }) => ApiError::internal(e),
        }
    }
}

/// How many changes the feed remembers for resuming watches (orchestrators change rarely).
const FEED_CAPACITY: usize = 1024;

/// The registry's database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Held from a write's `BEGIN` to its changes' publishing (see the module's words).
    write_lock: Arc<tokio::sync::Mutex<()>>,
    feed: Arc<Feed<()>>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and runs the embedded migrations.
    pub async fn open(path: &Path) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the registry database directory {}: {e}",
                    dir.display()
                )
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL, not NORMAL: writes here are rare (registrations), and an acknowledged registration
            // is what storage-ops resolves every volume against, so it must survive a power cut too.
            // Reads, the hot path, do not sync at all.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(|e| format!("cannot open the registry database {}: {e}", path.display()))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| {
                format!(
                    "cannot migrate the registry database {}: {e}",
                    path.display()
                )
            })?;
        let current: i64 =
            sqlx::query_scalar("SELECT value FROM registry_meta WHERE key = 'resource_version'")
                .fetch_one(&pool)
                .await?;
        Ok(Store {
            pool,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            feed: Feed::new(FEED_CAPACITY, u64::try_from(current).unwrap_or(0), []),
        })
    }

    /// Closes the database's connections (waiting for them), for a caller that moves the file next.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The change feed (orchestrators are cluster-wide: its one scope is `""`).
    pub fn feed(&self) -> &Arc<Feed<()>> {
        &self.feed
    }

    /// Every orchestrator, sorted by name, and the version the list is at, read in one transaction.
    pub async fn list_at(&self) -> Result<(Vec<Orchestrator>, u64), StoreError> {
        let mut tx = self.pool.begin().await?;
        let version: i64 =
            sqlx::query_scalar("SELECT value FROM registry_meta WHERE key = 'resource_version'")
                .fetch_one(&mut *tx)
                .await?;
        let rows = select("ORDER BY name").fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let items = rows.iter().map(decode).collect::<Result<_, _>>()?;
        Ok((items, u64::try_from(version).unwrap_or(0)))
    }

    fn publish(&self, event: EventType, orchestrator: &Orchestrator) {
        self.feed.publish(Change {
            event,
            kind: (),
            scope: String::new(),
            resource_version: orchestrator.resource_version,
            object: serde_json::to_value(orchestrator).unwrap_or_default(),
            status_only: false,
            previous_labels: None,
        });
    }

    /// `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The orchestrator `name`, if registered.
    pub async fn get(&self, name: &str) -> Result<Option<Orchestrator>, StoreError> {
        let row = select("WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Every orchestrator, sorted by name.
    pub async fn list(&self) -> Result<Vec<Orchestrator>, StoreError> {
        let rows = select("ORDER BY name").fetch_all(&self.pool).await?;
        rows.iter().map(decode).collect()
    }

    /// The default orchestrator, if one is.
    pub async fn default_orchestrator(&self) -> Result<Option<Orchestrator>, StoreError> {
        let row = select("WHERE is_default = 1")
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Registers `name` (creating or replacing it), atomically with clearing the previous default
    /// when this one becomes the default.
    pub async fn register(
        &self,
        name: &str,
        want: &Registration,
        precondition: Option<&Precondition>,
    ) -> Result<(Orchestrator, Outcome), StoreError> {
        let _writing = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let current = fetch_in(&mut tx, name).await?;
        check_precondition(name, current.as_ref(), precondition)?;
        if want.kind == OrchestratorKind::Local {
            // In the write transaction, so two registrations racing cannot both pass.
            check_base_path_apart(&mut tx, name, &want.config).await?;
        }
        let default = want
            .default
            .unwrap_or_else(|| current.as_ref().is_some_and(|c| c.default));
        let next = registered(
            name,
            want,
            default,
            current.as_ref().map_or(0, |c| c.resource_version),
        );
        if let Some(current) = current.as_ref()
            && *current == next
        {
            // The same body again: nothing changes, not even the version (no write, nothing to commit).
            tx.rollback().await?;
            return Ok((next, Outcome::Unchanged));
        }
        let now = chrono::Utc::now().to_rfc3339();
        let mut undefaulted = Vec::new();
        if default {
            // The previous default's change takes a version of its own, before this one's: a
            // watcher that resumes from either misses neither.
            let previous = select("WHERE is_default = 1 AND name <> ?")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
            if previous.is_some() {
                let its_version = next_version(&mut tx).await?;
                undefaulted = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE orchestrators SET is_default = 0, resource_version = ?, updated_at = ? \
                     WHERE is_default = 1 AND name <> ? RETURNING {COLUMNS}"
                )))
                .bind(its_version as i64)
                .bind(&now)
                .bind(name)
                .fetch_all(&mut *tx)
                .await?;
            }
        }
        let version = next_version(&mut tx).await?;
        sqlx::query(
            "INSERT INTO orchestrators \
               (name, kind, label, region, config, is_default, resource_version, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, label = excluded.label, \
               region = excluded.region, config = excluded.config, is_default = excluded.is_default, \
               resource_version = excluded.resource_version, updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(next.kind.as_str())
        .bind(&next.label)
        .bind(&next.region)
        .bind(next.config.to_string())
        .bind(default)
        .bind(version as i64)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let (outcome, event) = if current.is_some() {
            (Outcome::Replaced, EventType::Modified)
        } else {
            (Outcome::Created, EventType::Added)
        };
        let made = Orchestrator {
            resource_version: version,
            ..next
        };
        // Committed: a row that does not decode is the next read's error, not this write's.
        for previous in undefaulted.iter().filter_map(|r| decode(r).ok()) {
            self.publish(EventType::Modified, &previous);
        }
        self.publish(event, &made);
        Ok((made, outcome))
    }

    /// Deregisters `name`; says whether it was registered.
    pub async fn deregister(&self, name: &str) -> Result<bool, StoreError> {
        let _writing = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let Some(gone) = fetch_in(&mut tx, name).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        // A delete takes a version of its own, as Kubernetes' does, so a watch resumes past it.
        let version = next_version(&mut tx).await?;
        sqlx::query("DELETE FROM orchestrators WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.publish(
            EventType::Deleted,
            &Orchestrator {
                resource_version: version,
                ..gone
            },
        );
        Ok(true)
    }

    /// Whether the first start has already registered a detected default.
    pub async fn is_bootstrapped(&self) -> Result<bool, StoreError> {
        let v: i64 =
            sqlx::query_scalar("SELECT value FROM registry_meta WHERE key = 'bootstrapped'")
                .fetch_one(&self.pool)
                .await?;
        Ok(v != 0)
    }

    /// The first start: registers `want` as `name` and the default, only if this database has never
    /// been bootstrapped and holds no orchestrator (a concurrent starter, or an operator who
    /// registered before, wins). Returns the registration when it was made.
    pub async fn bootstrap(
        &self,
        name: &str,
        want: &Registration,
    ) -> Result<Option<Orchestrator>, StoreError> {
        let _writing = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let done: i64 =
            sqlx::query_scalar("SELECT value FROM registry_meta WHERE key = 'bootstrapped'")
                .fetch_one(&mut *tx)
                .await?;
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM orchestrators")
            .fetch_one(&mut *tx)
            .await?;
        let made = if done == 0 && count == 0 {
            let version = next_version(&mut tx).await?;
            let now = chrono::Utc::now().to_rfc3339();
            sqlx::query(
                "INSERT INTO orchestrators \
                   (name, kind, label, region, config, is_default, resource_version, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)",
            )
            .bind(name)
            .bind(want.kind.as_str())
            .bind(&want.label)
            .bind(&want.region)
            .bind(want.config.to_string())
            .bind(version as i64)
            .bind(&now)
            .bind(&now)
            .execute(&mut *tx)
            .await?;
            Some(registered(name, want, true, version))
        } else {
            None
        };
        sqlx::query("UPDATE registry_meta SET value = 1 WHERE key = 'bootstrapped'")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        if let Some(made) = &made {
            self.publish(EventType::Added, made);
        }
        Ok(made)
    }
}

impl Store {
    /// Makes a restored copy's registry its own (`berth restore`): every local orchestrator's base
    /// path moves from `from` (the original's data directory) to the same place under `to` (the
    /// copy's), each with a new resourceVersion, in one transaction. A local orchestrator whose base
    /// path lies outside `from` would be shared with the original (each would take the other's
    /// volumes for orphans), so the copy is refused naming them, and nothing changes. Returns how
    /// many moved.
    pub async fn make_copy_own(
        &self,
        from: &Path,
        to: &Path,
    ) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
        let _writing = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM orchestrators WHERE kind = 'local' ORDER BY name"
        )))
        .fetch_all(&mut *tx)
        .await?;
        let mut moved = Vec::new();
        let mut shared = Vec::new();
        for row in &rows {
            let mut orchestrator = decode(row)?;
            let base = orchestrator.config["basePath"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match std::path::Path::new(&base).strip_prefix(from) {
                Ok(rest) => {
                    orchestrator.config["basePath"] =
                        Value::String(to.join(rest).display().to_string());
                    moved.push(orchestrator);
                }
                Err(_) => shared.push(format!("{} ({base})", orchestrator.name)),
            }
        }
        if !shared.is_empty() {
            return Err(format!(
                "local orchestrators keep volumes outside the data directory, where a copy would share them with the original: {}",
                shared.join(", ")
            )
            .into());
        }
        let now = chrono::Utc::now().to_rfc3339();
        for orchestrator in &moved {
            let version = next_version(&mut tx).await?;
            sqlx::query(
                "UPDATE orchestrators SET config = ?, resource_version = ?, updated_at = ? WHERE name = ?",
            )
            .bind(orchestrator.config.to_string())
            .bind(version as i64)
            .bind(&now)
            .bind(&orchestrator.name)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(moved.len())
    }
}

/// The orchestrator a registration of `want` under `name` makes; `storage_ops` follows the kind.
fn registered(
    name: &str,
    want: &Registration,
    default: bool,
    resource_version: u64,
) -> Orchestrator {
    Orchestrator {
        name: name.to_string(),
        kind: want.kind,
        label: want.label.clone(),
        region: want.region.clone(),
        config: want.config.clone(),
        storage_ops: want.kind.supports_storage_ops(),
        default,
        resource_version,
    }
}

/// `SELECT` every column [`decode`] reads from `orchestrators`, then `rest` (a condition, an order);
/// the one place that names the columns a read takes.
fn select(rest: &str) -> sqlx::query::Query<'static, sqlx::Sqlite, SqliteArguments> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM orchestrators {rest}"
    )))
}

async fn fetch_in(
    tx: &mut SqliteTransaction<'static>,
    name: &str,
) -> Result<Option<Orchestrator>, StoreError> {
    let row = select("WHERE name = ?")
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
    row.as_ref().map(decode).transpose()
}

/// Refuses a local orchestrator whose base path nests with another local orchestrator's
/// ([`domain::orchestrator::base_paths_nest`]), naming the other: registrations are cluster-wide.
async fn check_base_path_apart(
    tx: &mut SqliteTransaction<'static>,
    name: &str,
    config: &Value,
) -> Result<(), StoreError> {
    let Some(base_path) = config.get("basePath").and_then(Value::as_str) else {
        return Ok(());
    };
    let others = select("WHERE kind = ? AND name <> ? ORDER BY name")
        .bind(OrchestratorKind::Local.as_str())
        .bind(name)
        .fetch_all(&mut **tx)
        .await?;
    // By their text, and where they lead on this host now: a symbolic link (made by whoever may
    // write under the roots) must not let one base path sit inside another's tree under another
    // name (a break-it finding: a volume made through the link landed in the other's directories,
    // past its capacity).
    let resolved = |path: &str| {
        service_kit::paths::resolve(std::path::Path::new(path))
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
    };
    let mine = resolved(base_path);
    for row in &others {
        let other = decode(row)?;
        let Some(theirs) = other.config.get("basePath").and_then(Value::as_str) else {
            continue;
        };
        let nest_where_they_lead = match (&mine, resolved(theirs)) {
            (Some(mine), Some(theirs)) => domain::orchestrator::base_paths_nest(mine, &theirs),
            _ => false,
        };
        if domain::orchestrator::base_paths_nest(base_path, theirs) || nest_where_they_lead {
            return Err(StoreError::Clash(Status::new(
                Code::AlreadyExists,
                format!(
                    "config.basePath: {base_path:?} nests with the base path {theirs:?} of local orchestrator '{}'; {}",
                    other.name,
                    domain::orchestrator::NESTED_BASE_PATH_RULE
                ),
            )));
        }
    }
    Ok(())
}

/// Hands out the next resourceVersion of the registry-wide sequence.
async fn next_version(tx: &mut SqliteTransaction<'static>) -> Result<u64, StoreError> {
    let v: i64 = sqlx::query_scalar(
        "UPDATE registry_meta SET value = value + 1 WHERE key = 'resource_version' RETURNING value",
    )
    .fetch_one(&mut **tx)
    .await?;
    Ok(v as u64)
}

fn check_precondition(
    name: &str,
    current: Option<&Orchestrator>,
    precondition: Option<&Precondition>,
) -> Result<(), StoreError> {
    match (precondition, current) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(StoreError::PreconditionFailed(format!(
            "If-Match: '{name}' is not a registered orchestration provider, so no version can match"
        ))),
        (Some(Precondition::Exists), Some(_)) => Ok(()),
        (Some(Precondition::Versions(versions)), Some(c)) => {
            if versions.contains(&c.resource_version) {
                Ok(())
            } else {
                Err(StoreError::PreconditionFailed(format!(
                    "If-Match: '{name}' is at resourceVersion {}, not {}; read it again and retry",
                    c.resource_version,
                    versions
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" or ")
                )))
            }
        }
    }
}

fn decode(row: &SqliteRow) -> Result<Orchestrator, StoreError> {
    let name: String = row.try_get("name")?;
    let corrupt = |why: String| StoreError::Corrupt {
        name: name.clone(),
        why,
    };
    let kind_text: String = row.try_get("kind")?;
    let kind = OrchestratorKind::parse_field("kind", &kind_text).map_err(|e| corrupt(e.message))?;
    let config_text: String = row.try_get("config")?;
    let config: Value =
        serde_json::from_str(&config_text).map_err(|e| corrupt(format!("config: {e}")))?;
    let version: i64 = row.try_get("resource_version")?;
    Ok(Orchestrator {
        kind,
        label: row.try_get("label")?,
        region: row.try_get("region")?,
        config,
        storage_ops: kind.supports_storage_ops(),
        default: row.try_get("is_default")?,
        resource_version: u64::try_from(version).map_err(|e| corrupt(format!("version: {e}")))?,
        name,
    })
}
