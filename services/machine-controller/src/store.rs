//! The controller's SQLite: every stored object, a resourceVersion sequence per namespace, and the orphan
//! collector's sightings.
//!
//! Objects are kept as the JSON a read answers (a secret's values apart, sealed in their own
//! column), keyed by (kind, namespace, name). Every write runs in a `BEGIN IMMEDIATE` transaction
//! under the store's own write lock, and publishes its change to the [`Feed`] before the lock is
//! let go, so watchers see changes in version order. A write that changes nothing writes nothing:
//! a reconcile that finds all as it was makes no version and no event.
//!
//! What the API and the reconcilers may change is theirs to say (each passes a closure that edits
//! the object); the store keeps the fields it owns: uid, creationTimestamp, resourceVersion, and
//! generation, which it bumps when `spec` (or, for kinds without one, anything but `status` and
//! `metadata`) changed. An object whose deletion was asked and whose finalizers are all gone is
//! removed in the same write.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use domain::resources::{API_VERSION, Kind};
use domain::{Code, Status};
use serde_json::{Value, json};
use service_kit::ApiError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool, SqliteTransaction};

use service_kit::watch::{EventType, Feed};

/// One committed change, as the feed carries it.
pub type Change = service_kit::watch::Change<Kind>;

/// How long a writer waits for SQLite's lock before the request is answered 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A secret's values, sealed.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The id of the key that sealed them.
    pub key_id: String,
    /// Nonce, ciphertext and tag.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// One stored object.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its kind.
    pub kind: Kind,
    /// The object as a read answers it.
    pub body: Value,
    /// Its version.
    pub resource_version: u64,
    /// A secret's sealed values.
    pub sealed: Option<Sealed>,
}

impl Stored {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.body["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.body["metadata"]["uid"].as_str().unwrap_or_default()
    }

    /// Decodes the body as the kind's type.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        serde_json::from_value(self.body.clone()).map_err(|e| StoreError::Corrupt {
            what: format!("{} {}", self.kind, self.name()),
            why: e.to_string(),
        })
    }
}

/// What a write did.
#[derive(Debug, Clone)]
pub enum Written {
    /// The object as it now is (unchanged when the edit changed nothing).
    Kept(Stored),
    /// The object is gone (its deletion was asked and nothing held it); its last state.
    Removed(Stored),
}

impl Written {
    /// The object, kept or as it was last.
    pub fn object(&self) -> &Stored {
        match self {
            Written::Kept(s) | Written::Removed(s) => s,
        }
    }
}

/// A store failure, turned into an answer by `From<StoreError> for ApiError`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The edit refused the change (its status says why).
    #[error("{}", .0.message)]
    Refused(Status),
    /// No such object.
    #[error("{kind} {name:?} not found in namespace {namespace:?}")]
    NotFound {
        /// Kind.
        kind: Kind,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The name is taken.
    #[error("{kind} {name:?} already exists in namespace {namespace:?}")]
    Exists {
        /// Kind.
        kind: Kind,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A resourceVersion precondition did not hold.
    #[error(
        "{kind} {name:?} is at resourceVersion {current}, not {expected}; read it again and retry"
    )]
    Conflict {
        /// Kind.
        kind: Kind,
        /// Name.
        name: String,
        /// What the caller expected.
        expected: String,
        /// What it is.
        current: u64,
    },
    /// The database stayed locked past the busy timeout.
    #[error("database busy: {0}")]
    Busy(sqlx::Error),
    /// Anything else.
    #[error("database: {0}")]
    Db(sqlx::Error),
    /// A row that does not decode.
    #[error("corrupt row for {what}: {why}")]
    Corrupt {
        /// Which object.
        what: String,
        /// What is wrong.
        why: String,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
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
            StoreError::Refused(status) => ApiError::new(status),
            e @ StoreError::NotFound { .. } => ApiError::from_code(Code::NotFound, e.to_string()),
            e @ StoreError::Exists { .. } => {
                ApiError::from_code(Code::AlreadyExists, e.to_string())
            }
            e @ StoreError::Conflict { .. } => ApiError::from_code(Code::Aborted, e.to_string()),
            StoreError::Busy(cause) => ApiError::from_code(
                Code::Unavailable,
                "the controller's database is busy; retry shortly",
            )
            .with_cause(cause),
            e @ (StoreError::Db(_) | StoreError::Corrupt { .. }) => ApiError::internal(e),
        }
    }
}

/// The controller's database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    feed: Arc<Feed<Kind>>,
}

/// How many changes the feed remembers for resuming watches.
pub const FEED_CAPACITY: usize = 10_000;

impl Store {
    /// Opens (creating if needed) the database at `path` and runs the embedded migrations.
    pub async fn open(path: &Path) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the directory of {}: {e}", path.display()))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: an acknowledged machine, or a machine the controller recorded before it asked
            // the driver for its VM, survives a power cut; that record is what keeps a VM from
            // being made twice or forgotten.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(|e| format!("cannot open the database {}: {e}", path.display()))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| format!("cannot migrate the database {}: {e}", path.display()))?;
        let current: i64 =
            sqlx::query_scalar("SELECT value FROM controller_meta WHERE key = 'resource_version'")
                .fetch_one(&pool)
                .await?;
        // A watch of a namespace cannot resume from before where its sequence is now.
        let namespaces: Vec<(String, i64)> =
            sqlx::query_as("SELECT namespace, version FROM namespace_versions")
                .fetch_all(&pool)
                .await?;
        let scopes = namespaces.into_iter().map(|(ns, v)| (ns, v.max(0) as u64));
        Ok(Store {
            pool,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            feed: Feed::new(FEED_CAPACITY, current as u64, scopes),
        })
    }

    /// The change feed.
    pub fn feed(&self) -> &Arc<Feed<Kind>> {
        &self.feed
    }

    /// `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The object, if stored.
    pub async fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Stored>, StoreError> {
        let row = sqlx::query(
            "SELECT kind, body, resource_version, sealed, key_id FROM objects \
             WHERE kind = ? AND namespace = ? AND name = ?",
        )
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Every object of `kind` in `namespace` (every namespace when `None`), by namespace and name,
    /// and the version they were read at (what a watch continues from): the namespace's own, or
    /// for every namespace only the floor all their sequences start above.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: Option<&str>,
    ) -> Result<(Vec<Stored>, u64), StoreError> {
        let mut tx = self.pool.begin().await?;
        let rows = match namespace {
            Some(ns) => {
                sqlx::query(
                    "SELECT kind, body, resource_version, sealed, key_id FROM objects \
                 WHERE kind = ? AND namespace = ? ORDER BY name",
                )
                .bind(kind.as_str())
                .bind(ns)
                .fetch_all(&mut *tx)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT kind, body, resource_version, sealed, key_id FROM objects \
                 WHERE kind = ? ORDER BY namespace, name",
                )
                .bind(kind.as_str())
                .fetch_all(&mut *tx)
                .await?
            }
        };
        let version = namespace_version(&mut tx, namespace).await?;
        tx.commit().await?;
        let objects = rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
        Ok((objects, version))
    }

    /// The objects of `kind` whose controlling owner is `owner_uid`.
    pub async fn owned(&self, kind: Kind, owner_uid: &str) -> Result<Vec<Stored>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, body, resource_version, sealed, key_id FROM objects \
             WHERE owner_uid = ? AND kind = ? ORDER BY name",
        )
        .bind(owner_uid)
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(decode).collect()
    }

    /// Stores a new object. `body` is what the caller sent, already checked; the store gives it
    /// its `apiVersion`, `kind`, namespace, uid, creationTimestamp, generation 1 and version.
    pub async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        mut body: Value,
        sealed: Option<Sealed>,
    ) -> Result<Stored, StoreError> {
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let _writer = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let taken: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM objects WHERE kind = ? AND namespace = ? AND name = ?",
        )
        .bind(kind.as_str())
        .bind(namespace)
        .bind(&name)
        .fetch_optional(&mut *tx)
        .await?;
        if taken.is_some() {
            return Err(StoreError::Exists {
                kind,
                namespace: namespace.into(),
                name,
            });
        }
        let version = next_version(&mut tx, namespace).await?;
        body["apiVersion"] = json!(API_VERSION);
        body["kind"] = json!(kind.as_str());
        let meta = &mut body["metadata"];
        meta["namespace"] = json!(namespace);
        // A uid chosen by the API (a secret's, which its sealing is bound to) is kept.
        if meta["uid"].as_str().is_none_or(str::is_empty) {
            meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        }
        meta["creationTimestamp"] = json!(now());
        meta["generation"] = json!(1);
        meta["resourceVersion"] = json!(version.to_string());
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
        }
        write_row(
            &mut tx,
            kind,
            namespace,
            &body,
            version,
            sealed.as_ref(),
            true,
        )
        .await?;
        tx.commit().await?;
        let stored = Stored {
            kind,
            body,
            resource_version: version,
            sealed,
        };
        self.publish(EventType::Added, &stored, namespace, false);
        Ok(stored)
    }

    /// Edits a stored object. `expect_uid` (when given) must be the object's uid, so an edit meant
    /// for one incarnation of a name never lands on the next; `precondition` (a resourceVersion)
    /// must be its version. `edit` changes the body (and, for a secret, may hand new sealed values
    /// back); the store then keeps what it owns, bumps the generation when the spec changed, and
    /// removes an object whose deletion was asked once no finalizer holds it.
    pub async fn update<F>(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        expect_uid: Option<&str>,
        precondition: Option<&str>,
        edit: F,
    ) -> Result<Written, StoreError>
    where
        F: FnOnce(&mut Value, &mut Option<Sealed>) -> Result<(), Status>,
    {
        let _writer = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query(
            "SELECT kind, body, resource_version, sealed, key_id FROM objects \
             WHERE kind = ? AND namespace = ? AND name = ?",
        )
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let not_found = || StoreError::NotFound {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        };
        let current = row
            .as_ref()
            .map(decode)
            .transpose()?
            .ok_or_else(not_found)?;
        if expect_uid.is_some_and(|uid| uid != current.uid()) {
            return Err(not_found());
        }
        if let Some(expected) = precondition
            && expected != current.resource_version.to_string()
        {
            return Err(StoreError::Conflict {
                kind,
                name: name.into(),
                expected: expected.chars().take(32).collect(),
                current: current.resource_version,
            });
        }
        let mut body = current.body.clone();
        let mut sealed = current.sealed.clone();
        edit(&mut body, &mut sealed).map_err(StoreError::Refused)?;
        // What the store owns, whatever the edit did.
        body["apiVersion"] = json!(API_VERSION);
        body["kind"] = json!(kind.as_str());
        for field in ["name", "namespace", "uid", "creationTimestamp"] {
            body["metadata"][field] = current.body["metadata"][field].clone();
        }
        if current.body["metadata"].get("deletionTimestamp").is_some() {
            body["metadata"]["deletionTimestamp"] =
                current.body["metadata"]["deletionTimestamp"].clone();
        }
        body["metadata"]["generation"] = current.body["metadata"]["generation"].clone();
        body["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"].clone();
        if body == current.body && sealed == current.sealed {
            tx.rollback().await?;
            return Ok(Written::Kept(current));
        }
        let status_only = sealed == current.sealed && same_but_status(&body, &current.body);
        if spec_of(kind, &body) != spec_of(kind, &current.body) {
            let generation = current.body["metadata"]["generation"].as_i64().unwrap_or(1);
            body["metadata"]["generation"] = json!(generation + 1);
        }
        let version = next_version(&mut tx, namespace).await?;
        body["metadata"]["resourceVersion"] = json!(version.to_string());
        let deleting = body["metadata"].get("deletionTimestamp").is_some();
        let held = body["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        let stored = Stored {
            kind,
            body,
            resource_version: version,
            sealed,
        };
        if deleting && !held {
            remove_row(&mut tx, kind, namespace, name).await?;
            tx.commit().await?;
            self.publish(EventType::Deleted, &stored, namespace, false);
            return Ok(Written::Removed(stored));
        }
        write_row(
            &mut tx,
            kind,
            namespace,
            &stored.body,
            version,
            stored.sealed.as_ref(),
            false,
        )
        .await?;
        tx.commit().await?;
        let previous_labels = &current.body["metadata"]["labels"];
        let relabelled = (*previous_labels != stored.body["metadata"]["labels"])
            .then(|| previous_labels.clone());
        self.publish_change(
            EventType::Modified,
            &stored,
            namespace,
            status_only,
            relabelled,
        );
        Ok(Written::Kept(stored))
    }

    /// Asks for an object's deletion: it goes now when no finalizer holds it, else it is marked
    /// (`deletionTimestamp`) and goes once its finalizers are done. Asking again changes nothing.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        expect_uid: Option<&str>,
        precondition: Option<&str>,
    ) -> Result<Written, StoreError> {
        self.update(
            kind,
            namespace,
            name,
            expect_uid,
            precondition,
            |body, _| {
                if body["metadata"].get("deletionTimestamp").is_none() {
                    body["metadata"]["deletionTimestamp"] = json!(now());
                }
                Ok(())
            },
        )
        .await
    }

    /// Every sealed secret, for resealing with a new key: (namespace, name, uid, sealed).
    pub async fn sealed_secrets(
        &self,
    ) -> Result<Vec<(String, String, String, Sealed)>, StoreError> {
        let rows = sqlx::query(
            "SELECT namespace, name, uid, sealed, key_id FROM objects \
             WHERE kind = 'Secret' AND sealed IS NOT NULL ORDER BY namespace, name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("namespace")?,
                    row.try_get("name")?,
                    row.try_get("uid")?,
                    Sealed {
                        key_id: row
                            .try_get::<Option<String>, _>("key_id")?
                            .unwrap_or_default(),
                        bytes: row.try_get("sealed")?,
                    },
                ))
            })
            .collect()
    }

    /// Replaces a secret's sealed values (same values, another key) without a new version: what
    /// a read answers does not change.
    pub async fn reseal(&self, uid: &str, old: &Sealed, new: &Sealed) -> Result<bool, StoreError> {
        let _writer = self.write_lock.lock().await;
        let done = sqlx::query(
            "UPDATE objects SET sealed = ?, key_id = ? WHERE uid = ? AND sealed = ? AND key_id = ?",
        )
        .bind(&new.bytes)
        .bind(&new.key_id)
        .bind(uid)
        .bind(&old.bytes)
        .bind(&old.key_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records, before the driver is asked, that this controller makes machine `name` (uid `uid`)
    /// of class `class_name` in `namespace`.
    pub async fn record_made(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        class_name: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO made_machines (namespace, name, uid, class_name) VALUES (?, ?, ?, ?) \
             ON CONFLICT (namespace, name) DO UPDATE SET uid = excluded.uid, class_name = excluded.class_name",
        )
        .bind(namespace)
        .bind(name)
        .bind(uid)
        .bind(class_name)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The machines of class `class_name` in `namespace` this controller made: name → uid.
    pub async fn made(
        &self,
        namespace: &str,
        class_name: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, uid FROM made_machines WHERE namespace = ? AND class_name = ?",
        )
        .bind(namespace)
        .bind(class_name)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("name")?, r.try_get("uid")?)))
            .collect()
    }

    /// Forgets that machine `name` in `namespace` was made (its VM is known gone).
    pub async fn forget_made(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM made_machines WHERE namespace = ? AND name = ?")
            .bind(namespace)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Forgets the sighting of `provider_id`.
    pub async fn forget_orphan(&self, provider_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM orphan_sightings WHERE provider_id = ?")
            .bind(provider_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records that `provider_id` (in `namespace`, of class `class_name`, named for `machine`)
    /// was seen backing no machine in one full listing; returns how many listings have seen it so
    /// and when the first did.
    pub async fn sight_orphan(
        &self,
        provider_id: &str,
        namespace: &str,
        class_name: &str,
        machine: &str,
    ) -> Result<(u32, String), StoreError> {
        let row = sqlx::query(
            "INSERT INTO orphan_sightings (provider_id, namespace, class_name, machine, first_seen, sightings) \
             VALUES (?, ?, ?, ?, ?, 1) \
             ON CONFLICT (provider_id) DO UPDATE SET sightings = sightings + 1 \
             RETURNING sightings, first_seen",
        )
        .bind(provider_id)
        .bind(namespace)
        .bind(class_name)
        .bind(machine)
        .bind(now())
        .fetch_one(&self.pool)
        .await?;
        let sightings: i64 = row.try_get("sightings")?;
        Ok((sightings as u32, row.try_get("first_seen")?))
    }

    /// Forgets the sightings of VMs not in `still_orphaned` among those of `namespace` and
    /// `class_name` (they back a machine again, or are gone).
    pub async fn forget_orphans_except(
        &self,
        namespace: &str,
        class_name: &str,
        still_orphaned: &[String],
    ) -> Result<(), StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT provider_id FROM orphan_sightings WHERE namespace = ? AND class_name = ?",
        )
        .bind(namespace)
        .bind(class_name)
        .fetch_all(&self.pool)
        .await?;
        for id in ids.iter().filter(|id| !still_orphaned.contains(id)) {
            sqlx::query("DELETE FROM orphan_sightings WHERE provider_id = ?")
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    fn publish(&self, event: EventType, stored: &Stored, namespace: &str, status_only: bool) {
        self.publish_change(event, stored, namespace, status_only, None);
    }

    fn publish_change(
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

/// Whether two objects differ in `status` at most (compared field by field, without copies: this
/// runs on every write the reconcilers make).
fn same_but_status(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let others =
        |o: &'_ serde_json::Map<String, Value>| o.keys().filter(|k| *k != "status").count();
    others(a) == others(b)
        && a.iter()
            .filter(|(k, _)| *k != "status")
            .all(|(k, v)| b.get(k) == Some(v))
}

/// What a change of the generation is measured on: `spec`, or for kinds without one (secrets,
/// classes) everything but `metadata` and `status`.
fn spec_of(kind: Kind, body: &Value) -> Value {
    match kind {
        Kind::Machine | Kind::MachineSet | Kind::MachineDeployment => body["spec"].clone(),
        Kind::Secret | Kind::MachineClass => {
            let mut rest = body.clone();
            if let Some(m) = rest.as_object_mut() {
                m.remove("metadata");
                m.remove("status");
            }
            rest
        }
    }
}

/// The current time as the objects write it (RFC 3339, seconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The next resourceVersion of `namespace`'s own sequence, which starts above the store's floor
/// (every version issued before namespaces had sequences of their own): one sequence for all let
/// a tenant learn from its own versions how much the others wrote.
async fn next_version(
    tx: &mut SqliteTransaction<'static>,
    namespace: &str,
) -> Result<u64, StoreError> {
    let v: i64 = sqlx::query_scalar(
        "INSERT INTO namespace_versions (namespace, version) \
         VALUES (?, (SELECT value FROM controller_meta WHERE key = 'resource_version') + 1) \
         ON CONFLICT (namespace) DO UPDATE SET version = version + 1 RETURNING version",
    )
    .bind(namespace)
    .fetch_one(&mut **tx)
    .await?;
    Ok(v as u64)
}

/// The version `namespace` is at (the floor when it has none yet); for every namespace, the floor.
async fn namespace_version(
    tx: &mut SqliteTransaction<'static>,
    namespace: Option<&str>,
) -> Result<u64, StoreError> {
    let floor: i64 =
        sqlx::query_scalar("SELECT value FROM controller_meta WHERE key = 'resource_version'")
            .fetch_one(&mut **tx)
            .await?;
    let own: Option<i64> = match namespace {
        Some(ns) => {
            sqlx::query_scalar("SELECT version FROM namespace_versions WHERE namespace = ?")
                .bind(ns)
                .fetch_optional(&mut **tx)
                .await?
        }
        None => None,
    };
    Ok(own.unwrap_or(floor).max(0) as u64)
}

/// The uid of the owner reference marked `controller: true`, or of the only one.
fn controlling_owner(body: &Value) -> String {
    let owners = body["metadata"]["ownerReferences"].as_array();
    let owners = owners.map(Vec::as_slice).unwrap_or_default();
    owners
        .iter()
        .find(|o| o["controller"] == json!(true))
        .or(if owners.len() == 1 {
            owners.first()
        } else {
            None
        })
        .and_then(|o| o["uid"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn write_row(
    tx: &mut SqliteTransaction<'static>,
    kind: Kind,
    namespace: &str,
    body: &Value,
    version: u64,
    sealed: Option<&Sealed>,
    insert: bool,
) -> Result<(), StoreError> {
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    let uid = body["metadata"]["uid"].as_str().unwrap_or_default();
    let owner = controlling_owner(body);
    let sql = if insert {
        "INSERT INTO objects (body, resource_version, sealed, key_id, owner_uid, uid, kind, namespace, name) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    } else {
        "UPDATE objects SET body = ?, resource_version = ?, sealed = ?, key_id = ?, owner_uid = ? \
         WHERE uid = ? AND kind = ? AND namespace = ? AND name = ?"
    };
    sqlx::query(sql)
        .bind(body.to_string())
        .bind(version as i64)
        .bind(sealed.map(|s| s.bytes.clone()))
        .bind(sealed.map(|s| s.key_id.clone()))
        .bind(owner)
        .bind(uid)
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn remove_row(
    tx: &mut SqliteTransaction<'static>,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?")
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn decode(row: &SqliteRow) -> Result<Stored, StoreError> {
    let kind_text: String = row.try_get("kind")?;
    let kind = Kind::parse(&kind_text).ok_or_else(|| StoreError::Corrupt {
        what: kind_text.clone(),
        why: "unknown kind".into(),
    })?;
    let text: String = row.try_get("body")?;
    let body: Value = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        what: kind_text.clone(),
        why: e.to_string(),
    })?;
    let version: i64 = row.try_get("resource_version")?;
    let bytes: Option<Vec<u8>> = row.try_get("sealed")?;
    let key_id: Option<String> = row.try_get("key_id")?;
    Ok(Stored {
        kind,
        body,
        resource_version: version as u64,
        sealed: bytes.map(|bytes| Sealed {
            key_id: key_id.unwrap_or_default(),
            bytes,
        }),
    })
}
