//! What a backup holds and how it is laid out: the parts, in the order they are taken, the
//! manifest that lists them, and writing and unpacking the tar archive. Apart because the format
//! is the contract between a backup and every later restore: an archive written by one Berth must
//! be read, or refused, by the next.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use domain::{Code, Status};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{check_database, failed, sync_dir};

/// The manifest's name in the archive.
pub const MANIFEST: &str = "berth-backup.json";
/// The archive format this Berth writes and reads.
pub(super) const FORMAT: u32 = 1;
/// The most a manifest may hold (it is read whole).
const MANIFEST_LIMIT: u64 = 1 << 20;

/// How a part is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    /// SQLite's online backup of the database.
    Database,
    /// The file as it is: each is replaced whole by a rename when it changes, so a read sees one
    /// version.
    File,
}

/// What a backup holds, in the order it is taken (see the module's words), as paths relative to
/// the data directory.
pub(super) const PARTS: [(&str, How); 8] = [
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
pub(super) const DATABASES: [&str; 3] = ["controller.db", "storage.db", "registry.db"];

/// The manifest.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Manifest {
    pub(super) format: u32,
    pub(super) berth_version: String,
    pub(super) created_at: String,
    /// The original data directory, absolute: what the copy's local paths move from.
    pub(super) data_dir: PathBuf,
    pub(super) files: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) path: String,
    pub(super) bytes: u64,
    pub(super) sha256: String,
}

fn bad_archive(from: &Path, message: String) -> Status {
    Status::new(
        Code::InvalidArgument,
        format!("{} is not a usable Berth backup: {message}", from.display()),
    )
}

pub(super) fn write_archive(
    path: &Path,
    staging: &Path,
    manifest: &Manifest,
) -> std::io::Result<()> {
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

/// Unpacks the archive into `into`, checking each entry against the manifest (which comes first)
/// and each database's integrity.
pub(super) fn unpack(from: &Path, archive: std::fs::File, into: &Path) -> Result<Manifest, Status> {
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
