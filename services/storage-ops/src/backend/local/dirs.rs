//! The base path and the namespace directories under it, and the checks that keep every object
//! under the operator's roots: apart because every operation first goes through them, and they
//! are where a planted link is refused.

use std::fs::{self, DirBuilder, File};
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use domain::Code;
use service_kit::paths::{Escape, check_within};

use super::LocalBackend;
use crate::backend::BackendError;

impl LocalBackend {
    /// Where the base path resolves to (see [`service_kit::paths::resolve`]), refusing one that
    /// leads outside the roots through a symbolic link (its text is under one: `Backends` checked
    /// that). Checked before anything is made, and again after the base path is made, so a link
    /// swapped in meanwhile is not used either.
    pub(super) fn check_base(&self) -> Result<PathBuf, BackendError> {
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
    pub(super) fn namespace_dir(
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
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), BackendError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| BackendError::io("syncing a directory", dir, &e))
}
