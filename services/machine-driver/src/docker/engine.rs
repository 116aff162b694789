//! The Engine itself: connecting to the one a request names, and what its answers mean.
//!
//! Every other file here talks to an Engine through a [`bollard`] client and turns its failures
//! into the driver's statuses the same way: a refusal keeps the Engine's words, anything that may
//! carry its internals stays in the log. That reading lives here, once, with the connection and
//! the checks an Engine's own answers get before they go back into an Engine path (ids), so the
//! files about containers and bootstraps hold only what they do with the Engine.

use std::sync::PoisonError;

use bollard::Docker as Engine;
use bollard::errors::Error as BollardError;
use domain::machine::Secret;
use domain::{Code, Status};

use super::Docker;
use super::spec::{self, SPEC};

/// What went wrong talking to an Engine. Callers turn it into a [`Status`] ([`EngineError::to_status`])
/// unless they give the answer a meaning of their own (a 409 on create is a race to adopt, say).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No answer: the Engine is down, unreachable or too slow.
    #[error("the Docker Engine does not answer ({doing})")]
    Unreachable {
        /// What the driver was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: BollardError,
    },
    /// The Engine answered with an error.
    #[error("the Docker Engine answered HTTP {status} to {doing}: {message}")]
    Answered {
        /// What the driver was doing.
        doing: String,
        /// The HTTP status (500 for an error reported mid-stream).
        status: u16,
        /// The Engine's message.
        message: String,
    },
    /// The Engine answered something the client could not read.
    #[error("the Docker Engine's answer to {doing} could not be read")]
    Unreadable {
        /// What the driver was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: BollardError,
    },
}

impl EngineError {
    /// Classifies a client error.
    pub fn new(doing: impl Into<String>, e: BollardError) -> Self {
        let doing = doing.into();
        match e {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => EngineError::Answered {
                doing,
                status: status_code,
                message: printable(&message),
            },
            BollardError::DockerStreamError { error } => EngineError::Answered {
                doing,
                status: 500,
                message: printable(&error),
            },
            e @ (BollardError::JsonDataError { .. }
            | BollardError::JsonSerdeError { .. }
            | BollardError::APIVersionParseError {}) => {
                EngineError::Unreadable { doing, source: e }
            }
            source => EngineError::Unreachable { doing, source },
        }
    }

    /// The Engine's HTTP status, when it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            EngineError::Answered { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(super) fn message(&self) -> &str {
        match self {
            EngineError::Answered { message, .. } => message,
            _ => "",
        }
    }

    /// What the caller sees. A client-side refusal (4xx) keeps the Engine's words; anything that may
    /// carry the Engine's internals (its address, its paths) stays in the driver's log, since a 5xx
    /// never names an internal host or path.
    pub fn to_status(&self) -> Status {
        match self {
            EngineError::Unreachable { doing, .. } => {
                tracing::warn!(error = %self, cause = %error_chain(self), "Docker Engine unreachable");
                Status::unavailable(format!(
                    "the Docker Engine does not answer ({doing}); retry"
                ))
            }
            EngineError::Unreadable { doing, .. } => {
                tracing::warn!(error = %self, cause = %error_chain(self), "Docker Engine answer unreadable");
                Status::internal(format!(
                    "the Docker Engine's answer to {doing} could not be read"
                ))
            }
            EngineError::Answered {
                doing,
                status,
                message,
            } => match status {
                400 => Status::new(
                    Code::InvalidArgument,
                    format!("{SPEC}: the Docker Engine refused {doing}: {message}"),
                ),
                404 => Status::not_found(format!("{doing}: {message}")),
                409 => Status::unavailable(format!(
                    "the Docker Engine is busy with the container ({doing}): {message}; retry"
                )),
                _ => {
                    tracing::warn!(error = %self, "Docker Engine failed");
                    Status::internal(format!(
                        "the Docker Engine failed {doing} (HTTP {status}); the machine driver's log has its message"
                    ))
                }
            },
        }
    }
}

/// The Engine's words without control characters (C0, DEL, C1), each replaced by a space: they
/// may repeat what a spec or a machine wrote (a path, an argument), and reach callers and logs.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// An error with its causes, for logs.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The first 12 characters of a Docker id, as the CLI shows them (the whole text when it has no
/// character boundary there: whatever it is, it is not an Engine id).
pub(super) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A container or exec id the Engine gave, checked before it goes into an Engine API path.
pub(super) fn checked_id<'a>(id: &'a str, what: &str) -> Result<&'a str, Status> {
    if spec::is_engine_id(id) {
        Ok(id)
    } else {
        tracing::warn!(
            what,
            "the Docker Engine gave an id that is not 64 hex digits"
        );
        Err(Status::internal(format!(
            "the Docker Engine gave {what} an id that is not 64 lower-case hex digits"
        )))
    }
}

/// The outcome of an Engine call that makes a container go away: a 404 (it is gone already) is as
/// good as done; any other failure is answered as what `doing` says.
pub(super) fn gone_is_done(
    outcome: Result<(), BollardError>,
    doing: impl FnOnce() -> String,
) -> Result<(), Status> {
    match outcome {
        Ok(())
        | Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(EngineError::new(doing(), e).to_status()),
    }
}

impl Docker {
    /// The client of the Engine at `host`, connected (and the API version agreed) on first use.
    pub(super) async fn engine(&self, host: &str) -> Result<Engine, Status> {
        let cell = self
            .engines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(host.to_owned())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            docker_engine::connect(host, self.operation_timeout)
                .await
                .map_err(|(stage, e)| EngineError::new(stage.doing(), e).to_status())
        })
        .await
        .cloned()
    }

    pub(super) fn engine_address(&self, secret: &Secret) -> Result<String, Status> {
        let named = secret.get_str(spec::SECRET_DOCKER_HOST)?;
        self.settings.engine_for(named.as_deref())
    }
}
