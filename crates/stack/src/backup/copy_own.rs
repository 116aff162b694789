//! Making a restored copy its own: a new Docker instance, and the storage and registry databases'
//! local paths moved from the original's data directory to the copy's. Apart because it is what
//! lets a copy run beside its original without touching what the original made, and each service
//! decides its own part.

use std::path::Path;

use domain::Status;

use super::{failed, refused};

/// Makes the unpacked copy in `staging` (to live at `to`, a copy of `from`) its own: a new Docker
/// instance, the storage database's new instance and local paths, the registry's local paths.
/// Returns what it says of it.
pub(super) async fn make_copy_own(
    staging: &Path,
    from: &Path,
    to: &Path,
) -> Result<String, Status> {
    let mut said = String::new();
    let storage = staging.join("storage.db");
    if storage.exists() {
        let made = storage_ops::store::make_copy_own(&storage, from, to).map_err(|e| match e {
            storage_ops::store::CopyError::Shared(_) => refused(format!(
                "a copy beside the original cannot be made: {e}; restore with --same-instance to replace the original instead (the two must never run at once)"
            )),
            storage_ops::store::CopyError::Database(_) => failed("storage.db".into(), e),
        })?;
        said.push_str(&format!(
            "  new storage instance {} ({} local volumes moved under {})\n",
            made.instance,
            made.moved,
            to.display()
        ));
    }
    let registry = staging.join("registry.db");
    if registry.exists() {
        let store = orchestrator_registry::store::Store::open(&registry)
            .await
            .map_err(|e| failed("registry.db".into(), e))?;
        let moved = store.make_copy_own(from, to).await.map_err(|e| {
            refused(format!(
                "a copy beside the original cannot be made: {e}; restore with --same-instance to replace the original instead (the two must never run at once)"
            ))
        });
        store.close().await;
        said.push_str(&format!(
            "  {} local orchestrators moved under {}\n",
            moved?,
            to.display()
        ));
    }
    let instance = crate::up::new_docker_instance();
    let file = staging.join("docker-instance");
    std::fs::write(&file, &instance)
        .and_then(|()| std::fs::File::open(&file)?.sync_all())
        .map_err(|e| failed("docker-instance".into(), e))?;
    said.push_str(&format!(
        "  new docker instance {instance}: the original's machines, volumes and claims are not this copy's; the copy makes its own\n"
    ));
    Ok(said)
}
