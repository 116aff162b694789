//! `berth backup` and `berth restore`: a consistent copy of a `berth up` data directory's state,
//! taken while the stack runs, and brought back into a new directory.
//!
//! A backup is a tar archive: a manifest (`berth-backup.json`: format, Berth's version, when, the
//! original data directory, and every file's size and SHA-256) and the files of [`PARTS`](archive::PARTS). Each
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
//!
//! # Layout
//! This file holds what every step shares: its refusals and failures, and the directory and
//! database helpers. The steps are in files of their own:
//! - `archive`: what a backup holds, its manifest, and writing and unpacking the archive.
//! - `take`: `berth backup`, each part copied beside the running stack.
//! - `restore`: `berth restore`, into a new directory, all or nothing.
//! - `copy_own`: making a restored copy its own, to run beside the original.

use std::path::{Path, PathBuf};

use domain::{Code, Status};

mod archive;
mod copy_own;
mod restore;
mod take;

pub use archive::MANIFEST;
pub use restore::restore;
pub use take::backup;

fn refused(message: String) -> Status {
    Status::new(Code::FailedPrecondition, message)
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
