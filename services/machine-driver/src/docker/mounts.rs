//! Why one machine's host directories may not nest inside another's, and the check before every
//! create and start that they do not.
//!
//! Apart because it is the one rule that looks across machines: a host directory is shared by
//! every container on an Engine, whatever its cluster or namespace, so the check lists every
//! Berth container there, not only the class's. The spec checks a machine's own mounts against
//! each other and the operator's roots; this file checks them against the neighbours'.

use std::collections::HashMap;

use bollard::query_parameters::ListContainersOptions;
use domain::{Code, Status};

use super::Docker;
use super::container::Target;
use super::engine::EngineError;
use super::settings;
use super::spec::{LABEL_MACHINE, SPEC};

/// A bind mount: its host source and whether it is writable.
pub(super) type Bind = (String, bool);

/// Why machine mounts `own` may not sit beside another machine's mounts `other` on one Engine, if
/// they may not: a machine with a writable mount could replace a directory on the way to a mount
/// source strictly inside it with a symbolic link, and the Engine would follow that link when it
/// next starts the other machine (the check before a start and the start itself are two steps, so
/// the link can win the race between them). Equal sources are fine: nobody can replace a mount's
/// own root from inside it.
pub(super) fn crossing(own: &[Bind], other: &[Bind]) -> Option<String> {
    own.iter().find_map(|(mine, mine_writable)| {
        other.iter().find_map(|(theirs, theirs_writable)| {
            if mine == theirs {
                None
            } else if *theirs_writable && settings::is_within(mine, theirs) {
                Some(format!(
                    "hostPath {mine:?} lies inside another machine's writable mount on this Docker Engine"
                ))
            } else if *mine_writable && settings::is_within(theirs, mine) {
                Some(format!(
                    "hostPath {mine:?} is writable and holds another machine's mount on this Docker Engine"
                ))
            } else {
                None
            }
        })
    })
}

impl Docker {
    /// Refuses mounts `own` (of container `own_id`, when it exists) that cross another Berth
    /// container's on the Engine ([`crossing`]), whatever its cluster or namespace: a host
    /// directory is shared by every machine of the Engine. The caller holds the mount gate.
    pub(super) async fn check_neighbours(
        &self,
        t: &Target,
        own_id: Option<&str>,
        own: &[Bind],
    ) -> Result<(), Status> {
        let listed = t
            .engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![LABEL_MACHINE.to_owned()],
                )])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| {
                EngineError::new("listing the machines' containers to check mounts", e).to_status()
            })?;
        for c in listed {
            if own_id.is_some_and(|id| c.id.as_deref() == Some(id)) {
                continue;
            }
            let other: Vec<Bind> = c
                .mounts
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m.typ.as_deref() == Some("bind"))
                .filter_map(|m| Some((m.source?, m.rw.unwrap_or(true))))
                .collect();
            if let Some(rule) = crossing(own, &other) {
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "{SPEC}.mounts: {rule}: a machine could replace the way to the other's source with a symbolic link; use separate directories, or mount the outer one read-only"
                    ),
                ));
            }
        }
        Ok(())
    }
}
