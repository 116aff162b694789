//! A stored object and its row in `objects`: how a row is written, removed and decoded, and the
//! owner column kept beside the body. Apart because it is the one place that knows the table's
//! columns; reads and writes go through it.

use domain::resources::Kind;
use serde_json::{Value, json};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

use super::StoreError;

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
        // From the borrowed value: a reconcile decodes every machine of a set, and a copy of
        // each body first was a measurable share of the controller's time.
        T::deserialize(&self.body).map_err(|e| StoreError::Corrupt {
            what: format!("{} {}", self.kind, self.name()),
            why: e.to_string(),
        })
    }
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

pub(super) async fn write_row(
    conn: &mut SqliteConnection,
    kind: Kind,
    namespace: &str,
    body: &Value,
    version: u64,
    sealed: Option<&Sealed>,
    insert: bool,
) -> Result<u64, StoreError> {
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
    let done = sqlx::query(sql)
        .bind(body.to_string())
        .bind(version as i64)
        .bind(sealed.map(|s| s.bytes.clone()))
        .bind(sealed.map(|s| s.key_id.clone()))
        .bind(owner)
        .bind(uid)
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

pub(super) async fn remove_row(
    conn: &mut SqliteConnection,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?")
        .bind(kind.as_str())
        .bind(namespace)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The object at `(kind, namespace, name)` as `executor` sees it: the pool's committed state for a
/// read, the batch's own for the writer.
pub(super) async fn fetch_object<'e>(
    executor: impl sqlx::SqliteExecutor<'e>,
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
    .fetch_optional(executor)
    .await?;
    row.as_ref().map(decode).transpose()
}

pub(super) fn decode(row: &SqliteRow) -> Result<Stored, StoreError> {
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
