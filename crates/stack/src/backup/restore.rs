//! `berth restore`: an archive unpacked beside a new or empty directory, checked, made its own
//! unless `--same-instance`, then renamed into place. Apart because a restore must never mix with
//! what is there: every refusal of the target is decided here, before anything is written.

use std::path::Path;

use domain::Status;

use super::archive::unpack;
use super::copy_own::make_copy_own;
use super::{failed, parent_of, refused, sync_dir, writing_refused};

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
