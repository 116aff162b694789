//! Making, removing and growing a volume's object (a directory or a sparse file), each synced
//! with its directory: apart because these are the calls that change the disk for a volume with a
//! row, as opposed to the uncommitted objects of [`commit`](super::commit).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use domain::Code;

use super::LocalBackend;
use super::commit::{
    DIR_MODE, UNCOMMITTED_MODE, final_mode, mark_committed_at, remove_uncommitted_at,
};

use super::dirs::sync_dir;
use crate::backend::{BackendError, ObjectRef};

impl LocalBackend {
    /// Makes `v`'s object, or finds it made (and marks it committed), and syncs it with its
    /// directory. For a volume whose row is already written.
    pub(super) fn create_blocking(&self, v: &ObjectRef) -> Result<String, BackendError> {
        let dir = self
            .namespace_dir(&v.namespace, true)?
            .expect("create makes the namespace directory");
        let path = dir.join(Self::object_name(v));
        // Found uncommitted (made by an add a crash interrupted after its row was written, or a
        // `chmod` a power loss undid): committed now, or the file could not be opened to size it.
        mark_committed_at(&path)?;
        make_object(&path, v, final_mode(v.file), false)?;
        sync_dir(&dir)?;
        Ok(path.display().to_string())
    }

    pub(super) fn remove_blocking(
        &self,
        namespace: &str,
        object: &str,
    ) -> Result<(), BackendError> {
        let Some(dir) = self.namespace_dir(namespace, false)? else {
            return Ok(());
        };
        let path = dir.join(object);
        let removed = match fs::symlink_metadata(&path) {
            // Mode 000 (uncommitted): a directory must be readable to be emptied.
            Ok(m) if m.is_dir() && m.mode() & 0o7777 == UNCOMMITTED_MODE => {
                fs::set_permissions(&path, fs::Permissions::from_mode(DIR_MODE))
                    .and_then(|()| fs::remove_dir_all(&path))
            }
            Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(BackendError::io("removing the volume's object", &path, &e)),
        }
    }

    /// A sparse file is made longer (no block is written: the file system gives the room as it is
    /// used); a directory has no size of its own, so its capacity is the record's alone and
    /// growing it asks nothing of the disk.
    pub(super) fn grow_blocking(&self, v: &ObjectRef, bytes: u64) -> Result<(), BackendError> {
        if !v.file {
            return Ok(());
        }
        let Some(dir) = self.namespace_dir(&v.namespace, false)? else {
            return Err(
                BackendError::new(Code::NotFound, "the volume's object is gone").with_detail(
                    format!("no namespace directory under {}", self.base.display()),
                ),
            );
        };
        let path = dir.join(Self::object_name(v));
        // Not through a link planted in the file's place.
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|e| {
                if e.kind() == ErrorKind::NotFound {
                    BackendError::new(Code::NotFound, "the volume's object is gone")
                        .with_detail(format!("at {}", path.display()))
                } else {
                    BackendError::io("opening the volume's file", &path, &e)
                }
            })?;
        let len = file
            .metadata()
            .map_err(|e| BackendError::io("reading the volume's file", &path, &e))?
            .len();
        if len < bytes {
            file.set_len(bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| BackendError::io("growing the volume's file", &path, &e))?;
        }
        Ok(())
    }
}

/// Makes the directory or sparse file at `path` with `mode`; `new` refuses one already there (an
/// uncommitted object has a fresh uid: one already there is not this add's), otherwise one there is
/// taken as made.
pub(super) fn make_object(
    path: &Path,
    v: &ObjectRef,
    mode: u32,
    new: bool,
) -> Result<(), BackendError> {
    if v.file {
        let file = OpenOptions::new()
            .write(true)
            .create(!new)
            .create_new(new)
            .truncate(false)
            .mode(mode)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .map_err(|e| BackendError::io("making the volume's file", path, &e))?;
        // Sparse: set_len allocates nothing, so the file has the exact capacity and costs no space.
        let sized = file
            .set_len(v.capacity_bytes)
            .map_err(|e| {
                if e.kind() == ErrorKind::FileTooLarge {
                    // The caller's size, not the service's failure (ext4 holds at most 16 TiB a file).
                    return BackendError::new(
                        Code::InvalidArgument,
                        format!(
                            "capacity: {} bytes is more than one file can hold on the file system under the orchestrator's base path; ask for less, or for parameters.format: directory",
                            v.capacity_bytes
                        ),
                    )
                    .with_detail(format!("at {}: {e}", path.display()));
                }
                BackendError::io("sizing the volume's file", path, &e)
            })
            .and_then(|()| {
                file.sync_all()
                    .map_err(|e| BackendError::io("syncing the volume's file", path, &e))
            });
        if sized.is_err() && new {
            // This call made it: take it back (or leave it uncommitted, for the reconciler).
            let _ = remove_uncommitted_at(path);
        }
        return sized;
    }
    match DirBuilder::new().mode(mode).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && !new => {
            let m = fs::symlink_metadata(path)
                .map_err(|e| BackendError::io("reading the volume's directory", path, &e))?;
            if m.is_dir() {
                Ok(())
            } else {
                Err(BackendError::new(
                    Code::AlreadyExists,
                    "the volume's path exists and is not a directory",
                )
                .with_detail(format!("at {}", path.display())))
            }
        }
        Err(e) => Err(BackendError::io("making the volume's directory", path, &e)),
    }
}
