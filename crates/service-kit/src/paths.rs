//! Where a caller-named directory really is: symbolic links resolved, so a path that is under an
//! operator's root by its text but leads elsewhere through a link is caught.
//!
//! The lexical rules (absolute, no `..`, under a root by its components) are the domain's
//! ([`domain::orchestrator::OrchestratorLimits`]); these are the file-system half, for the services
//! that have a file system to ask.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Why a path could not be shown to stay under the roots.
#[derive(Debug, thiserror::Error)]
pub enum Escape {
    /// It resolves (through a symbolic link) somewhere no root covers.
    #[error("resolves through a symbolic link to a place outside every allowed directory")]
    Outside {
        /// Where it resolves to (for the log only: never answered).
        resolved: PathBuf,
    },
    /// A link on the way does not resolve, or the file system would not say.
    #[error("cannot be resolved: {0}")]
    Unresolvable(#[source] std::io::Error),
}

/// Where the absolute `path` leads: its deepest existing ancestor with every link resolved, then the
/// rest as written (what does not exist yet cannot be a link, and nothing is under a file). A link that exists but leads nowhere
/// is an error: making directories through it would go wherever it is later pointed.
pub fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(_) => {
                let mut resolved = std::fs::canonicalize(at)?;
                resolved.extend(rest.iter().rev());
                return Ok(resolved);
            }
            // Not there, or a file on the way (nothing can be made under it, and it leads nowhere
            // else): what exists above it decides.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                let Some(name) = at.file_name() else {
                    return Err(e);
                };
                rest.push(name.to_os_string());
                at = match at.parent() {
                    Some(parent) => parent,
                    None => return Err(e),
                };
            }
            Err(e) => return Err(e),
        }
    }
}

/// Checks that `path` resolves to one of `roots`, or under one, as they resolve themselves, and
/// says where it resolves to (see [`resolve`]), so a caller about to use the path need not resolve
/// it again.
pub fn check_within(path: &Path, roots: &[String]) -> Result<PathBuf, Escape> {
    let resolved = resolve(path).map_err(Escape::Unresolvable)?;
    for root in roots {
        // A root that cannot be resolved covers nothing (and refuses nothing on its own).
        if let Ok(root) = resolve(Path::new(root))
            && resolved.starts_with(&root)
        {
            return Ok(resolved);
        }
    }
    Err(Escape::Outside { resolved })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_that_leave_the_root_are_caught() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("inner")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("gone"), root.join("dangling")).unwrap();
        let roots = [root.display().to_string()];
        std::fs::write(root.join("file"), b"x").unwrap();
        for ok in [
            "",
            "real",
            "real/new/deeper",
            "inner/x",
            "not-yet/made",
            "file/x",
        ] {
            assert!(check_within(&root.join(ok), &roots).is_ok(), "{ok}");
        }
        for bad in ["escape", "escape/new"] {
            assert!(
                matches!(
                    check_within(&root.join(bad), &roots),
                    Err(Escape::Outside { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            check_within(&root.join("dangling/x"), &roots),
            Err(Escape::Unresolvable(_))
        ));
        // A root that is itself a link covers where it leads.
        let linked_root = tmp.path().join("linked-root");
        std::os::unix::fs::symlink(&root, &linked_root).unwrap();
        assert!(check_within(&root.join("real"), &[linked_root.display().to_string()]).is_ok());
    }
}
