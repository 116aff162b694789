//! The sealed values of secrets, for resealing them with a new key. Apart because it reaches past
//! the objects to their sealed column, and changes it without a new version.

use sqlx::Row;

use super::{Sealed, Store, StoreError};

impl Store {
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
        let (uid, old, new) = (uid.to_string(), old.clone(), new.clone());
        self.commit_one_statement(move |session| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE objects SET sealed = ?, key_id = ? \
                     WHERE uid = ? AND sealed = ? AND key_id = ?",
                )
                .bind(&new.bytes)
                .bind(&new.key_id)
                .bind(&uid)
                .bind(&old.bytes)
                .bind(&old.key_id)
                .execute(&mut session.conn)
                .await?;
                // The writer follows rows by what it writes through them; this one it did not.
                session.forget_rows();
                Ok((done.rows_affected() == 1, Vec::new()))
            })
        })
        .await
    }
}
