//! Reading objects: one by name, a kind's list with the version a watch continues from, and what
//! an owner owns (whole, or for machines only what a set counts them by). Apart from writes
//! because reads take no write lock and publish nothing.

use domain::Labels;
use domain::resources::{Kind, MachinePhase, PRESERVE_ANNOTATION};
use sqlx::{Row as _, SqliteTransaction};

use super::rows::{decode, fetch_object};
use super::{Store, StoreError, Stored};

impl Store {
    /// The object, if stored.
    pub async fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Stored>, StoreError> {
        fetch_object(&self.pool, kind, namespace, name).await
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
}

/// What a machine set (and its deployment) counts a machine it owns by, read from the stored body
/// by SQLite. A set reconciles after every status change of any of its machines and looks at all
/// of them each time, so reading them whole (the body parsed, then decoded) made its cost grow with
/// the square of its size; this is a few fields of each row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedMachine {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `status.phase` (Pending before its first reconcile).
    pub phase: MachinePhase,
    /// Whether its deletion was asked (`metadata.deletionTimestamp`).
    pub deleting: bool,
    /// `metadata.creationTimestamp` (RFC 3339, which sorts as time does).
    pub created: String,
    /// Whether it carries the preserve mark that no controller action deletes.
    pub preserved: bool,
    /// `metadata.labels`: a machine relabelled out of its set's selector is let go.
    pub labels: Labels,
}

impl Store {
    /// The machines whose controlling owner is `owner_uid`, by name, as [`OwnedMachine`]s.
    pub async fn owned_machines(&self, owner_uid: &str) -> Result<Vec<OwnedMachine>, StoreError> {
        let preserve = format!("$.metadata.annotations.\"{PRESERVE_ANNOTATION}\"");
        let rows = sqlx::query(
            "SELECT name, uid, json_extract(body, '$.status.phase') AS phase, \
                    json_extract(body, '$.metadata.deletionTimestamp') IS NOT NULL AS deleting, \
                    json_extract(body, '$.metadata.creationTimestamp') AS created, \
                    json_extract(body, ?) IS 'true' AS preserved, \
                    json_extract(body, '$.metadata.labels') AS labels \
             FROM objects WHERE owner_uid = ? AND kind = ? ORDER BY name",
        )
        .bind(preserve)
        .bind(owner_uid)
        .bind(Kind::Machine.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("name")?;
                let phase: Option<String> = row.try_get("phase")?;
                let phase = match phase.as_deref() {
                    None => MachinePhase::Pending,
                    Some(text) => MachinePhase::parse(text).ok_or_else(|| StoreError::Corrupt {
                        what: format!("Machine {name}"),
                        why: format!("unknown phase {text:?}"),
                    })?,
                };
                let labels: Option<String> = row.try_get("labels")?;
                let labels = match labels {
                    None => Labels::new(),
                    Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                        what: format!("Machine {name}"),
                        why: format!("labels: {e}"),
                    })?,
                };
                Ok(OwnedMachine {
                    labels,
                    uid: row.try_get("uid")?,
                    phase,
                    deleting: row.try_get("deleting")?,
                    created: row
                        .try_get::<Option<String>, _>("created")?
                        .unwrap_or_default(),
                    preserved: row.try_get("preserved")?,
                    name,
                })
            })
            .collect()
    }
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
