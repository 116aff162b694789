//! The reads: one orchestrator, all of them, the default, and a list with its version. Apart
//! from the writes because they take no lock and publish nothing.

use domain::Orchestrator;

use super::rows::{decode, select};
use super::{Store, StoreError};

impl Store {
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
}
