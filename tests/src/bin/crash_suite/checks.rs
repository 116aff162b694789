//! The end of a round: the controller's repeats, then every check.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::processes::{ProcessStack, Service};
use client::storage;
use domain::VolumePhase;
use serde_json::Value;

use crate::model::{machine_name, volume_name};
use crate::workload::{Shared, until_acknowledged};
use crate::{
    ADMIN_TOKEN, ECS_KEY_ID, ECS_KEY_SECRET, INTERNAL_TOKEN, NAMESPACE, SETTLE, USER_DATA,
};

pub(crate) async fn settle_and_check(shared: &Shared, stack: &ProcessStack) {
    // Repeat every unacknowledged intent, as a controller does until it is answered.
    for (i, state) in shared.volumes.iter().enumerate() {
        let mut state = state.lock().await;
        if let Some(intent) = state.pending {
            match until_acknowledged(|| shared.volume_op(i, intent)).await {
                Ok(()) => state.acknowledged(intent),
                Err(e) => shared.count(|c| {
                    c.half_made += 1;
                    c.findings.push(format!(
                        "{}: {intent:?} never acknowledged: {e}",
                        volume_name(i)
                    ));
                }),
            }
        }
    }
    for (i, state) in shared.machines.iter().enumerate() {
        let mut state = state.lock().await;
        if let Some(intent) = state.pending {
            let generation = state.generation;
            match until_acknowledged(|| shared.machine_op(i, intent, generation)).await {
                Ok(()) => state.acknowledged(intent),
                Err(e) => shared.count(|c| {
                    c.half_made += 1;
                    c.findings.push(format!(
                        "{}: {intent:?} never acknowledged: {e}",
                        machine_name(i)
                    ));
                }),
            }
        }
    }

    // Volumes: reconciled, each as acknowledged, no half-made one.
    let started = Instant::now();
    let volumes = loop {
        let listed = shared
            .clients
            .volumes
            .list_all(&storage::ListParams {
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            })
            .await;
        match listed {
            Ok(v) if v.iter().all(|v| v.status.phase == VolumePhase::Ready) => break v,
            Ok(v) if started.elapsed() > SETTLE => break v,
            Err(e) if started.elapsed() > SETTLE => {
                shared.count(|c| c.findings.push(format!("cannot list volumes: {e}")));
                break vec![];
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let by_name: BTreeMap<&str, &domain::Volume> = volumes
        .iter()
        .map(|v| (v.metadata.name.as_str(), v))
        .collect();
    for (i, state) in shared.volumes.iter().enumerate() {
        let state = state.lock().await;
        let name = volume_name(i);
        match (state.present, by_name.get(name.as_str())) {
            (true, None) => shared.count(|c| {
                c.data_lost += 1;
                c.findings
                    .push(format!("{name}: acknowledged as made, missing"));
            }),
            (false, Some(_)) => shared.count(|c| {
                c.data_lost += 1;
                c.findings
                    .push(format!("{name}: acknowledged as deleted, still there"));
            }),
            (true, Some(v)) if v.status.phase != VolumePhase::Ready => shared.count(|c| {
                c.half_made += 1;
                c.findings
                    .push(format!("{name}: {:?} after reconcile", v.status.phase));
            }),
            _ => {}
        }
    }
    // Every backend directory is a listed volume's, and storage-ops reports no orphan: an object
    // seen both ways counts once. A kill between an add making its (uncommitted) directory and
    // committing its row leaves one that the reconciler takes back on its next pass: the
    // directories are read again, up to SETTLE, until that pass has run.
    let owned: Vec<&str> = volumes.iter().map(|v| v.status.location.as_str()).collect();
    let unowned = || {
        let mut found = std::collections::BTreeSet::new();
        if let Ok(entries) = std::fs::read_dir(stack.volumes_root.join(NAMESPACE)) {
            for entry in entries.flatten() {
                let path = entry.path().display().to_string();
                if !owned.contains(&path.as_str()) {
                    found.insert(path);
                }
            }
        }
        found
    };
    let started = Instant::now();
    let mut orphans = unowned();
    while !orphans.is_empty() && started.elapsed() < SETTLE {
        tokio::time::sleep(Duration::from_millis(200)).await;
        orphans = unowned();
    }
    match shared.clients.volumes.orphans().await {
        Ok(list) => orphans.extend(list.items.into_iter().map(|o| o.location)),
        Err(e) => shared.count(|c| c.findings.push(format!("cannot list orphans: {e}"))),
    }
    for path in orphans {
        shared.count(|c| {
            c.orphans += 1;
            c.findings.push(format!("orphan backend object {path}"));
        });
    }

    // Machines: one VM per machine acknowledged as made, none for one acknowledged as deleted, and
    // nothing left behind by a deleted one.
    let account: Value = match reqwest::get(format!("{}/_emulator/state", stack.emulator)).await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(e) => {
            shared.count(|c| c.findings.push(format!("cannot read the ECS account: {e}")));
            Value::Null
        }
    };
    let machine_of = |resource: &Value| -> Option<String> {
        resource["Tags"]["Tag"]
            .as_array()?
            .iter()
            .find(|t| t["TagKey"] == "berth.io/machine")
            .and_then(|t| t["TagValue"].as_str().map(String::from))
    };
    let mut vms: BTreeMap<String, usize> = BTreeMap::new();
    for instance in account["instances"].as_array().into_iter().flatten() {
        if let Some(m) = machine_of(instance) {
            *vms.entry(m).or_default() += 1;
        }
    }
    for (i, state) in shared.machines.iter().enumerate() {
        let state = state.lock().await;
        let name = machine_name(i);
        let n = vms.get(&name).copied().unwrap_or(0);
        if n > 1 {
            shared.count(|c| {
                c.duplicate_vms += n - 1;
                c.findings.push(format!("{name}: {n} VMs"));
            });
        }
        match (state.present, n) {
            (true, 0) => shared.count(|c| {
                c.data_lost += 1;
                c.findings
                    .push(format!("{name}: acknowledged as made, no VM"));
            }),
            (false, n) if n > 0 => shared.count(|c| {
                c.data_lost += 1;
                c.findings
                    .push(format!("{name}: acknowledged as deleted, {n} VM(s) left"));
            }),
            _ => {}
        }
        if !state.present {
            for kind in ["disks", "networkInterfaces"] {
                for resource in account[kind].as_array().into_iter().flatten() {
                    if machine_of(resource).as_deref() == Some(name.as_str()) {
                        shared.count(|c| {
                            c.orphans += 1;
                            c.findings
                                .push(format!("{name}: a {kind} resource left behind"));
                        });
                    }
                }
            }
        }
    }
}

/// The planted secrets — the ECS access key and secret, the machines' user data, the admin token
/// and the internal credential — appear in no Berth service's log (its crates at debug level) and
/// on no `/metrics` page. The emulator is left out: it stands for the cloud, which holds the key by
/// definition, and it logs the key it was given at start on purpose (so a user of `berth up` can
/// sign calls to it).
pub(crate) async fn no_secret_anywhere(shared: &Shared, stack: &ProcessStack, data: &Path) {
    let mut places: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(data).into_iter().flatten().flatten() {
        let path = entry.path();
        let berths = path.file_stem().is_some_and(|s| s != "ecs-emulator");
        if berths && path.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            places.push((path.display().to_string(), text));
        }
    }
    for (service, url) in stack
        .urls()
        .into_iter()
        .filter(|(s, _)| *s != Service::Emulator)
    {
        // The gateway's page needs a cluster-wide metrics:read token (admin has it); without one
        // this would read its 401 and check nothing.
        let page = reqwest::Client::new()
            .get(format!("{url}/metrics"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await;
        if let Ok(r) = page {
            assert!(
                r.status().is_success(),
                "{} /metrics answered {}",
                service.binary(),
                r.status()
            );
            places.push((
                format!("{} /metrics", service.binary()),
                r.text().await.unwrap_or_default(),
            ));
        }
    }
    for (place, text) in &places {
        shared.no_secret_in(place, text);
    }
}

/// The planted secrets, each with what it is.
const PLANTED: [(&str, &str); 5] = [
    ("the ECS access key id", ECS_KEY_ID),
    ("the ECS access key secret", ECS_KEY_SECRET),
    ("the machines' user data", USER_DATA),
    ("the admin token", ADMIN_TOKEN),
    ("the internal credential", INTERNAL_TOKEN),
];

impl Shared {
    /// Counts each planted secret found in `text` (a log, a metrics page, an answer) as a leak.
    pub(crate) fn no_secret_in(&self, place: &str, text: &str) {
        for (what, secret) in PLANTED {
            // The user data is multi-line: any one of its lines is a leak.
            let found = secret
                .trim()
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with("#!"))
                .any(|l| text.contains(l));
            if found {
                self.count(|c| {
                    c.secrets_leaked += 1;
                    c.findings.push(format!("{what} appears in {place}"));
                });
            }
        }
    }
}

/// A Kubernetes round's claims against its volumes: every volume acknowledged as made has its
/// claim, none acknowledged as deleted has one, and no claim labelled as Berth's is no volume's.
pub(crate) async fn claims_match_volumes(shared: &Shared, standin: &kube_standin::StandIn) {
    let claims = standin.claims(crate::CLAIMS_NAMESPACE);
    let berths: std::collections::BTreeSet<String> = claims
        .iter()
        .filter(|(_, c)| c["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth")
        .map(|(name, _)| name.clone())
        .collect();
    let mut expected = std::collections::BTreeSet::new();
    for (i, state) in shared.volumes.iter().enumerate() {
        let name = volume_name(i);
        let claim = format!("{NAMESPACE}.{name}");
        let present = state.lock().await.present;
        if present {
            expected.insert(claim.clone());
            if !berths.contains(&claim) {
                shared.count(|c| {
                    c.data_lost += 1;
                    c.findings
                        .push(format!("{name}: acknowledged as made, no claim {claim}"));
                });
            }
        }
    }
    for claim in berths.difference(&expected) {
        shared.count(|c| {
            c.orphans += 1;
            c.findings
                .push(format!("claim {claim}: Berth's, but no volume's"));
        });
    }
}
