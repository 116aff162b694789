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
//!
//! Layout: this file holds the backend and its [`Backend`] impl; `dirs` the base path and
//! namespace directories, and the checks that keep everything under the roots; `objects` making,
//! removing and growing a volume's object; `commit` the mode-000 mark of uncommitted objects;
//! `reads` usage and the orphan scan.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Backend, BackendError, Found, NewObject, ObjectRef, Uncommitted, Usage, blocking};

mod commit;
mod dirs;
mod objects;
mod reads;

pub use reads::parse_object_name;
pub(crate) use reads::walk_allocated;

/// Directories and files under one base path, itself under one of the operator's roots.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    base: PathBuf,
    roots: Arc<[String]>,
}

impl LocalBackend {
    /// The backend of the (normalised, absolute) `base_path`, which must lead (links followed) under
    /// one of `roots` whenever the backend touches it.
    pub fn new(base_path: &str, roots: Arc<[String]>) -> Self {
        LocalBackend {
            base: PathBuf::from(base_path),
            roots,
        }
    }

    /// The object's file name: `<name>-<uid>`.
    pub fn object_name(v: &ObjectRef) -> String {
        format!("{}-{}", v.name, v.uid)
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
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use domain::Code;

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
