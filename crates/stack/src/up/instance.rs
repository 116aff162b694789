//! The stack's Docker instance: the name that keeps one stack's Docker machines apart from
//! another's on the same Engine, kept in the data directory. Apart because backup's restore makes
//! a copy its own with a new one, and a data directory from before instances must keep none.

use service_kit::Env;

use super::BoxError;

/// The machine driver's setting that keeps this stack's Docker machines apart from another's.
pub(super) const DOCKER_INSTANCE: &str = machine_driver::env_vars::DOCKER_INSTANCE;
/// Where `berth up` keeps the stack's Docker instance, beside the state it names.
const DOCKER_INSTANCE_FILE: &str = "docker-instance";
/// The files a data directory holds once a stack has run in it.
const STATE_FILES: [&str; 3] = ["registry.db", "storage.db", "controller.db"];

/// The stack's Docker instance (`BERTH_DOCKER_INSTANCE`): the one the environment gives, else the
/// one kept in the data directory, made on its first start. Two `berth up`s on one Engine then never
/// list, block or touch each other's Docker machines, as their volumes are kept apart. A data
/// directory a stack ran in before it kept one (an earlier release) gets none, recorded as an empty
/// file: its Docker machines were made without one and must stay this stack's.
pub(super) fn docker_instance_of(
    data_dir: &std::path::Path,
    env: &Env,
) -> Result<Option<String>, BoxError> {
    if let Some(given) = env.get(DOCKER_INSTANCE) {
        return Ok(Some(given.to_owned()));
    }
    let file = data_dir.join(DOCKER_INSTANCE_FILE);
    match std::fs::read_to_string(&file) {
        Ok(kept) => {
            let kept = kept.trim();
            if kept.is_empty() {
                return Ok(None);
            }
            domain::names::validate_dns1123_label("its content", kept).map_err(|e| {
                format!(
                    "{} holds no Docker instance ({DOCKER_INSTANCE}): {}",
                    file.display(),
                    e.message
                )
            })?;
            return Ok(Some(kept.to_owned()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", file.display()).into()),
    }
    let used_before = STATE_FILES.iter().any(|f| data_dir.join(f).exists());
    let instance = (!used_before).then(new_docker_instance);
    // Written whole or not at all: a crash mid-write must not leave a stack with half an instance.
    let partial = data_dir.join(format!("{DOCKER_INSTANCE_FILE}.partial"));
    std::fs::write(&partial, instance.as_deref().unwrap_or_default())?;
    std::fs::rename(&partial, &file)?;
    Ok(instance)
}

/// A new stack's Docker instance: a DNS-1123 label, unlikely to be any other stack's.
pub fn new_docker_instance() -> String {
    format!("b{}", hex::encode(rand::random::<[u8; 6]>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_data_directory_keeps_one_docker_instance_and_an_old_one_keeps_none() {
        let env = Env::default();
        let fresh = tempfile::tempdir().unwrap();
        let made = docker_instance_of(fresh.path(), &env)
            .unwrap()
            .expect("an instance");
        assert!(
            domain::names::validate_dns1123_label("instance", &made).is_ok(),
            "{made}"
        );
        assert_eq!(
            docker_instance_of(fresh.path(), &env).unwrap(),
            Some(made.clone())
        );
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            docker_instance_of(other.path(), &env).unwrap(),
            Some(made),
            "two stacks, two instances"
        );
        // A directory a stack ran in before instances existed: its machines have none, and keep it.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join("registry.db"), b"").unwrap();
        assert_eq!(docker_instance_of(old.path(), &env).unwrap(), None);
        assert_eq!(docker_instance_of(old.path(), &env).unwrap(), None);
        // The operator's own wins; a damaged file stops the start with its path.
        let given = Env::default().with(DOCKER_INSTANCE, "mine");
        assert_eq!(
            docker_instance_of(old.path(), &given).unwrap().as_deref(),
            Some("mine")
        );
        std::fs::write(old.path().join(DOCKER_INSTANCE_FILE), "../x").unwrap();
        let e = docker_instance_of(old.path(), &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains(DOCKER_INSTANCE_FILE), "{e}");
    }
}
