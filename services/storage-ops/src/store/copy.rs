//! Making a restored copy of a database its own (`berth restore`): a copy started beside the
//! original must never act on the original's backend objects.
//!
//! Two things tie a volume row to an object: the database's `instance` (the label on its Docker
//! volumes and Kubernetes claims, checked before any of them is changed) and, for local volumes, the
//! base path kept in the row's `backend_config` (a delete removes `<basePath>/<namespace>/<object>`,
//! whatever the registry says now). A copy therefore takes a new instance, and its local rows move
//! from the original's data directory to the copy's. A local row whose base path lies outside the
//! original's data directory cannot be moved (its files are not in any backup) and would be shared,
//! so such a copy is refused, naming the volumes.

use std::path::{Path, PathBuf};

/// What [`make_copy_own`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyMade {
    /// The copy's new instance.
    pub instance: String,
    /// Local volumes (and retained objects) moved under the copy's data directory.
    pub moved: usize,
}

/// Why a database cannot become a copy.
#[derive(Debug)]
pub enum CopyError {
    /// Local volumes whose files lie outside the original's data directory (`namespace/name` and
    /// base path of each, at most ten): a copy would delete the original's files.
    Shared(Vec<(String, PathBuf)>),
    /// The database could not be read or written.
    Database(Box<dyn std::error::Error + Send + Sync>),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::Shared(volumes) => {
                let listed: Vec<String> = volumes
                    .iter()
                    .map(|(volume, base)| format!("{volume} (in {})", base.display()))
                    .collect();
                write!(
                    f,
                    "local volumes keep their files outside the data directory, where a copy would share them with the original: {}",
                    listed.join(", ")
                )
            }
            CopyError::Database(e) => write!(f, "the storage database: {e}"),
        }
    }
}

impl std::error::Error for CopyError {}

impl From<rusqlite::Error> for CopyError {
    fn from(e: rusqlite::Error) -> Self {
        CopyError::Database(Box::new(e))
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for CopyError {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        CopyError::Database(e)
    }
}

/// `path` (a path under `from`) moved under `to`; `None` when it is not under `from`.
fn moved(path: &str, from: &Path, to: &Path) -> Option<String> {
    let rest = Path::new(path).strip_prefix(from).ok()?;
    Some(to.join(rest).display().to_string())
}

/// Gives the database at `path` (not open anywhere else) a new instance and moves its local
/// volumes' base paths and locations from `from` (the original's data directory) to `to` (the
/// copy's), in one transaction: all of it or nothing.
pub fn make_copy_own(path: &Path, from: &Path, to: &Path) -> Result<CopyMade, CopyError> {
    let mut conn = super::schema::open_writer(path)?;
    super::schema::migrate(&mut conn)?;
    let tx = conn.transaction()?;
    let rows: Vec<(String, String, String, String, String)> = tx
        .prepare("SELECT uid, namespace, name, backend_config, location FROM volumes WHERE kind = 'local'")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut shared = Vec::new();
    let mut moved_count = 0;
    for (uid, namespace, name, config, location) in rows {
        let mut config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| super::row::bad_column(3, e))?;
        let base = config["basePath"].as_str().unwrap_or_default().to_string();
        let Some(new_base) = moved(&base, from, to) else {
            shared.push((format!("{namespace}/{name}"), PathBuf::from(base)));
            continue;
        };
        config["basePath"] = serde_json::Value::String(new_base);
        let location = moved(&location, from, to).unwrap_or(location);
        tx.execute(
            "UPDATE volumes SET backend_config = ?1, location = ?2 WHERE uid = ?3",
            rusqlite::params![config.to_string(), location, uid],
        )?;
        moved_count += 1;
    }
    if !shared.is_empty() {
        shared.truncate(10);
        return Err(CopyError::Shared(shared));
    }
    let retained: Vec<(String, String)> = tx
        .prepare("SELECT uid, location FROM retained WHERE kind = 'local'")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (uid, location) in retained {
        // A retained object is only listed, never acted on: one outside stays as it was.
        if let Some(location) = moved(&location, from, to) {
            tx.execute(
                "UPDATE retained SET location = ?1 WHERE uid = ?2",
                rusqlite::params![location, uid],
            )?;
            moved_count += 1;
        }
    }
    let instance = uuid::Uuid::new_v4().to_string();
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('instance', ?1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [&instance],
    )?;
    tx.commit()?;
    Ok(CopyMade {
        instance,
        moved: moved_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database_with(dir: &Path, volumes: &[(&str, &str, &str)]) -> PathBuf {
        let path = dir.join("storage.db");
        let mut conn = super::super::schema::open_writer(&path).unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('instance', 'original')",
            [],
        )
        .unwrap();
        for (i, (name, kind, base)) in volumes.iter().enumerate() {
            conn.execute(
                "INSERT INTO volumes (uid, namespace, name, orchestrator, kind, backend_config, capacity, capacity_bytes, replicas, labels, parameters, spec_hash, phase, location, created_at, updated_at, resource_version)
                 VALUES (?1, 'team', ?2, 'o', ?3, ?4, '1Mi', 1048576, 1, '{}', '{}', 'h', 'Ready', ?5, 't', 't', ?6)",
                rusqlite::params![
                    format!("uid-{i}"),
                    name,
                    kind,
                    serde_json::json!({"basePath": base}).to_string(),
                    format!("{base}/team/{name}-uid-{i}"),
                    i as i64 + 1
                ],
            )
            .unwrap();
        }
        path
    }

    fn column(path: &Path, sql: &str) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn a_copy_takes_a_new_instance_and_its_local_volumes_move_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = database_with(
            dir.path(),
            &[
                ("a", "local", "/srv/old/volumes/local"),
                ("b", "docker", "unix:///var/run/docker.sock"),
            ],
        );
        let made = make_copy_own(&path, Path::new("/srv/old"), Path::new("/srv/new")).unwrap();
        assert_eq!(made.moved, 1);
        assert_ne!(made.instance, "original");
        assert_eq!(
            column(&path, "SELECT value FROM meta WHERE key = 'instance'"),
            [made.instance.as_str()]
        );
        assert_eq!(
            column(&path, "SELECT location FROM volumes ORDER BY name"),
            [
                "/srv/new/volumes/local/team/a-uid-0",
                "unix:///var/run/docker.sock/team/b-uid-1"
            ]
        );
        assert_eq!(
            column(
                &path,
                "SELECT json_extract(backend_config, '$.basePath') FROM volumes WHERE name = 'a'"
            ),
            ["/srv/new/volumes/local"]
        );
        // `/srv/ne` is not a part of `/srv/new`: paths move by whole components.
        let again = make_copy_own(&path, Path::new("/srv/ne"), Path::new("/x")).unwrap_err();
        assert!(matches!(again, CopyError::Shared(_)), "{again}");
    }

    #[test]
    fn a_local_volume_outside_the_data_directory_refuses_the_copy_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = database_with(
            dir.path(),
            &[
                ("inside", "local", "/srv/old/volumes"),
                ("outside", "local", "/mnt/shared"),
            ],
        );
        let e = make_copy_own(&path, Path::new("/srv/old"), Path::new("/srv/new")).unwrap_err();
        let said = e.to_string();
        assert!(said.contains("team/outside (in /mnt/shared)"), "{said}");
        assert!(!said.contains("team/inside"), "{said}");
        assert_eq!(
            column(&path, "SELECT value FROM meta WHERE key = 'instance'"),
            ["original"]
        );
        assert_eq!(
            column(&path, "SELECT location FROM volumes WHERE name = 'inside'"),
            ["/srv/old/volumes/team/inside-uid-0"]
        );
    }
}
