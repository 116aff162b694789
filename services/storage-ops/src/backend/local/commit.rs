//! The mode-000 mark of uncommitted objects (see the module docs of [`local`](super)): making an
//! object with it, taking it off once the row is committed, and removing an uncommitted object
//! only while it is empty. Apart because it is the one protocol between the backend and the
//! store's commit, and every rule of it is here.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use domain::Code;

use super::LocalBackend;
use super::objects::make_object;
use crate::backend::{BackendError, ObjectRef, Uncommitted};

impl LocalBackend {
    /// Makes a new object of mode 000 for `v` (see the module docs); its directory's fsync is left to
    /// the store, which runs it right before the commit that records the row (a file object syncs its
    /// own inode here, while it is open).
    pub(super) fn create_uncommitted_blocking(
        &self,
        v: &ObjectRef,
    ) -> Result<Uncommitted, BackendError> {
        let dir = self
            .namespace_dir(&v.namespace, true)?
            .expect("create makes the namespace directory");
        let path = dir.join(Self::object_name(v));
        make_object(&path, v, UNCOMMITTED_MODE, true)?;
        Ok(Uncommitted {
            location: path.display().to_string(),
            sync_dir: dir,
        })
    }

    /// Marks `v`'s object committed (a no-op when it is, or is gone).
    pub(super) fn mark_committed_blocking(&self, v: &ObjectRef) -> Result<(), BackendError> {
        let Some(dir) = self.namespace_dir(&v.namespace, false)? else {
            return Ok(());
        };
        mark_committed_at(&dir.join(Self::object_name(v)))
    }

    /// Removes an uncommitted object a scan found, if it still is uncommitted and empty.
    pub(super) fn remove_uncommitted_blocking(
        &self,
        namespace: &str,
        object: &str,
    ) -> Result<(), BackendError> {
        let Some(dir) = self.namespace_dir(namespace, false)? else {
            return Ok(());
        };
        // Not synced: an uncommitted object a power loss brings back is removed again.
        remove_uncommitted_at(&dir.join(object))
    }
}

/// The mode of a committed directory.
pub(super) const DIR_MODE: u32 = 0o700;
/// The mode of a committed file.
const FILE_MODE: u32 = 0o600;
/// The mode that marks an object uncommitted (see the module docs).
pub(super) const UNCOMMITTED_MODE: u32 = 0o000;

pub(super) fn final_mode(file: bool) -> u32 {
    if file { FILE_MODE } else { DIR_MODE }
}

pub(super) fn is_uncommitted(m: &fs::Metadata) -> bool {
    (m.is_dir() || m.is_file()) && m.mode() & 0o7777 == UNCOMMITTED_MODE
}

/// Gives the uncommitted object at `path` its committed mode; anything else (committed, gone, a
/// link) is left as it is. `chmod` follows links, so the object is looked at first: the namespace
/// directory it is in is 0700 and Berth's, so nobody else can swap a link in between.
pub(super) fn mark_committed_at(path: &Path) -> Result<(), BackendError> {
    match fs::symlink_metadata(path) {
        Ok(m) if is_uncommitted(&m) => {
            fs::set_permissions(path, fs::Permissions::from_mode(final_mode(m.is_file())))
                .map_err(|e| BackendError::io("marking the volume's object committed", path, &e))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BackendError::io("reading the volume's object", path, &e)),
    }
}

/// Removes the uncommitted object at `path` if it still is uncommitted and holds nothing: an empty
/// directory (`rmdir` refuses any other), a file with no block written. Gone already is success.
pub(super) fn remove_uncommitted_at(path: &Path) -> Result<(), BackendError> {
    let refuse = |why: &str| {
        BackendError::new(
            Code::FailedPrecondition,
            format!("an uncommitted object {why}; left in place"),
        )
        .with_detail(format!("at {}", path.display()))
    };
    let removed = match fs::symlink_metadata(path) {
        Ok(m) if !is_uncommitted(&m) => return Err(refuse("is not uncommitted any more")),
        Ok(m) if m.is_dir() => fs::remove_dir(path),
        Ok(m) if m.blocks() == 0 => fs::remove_file(path),
        Ok(_) => return Err(refuse("has data written in it")),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == ErrorKind::DirectoryNotEmpty => Err(refuse("is not empty")),
        Err(e) => Err(BackendError::io("removing an uncommitted object", path, &e)),
    }
}
