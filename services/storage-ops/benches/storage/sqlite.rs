//! The baselines below storage-ops: raw SQLite with its settings and schema, sqlx on one
//! connection, and storage-ops' own store.

use super::*;

pub(super) const SCHEMA: &str = include_str!("../../migrations/0001_volumes.sql");
pub(super) const RAW_ROWS: usize = 2000;

pub(super) fn row(namespace: &str, name: &str, gold: bool) -> VolumeRow {
    VolumeRow {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: namespace.into(),
        name: name.into(),
        orchestrator: "disk".into(),
        kind: OrchestratorKind::Local,
        backend_config: serde_json::json!({"basePath": "/var/lib/berth/volumes"}),
        capacity: "1Gi".into(),
        capacity_bytes: 1 << 30,
        replicas: 1,
        labels: if gold {
            BTreeMap::from([("tier".into(), "gold".into())])
        } else {
            BTreeMap::from([("tier".into(), "bronze".into())])
        },
        parameters: BTreeMap::new(),
        spec_hash: "0".repeat(64),
        phase: VolumePhase::Ready,
        reason: "Provisioned".into(),
        message: String::new(),
        location: format!("/var/lib/berth/volumes/{namespace}/{name}"),
        created_at: now(),
        updated_at: now(),
        resource_version: 0,
    }
}

pub(super) const INSERT: &str = "INSERT INTO volumes (uid, namespace, name, orchestrator, kind, backend_config, capacity, \
     capacity_bytes, replicas, labels, parameters, spec_hash, phase, reason, message, location, created_at, \
     updated_at, resource_version) VALUES (?1, ?2, ?3, 'disk', 'local', ?4, '1Gi', 1073741824, 1, ?5, '{}', ?6, \
     'Ready', 'Provisioned', '', ?7, ?8, ?8, ?9)";

/// One row of the volumes table through rusqlite, outside storage-ops' store (the raw baselines).
pub(super) fn raw_insert(conn: &rusqlite::Connection, r: &VolumeRow, resource_version: i64) {
    conn.execute(
        INSERT,
        rusqlite::params![
            r.uid,
            r.namespace,
            r.name,
            r#"{"basePath":"/var/lib/berth/volumes"}"#,
            r#"{"tier":"bronze"}"#,
            r.spec_hash,
            r.location,
            r.created_at,
            resource_version
        ],
    )
    .unwrap();
}

pub(super) fn raw_sqlite(dir: &Path, per_txn: usize, synchronous: &str) -> f64 {
    let path = dir.join(format!(
        "raw-{per_txn}-{synchronous}-{}.db",
        uuid::Uuid::new_v4()
    ));
    let conn = RawDb::open(&path, synchronous).conn;
    let started = Instant::now();
    let mut i = 0;
    while i < RAW_ROWS {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..per_txn {
            raw_insert(&conn, &row("bench", &format!("v{i:06}"), false), i as i64);
            i += 1;
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    RAW_ROWS as f64 / started.elapsed().as_secs_f64()
}

pub(super) async fn sqlx_single(dir: &Path, synchronous: SqliteSynchronous) -> f64 {
    let path = dir.join(format!("sqlx-{}.db", uuid::Uuid::new_v4()));
    // The store's settings (see `raw_sqlite`), through sqlx.
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    conn.execute(sqlx::AssertSqlSafe(SCHEMA)).await.unwrap();
    let config = r#"{"basePath":"/var/lib/berth/volumes"}"#;
    let started = Instant::now();
    for i in 0..RAW_ROWS {
        let r = row("bench", &format!("v{i:06}"), false);
        let mut tx = conn.begin().await.unwrap();
        sqlx::query(INSERT)
            .bind(&r.uid)
            .bind(&r.namespace)
            .bind(&r.name)
            .bind(config)
            .bind(r#"{"tier":"bronze"}"#)
            .bind(&r.spec_hash)
            .bind(&r.location)
            .bind(&r.created_at)
            .bind(i as i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    RAW_ROWS as f64 / started.elapsed().as_secs_f64()
}

pub(super) async fn store_inserts(dir: &Path, callers: usize) -> f64 {
    let store = Store::open(&dir.join(format!("store-{callers}-{}.db", uuid::Uuid::new_v4())))
        .await
        .unwrap();
    let started = Instant::now();
    let per = RAW_ROWS / callers;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per {
                    store
                        .insert(row("bench", &format!("c{c:03}-{i:06}"), false), None)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per * callers) as f64 / started.elapsed().as_secs_f64()
}

/// A raw connection with storage-ops' settings and schema (the raw baseline and the floor), with
/// the resource version it last wrote.
pub(super) struct RawDb {
    conn: rusqlite::Connection,
    rv: i64,
}

impl RawDb {
    /// `synchronous` is `FULL` (storage-ops' own) or `NORMAL` (for comparison).
    pub(super) fn open(path: &Path, synchronous: &str) -> RawDb {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;"
        ))
        .unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        RawDb { conn, rv: 0 }
    }

    /// One single-row transaction, committed (so fsynced: FULL).
    pub(super) fn commit_one(&mut self, name: &str) {
        self.rv += 1;
        let r = row("raw", name, false);
        self.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        raw_insert(&self.conn, &r, self.rv);
        self.conn.execute_batch("COMMIT").unwrap();
    }
}
