//! `berth backup` and `berth restore`: a consistent copy of a `berth up` data directory's state,
//! taken while the stack runs, and brought back into a new directory.
//!
//! A backup is a tar archive: a manifest (`berth-backup.json`: format, Berth's version, when, the
//! original data directory, and every file's size and SHA-256) and the files of [`PARTS`]. Each
//! SQLite database is copied with SQLite's online backup API in one step, so each is one
//! transaction's view, taken beside the running writers (WAL lets them go on). The parts are taken
//! in the order that lets the copy heal itself: the emulator's VMs before the controller that made
//! them (a VM made after the emulator's copy is one the controller's copy re-creates; the other way
//! round it would be a VM no copy knows it made), the volumes before the orchestrators they name (a
//! volume never names an orchestrator the copy lacks: one in use cannot be removed).
//!
//! What it does not hold: the volumes' data (local directories, Docker volumes, claims: the data
//! belongs to the orchestrator's own backups), the gateway's last-used times, logs.
//!
//! A restore writes a new or empty directory only, and all of it or nothing: it unpacks beside the
//! target, checks every file against the manifest and every database's integrity, makes the copy
//! its own, then renames the whole directory into place. "Its own" (the default) means a copy
//! that can run beside the original without touching what the original made: a new Docker instance
//! (its machines, volumes and claims are told apart by it), and local orchestrators and volumes
//! moved from the original's data directory to the copy's (see
//! `storage_ops::store::make_copy_own`). `--same-instance` keeps every identity, to replace an
//! original that is gone; the two must then never run at once.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use domain::{Code, Status};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's name in the archive.
pub const MANIFEST: &str = "berth-backup.json";
/// The archive format this Berth writes and reads.
const FORMAT: u32 = 1;
/// The most a manifest may hold (it is read whole).
const MANIFEST_LIMIT: u64 = 1 << 20;

/// How a part is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// SQLite's online backup of the database.
    Database,
    /// The file as it is: each is replaced whole by a rename when it changes, so a read sees one
    /// version.
    File,
}

/// What a backup holds, in the order it is taken (see the module's words), as paths relative to
/// the data directory.
const PARTS: [(&str, How); 8] = [
    ("ecs-emulator/state.json", How::File),
    ("ecs-emulator/access-key.json", How::File),
    ("controller.db", How::Database),
    ("storage.db", How::Database),
    ("registry.db", How::Database),
    // The key the controller seals secrets with: without it the copy's secrets cannot be read.
    ("controller.key", How::File),
    // Hashes of the tokens only, never a token.
    ("tokens", How::File),
    ("docker-instance", How::File),
];

/// The databases: one of them makes a directory a Berth data directory.
const DATABASES: [&str; 3] = ["controller.db", "storage.db", "registry.db"];

/// The manifest.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    format: u32,
    berth_version: String,
    created_at: String,
    /// The original data directory, absolute: what the copy's local paths move from.
    data_dir: PathBuf,
    files: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    path: String,
    bytes: u64,
    sha256: String,
}

fn refused(message: String) -> Status {
    Status::new(Code::FailedPrecondition, message)
}

fn bad_archive(from: &Path, message: String) -> Status {
    Status::new(
        Code::InvalidArgument,
        format!("{} is not a usable Berth backup: {message}", from.display()),
    )
}

/// Why a place cannot be written, when it is the caller's to fix (a directory that is not there,
/// not theirs, or read-only), not a failure retrying may cure.
fn writing_refused(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => Some("no such directory"),
        ErrorKind::PermissionDenied => Some("permission denied"),
        ErrorKind::ReadOnlyFilesystem => Some("a read-only file system"),
        ErrorKind::NotADirectory => Some("a path in it is not a directory"),
        _ => None,
    }
}

fn failed(what: String, e: impl std::fmt::Display) -> Status {
    Status::new(Code::Internal, format!("{what}: {e}"))
}

/// The SHA-256 and size of the file at `path`.
fn digest(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher)?;
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Syncs a directory, so a rename into it survives a power cut.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
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

fn check_database(db: &rusqlite::Connection) -> rusqlite::Result<()> {
    let verdict: String = db.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if verdict == "ok" {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!("quick_check: {verdict}")),
        ))
    }
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

fn write_archive(path: &Path, staging: &Path, manifest: &Manifest) -> std::io::Result<()> {
    let file = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?
    };
    let mut archive = tar::Builder::new(std::io::BufWriter::new(file));
    let body = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(body.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(chrono::Utc::now().timestamp().max(0) as u64);
    header.set_cksum();
    archive.append_data(&mut header, MANIFEST, body.as_slice())?;
    for entry in &manifest.files {
        let mut file = std::fs::File::open(staging.join(&entry.path))?;
        archive.append_file(&entry.path, &mut file)?;
    }
    let mut out = archive.into_inner()?;
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// `berth restore --from FILE --data-dir D [--same-instance]`.
pub async fn restore(from: &Path, data_dir: &Path, same_instance: bool) -> Result<String, Status> {
    if std::fs::symlink_metadata(data_dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refused(format!(
            "--data-dir {}: is a symbolic link; name the directory itself",
            data_dir.display()
        )));
    }
    if let Ok(mut inside) = std::fs::read_dir(data_dir) {
        if let Some(Ok(first)) = inside.next() {
            return Err(refused(format!(
                "--data-dir {}: is not empty (it holds {:?}); a restore writes a new or empty directory and never mixes with what is there",
                data_dir.display(),
                first.file_name()
            )));
        }
    } else if data_dir.exists() {
        return Err(refused(format!(
            "--data-dir {}: is not a directory",
            data_dir.display()
        )));
    }
    let target_parent = parent_of(data_dir);
    std::fs::create_dir_all(&target_parent).map_err(|e| {
        writing_refused(&e).map_or_else(
            || failed(format!("creating {}", target_parent.display()), &e),
            |why| {
                refused(format!(
                    "--data-dir {}: cannot be made there ({why})",
                    data_dir.display()
                ))
            },
        )
    })?;
    let target_parent = std::fs::canonicalize(&target_parent)
        .map_err(|e| failed(format!("reading {}", target_parent.display()), e))?;
    let name = data_dir.file_name().ok_or_else(|| {
        refused(format!(
            "--data-dir {}: names no directory",
            data_dir.display()
        ))
    })?;
    let target = target_parent.join(name);
    let archive = std::fs::File::open(from)
        .map_err(|e| refused(format!("--from {}: cannot be read ({e})", from.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".berth-restore-")
        .tempdir_in(&target_parent)
        .map_err(|e| {
            writing_refused(&e).map_or_else(
                || failed(format!("writing beside {}", target.display()), &e),
                |why| {
                    refused(format!(
                        "--data-dir {}: cannot write in its directory ({why})",
                        data_dir.display()
                    ))
                },
            )
        })?;
    let manifest = unpack(from, archive, staging.path())?;
    if target != manifest.data_dir && target.starts_with(&manifest.data_dir) {
        return Err(refused(format!(
            "--data-dir {}: is inside the original's data directory {}; restore beside it",
            target.display(),
            manifest.data_dir.display()
        )));
    }
    let mut said = format!(
        "restored {} files of {} (a backup of {} taken {}) into {}\n",
        manifest.files.len(),
        from.display(),
        manifest.data_dir.display(),
        manifest.created_at,
        target.display()
    );
    let staged_has = |name: &str| staging.path().join(name).exists();
    if staged_has("controller.db") && !staged_has("controller.key") {
        said.push_str("  no controller.key in the backup: the copy's sealed secrets need the original's key (BERTH_CONTROLLER_KEY_FILE) before the copy starts\n");
    }
    if same_instance {
        said.push_str("  same instance: this copy owns what the original made (its Docker machines, volumes, claims); never run both at once\n");
        if manifest.data_dir != target {
            said.push_str(&format!(
                "  local orchestrators and volumes still name {}: the original's directory\n",
                manifest.data_dir.display()
            ));
        }
    } else {
        said.push_str(&make_copy_own(staging.path(), &manifest.data_dir, &target).await?);
    }
    // The commit point: the directory appears whole, or not at all.
    if target.exists() {
        std::fs::remove_dir(&target).map_err(|e| {
            refused(format!(
                "--data-dir {}: cannot be replaced ({e}; a mount point is one): restore into a new directory inside it",
                target.display()
            ))
        })?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, &target).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staged);
        // Another restore made it meanwhile: the same refusal as for a directory found full.
        refused(format!(
            "--data-dir {}: could not be made ({e}); a restore writes a new or empty directory",
            target.display()
        ))
    })?;
    sync_dir(&target_parent)
        .map_err(|e| failed(format!("syncing {}", target_parent.display()), e))?;
    if same_instance {
        said.push_str(&format!(
            "  start it: berth up --data-dir {} (once the original is stopped for good)\n",
            target.display()
        ));
    } else {
        said.push_str(&format!(
            "  start it: berth up --data-dir {} (with another --port-base than the original's if both run)\n",
            target.display()
        ));
    }
    Ok(said)
}

/// Unpacks the archive into `into`, checking each entry against the manifest (which comes first)
/// and each database's integrity.
fn unpack(from: &Path, archive: std::fs::File, into: &Path) -> Result<Manifest, Status> {
    let bad = |m: String| bad_archive(from, m);
    let mut archive = tar::Archive::new(std::io::BufReader::new(archive));
    let mut entries = archive
        .entries()
        .map_err(|e| bad(format!("not a tar archive ({e})")))?;
    let manifest: Manifest = {
        let mut first = entries
            .next()
            .ok_or_else(|| bad("it is empty".into()))?
            .map_err(|e| bad(format!("not a tar archive ({e})")))?;
        if first.path_bytes().as_ref() != MANIFEST.as_bytes() {
            return Err(bad(format!("its first entry is not {MANIFEST}")));
        }
        let mut body = Vec::new();
        (&mut first)
            .take(MANIFEST_LIMIT)
            .read_to_end(&mut body)
            .map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
        serde_json::from_slice(&body).map_err(|e| bad(format!("{MANIFEST}: {e}")))?
    };
    if manifest.format != FORMAT {
        return Err(bad(format!(
            "its format is {}, this Berth ({}) reads format {FORMAT}",
            manifest.format,
            env!("CARGO_PKG_VERSION")
        )));
    }
    std::fs::create_dir(into.join("ecs-emulator")).map_err(|e| failed("staging".into(), e))?;
    let mut seen = Vec::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("a damaged entry ({e})")))?;
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        // Only the names Berth writes, each once, as regular files: nothing in an archive chooses
        // where a file goes.
        let Some(listed) = manifest.files.iter().find(|f| f.path == path) else {
            return Err(bad(format!(
                "it holds {path:?}, which its manifest does not list"
            )));
        };
        if !PARTS.iter().any(|(part, _)| *part == path) || seen.contains(&path) {
            return Err(bad(format!(
                "{path:?} is not a part of a Berth backup, or comes twice"
            )));
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(bad(format!("{path:?} is not a regular file")));
        }
        let file_path = into.join(&path);
        // Yours alone, whatever the archive says: the key and the tokens' hashes are among them.
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&file_path)
        }
        .map_err(|e| failed(format!("writing {}", file_path.display()), e))?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 64 * 1024];
        let mut bytes = 0u64;
        loop {
            let n = entry
                .read(&mut buffer)
                .map_err(|e| bad(format!("{path:?} cannot be read ({e})")))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            file.write_all(&buffer[..n])
                .map_err(|e| failed(format!("writing {}", file_path.display()), e))?;
            bytes += n as u64;
        }
        file.sync_all()
            .map_err(|e| failed(format!("writing {}", file_path.display()), e))?;
        if bytes != listed.bytes || hex::encode(hasher.finalize()) != listed.sha256 {
            return Err(bad(format!(
                "{path:?} is not what its manifest says (size or SHA-256 differ): the file was damaged"
            )));
        }
        seen.push(path);
    }
    if let Some(missing) = manifest.files.iter().find(|f| !seen.contains(&f.path)) {
        return Err(bad(format!(
            "{:?} is listed in its manifest but missing: the file is cut short",
            missing.path
        )));
    }
    for db in DATABASES {
        let path = into.join(db);
        if path.exists() {
            rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .and_then(|c| check_database(&c))
            .map_err(|e| bad(format!("{db}: {e}")))?;
        }
    }
    sync_dir(into).map_err(|e| failed("syncing".into(), e))?;
    Ok(manifest)
}

/// Makes the unpacked copy in `staging` (to live at `to`, a copy of `from`) its own: a new Docker
/// instance, the storage database's new instance and local paths, the registry's local paths.
/// Returns what it says of it.
async fn make_copy_own(staging: &Path, from: &Path, to: &Path) -> Result<String, Status> {
    let mut said = String::new();
    let storage = staging.join("storage.db");
    if storage.exists() {
        let made = storage_ops::store::make_copy_own(&storage, from, to).map_err(|e| match e {
            storage_ops::store::CopyError::Shared(_) => refused(format!(
                "a copy beside the original cannot be made: {e}; restore with --same-instance to replace the original instead (the two must never run at once)"
            )),
            storage_ops::store::CopyError::Database(_) => failed("storage.db".into(), e),
        })?;
        said.push_str(&format!(
            "  new storage instance {} ({} local volumes moved under {})\n",
            made.instance,
            made.moved,
            to.display()
        ));
    }
    let registry = staging.join("registry.db");
    if registry.exists() {
        let store = orchestrator_registry::store::Store::open(&registry)
            .await
            .map_err(|e| failed("registry.db".into(), e))?;
        let moved = store.make_copy_own(from, to).await.map_err(|e| {
            refused(format!(
                "a copy beside the original cannot be made: {e}; restore with --same-instance to replace the original instead (the two must never run at once)"
            ))
        });
        store.close().await;
        said.push_str(&format!(
            "  {} local orchestrators moved under {}\n",
            moved?,
            to.display()
        ));
    }
    let instance = crate::up::new_docker_instance();
    let file = staging.join("docker-instance");
    std::fs::write(&file, &instance)
        .and_then(|()| std::fs::File::open(&file)?.sync_all())
        .map_err(|e| failed("docker-instance".into(), e))?;
    said.push_str(&format!(
        "  new docker instance {instance}: the original's machines, volumes and claims are not this copy's; the copy makes its own\n"
    ));
    Ok(said)
}
