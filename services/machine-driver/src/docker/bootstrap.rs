//! Getting the user data into a container and running it once: the bootstrap's states, the
//! user data file, and the exec.
//!
//! Apart because running a program inside a machine exactly once, across driver restarts and
//! racing calls, takes an order of its own: the exec's id is recorded before the exec starts, one
//! lock per container within the process, and a watcher that records the exit code even when
//! nobody asks. What the records hold and how they are read is in [`super::records`].

use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use bollard::Docker as Engine;
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecOptions};
use bollard::query_parameters::{ContainerArchiveInfoOptions, UploadToContainerOptions};
use domain::{Code, Status};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::Docker;
use super::archive;
use super::container::{Container, Target};
use super::engine::{EngineError, checked_id, short};
use super::records::{ReadFirst, bootstrap_state, make_record, record_exit};
use super::spec::{LABEL_RECORD_EXEC, Record, USER_DATA_PATH};

/// How long the driver keeps following a bootstrap it started, to record its exit code.
const WATCH_LIMIT: Duration = Duration::from_secs(3600);

/// The user data's mode: owner-only, since it usually holds a bootstrap token; executable whatever
/// the class says now, so a class that moves to `bootstrap: exec` later can still run it.
pub(super) const USER_DATA_MODE: u32 = 0o700;

/// How far a container's bootstrap got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapState {
    /// The class asks for none.
    NotRequested,
    /// Not run yet.
    Pending,
    /// An exec was made for it but never started (a driver stopped between the two steps).
    Unstarted(String),
    /// Running as this exec.
    Running(String),
    /// Finished with exit code 0.
    Completed,
    /// Finished with this exit code.
    Failed(i64),
    /// Started as this exec, whose result the Engine no longer knows and nobody recorded.
    Lost(String),
    /// Left by an earlier driver (no [`LABEL_RECORDS`](super::spec::LABEL_RECORDS)) without an
    /// exit code it wrote that can be read: whether it ran is not known, so it is never run.
    Unknown,
}

impl BootstrapState {
    /// Why a machine in this state is not initialised (for Uninitialized answers).
    pub(super) fn reason(&self, name: &str) -> String {
        match self {
            BootstrapState::NotRequested | BootstrapState::Completed => {
                format!("the bootstrap of machine {name:?} has completed")
            }
            BootstrapState::Pending | BootstrapState::Unstarted(_) => format!(
                "the bootstrap of machine {name:?} has not run yet; InitializeMachine runs it"
            ),
            BootstrapState::Running(exec) => format!(
                "the bootstrap of machine {name:?} is running (exec {})",
                short(exec)
            ),
            BootstrapState::Failed(code) => format!(
                "the bootstrap of machine {name:?} failed with exit code {code}; {}: delete the machine to try again",
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
            BootstrapState::Lost(exec) => format!(
                "the bootstrap of machine {name:?} (exec {}) ended without a recorded exit code; {}: delete the machine to try again",
                short(exec),
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
            BootstrapState::Unknown => format!(
                "the bootstrap of machine {name:?} was left by an earlier driver without a result this driver can read; it is never run again: delete the machine and create it anew"
            ),
        }
    }

    /// The answer for a machine in this state that is not initialised: Uninitialized while the
    /// driver knows where the bootstrap got to; FailedPrecondition when it cannot know (only the
    /// operator can settle it, by recreating the machine).
    pub(super) fn refusal(&self, name: &str) -> Status {
        let code = match self {
            BootstrapState::Unknown => Code::FailedPrecondition,
            _ => Code::Uninitialized,
        };
        Status::new(code, self.reason(name))
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(
            self,
            BootstrapState::NotRequested | BootstrapState::Completed
        )
    }
}

/// Writes one file into a container (root-owned, with `mode`), making its directories.
pub(super) async fn write_file(
    engine: &Engine,
    id: &str,
    path: &str,
    mode: u32,
    contents: &[u8],
) -> Result<(), Status> {
    let tar = archive::single_file(path, mode, contents)
        .map_err(|e| Status::internal(format!("writing {path}: {e}")))?;
    engine
        .upload_to_container(
            id,
            Some(UploadToContainerOptions {
                path: "/".to_owned(),
                ..UploadToContainerOptions::default()
            }),
            bollard::body_full(tar.into()),
        )
        .await
        .map_err(|e| {
            EngineError::new(format!("writing {path} in container {}", short(id)), e).to_status()
        })
}

/// Follows a bootstrap this driver started until it ends, and records its exit code, so the result
/// is kept even if nobody asks before the Engine forgets the exec.
fn watch(engine: Engine, id: String, exec_id: String) {
    tokio::spawn(
        async move {
            let give_up = Instant::now() + WATCH_LIMIT;
            let mut pause = Duration::from_millis(50);
            while Instant::now() < give_up {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                match engine.inspect_exec(&exec_id).await {
                    Ok(x) if x.running == Some(true) => {}
                    Ok(x) => {
                        if let Some(code) = x.exit_code {
                            tracing::info!(exit_code = code, "bootstrap finished");
                            if let Err(e) = record_exit(&engine, &id, code).await {
                                tracing::debug!(error = %e, "bootstrap result not recorded; the next status call records it");
                            }
                        }
                        return;
                    }
                    // The container is gone, or the Engine is away: a later call settles it.
                    Err(_) => return,
                }
            }
        }
        .instrument(tracing::debug_span!("docker.bootstrap_watch")),
    );
}

impl Docker {
    /// Writes the user data into the container unless it is there already: MCM substitutes a fresh
    /// bootstrap token on every CreateMachine, but the machine keeps the one it booted with.
    pub(super) async fn ensure_user_data(
        &self,
        t: &Target,
        c: &Container,
        data: &[u8],
    ) -> Result<(), Status> {
        match t
            .engine
            .get_container_archive_info(
                &c.id,
                Some(ContainerArchiveInfoOptions {
                    path: USER_DATA_PATH.to_owned(),
                }),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => {
                return Err(EngineError::new(
                    format!("looking for the user data in container {}", c.name),
                    e,
                )
                .to_status());
            }
        }
        write_file(&t.engine, &c.id, USER_DATA_PATH, USER_DATA_MODE, data).await
    }

    /// The lock that serialises the bootstrap of one container within this process.
    async fn bootstrap_lock(&self, t: &Target, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let key = format!("{}#{id}", t.host);
        let lock = {
            let mut locks = self
                .bootstrap_locks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            locks.retain(|_, l| l.strong_count() > 0);
            match locks.get(&key).and_then(Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(key, Arc::downgrade(&l));
                    l
                }
            }
        };
        lock.lock_owned().await
    }

    /// Starts the bootstrap unless it has run (or is running): the exec's id is recorded (in a
    /// record only the driver makes) before the exec starts, so no later call starts a second one.
    pub(super) async fn run_bootstrap(
        &self,
        t: &Target,
        c: &Container,
    ) -> Result<BootstrapState, Status> {
        let _serialised = self.bootstrap_lock(t, &c.id).await;
        let exec_id = match bootstrap_state(&t.engine, c, ReadFirst::Started).await? {
            BootstrapState::Pending => {
                let exec = t
                    .engine
                    .create_exec(
                        &c.id,
                        CreateExecOptions {
                            cmd: Some(vec![USER_DATA_PATH.to_owned()]),
                            user: Some("0".to_owned()),
                            working_dir: Some("/".to_owned()),
                            attach_stdout: Some(false),
                            attach_stderr: Some(false),
                            ..CreateExecOptions::default()
                        },
                    )
                    .await
                    .map_err(|e| {
                        let e = EngineError::new(
                            format!("preparing the bootstrap of container {}", c.name),
                            e,
                        );
                        match e.status() {
                            Some(409) => Status::new(
                                Code::Uninitialized,
                                format!(
                                    "container {} is not running, so its bootstrap cannot run: {}",
                                    c.name,
                                    e.message()
                                ),
                            ),
                            _ => e.to_status(),
                        }
                    })?;
                let ours = checked_id(&exec.id, "the bootstrap's exec")?;
                let claimed =
                    make_record(&t.engine, &c.id, Record::Started, LABEL_RECORD_EXEC, ours).await?;
                if claimed.get(LABEL_RECORD_EXEC).map(String::as_str) == Some(ours) {
                    exec.id
                } else {
                    // Another driver recorded its exec first: that one is the bootstrap (ours is
                    // never started, and goes with the container).
                    match bootstrap_state(&t.engine, c, ReadFirst::Started).await? {
                        BootstrapState::Unstarted(exec_id) => exec_id,
                        other => return Ok(other),
                    }
                }
            }
            BootstrapState::Unstarted(exec_id) => exec_id,
            settled => return Ok(settled),
        };
        let started = t
            .engine
            .start_exec(
                &exec_id,
                Some(StartExecOptions {
                    detach: true,
                    ..StartExecOptions::default()
                }),
            )
            .await;
        match started {
            Ok(_) => {}
            // Started by someone else meanwhile: just as good.
            Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => {
                // The Engine records an exit code when it cannot even start the program (a missing
                // interpreter, say): that is a failed bootstrap, not an Engine failure.
                let after = bootstrap_state(&t.engine, c, ReadFirst::Started).await?;
                if matches!(after, BootstrapState::Failed(_) | BootstrapState::Completed) {
                    return Ok(after);
                }
                return Err(EngineError::new(
                    format!("starting the bootstrap of container {}", c.name),
                    e,
                )
                .to_status());
            }
        }
        tracing::info!(container = %c.name, exec = %short(&exec_id), "bootstrap started");
        watch(t.engine.clone(), c.id.clone(), exec_id.clone());
        Ok(BootstrapState::Running(exec_id))
    }
}
