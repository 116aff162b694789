//! The `docker` backend: a Docker Engine volume per Berth volume, through the Engine API (bollard).
//!
//! The volume is named `berth-<namespace>-<name>-<first 8 hex of uid>` and labelled with the Berth uid,
//! namespace and name, plus the store's instance id: a scan lists only volumes carrying this store's
//! instance label, so two Berths (or two test runs) sharing one Engine never take each other's volumes
//! for orphans. The client negotiates the API version with the Engine on first use, so an older Engine
//! (API 1.41) works as well as a current one.

use std::collections::HashMap;
use std::sync::Arc;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::ListVolumesOptions;
use domain::Code;
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use super::{Backend, BackendError, Found, ObjectRef, Usage};

/// Label: the store instance that made the volume.
pub const LABEL_INSTANCE: &str = "io.berth.instance";
/// Label: the Berth volume's uid.
pub const LABEL_UID: &str = "io.berth.uid";
/// Label: the Berth volume's namespace.
pub const LABEL_NAMESPACE: &str = "io.berth.namespace";
/// Label: the Berth volume's name.
pub const LABEL_NAME: &str = "io.berth.name";
/// Label: the capacity asked for, in bytes (the local driver does not enforce it).
pub const LABEL_CAPACITY: &str = "io.berth.capacity-bytes";

/// Seconds an Engine call may take.
const ENGINE_TIMEOUT_SECS: u64 = 20;

/// One connected (and version-negotiated) client per Engine address, made on first use.
pub type SharedClient = Arc<OnceCell<Docker>>;

/// Volumes on one Docker Engine.
pub struct DockerBackend {
    host: String,
    client: SharedClient,
    instance: String,
}

impl DockerBackend {
    /// The backend of the Engine at `host` (`unix:///var/run/docker.sock`, `tcp://h:2375`).
    pub fn new(host: &str, client: SharedClient, instance: &str) -> Self {
        DockerBackend {
            host: host.to_string(),
            client,
            instance: instance.to_string(),
        }
    }

    /// The Docker volume's name for `v`.
    pub fn volume_name(v: &ObjectRef) -> String {
        let short: String = v.uid.chars().filter(|c| *c != '-').take(8).collect();
        format!("berth-{}-{}-{short}", v.namespace, v.name)
    }

    async fn docker(&self) -> Result<&Docker, BackendError> {
        self.client
            .get_or_try_init(|| async {
                docker_engine::connect(
                    &self.host,
                    std::time::Duration::from_secs(ENGINE_TIMEOUT_SECS),
                )
                .await
                .map_err(|(stage, e)| self.error(stage.doing(), e))
            })
            .await
    }

    /// Maps an Engine error: no answer is Unavailable, an answer keeps its meaning. The caller hears
    /// what failed; the Engine's address, and an Engine's own words for its server errors (which
    /// may name its host's paths), go to the log only.
    fn error(&self, what: &str, e: DockerError) -> BackendError {
        match e {
            DockerError::DockerResponseServerError {
                status_code,
                message,
            } => {
                let code = match status_code {
                    404 => Code::NotFound,
                    409 => Code::FailedPrecondition,
                    400 => Code::InvalidArgument,
                    500..=599 => Code::Unavailable,
                    _ => Code::Internal,
                };
                let public = if (400..500).contains(&status_code) {
                    format!("the Docker Engine refused {what}: {message}")
                } else {
                    format!("the Docker Engine failed {what} (HTTP {status_code})")
                };
                BackendError::new(code, public)
                    .with_detail(format!("Engine at {}: {message}", self.host))
            }
            other => BackendError::new(
                Code::Unavailable,
                format!("the Docker Engine does not answer ({what})"),
            )
            .with_detail(format!("Engine at {}: {other}", self.host)),
        }
    }

    /// Whether an object with these labels was made by this stack's database.
    fn is_this_stacks(&self, labels: &HashMap<String, String>) -> bool {
        labels.get(LABEL_INSTANCE) == Some(&self.instance)
    }

    fn labels(&self, v: &ObjectRef) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
            (LABEL_UID.to_string(), v.uid.clone()),
            (LABEL_NAMESPACE.to_string(), v.namespace.clone()),
            (LABEL_NAME.to_string(), v.name.clone()),
            (LABEL_CAPACITY.to_string(), v.capacity_bytes.to_string()),
        ])
    }

    async fn create_volume(&self, v: &ObjectRef) -> Result<String, BackendError> {
        let docker = self.docker().await?;
        let name = Self::volume_name(v);
        let made = docker
            .create_volume(VolumeCreateRequest {
                name: Some(name.clone()),
                driver: Some("local".into()),
                labels: Some(self.labels(v)),
                ..Default::default()
            })
            .await
            .map_err(|e| self.error(&format!("creating volume {name}"), e))?;
        // The Engine answers an existing volume of that name as if it made it: check it is ours,
        // and this stack's (a restored copy of this stack's database has the same uids).
        if made.labels.get(LABEL_UID) != Some(&v.uid) || !self.is_this_stacks(&made.labels) {
            return Err(BackendError::new(
                Code::AlreadyExists,
                format!(
                    "Docker volume {name} exists and does not belong to volume uid {}",
                    v.uid
                ),
            )
            .with_detail(format!("Engine at {}", self.host)));
        }
        Ok(name)
    }

    async fn remove(&self, name: &str, uid: &str) -> Result<(), BackendError> {
        let docker = self.docker().await?;
        match docker.inspect_volume(name).await {
            Ok(found)
                if found.labels.get(LABEL_UID).map(String::as_str) != Some(uid)
                    || !self.is_this_stacks(&found.labels) =>
            {
                // Someone else's volume under the name ours would have, or the one of another
                // stack holding a copy of this database: ours is gone.
                return Ok(());
            }
            Ok(_) => {}
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) => return Err(self.error(&format!("inspecting volume {name}"), e)),
        }
        match docker
            .remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
        {
            Ok(()) => Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(self.error(&format!("removing volume {name}"), e)),
        }
    }

    async fn measure(&self, v: &ObjectRef) -> Result<Usage, BackendError> {
        let docker = self.docker().await?;
        let name = Self::volume_name(v);
        let found = docker
            .inspect_volume(&name)
            .await
            .map_err(|e| self.error(&format!("inspecting volume {name}"), e))?;
        if let Some(size) = found
            .usage_data
            .as_ref()
            .and_then(|u| u64::try_from(u.size).ok())
        {
            return Ok(Usage {
                used_bytes: Some(size),
                available_bytes: None,
                source: "docker",
            });
        }
        // Engines compute usage only in `system df`; an Engine on this host lets us look ourselves.
        let mountpoint = std::path::PathBuf::from(&found.mountpoint);
        let measured = tokio::task::spawn_blocking(move || {
            std::fs::symlink_metadata(&mountpoint)
                .is_ok_and(|m| m.is_dir())
                .then(|| super::local::walk_allocated(&mountpoint))
        })
        .await
        .ok()
        .flatten();
        Ok(Usage {
            used_bytes: measured,
            available_bytes: None,
            source: if measured.is_some() {
                "walk"
            } else {
                "unavailable"
            },
        })
    }

    async fn list(&self) -> Result<Vec<Found>, BackendError> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_INSTANCE}={}", self.instance)],
        )]);
        let listed = docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(filters),
            }))
            .await
            .map_err(|e| self.error("listing volumes", e))?;
        Ok(listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|v| {
                Some(Found {
                    uid: v.labels.get(LABEL_UID)?.clone(),
                    namespace: v.labels.get(LABEL_NAMESPACE)?.clone(),
                    name: v.labels.get(LABEL_NAME)?.clone(),
                    location: v.name,
                    // Docker volumes cannot be marked (labels are fixed at creation): their row is
                    // always written first.
                    uncommitted: false,
                })
            })
            .collect())
    }
}

impl Backend for DockerBackend {
    fn create<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<String, BackendError>> {
        Box::pin(self.create_volume(v))
    }

    fn delete<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { self.remove(&Self::volume_name(v), &v.uid).await })
    }

    fn grow<'a>(&'a self, v: &'a ObjectRef, bytes: u64) -> BoxFuture<'a, Result<(), BackendError>> {
        let _ = (v, bytes);
        Box::pin(std::future::ready(Err(BackendError::new(
            Code::FailedPrecondition,
            "a Docker volume cannot grow: the Engine's local driver has no size to change, and the capacity it was made with is fixed in its labels; make a new volume and copy the data",
        ))))
    }

    fn usage<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Usage, BackendError>> {
        Box::pin(self.measure(v))
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<Found>, BackendError>> {
        Box::pin(self.list())
    }

    fn remove_found<'a>(&'a self, f: &'a Found) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.remove(&f.location, &f.uid))
    }

    fn identity(&self) -> String {
        format!("docker:{}", self.host)
    }
}
