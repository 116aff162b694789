//! The bootstrap's records, and how far a bootstrap got as read back from them.
//!
//! The records are two Docker volumes per container that only the driver writes and never
//! mounts: the machine is root in its container, so nothing it can write may say whether its
//! bootstrap ran. Apart from running the bootstrap because every call reads them (a status call
//! only reads), and because reading them is where the care is: ids checked before they go into
//! an Engine path, an exec believed only if it belongs to the container, and the one file read
//! from a container (an earlier driver's exit code) bounded to a few bytes.

use std::collections::HashMap;

use bollard::Docker as Engine;
use bollard::errors::Error as BollardError;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, RemoveVolumeOptions,
};
use domain::Status;
use futures::StreamExt as _;

use super::archive;
use super::bootstrap::BootstrapState;
use super::container::Container;
use super::engine::{EngineError, checked_id, gone_is_done, short};
use super::spec::{
    self, LABEL_RECORD_EXEC, LABEL_RECORD_EXIT, LABEL_RECORD_OF, LABEL_RECORDS, LEGACY_EXIT_PATH,
    Record,
};

/// The largest file read back from a container (an earlier driver's exit-code file: a few bytes).
const MAX_READ: usize = 64;

/// Reads one small file out of a container; `None` when it does not exist, or is anything but a
/// regular file of at most [`MAX_READ`] bytes. Whatever is in a container was written by the
/// machine, so the size is checked before anything is downloaded, and the download is cut off past
/// the bound all the same (the file may grow between the two).
async fn read_small_file(
    engine: &Engine,
    id: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, EngineError> {
    let doing = || format!("reading {path} in container {}", short(id));
    let stat = engine
        .get_container_archive_info(
            id,
            Some(ContainerArchiveInfoOptions {
                path: path.to_owned(),
            }),
        )
        .await;
    let stat = match stat {
        Ok(headers) => headers,
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => return Ok(None),
        Err(e) => return Err(EngineError::new(doing(), e)),
    };
    // A directory, link, device... has mode bits above the permission ones.
    let small_regular = (0..=MAX_READ as i64).contains(&stat.size) && stat.file_mode & !0o7777 == 0;
    if !small_regular {
        return Ok(None);
    }
    let mut stream = engine.download_from_container(
        id,
        Some(DownloadFromContainerOptions {
            path: path.to_owned(),
        }),
    );
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => tar.extend_from_slice(&bytes),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(EngineError::new(doing(), e)),
        }
        if tar.len() > MAX_READ + 4096 {
            return Ok(None);
        }
    }
    Ok(archive::first_file(&tar).filter(|f| f.len() <= MAX_READ))
}

/// The labels of a bootstrap record of container `id`, if it exists.
async fn read_record(
    engine: &Engine,
    id: &str,
    record: Record,
) -> Result<Option<HashMap<String, String>>, Status> {
    let name = spec::bootstrap_record(checked_id(id, "a container")?, record);
    match engine.inspect_volume(&name).await {
        Ok(v) => Ok(Some(v.labels)),
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(EngineError::new("reading a bootstrap record", e).to_status()),
    }
}

/// Makes a bootstrap record of container `id` with `label = value`, unless one exists: the Engine
/// answers a create of an existing volume with that volume, unchanged, so the first record made
/// wins and every caller reads back the same labels.
pub(super) async fn make_record(
    engine: &Engine,
    id: &str,
    record: Record,
    label: &str,
    value: &str,
) -> Result<HashMap<String, String>, Status> {
    let name = spec::bootstrap_record(checked_id(id, "a container")?, record);
    engine
        .create_volume(VolumeCreateRequest {
            name: Some(name),
            labels: Some(HashMap::from([
                (LABEL_RECORD_OF.to_owned(), id.to_owned()),
                (label.to_owned(), value.to_owned()),
            ])),
            ..VolumeCreateRequest::default()
        })
        .await
        .map(|v| v.labels)
        .map_err(|e| EngineError::new("recording the bootstrap", e).to_status())
}

/// Removes container `id`'s bootstrap records (after the container).
pub(super) async fn remove_records(engine: &Engine, id: &str) -> Result<(), Status> {
    let id = checked_id(id, "a container")?;
    for record in [Record::Exited, Record::Started] {
        let removed = engine
            .remove_volume(
                &spec::bootstrap_record(id, record),
                None::<RemoveVolumeOptions>,
            )
            .await;
        gone_is_done(removed, || "removing a bootstrap record".to_owned())?;
    }
    Ok(())
}

/// Records a finished bootstrap's exit code, so its result outlives the Engine's memory of the exec.
pub(super) async fn record_exit(engine: &Engine, id: &str, code: i64) -> Result<(), Status> {
    make_record(
        engine,
        id,
        Record::Exited,
        LABEL_RECORD_EXIT,
        &code.to_string(),
    )
    .await
    .map(|_| ())
}

/// The state an exit code means.
fn finished(code: Option<i64>) -> BootstrapState {
    match code {
        Some(0) => BootstrapState::Completed,
        Some(code) => BootstrapState::Failed(code),
        None => BootstrapState::Lost(String::new()),
    }
}

/// Which of a bootstrap's records [`bootstrap_state`] reads first: either gives the same answer,
/// and the right one saves a look at the Engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadFirst {
    /// The exit record: one look for a machine long bootstrapped, as status calls mostly see.
    Exited,
    /// The started record: one look for a bootstrap not started yet.
    Started,
}

/// How far the container's bootstrap got, from the driver's records and the Engine's exec record. A
/// result the Engine knows but nobody recorded yet is recorded now.
///
/// Nothing in the container is read (it is the machine's, and a machine may write anything there),
/// except for a container an earlier driver made: there the old exit file, at most a few bytes
/// parsed as a number, says how its bootstrap ended; its exec id is never read.
///
/// The exit record is only ever made after the started one, so either may be read first: `first`
/// says which ([`ReadFirst`]).
pub(super) async fn bootstrap_state(
    engine: &Engine,
    c: &Container,
    first: ReadFirst,
) -> Result<BootstrapState, Status> {
    let exited = |labels: HashMap<String, String>| {
        finished(
            labels
                .get(LABEL_RECORD_EXIT)
                .and_then(|code| code.parse().ok()),
        )
    };
    if first == ReadFirst::Exited
        && let Some(labels) = read_record(engine, &c.id, Record::Exited).await?
    {
        return Ok(exited(labels));
    }
    let Some(started) = read_record(engine, &c.id, Record::Started).await? else {
        return legacy_state(engine, c).await;
    };
    if first == ReadFirst::Started
        && let Some(labels) = read_record(engine, &c.id, Record::Exited).await?
    {
        return Ok(exited(labels));
    }
    let Some(exec_id) = started
        .get(LABEL_RECORD_EXEC)
        .filter(|e| spec::is_engine_id(e))
        .cloned()
    else {
        return Ok(BootstrapState::Lost(String::new()));
    };
    match engine.inspect_exec(&exec_id).await {
        // An exec of another container is not this bootstrap, whatever recorded it.
        Ok(x) if x.container_id.as_deref() != Some(c.id.as_str()) => {
            Ok(BootstrapState::Lost(exec_id))
        }
        Ok(x) if x.running == Some(true) => Ok(BootstrapState::Running(exec_id)),
        Ok(x) => match x.exit_code {
            Some(code) => {
                record_exit(engine, &c.id, code).await?;
                Ok(finished(Some(code)))
            }
            None => Ok(BootstrapState::Unstarted(exec_id)),
        },
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(BootstrapState::Lost(exec_id)),
        Err(e) => Err(EngineError::new("inspecting the bootstrap's exec", e).to_status()),
    }
}

/// The bootstrap state of a container without records: Pending for one this driver made; for one an
/// earlier driver made (no [`LABEL_RECORDS`]), the exit code that driver wrote in it, read as data
/// only (a regular file of a few digits), else Unknown, never Pending: the file is in the machine's
/// hands, and a machine that removed it or replaced it with a link must not get its bootstrap run
/// again. The code read is the machine's own word (it could have written a 0); that fakes nothing
/// a machine could not fake anyway, since its bootstrap runs inside it, as root.
async fn legacy_state(engine: &Engine, c: &Container) -> Result<BootstrapState, Status> {
    if c.labels.contains_key(LABEL_RECORDS) {
        return Ok(BootstrapState::Pending);
    }
    let exit = read_small_file(engine, &c.id, LEGACY_EXIT_PATH)
        .await
        .map_err(|e| e.to_status())?;
    let code: Option<i64> = exit.and_then(|exit| {
        std::str::from_utf8(&exit)
            .ok()
            .map(str::trim)
            .filter(|t| t.len() <= 20)
            .and_then(|t| t.parse().ok())
    });
    Ok(code.map_or(BootstrapState::Unknown, |code| finished(Some(code))))
}
