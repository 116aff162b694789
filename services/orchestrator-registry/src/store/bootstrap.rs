//! The first start's detected default and a restored copy's base paths: apart because each runs
//! once in a database's life, not per request.

use std::path::Path;

use domain::Orchestrator;
use serde_json::Value;
use service_kit::watch::EventType;

use super::rows::{COLUMNS, decode};
use super::writes::{next_version, registered};
use super::{Registration, Store, StoreError};

impl Store {
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
