//! `berth backup`: each part copied beside the running stack (a database with SQLite's online
//! backup, a file as it is), then written as one archive that appears whole or not at all. Apart
//! because taking a copy while writers go on has rules of its own: one transaction per database,
//! and nothing in the data directory is ever written.

use std::path::Path;

use domain::Status;
use sha2::{Digest, Sha256};

use super::archive::{DATABASES, Entry, FORMAT, How, Manifest, PARTS, write_archive};
use super::{check_database, failed, parent_of, refused, sync_dir, writing_refused};

/// The SHA-256 and size of the file at `path`.
fn digest(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher)?;
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Copies the database at `from` into a new file `to` with SQLite's online backup, in one step (one
/// read transaction: a consistent view, while writers go on), then checks the copy.
fn copy_database(from: &Path, to: &Path) -> rusqlite::Result<()> {
    use rusqlite::OpenFlags;
    // Opened for writing but never created: a read-only connection cannot take part in WAL when
    // the database is not open elsewhere, and a missing file is not to be made here.
    let source = rusqlite::Connection::open_with_flags(
        from,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.busy_timeout(std::time::Duration::from_secs(30))?;
    let mut copy = rusqlite::Connection::open(to)?;
    {
        use rusqlite::backup::StepResult;
        let backup = rusqlite::backup::Backup::new(&source, &mut copy)?;
        // Every page in one step (-1): one read transaction, so one consistent view. A writer
        // holding a lock that a step needs (a checkpoint) makes it answer Busy: try again shortly.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More | StepResult::Busy | StepResult::Locked
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                _ => {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        Some("the database stayed locked for 30 s".into()),
                    ));
                }
            }
        }
    }
    check_database(&copy)
}

/// `berth backup --data-dir D --to FILE`.
pub fn backup(data_dir: &Path, to: &Path) -> Result<String, Status> {
    let data_dir = std::fs::canonicalize(data_dir).map_err(|e| {
        refused(format!(
            "--data-dir {}: cannot be read ({e})",
            data_dir.display()
        ))
    })?;
    if !DATABASES.iter().any(|db| data_dir.join(db).is_file()) {
        return Err(refused(format!(
            "--data-dir {}: holds no Berth state (none of {}); is it the directory `berth up --data-dir` was given?",
            data_dir.display(),
            DATABASES.join(", ")
        )));
    }
    let target_dir = parent_of(to);
    // Only ever a regular file (or nothing) is replaced: not a device, a link or a directory,
    // and nothing inside the data directory it copies (its own files, as a typo would name them).
    if let Ok(there) = std::fs::symlink_metadata(to)
        && !there.file_type().is_file()
    {
        return Err(refused(format!(
            "--to {}: is not a regular file (a directory, a link or a device); name a new file or a backup to replace",
            to.display()
        )));
    }
    if let Ok(dir) = std::fs::canonicalize(&target_dir)
        && dir.starts_with(&data_dir)
    {
        return Err(refused(format!(
            "--to {}: is inside the data directory it backs up; write the backup elsewhere",
            to.display()
        )));
    }
    if !target_dir.is_dir() {
        return Err(refused(format!(
            "--to {}: its directory {} does not exist; make it first or name another",
            to.display(),
            target_dir.display()
        )));
    }
    let staging = tempfile::Builder::new()
        .prefix(".berth-backup-")
        .tempdir_in(&target_dir)
        .map_err(|e| {
            writing_refused(&e).map_or_else(
                || failed(format!("--to {}: cannot write beside it", to.display()), &e),
                |why| {
                    refused(format!(
                        "--to {}: cannot write in its directory ({why})",
                        to.display()
                    ))
                },
            )
        })?;
    std::fs::create_dir(staging.path().join("ecs-emulator"))
        .map_err(|e| failed("staging".into(), e))?;
    let mut files = Vec::new();
    for (part, how) in PARTS {
        let source = data_dir.join(part);
        if !source.is_file() {
            continue;
        }
        let copy = staging.path().join(part);
        match how {
            How::Database => copy_database(&source, &copy)
                .map_err(|e| failed(format!("copying {}", source.display()), e))?,
            How::File => {
                std::fs::copy(&source, &copy)
                    .map_err(|e| failed(format!("copying {}", source.display()), e))?;
            }
        }
        let (sha256, bytes) =
            digest(&copy).map_err(|e| failed(format!("reading {}", copy.display()), e))?;
        files.push(Entry {
            path: part.to_string(),
            bytes,
            sha256,
        });
    }
    let manifest = Manifest {
        format: FORMAT,
        berth_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        data_dir: data_dir.clone(),
        files,
    };
    let partial = staging.path().join("archive.tar");
    write_archive(&partial, staging.path(), &manifest)
        .map_err(|e| failed(format!("writing {}", partial.display()), e))?;
    // Whole or not at all: a backup is only ever seen under its name complete, and one there
    // before is replaced only then.
    std::fs::rename(&partial, to)
        .map_err(|e| failed(format!("--to {}: cannot write it", to.display()), e))?;
    sync_dir(&target_dir).map_err(|e| failed(format!("syncing {}", target_dir.display()), e))?;
    let total: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    let mut said = format!(
        "backed up {} into {} ({} files, {total} bytes): {}\n",
        data_dir.display(),
        to.display(),
        manifest.files.len(),
        manifest
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !manifest.files.iter().any(|f| f.path == "controller.key")
        && manifest.files.iter().any(|f| f.path == "controller.db")
    {
        said.push_str("  no controller.key in the data directory: a copy's secrets need the key BERTH_CONTROLLER_KEY_FILE names\n");
    }
    if manifest.files.iter().any(|f| f.path == "controller.key") {
        said.push_str("  it holds the secrets' key and the tokens' hashes: keep it as you keep the data directory (it is readable by you alone)\n");
    }
    said.push_str("  not in it: the volumes' data (back that up where it lives); restore with: berth restore --from FILE --data-dir NEW_DIR\n");
    Ok(said)
}
