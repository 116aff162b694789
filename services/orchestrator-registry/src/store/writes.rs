//! Registering and deregistering, each in one `BEGIN IMMEDIATE` transaction with the checks it
//! makes (`If-Match`, base paths apart) and the versions it takes, then published to the feed.
//! Apart because these are the writes, and the order they lock, commit and publish in matters.

use domain::{Code, Orchestrator, OrchestratorKind, Status};
use serde_json::Value;
use service_kit::watch::{Change, EventType};
use sqlx::SqliteTransaction;

use super::rows::{COLUMNS, decode, fetch_in, select};
use super::{Outcome, Precondition, Registration, Store, StoreError};

impl Store {
    pub(super) fn publish(&self, event: EventType, orchestrator: &Orchestrator) {
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
}

/// The orchestrator a registration of `want` under `name` makes; `storage_ops` follows the kind.
pub(super) fn registered(
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
pub(super) async fn next_version(tx: &mut SqliteTransaction<'static>) -> Result<u64, StoreError> {
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
