//! The machine's image on the Engine: whether it is there, whether its labels may be trusted,
//! and pulling it when the class allows.
//!
//! Apart because an image is the one thing a create takes from outside Berth: whoever built it
//! chose its labels, and the Engine copies them onto the container, so the driver looks at them
//! before every create; and a pull goes to a registry, which only the class's `pull` and the
//! operator's registries allow.

use bollard::errors::Error as BollardError;
use bollard::query_parameters::CreateImageOptions;
use domain::{Code, Status};
use futures::StreamExt as _;

use super::Docker;
use super::container::Target;
use super::engine::EngineError;
use super::spec::{self, ImageRef, SPEC};

impl Docker {
    /// Refuses an image carrying a label the driver or the Docker tools read as theirs
    /// ([`spec::foreign_image_label`]): the Engine would copy it onto the machine's container. A
    /// missing image passes (the create that follows says so, or pulls it and looks again).
    pub(super) async fn check_image_labels(
        &self,
        t: &Target,
        image: &ImageRef,
    ) -> Result<(), Status> {
        let labels = match t.engine.inspect_image(&image.reference).await {
            Ok(i) => i.config.and_then(|c| c.labels).unwrap_or_default(),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) => {
                return Err(
                    EngineError::new(format!("inspecting image {:?}", image.reference), e)
                        .to_status(),
                );
            }
        };
        match spec::foreign_image_label(&labels) {
            None => Ok(()),
            Some(key) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{SPEC}.image: image {:?} carries label {key:?}, whose prefix is reserved for the driver and the Docker tools; build the image without it",
                    image.reference
                ),
            )),
        }
    }

    pub(super) async fn image_exists(&self, t: &Target, image: &ImageRef) -> Result<bool, Status> {
        match t.engine.inspect_image(&image.reference).await {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(
                EngineError::new(format!("inspecting image {:?}", image.reference), e).to_status(),
            ),
        }
    }

    /// Pulls `image` (its `latest` tag when it names neither tag nor digest: a bare name would pull
    /// every tag).
    pub(super) async fn pull(&self, t: &Target, image: &ImageRef) -> Result<(), Status> {
        let reference = image.pullable();
        tracing::info!(image = %reference, "pulling a missing image (pull: IfNotPresent)");
        let mut progress = t.engine.create_image(
            Some(CreateImageOptions {
                from_image: Some(reference.clone()),
                ..CreateImageOptions::default()
            }),
            None,
            None,
        );
        while let Some(step) = progress.next().await {
            if let Err(e) = step {
                let e = EngineError::new(format!("pulling image {reference:?}"), e);
                return Err(match e {
                    EngineError::Answered { message, .. } => Status::new(
                        Code::FailedPrecondition,
                        format!(
                            "{SPEC}.image: image {:?} is not on the Docker Engine and pulling it failed: {message}",
                            image.reference
                        ),
                    ),
                    other => other.to_status(),
                });
            }
        }
        Ok(())
    }
}

impl ImageRef {
    /// The reference to pull: with `:latest` when it names neither a tag nor a digest.
    pub(super) fn pullable(&self) -> String {
        let last = self.reference.rsplit('/').next().unwrap_or_default();
        if self.reference.contains('@') || last.contains(':') {
            self.reference.clone()
        } else {
            format!("{}:latest", self.reference)
        }
    }
}
