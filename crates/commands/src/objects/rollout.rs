//! `berth rollout status`: following a machine deployment until its roll is done, and the rule
//! that says when it is. Apart because that rule (generations seen, replicas updated, available,
//! old ones gone) is the controller's contract, read here field by field.

use std::time::{Duration, Instant};

use client::controller::Client;
use domain::resources::Kind;
use domain::{Code, Status};
use serde_json::Value;

use super::follow::follow;
use super::{lower, number, resolve, text};
use crate::args::ObjectRef;
use crate::{CliError, Ctx};

/// Where a deployment's roll stands: done, or what is still to happen. `class_generation` is
/// its class's generation when the command started: a class change rolls the machines without
/// changing the deployment's generation.
fn rollout_state(d: &Value, class_generation: Option<i64>) -> Result<(), String> {
    let want = number(d, "/spec/replicas");
    let observed = d
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let generation = d
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed_class = d
        .pointer("/status/observedClassGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if observed < generation || class_generation.is_some_and(|g| observed_class < g) {
        return Err("waiting for the controller to see the latest change".into());
    }
    let updated = number(d, "/status/updatedReplicas");
    let replicas = number(d, "/status/replicas");
    let available = number(d, "/status/availableReplicas");
    if updated < want {
        // As kubectl says it: how many are of the new template yet, not how many are available
        // (the available ones may all be old).
        return Err(format!(
            "{updated} of {want} new replicas have been updated"
        ));
    }
    if replicas > updated {
        return Err(format!(
            "{} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Err(format!(
            "{available} of {updated} updated replicas are available"
        ));
    }
    Ok(())
}

/// `berth rollout status machinedeployment/NAME`: follows the deployment's watch until its roll is
/// complete, saying each step once.
pub async fn rollout_status(
    ctx: &Ctx,
    object: &ObjectRef,
    timeout: Duration,
) -> Result<(), CliError> {
    let (kind, name, namespace) = resolve(object)?;
    if kind != Kind::MachineDeployment {
        return Err(CliError::Usage(format!(
            "rollout status follows a machinedeployment, not a {}",
            lower(kind)
        )));
    }
    let client = Client::new(ctx.client());
    let current = client.get(kind, &namespace, &name).await?;
    // The class as it is now: a roll it started is not done until the controller saw it. A class
    // that is missing (or unreadable) leaves only the deployment's own generation to wait on.
    let class = text(&current, "/spec/template/spec/class/name").to_string();
    let class_generation = match class.is_empty() {
        true => None,
        false => client
            .get(Kind::MachineClass, &namespace, &class)
            .await
            .ok()
            .and_then(|c| c.pointer("/metadata/generation").and_then(Value::as_i64)),
    };
    let done = format!("machinedeployment {name:?} successfully rolled out");
    let mut last = String::new();
    let mut check = |d: &Value| match rollout_state(d, class_generation) {
        Ok(()) => true,
        Err(state) => {
            if state != last {
                println!("Waiting for machinedeployment {name:?} rollout to finish: {state}...");
                last = state;
            }
            false
        }
    };
    if check(&current) {
        println!("{done}");
        return Ok(());
    }
    let version = text(&current, "/metadata/resourceVersion").to_string();
    let started = Instant::now();
    let mut finished = false;
    let followed = follow(ctx, &client, kind, &namespace, None, version, |event| {
        if text(&event.object, "/metadata/name") != name {
            return true;
        }
        if event.event == "DELETED" {
            return false;
        }
        finished = check(&event.object);
        !finished
    });
    match tokio::time::timeout(timeout.saturating_sub(started.elapsed()), followed).await {
        Ok(result) => result?,
        Err(_) => {
            let why = stuck_machines(&client, &namespace, &current).await;
            return Err(CliError::Local(Status::new(
                Code::DeadlineExceeded,
                format!(
                    "gave up waiting for machinedeployment {name:?} to roll out after {timeout:?} (a longer --timeout waits longer){why}"
                ),
            )));
        }
    }
    if finished {
        println!("{done}");
        Ok(())
    } else {
        Err(CliError::Local(Status::not_found(format!(
            "machinedeployment {name:?} was deleted during its roll"
        ))))
    }
}

/// At most this many machines are named in why a roll is stuck.
const STUCK_SHOWN: usize = 3;

/// Why a roll (or a delete) may be stuck, as its machines say it: each of the deployment's (or
/// set's: any object with `spec.selector.matchLabels`) machines that is not
/// Running and whose last operation failed, with that operation's description; empty when none (or
/// when they cannot be listed: the timeout is the answer then).
pub(super) async fn stuck_machines(client: &Client, namespace: &str, deployment: &Value) -> String {
    let selector = deployment
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|s| !s.is_empty());
    match client
        .list(Kind::Machine, namespace, selector.as_deref())
        .await
    {
        Ok(list) => failed_machines(&list),
        Err(_) => String::new(),
    }
}

/// The machines of `list` that are not Running and whose last operation failed, said in a clause
/// (empty when none).
pub(super) fn failed_machines(list: &Value) -> String {
    let stuck: Vec<String> = list
        .pointer("/items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| text(m, "/status/phase") != "Running")
        .filter(|m| {
            text(m, "/status/lastOperation/state") == "Failed"
                || !text(m, "/status/lastOperation/errorCode").is_empty()
        })
        .map(|m| {
            format!(
                "{} ({}): {}",
                text(m, "/metadata/name"),
                text(m, "/status/phase"),
                text(m, "/status/lastOperation/description")
            )
        })
        .collect();
    match stuck.len() {
        0 => String::new(),
        n => {
            let more = if n > STUCK_SHOWN {
                format!("; and {} more", n - STUCK_SHOWN)
            } else {
                String::new()
            };
            format!(
                "; machines whose last operation failed: {}{more}",
                stuck[..n.min(STUCK_SHOWN)].join("; ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stuck_roll_names_the_machines_whose_last_operation_failed() {
        let machine = |name: &str, phase: &str, state: &str, code: Option<&str>| {
            json!({"metadata": {"name": name}, "status": {"phase": phase, "lastOperation": {
                "state": state, "errorCode": code, "description": format!("{name} went wrong")}}})
        };
        let list = json!({"items": [
            machine("ok", "Running", "Successful", None),
            machine("boot", "Creating", "Processing", Some("Uninitialized")),
            machine("gone", "Failed", "Failed", None),
        ]});
        assert_eq!(
            failed_machines(&list),
            "; machines whose last operation failed: boot (Creating): boot went wrong; gone \
             (Failed): gone went wrong"
        );
        assert_eq!(failed_machines(&json!({"items": []})), "");
        let many = json!({"items": (0..5).map(|i| machine(&format!("m{i}"), "Creating", "Failed", None)).collect::<Vec<_>>()});
        assert!(
            failed_machines(&many).ends_with("; and 2 more"),
            "{}",
            failed_machines(&many)
        );
    }

    #[test]
    fn a_roll_is_done_when_every_replica_is_updated_and_available() {
        let rollout_state_of = |d: &Value| rollout_state(d, None);
        let d = |generation: i64,
                 observed: i64,
                 want: u64,
                 replicas: u64,
                 updated: u64,
                 available: u64| {
            json!({"metadata": {"generation": generation}, "spec": {"replicas": want},
                   "status": {"observedGeneration": observed, "replicas": replicas,
                              "updatedReplicas": updated, "availableReplicas": available}})
        };
        assert!(
            rollout_state_of(&d(2, 1, 3, 3, 3, 3))
                .unwrap_err()
                .contains("latest change")
        );
        // Three available, all old: what is said is how far the new template got.
        assert_eq!(
            rollout_state_of(&d(2, 2, 3, 4, 1, 3)).unwrap_err(),
            "1 of 3 new replicas have been updated"
        );
        assert!(
            rollout_state_of(&d(2, 2, 3, 4, 3, 3))
                .unwrap_err()
                .contains("1 old replicas")
        );
        assert!(
            rollout_state_of(&d(2, 2, 3, 3, 3, 2))
                .unwrap_err()
                .contains("2 of 3")
        );
        rollout_state_of(&d(2, 2, 3, 3, 3, 3)).unwrap();
        // A class change: done only once the controller saw the class's new generation.
        let mut done = d(2, 2, 3, 3, 3, 3);
        done["status"]["observedClassGeneration"] = json!(4);
        assert!(
            rollout_state(&done, Some(5))
                .unwrap_err()
                .contains("latest change")
        );
        rollout_state(&done, Some(4)).unwrap();
    }
}
