//! The row codec: the columns a read takes, the `SELECT` naming them, and an orchestrator decoded
//! from its row. Apart because every read and write goes through it, and a row that does not
//! decode is refused here, in one place.

use domain::{Orchestrator, OrchestratorKind};
use serde_json::Value;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, SqliteTransaction};

use super::StoreError;

pub(super) const COLUMNS: &str = "name, kind, label, region, config, is_default, resource_version";

/// `SELECT` every column [`decode`] reads from `orchestrators`, then `rest` (a condition, an order);
/// the one place that names the columns a read takes.
pub(super) fn select(rest: &str) -> sqlx::query::Query<'static, sqlx::Sqlite, SqliteArguments> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM orchestrators {rest}"
    )))
}

pub(super) async fn fetch_in(
    tx: &mut SqliteTransaction<'static>,
    name: &str,
) -> Result<Option<Orchestrator>, StoreError> {
    let row = select("WHERE name = ?")
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
    row.as_ref().map(decode).transpose()
}

pub(super) fn decode(row: &SqliteRow) -> Result<Orchestrator, StoreError> {
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
