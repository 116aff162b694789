//! What the backend reads and never changes: a volume's usage and the scan for Berth's objects.
//! Apart because these walk the disk rather than one object, and are bounded as such.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use domain::Code;

use super::LocalBackend;
use super::commit::is_uncommitted;
use crate::backend::{BackendError, Found, ObjectRef, Usage};

/// Most files a usage walk visits before it stops and reports what it has counted.
const WALK_LIMIT: usize = 100_000;
impl LocalBackend {
    pub(super) fn usage_blocking(&self, v: &ObjectRef) -> Result<Usage, BackendError> {
        let Some(dir) = self.namespace_dir(&v.namespace, false)? else {
            return Err(BackendError::new(
                Code::NotFound,
                format!("namespace {:?} has no directory", v.namespace),
            )
            .with_detail(format!("under {}", self.base.display())));
        };
        let path = dir.join(Self::object_name(v));
        let m = fs::symlink_metadata(&path).map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                // Removed behind Berth's back: the volume's data is gone, which the caller is told
                // as such, not as the service's own failure.
                return BackendError::new(Code::NotFound, "the volume's object is gone")
                    .with_detail(format!("at {}", path.display()));
            }
            BackendError::io("reading the volume's object", &path, &e)
        })?;
        let available_bytes = nix::sys::statvfs::statvfs(&path)
            .ok()
            .map(|s| s.blocks_available().saturating_mul(s.fragment_size()));
        if !m.is_dir() {
            return Ok(Usage {
                used_bytes: Some(m.blocks() * 512),
                available_bytes,
                source: "file",
            });
        }
        Ok(Usage {
            used_bytes: Some(walk_allocated(&path)),
            available_bytes,
            source: "walk",
        })
    }

    pub(super) fn scan_blocking(&self) -> Result<Vec<Found>, BackendError> {
        let base = self.check_base()?;
        if let Err(e) = fs::symlink_metadata(&base) {
            if e.kind() == ErrorKind::NotFound {
                return Ok(Vec::new());
            }
            return Err(BackendError::io("reading the base path", &self.base, &e));
        }
        let mut found = Vec::new();
        for ns in read_dir(&base)? {
            let Ok(ns) = ns else { continue };
            let Some(namespace) = ns.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !ns.file_type().is_ok_and(|t| t.is_dir())
                || domain::names::validate_dns1123_label("namespace", &namespace).is_err()
            {
                continue;
            }
            for entry in read_dir(&ns.path())? {
                let Ok(entry) = entry else { continue };
                let Some(file) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if let Some((name, uid)) = parse_object_name(&file) {
                    // An entry gone since the listing is skipped: it is nobody's any more.
                    let Ok(m) = entry.metadata() else { continue };
                    found.push(Found {
                        uid: uid.to_string(),
                        namespace: namespace.clone(),
                        name: name.to_string(),
                        location: entry.path().display().to_string(),
                        uncommitted: is_uncommitted(&m),
                    });
                }
            }
        }
        Ok(found)
    }
}

/// Splits `<name>-<uid>` where uid is a lower-case hyphenated UUID; anything else is not Berth's.
pub fn parse_object_name(file: &str) -> Option<(&str, &str)> {
    const UUID_LEN: usize = 36;
    if file.len() < UUID_LEN + 2 {
        return None;
    }
    let (head, uid) = file.split_at(file.len() - UUID_LEN);
    let name = head.strip_suffix('-')?;
    let parsed = uuid::Uuid::parse_str(uid).ok()?;
    (parsed.hyphenated().to_string() == uid
        && domain::names::validate_volume_name("name", name).is_ok())
    .then_some((name, uid))
}

fn read_dir(path: &Path) -> Result<fs::ReadDir, BackendError> {
    fs::read_dir(path).map_err(|e| BackendError::io("listing a directory", path, &e))
}

/// Allocated bytes of everything under `root`, links not followed, at most [`WALK_LIMIT`] entries.
pub(crate) fn walk_allocated(root: &Path) -> u64 {
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > WALK_LIMIT {
                return total;
            }
            let Ok(m) = entry.metadata() else { continue };
            total = total.saturating_add(m.blocks() * 512);
            if m.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}
