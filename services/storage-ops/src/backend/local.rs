//! The `local` backend: `<basePath>/<namespace>/<name>-<uid>`, a directory or a sparse file.
//!
//! Directories are made with mode 0700 and files with 0600 by passing the mode to `mkdir`/`open`
//! (which the umask can only narrow), rather than by changing the process's umask, which is shared by
//! every thread of the process. Nothing is ever made or removed outside `basePath`: names are validated
//! DNS names (no `/`, no `..`), and the namespace directory must be a real directory (not a link)
//! directly in the resolved base path, so a symbolic link planted under `basePath` cannot redirect a
//! volume elsewhere.
//! A made object is `fsync`ed together with its directory before it is reported, so a volume the
//! database calls Ready survives a power loss on the backend too.
//!
//! # Uncommitted objects: mode 000
//!
//! AddStorage makes a new volume's object before its row ([`Backend::new_object`]), with
//! mode 000 given to the `mkdir`/`open` that makes it: the mark is part of the new inode, so the one
//! directory `fsync` that makes the object durable (the store's, right before the commit that
//! records the row) makes the mark durable with it, at no cost. Once
//! the row is committed the mode becomes 0700 (0600 for a file) with a `chmod` that is not synced: if
//! a power loss undoes it, the object is owned by a row and the reconciler sets it again. So an
//! object of mode 000 without a row was never acknowledged to anyone, and is removed only if it is
//! still empty (a directory `rmdir` accepts, a file with no block written). A volume's own mode 000
//! is therefore reserved: Berth sets it back to 0700 on a volume that has a row.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use domain::Code;
use futures::future::BoxFuture;
use service_kit::paths::{Escape, check_within};

use super::{Backend, BackendError, Found, NewObject, ObjectRef, Uncommitted, Usage, blocking};

/// Directories and files under one base path, itself under one of the operator's roots.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    base: PathBuf,
    roots: Arc<[String]>,
}

/// Most files a usage walk visits before it stops and reports what it has counted.
const WALK_LIMIT: usize = 100_000;

impl LocalBackend {
    /// The backend of the (normalised, absolute) `base_path`, which must lead (links followed) under
    /// one of `roots` whenever the backend touches it.
    pub fn new(base_path: &str, roots: Arc<[String]>) -> Self {
        LocalBackend {
            base: PathBuf::from(base_path),
            roots,
        }
    }

    /// Where the base path resolves to (see [`service_kit::paths::resolve`]), refusing one that
    /// leads outside the roots through a symbolic link (its text is under one: `Backends` checked
    /// that). Checked before anything is made, and again after the base path is made, so a link
    /// swapped in meanwhile is not used either.
    fn check_base(&self) -> Result<PathBuf, BackendError> {
        check_within(&self.base, &self.roots).map_err(|escape| {
            let detail = match &escape {
                Escape::Outside { resolved } => {
                    format!("{} resolves to {}", self.base.display(), resolved.display())
                }
                Escape::Unresolvable(e) => format!("{}: {e}", self.base.display()),
            };
            BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "the base path {escape}; refusing to use it (an operator allows directories with {})",
                    domain::orchestrator::LOCAL_ROOTS_SETTING
                ),
            )
            .with_detail(detail)
        })
    }

    /// Refuses to make anything under a base path that resolves inside a Berth volume's own
    /// directory. The registry refuses such a base path by its text; through a link it can still
    /// lead into one, and volumes made there would go when that volume is deleted. Only making is
    /// refused: volumes already there can still be read and deleted.
    fn refuse_inside_volume(&self, resolved: &Path) -> Result<(), BackendError> {
        match resolved
            .to_str()
            .and_then(domain::orchestrator::volume_object_in)
        {
            None => Ok(()),
            Some(volume) => Err(BackendError::new(
                Code::FailedPrecondition,
                "the base path resolves inside the directory of a Berth volume; refusing to make volumes there (deleting that volume would delete them)",
            )
            .with_detail(format!(
                "{} resolves to {} (inside {volume})",
                self.base.display(),
                resolved.display()
            ))),
        }
    }

    /// The object's file name: `<name>-<uid>`.
    pub fn object_name(v: &ObjectRef) -> String {
        format!("{}-{}", v.name, v.uid)
    }

    /// The resolved base path, made (and checked again) when `create` is set and it is missing;
    /// `None` when it is missing, or is not a directory, and `create` is not set.
    fn base_dir(&self, create: bool) -> Result<Option<PathBuf>, BackendError> {
        let resolved = self.check_base()?;
        if create {
            self.refuse_inside_volume(&resolved)?;
        }
        // There, it is its own canonical path: every link on the way to it is resolved.
        match fs::symlink_metadata(&resolved) {
            Ok(m) if m.is_dir() => return Ok(Some(resolved)),
            // A base path that is a file holds no namespace directory: nothing there to read or
            // delete, so a volume that failed on it can still be deleted.
            Ok(_) if !create => return Ok(None),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                if !create {
                    return Ok(None);
                }
            }
            Err(e) => return Err(BackendError::io("resolving the base path", &self.base, &e)),
            // A file (or another non-directory) where the base path should be: the operator's to
            // mend, not a failure of the service.
            Ok(_) => {
                return Err(BackendError::new(
                    Code::FailedPrecondition,
                    "the base path is not a directory (a file or something else is there); refusing to use it",
                )
                .with_detail(format!("at {}", resolved.display())));
            }
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.base)
            .map_err(|e| match e.kind() {
                // A file where one of the base path's directories should be.
                ErrorKind::AlreadyExists | ErrorKind::NotADirectory => BackendError::new(
                    Code::FailedPrecondition,
                    "the base path cannot be made: a file is where one of its directories should be; refusing to use it",
                )
                .with_detail(format!("at {}: {e}", self.base.display())),
                _ => BackendError::io("making the base path", &self.base, &e),
            })?;
        let resolved = self.check_base()?;
        self.refuse_inside_volume(&resolved)?;
        Ok(Some(resolved))
    }

    /// The resolved namespace directory, made when `create` is set; `None` when it does not exist.
    fn namespace_dir(
        &self,
        namespace: &str,
        create: bool,
    ) -> Result<Option<PathBuf>, BackendError> {
        if namespace.is_empty() || namespace.contains(['/', '\0']) || namespace.starts_with('.') {
            return Err(BackendError::new(
                Code::InvalidArgument,
                format!("namespace {namespace:?} cannot be a directory name"),
            ));
        }
        let Some(base) = self.base_dir(create)? else {
            return Ok(None);
        };
        let dir = base.join(namespace);
        if create {
            match DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => sync_dir(&base)?,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(BackendError::io("making the namespace directory", &dir, &e));
                }
            }
        }
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(BackendError::new(
                    Code::FailedPrecondition,
                    format!(
                        "the directory of namespace {namespace:?} is not a directory (a link or a file); refusing to use it"
                    ),
                )
                .with_detail(format!("at {}", dir.display())));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(BackendError::io(
                    "reading the namespace directory",
                    &dir,
                    &e,
                ));
            }
        }
        // A real directory (not a link) in the resolved base path: already its own canonical path,
        // which is why it is not resolved again (each resolution reads every component's link).
        Ok(Some(dir))
    }

    /// Makes `v`'s object, or finds it made (and marks it committed), and syncs it with its
    /// directory. For a volume whose row is already written.
    fn create_blocking(&self, v: &ObjectRef) -> Result<String, BackendError> {
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

    /// Makes a new object of mode 000 for `v` (see the module docs); its directory's fsync is left to
    /// the store, which runs it right before the commit that records the row (a file object syncs its
    /// own inode here, while it is open).
    fn create_uncommitted_blocking(&self, v: &ObjectRef) -> Result<Uncommitted, BackendError> {
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
    fn mark_committed_blocking(&self, v: &ObjectRef) -> Result<(), BackendError> {
        let Some(dir) = self.namespace_dir(&v.namespace, false)? else {
            return Ok(());
        };
        mark_committed_at(&dir.join(Self::object_name(v)))
    }

    /// Removes an uncommitted object a scan found, if it still is uncommitted and empty.
    fn remove_uncommitted_blocking(
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

    fn remove_blocking(&self, namespace: &str, object: &str) -> Result<(), BackendError> {
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
    fn grow_blocking(&self, v: &ObjectRef, bytes: u64) -> Result<(), BackendError> {
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

    fn usage_blocking(&self, v: &ObjectRef) -> Result<Usage, BackendError> {
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

    fn scan_blocking(&self) -> Result<Vec<Found>, BackendError> {
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

/// A new object of the local backend, made and marked by the store's writer.
struct LocalNewObject {
    backend: LocalBackend,
    object: ObjectRef,
}

impl NewObject for LocalNewObject {
    fn make(&mut self) -> Result<Uncommitted, BackendError> {
        self.backend.create_uncommitted_blocking(&self.object)
    }

    fn mark_committed(&mut self) -> Result<(), BackendError> {
        // Through the checked namespace directory again, not the path `make` returned: a base path
        // swapped for a link in between is refused here too.
        self.backend.mark_committed_blocking(&self.object)
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

/// The mode of a committed directory.
const DIR_MODE: u32 = 0o700;
/// The mode of a committed file.
const FILE_MODE: u32 = 0o600;
/// The mode that marks an object uncommitted (see the module docs).
const UNCOMMITTED_MODE: u32 = 0o000;

fn final_mode(file: bool) -> u32 {
    if file { FILE_MODE } else { DIR_MODE }
}

fn is_uncommitted(m: &fs::Metadata) -> bool {
    (m.is_dir() || m.is_file()) && m.mode() & 0o7777 == UNCOMMITTED_MODE
}

/// Makes the directory or sparse file at `path` with `mode`; `new` refuses one already there (an
/// uncommitted object has a fresh uid: one already there is not this add's), otherwise one there is
/// taken as made.
fn make_object(path: &Path, v: &ObjectRef, mode: u32, new: bool) -> Result<(), BackendError> {
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

/// Gives the uncommitted object at `path` its committed mode; anything else (committed, gone, a
/// link) is left as it is. `chmod` follows links, so the object is looked at first: the namespace
/// directory it is in is 0700 and Berth's, so nobody else can swap a link in between.
fn mark_committed_at(path: &Path) -> Result<(), BackendError> {
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
fn remove_uncommitted_at(path: &Path) -> Result<(), BackendError> {
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

fn read_dir(path: &Path) -> Result<fs::ReadDir, BackendError> {
    fs::read_dir(path).map_err(|e| BackendError::io("listing a directory", path, &e))
}

fn sync_dir(dir: &Path) -> Result<(), BackendError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| BackendError::io("syncing a directory", dir, &e))
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

impl Backend for LocalBackend {
    fn create<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<String, BackendError>> {
        let this = self.clone();
        let v = v.clone();
        Box::pin(blocking(move || this.create_blocking(&v)))
    }

    fn new_object(&self, v: &ObjectRef) -> Option<Box<dyn NewObject>> {
        Some(Box::new(LocalNewObject {
            backend: self.clone(),
            object: v.clone(),
        }))
    }

    fn mark_committed<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        let this = self.clone();
        let v = v.clone();
        Box::pin(blocking(move || this.mark_committed_blocking(&v)))
    }

    fn delete<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        let this = self.clone();
        let (namespace, object) = (v.namespace.clone(), Self::object_name(v));
        Box::pin(blocking(move || this.remove_blocking(&namespace, &object)))
    }

    fn grow<'a>(&'a self, v: &'a ObjectRef, bytes: u64) -> BoxFuture<'a, Result<(), BackendError>> {
        let this = self.clone();
        let v = v.clone();
        Box::pin(blocking(move || this.grow_blocking(&v, bytes)))
    }

    fn usage<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Usage, BackendError>> {
        let this = self.clone();
        let v = v.clone();
        Box::pin(blocking(move || this.usage_blocking(&v)))
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<Found>, BackendError>> {
        let this = self.clone();
        Box::pin(blocking(move || this.scan_blocking()))
    }

    fn remove_found<'a>(&'a self, f: &'a Found) -> BoxFuture<'a, Result<(), BackendError>> {
        let this = self.clone();
        let (namespace, object) = (f.namespace.clone(), format!("{}-{}", f.name, f.uid));
        if f.uncommitted {
            return Box::pin(blocking(move || {
                this.remove_uncommitted_blocking(&namespace, &object)
            }));
        }
        Box::pin(blocking(move || this.remove_blocking(&namespace, &object)))
    }

    fn identity(&self) -> String {
        format!("local:{}", self.base.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(dir: &Path) -> Arc<[String]> {
        vec![dir.display().to_string()].into()
    }

    fn object(name: &str, file: bool) -> ObjectRef {
        ObjectRef {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: "ns".into(),
            name: name.into(),
            capacity_bytes: 1 << 30,
            file,
        }
    }

    #[tokio::test]
    async fn directories_and_sparse_files_are_made_idempotently_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(
            &tmp.path().join("base").display().to_string(),
            roots(tmp.path()),
        );
        let dir = object("data", false);
        let at = backend.create(&dir).await.unwrap();
        assert_eq!(backend.create(&dir).await.unwrap(), at);
        let m = fs::metadata(&at).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        let file = object("blob", true);
        let at_file = backend.create(&file).await.unwrap();
        let m = fs::metadata(&at_file).unwrap();
        assert_eq!(m.len(), 1 << 30);
        assert!(m.blocks() * 512 < 1 << 20, "sparse");
        assert_eq!(m.mode() & 0o777, 0o600);
        let usage = backend.usage(&file).await.unwrap();
        assert_eq!(usage.source, "file");

        let found = backend.scan().await.unwrap();
        assert_eq!(found.len(), 2);
        backend.delete(&dir).await.unwrap();
        backend.delete(&dir).await.unwrap();
        backend.delete(&file).await.unwrap();
        assert!(backend.scan().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_base_path_that_is_a_file_fails_creates_but_not_deletes() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("afile");
        fs::write(&base, b"").unwrap();
        let backend = LocalBackend::new(&base.display().to_string(), roots(tmp.path()));
        let v = object("data", false);
        let e = backend.create(&v).await.unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        // What failed to be made can still be deleted: there is nothing there.
        backend.delete(&v).await.unwrap();
        // A file on the way to the base path is the operator's to mend too.
        let under = LocalBackend::new(&base.join("vols").display().to_string(), roots(tmp.path()));
        let e = under.create(&v).await.unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        assert_eq!(fs::read(&base).unwrap(), b"");
    }

    /// A base path that comes to resolve inside a volume's own directory (through a link swapped
    /// later) refuses new volumes, but the volumes already made there can still be read and deleted.
    #[tokio::test]
    async fn a_base_path_inside_a_volume_refuses_only_new_volumes() {
        let tmp = tempfile::tempdir().unwrap();
        let outer_backend = LocalBackend::new(
            &tmp.path().join("outer").display().to_string(),
            roots(tmp.path()),
        );
        let outer = outer_backend.create(&object("outer", false)).await.unwrap();
        let plain = tmp.path().join("plain");
        fs::create_dir_all(&plain).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        let nested = LocalBackend::new(&link.join("vols").display().to_string(), roots(tmp.path()));
        let kept = object("kept", false);
        let at = nested.create(&kept).await.unwrap();
        // The link now leads into the outer volume, with the volumes made so far.
        fs::rename(plain.join("vols"), Path::new(&outer).join("vols")).unwrap();
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&outer, &link).unwrap();
        for e in [
            nested.create(&object("new", false)).await.unwrap_err(),
            nested
                .create_uncommitted(&object("new", false))
                .await
                .unwrap_err(),
        ] {
            assert_eq!(e.code, Code::FailedPrecondition, "{e}");
            assert!(
                e.message.contains("inside the directory of a Berth volume"),
                "{e}"
            );
        }
        assert_eq!(nested.usage(&kept).await.unwrap().source, "walk");
        nested.delete(&kept).await.unwrap();
        assert!(
            !Path::new(&outer)
                .join("vols")
                .join("ns")
                .join(Path::new(&at).file_name().unwrap())
                .exists()
        );
    }

    #[tokio::test]
    async fn a_linked_namespace_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&base).unwrap();
        fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("ns")).unwrap();
        let backend = LocalBackend::new(&base.display().to_string(), roots(tmp.path()));
        let e = backend.create(&object("data", false)).await.unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_base_path_that_links_out_of_the_roots_is_refused_before_anything_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let backend =
            LocalBackend::new(&root.join("link/vols").display().to_string(), roots(&root));
        let e = backend.create(&object("data", false)).await.unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        assert!(
            !e.message.contains(&outside.display().to_string()),
            "{}",
            e.message
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing made");
        assert!(backend.scan().await.is_err());
    }

    #[tokio::test]
    async fn a_base_path_swapped_for_a_link_out_of_the_roots_is_refused_on_the_next_use() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let base = root.join("vols");
        let backend = LocalBackend::new(&base.display().to_string(), roots(&root));
        let first = object("first", false);
        let at = backend.create(&first).await.unwrap();
        assert!(at.starts_with(&*root.canonicalize().unwrap().display().to_string()));
        fs::rename(&base, root.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, &base).unwrap();
        for e in [
            backend.create(&object("second", false)).await.unwrap_err(),
            backend
                .create_uncommitted(&object("third", false))
                .await
                .unwrap_err(),
            backend.mark_committed(&first).await.unwrap_err(),
        ] {
            assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        }
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing made");
    }

    #[tokio::test]
    async fn uncommitted_objects_are_mode_000_until_marked_and_removed_only_while_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(
            &tmp.path().join("base").display().to_string(),
            roots(tmp.path()),
        );
        let mode = |at: &str| fs::symlink_metadata(at).unwrap().mode() & 0o7777;
        let (dir, file) = (object("dir", false), object("blob", true));
        let at_dir = backend.create_uncommitted(&dir).await.unwrap().location;
        let at_file = backend.create_uncommitted(&file).await.unwrap().location;
        assert_eq!((mode(&at_dir), mode(&at_file)), (0, 0));
        assert_eq!(fs::metadata(&at_file).unwrap().len(), 1 << 30);
        // A fresh uid's object is never taken over: one already there is an error.
        assert!(backend.create_uncommitted(&dir).await.is_err());
        let found = backend.scan().await.unwrap();
        assert!(found.iter().all(|f| f.uncommitted), "{found:?}");

        backend.mark_committed(&dir).await.unwrap();
        backend.mark_committed(&dir).await.unwrap();
        assert_eq!(mode(&at_dir), 0o700);
        let found = backend.scan().await.unwrap();
        let committed = found.iter().find(|f| f.uid == dir.uid).unwrap();
        assert!(!committed.uncommitted);
        // An object found uncommitted but committed since is not removed as an uncommitted one.
        let stale = Found {
            uncommitted: true,
            ..committed.clone()
        };
        assert!(backend.remove_found(&stale).await.is_err());
        assert!(Path::new(&at_dir).is_dir());

        // `create` of an object left uncommitted (its row written before a crash) marks it.
        backend.create(&file).await.unwrap();
        assert_eq!(mode(&at_file), 0o600);

        // An uncommitted object with something in it is left in place; an empty one goes.
        let full = object("full", false);
        let at_full = backend.create_uncommitted(&full).await.unwrap().location;
        fs::set_permissions(&at_full, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(Path::new(&at_full).join("data"), b"x").unwrap();
        fs::set_permissions(&at_full, fs::Permissions::from_mode(0o000)).unwrap();
        let empty = object("empty", false);
        let at_empty = backend.create_uncommitted(&empty).await.unwrap().location;
        for f in backend.scan().await.unwrap() {
            if f.uid == full.uid {
                assert!(backend.remove_found(&f).await.is_err());
            } else if f.uid == empty.uid {
                backend.remove_found(&f).await.unwrap();
                backend.remove_found(&f).await.unwrap();
            }
        }
        assert!(Path::new(&at_full).exists());
        assert!(!Path::new(&at_empty).exists());
        // A volume's delete removes it whatever its mode.
        backend.delete(&full).await.unwrap();
        assert!(!Path::new(&at_full).exists());
    }

    #[test]
    fn only_berth_object_names_parse() {
        let uid = uuid::Uuid::new_v4().to_string();
        assert_eq!(
            parse_object_name(&format!("my-vol-{uid}")),
            Some(("my-vol", uid.as_str()))
        );
        assert_eq!(parse_object_name("lost+found"), None);
        assert_eq!(parse_object_name(&format!("-{uid}")), None);
        assert_eq!(
            parse_object_name(&format!("x-{}", uid.to_uppercase())),
            None
        );
    }
}
