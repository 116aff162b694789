//! The machine controller's rounds: a MachineDeployment scaled 0 → 30 → 5 → 20 through the gateway
//! while a killer SIGKILLs the machine controller, the machine driver, or both, at random moments,
//! on the ECS emulator ([`Cloud::Emulator`]) and as containers on the local Docker Engine
//! ([`Cloud::Docker`], the test machine image the driver's tests build from nothing).
//!
//! Every write is one a controller's user repeats safely until it is answered 2xx: PUT makes the
//! secret, class and deployment, a merge PATCH sets the replicas. Once the last scale is
//! acknowledged the killer stops, both services are started again, and the round waits (within
//! [`SETTLE`]) for the stack to come to rest. Then it checks, against the ECS account itself:
//! - missing: fewer than 20 machines Running, or a machine whose providerID names no live VM (a
//!   wanted machine's VM deleted);
//! - extra: more machines than wanted, or a machine left Failed, Pending or Creating;
//! - leaked: a VM of this stack that no machine owns (the orphan collector had its two listings);
//! - duplicate VMs: more than one VM for one machine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::docker_support::{RUN_LABEL, Sweep, local_engine, machine_image};
use crate::{ADMIN_TOKEN, ECS_KEY_ID, ECS_KEY_SECRET, INTERNAL_TOKEN, SETTLE};

/// The replicas the round asks for, in turn.
pub(crate) const STEPS: [u64; 3] = [30, 5, 20];
const NS: &str = "crash-scale";
const DEPLOYMENT: &str = "workers";

/// Where a round's machines are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cloud {
    /// VMs on the ECS emulator.
    Emulator,
    /// Containers on the local Docker Engine.
    Docker,
}

impl std::fmt::Display for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so the table's widths apply.
        f.pad(match self {
            Cloud::Emulator => "ECS",
            Cloud::Docker => "Docker",
        })
    }
}

/// What a round's machines are made on, and how they are counted.
enum Backend {
    Emulator {
        url: String,
    },
    Docker {
        engine: bollard::Docker,
        run: String,
        _sweep: Sweep,
    },
}

/// What one round saw.
#[derive(Debug, Default, Clone)]
pub(crate) struct ScaleCounts {
    pub(crate) kills: usize,
    pub(crate) machines: usize,
    pub(crate) vms: usize,
    pub(crate) missing: usize,
    pub(crate) extra: usize,
    pub(crate) leaked: usize,
    pub(crate) duplicate_vms: usize,
    pub(crate) findings: Vec<String>,
}

impl ScaleCounts {
    /// Exactly the wanted machines, nothing found wrong, and at least one kill: a round whose
    /// services never died proves nothing about crashes.
    pub(crate) fn passed(&self) -> bool {
        self.missing + self.extra + self.leaked + self.duplicate_vms == 0
            && self.findings.is_empty()
            && self.kills > 0
    }
}

/// The controller's settings for a round: quick resyncs and backoffs, orphans looked for every
/// two seconds, so a round comes to rest within the suite's patience.
/// On Docker, the driver reaches the local Engine (the stack's default is one nobody listens on).
fn settings(cloud: Cloud) -> Vec<(Service, &'static str, &'static str)> {
    let mut settings: Vec<_> = [
        ("BERTH_CONTROLLER_RESYNC", "500ms"),
        ("BERTH_CONTROLLER_BACKOFF_MAX", "1s"),
        ("BERTH_CONTROLLER_ORPHAN_INTERVAL", "2s"),
        ("BERTH_CONTROLLER_CLASS_CALLS_PER_SECOND", "50"),
    ]
    .into_iter()
    .map(|(k, v)| (Service::MachineController, k, v))
    .collect();
    if cloud == Cloud::Docker {
        settings.push((
            Service::MachineDriver,
            "DOCKER_HOST",
            "unix:///var/run/docker.sock",
        ));
    }
    settings
}

/// One round with `seed` on `cloud`; Docker's rounds need a local Engine (the caller checks).
pub(crate) async fn round(
    bin_dir: &std::path::Path,
    seed: u64,
    cloud: Cloud,
) -> Result<ScaleCounts, String> {
    let data = tempfile::Builder::new()
        .prefix("berth-crash-scale-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    match run(bin_dir, seed, cloud, data.path()).await {
        Ok(counts) if counts.passed() => Ok(counts),
        // The data directory (every service's log) stays to look at.
        Ok(counts) => {
            eprintln!("scale round {seed}: kept {}", data.keep().display());
            Ok(counts)
        }
        Err(e) => Err(format!("{e} (kept {})", data.keep().display())),
    }
}

async fn run(
    bin_dir: &std::path::Path,
    seed: u64,
    cloud: Cloud,
    data: &std::path::Path,
) -> Result<ScaleCounts, String> {
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: ECS_KEY_ID.into(),
        ecs_key_secret: ECS_KEY_SECRET.into(),
    };
    let backend = match cloud {
        Cloud::Emulator => None,
        Cloud::Docker => {
            let engine = local_engine()
                .await
                .ok_or("no Docker Engine answers on its default socket")?;
            let run = format!("crash{}-{seed}", std::process::id());
            Some((engine, run))
        }
    };
    let stack = ProcessStack::start(bin_dir, data, &credentials, &settings(cloud)).await?;
    let (backend, secret, class) = match backend {
        None => (
            Backend::Emulator {
                url: stack.emulator.clone(),
            },
            json!({"stringData": {
                "alicloudAccessKeyID": ECS_KEY_ID, "alicloudAccessKeySecret": ECS_KEY_SECRET}}),
            alicloud_class(),
        ),
        Some((engine, run)) => {
            let class = docker_class(&machine_image().await, &run);
            (
                Backend::Docker {
                    engine,
                    _sweep: Sweep(run.clone()),
                    run,
                },
                json!({"stringData": {"userData": "#!/bin/sh\necho scaled\n"}}),
                class,
            )
        }
    };
    let api = Api {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| e.to_string())?,
        gateway: stack.gateway.clone(),
    };
    let stack = Arc::new(Mutex::new(stack));
    let mut counts = ScaleCounts::default();

    api.put("secrets", "cloud", secret).await?;
    api.put("machineclasses", "small", class).await?;
    api.put("machinedeployments", DEPLOYMENT, deployment(0))
        .await?;

    let stop = Arc::new(AtomicBool::new(false));
    let killing = tokio::spawn(killer(stack.clone(), stop.clone(), seed));
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5ca1e);
    for replicas in STEPS {
        api.patch(
            "machinedeployments",
            DEPLOYMENT,
            json!({"spec": {"replicas": replicas}}),
        )
        .await?;
        // Long enough that some scales are caught halfway, short enough that others are not.
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..3000))).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (kills, failed_starts) = killing
        .await
        .map_err(|e| format!("the killer panicked: {e}"))?;
    counts.kills = kills;
    counts.findings.extend(
        failed_starts
            .into_iter()
            .map(|e| format!("restart failed: {e}")),
    );
    let mut stack = Arc::try_unwrap(stack)
        .map_err(|_| "the stack is still shared".to_string())?
        .into_inner();
    for s in [Service::MachineDriver, Service::MachineController] {
        let p = stack.process(s);
        p.kill().await;
        p.start().await?;
    }

    // At rest: the wanted machines Running, one live VM each, and no VM of this stack beside them.
    let want = *STEPS.last().expect("steps") as usize;
    let started = Instant::now();
    let (machines, vms) = loop {
        let machines = api.machines().await.unwrap_or_default();
        let vms = backend.by_machine().await.unwrap_or_default();
        let running = machines
            .iter()
            .filter(|m| m["status"]["phase"] == "Running")
            .count();
        let one_each = vms.values().all(|v| v.len() == 1);
        if (running == want && machines.len() == want && vms.len() == want && one_each)
            || started.elapsed() > SETTLE
        {
            break (machines, vms);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    counts.machines = machines.len();
    counts.vms = vms.values().map(Vec::len).sum();
    let mut owned = BTreeMap::new();
    for m in &machines {
        let name = m["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let phase = m["status"]["phase"].as_str().unwrap_or_default();
        if phase != "Running" {
            counts.extra += 1;
            counts.findings.push(format!("{name}: {phase} at rest"));
        }
        let instance = backend.id_in(m["status"]["providerID"].as_str().unwrap_or_default());
        let live = vms.get(&name).is_some_and(|ids| ids.contains(&instance));
        if !live {
            counts.missing += 1;
            counts
                .findings
                .push(format!("{name}: its VM {instance:?} is not there"));
        }
        owned.insert(name, instance);
    }
    counts.missing += want.saturating_sub(machines.len());
    counts.extra += machines.len().saturating_sub(want);
    for (machine, ids) in &vms {
        if !owned.contains_key(machine) {
            counts.leaked += ids.len();
            counts
                .findings
                .push(format!("{machine}: {} VM(s) and no machine", ids.len()));
        } else if ids.len() > 1 {
            counts.duplicate_vms += ids.len() - 1;
            counts
                .findings
                .push(format!("{machine}: {} VMs", ids.len()));
        }
    }
    stack.stop().await;
    Ok(counts)
}

/// Kills the controller, the driver or both every 0.2-1 s until told to stop, and starts them
/// again after up to 0.5 s; answers how many kills, and the starts that failed five times.
async fn killer(
    stack: Arc<Mutex<ProcessStack>>,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> (usize, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kills = 0;
    let mut failed_starts = Vec::new();
    let everyone = [Service::MachineController, Service::MachineDriver];
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1000))).await;
        let pick = rng.random_range(0..=everyone.len());
        let victims: &[Service] = match everyone.get(pick) {
            Some(one) => std::slice::from_ref(one),
            None => &everyone,
        };
        let mut stack = stack.lock().await;
        for v in victims {
            stack.process(*v).kill().await;
        }
        kills += victims.len();
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..500))).await;
        for v in victims {
            // A start can fail on a loaded machine (the port not yet free, /healthz late): it is
            // tried again, and one that never comes back is a finding, not a silent outage.
            let mut last = String::new();
            for _ in 0..5 {
                match stack.process(*v).start().await {
                    Ok(()) => {
                        last.clear();
                        break;
                    }
                    Err(e) => {
                        last = e;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            if !last.is_empty() {
                failed_starts.push(last);
            }
        }
    }
    (kills, failed_starts)
}

/// The class of the suite's other machines (`berth_tests::alicloud_machine_request`), stored.
fn alicloud_class() -> Value {
    let mut request = berth_tests::alicloud_machine_request(&berth_tests::AlicloudMachine {
        name: "unused",
        uid: "unused",
        cluster: "shoot--scale",
        class: "small",
        key_id: ECS_KEY_ID,
        key_secret: ECS_KEY_SECRET,
        user_data: "",
    });
    let mut class = request["machineClass"].take();
    if let Some(fields) = class.as_object_mut() {
        fields.remove("metadata");
    }
    class["secretRef"] = json!({"name": "cloud"});
    class
}

/// A class of the test machine image, its containers labelled with the round's run (so the sweep
/// removes them whatever happens) and the cluster named after it.
fn docker_class(image: &str, run: &str) -> Value {
    json!({
        "provider": "Docker",
        "providerSpec": {
            "image": image,
            "tags": {format!("kubernetes.io/cluster/{run}"): "1", "kubernetes.io/role/worker": "1"},
            "labels": {RUN_LABEL: run},
            "stopGracePeriodSeconds": 1
        },
        "secretRef": {"name": "cloud"}
    })
}

fn deployment(replicas: u64) -> Value {
    json!({"spec": {"replicas": replicas,
        "selector": {"matchLabels": {"pool": "workers"}},
        "template": {"metadata": {"labels": {"pool": "workers"}},
                     "spec": {"class": {"name": "small"}}}}})
}

impl Backend {
    /// The round's VMs or containers, by the machine they were made for: an instance's
    /// `berth.io/machine` tag, a container's name (`<namespace>_<machine>`).
    async fn by_machine(&self) -> Result<BTreeMap<String, Vec<String>>, String> {
        let mut vms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        match self {
            Backend::Emulator { url } => {
                let account: Value = reqwest::get(format!("{url}/_emulator/state"))
                    .await
                    .map_err(|e| e.to_string())?
                    .json()
                    .await
                    .map_err(|e| e.to_string())?;
                for instance in account["instances"].as_array().into_iter().flatten() {
                    let Some(machine) = instance["Tags"]["Tag"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|t| t["TagKey"] == "berth.io/machine")
                        .and_then(|t| t["TagValue"].as_str())
                    else {
                        continue;
                    };
                    let id = instance["InstanceId"].as_str().unwrap_or_default();
                    vms.entry(machine.to_string())
                        .or_default()
                        .push(id.to_string());
                }
            }
            Backend::Docker { engine, run, .. } => {
                let containers = engine
                    .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                        all: true,
                        filters: Some(std::collections::HashMap::from([(
                            "label".to_owned(),
                            vec![format!("{RUN_LABEL}={run}")],
                        )])),
                        ..Default::default()
                    }))
                    .await
                    .map_err(|e| e.to_string())?;
                for c in containers {
                    for name in c.names.unwrap_or_default() {
                        let name = name.trim_start_matches('/');
                        let machine = name
                            .strip_prefix(&format!("{NS}_"))
                            .unwrap_or(name)
                            .to_string();
                        vms.entry(machine).or_default().push(name.to_string());
                    }
                }
            }
        }
        Ok(vms)
    }

    /// The VM or container a machine's providerID names, as [`Backend::by_machine`] lists it.
    fn id_in(&self, provider_id: &str) -> String {
        match self {
            Backend::Emulator { .. } => provider_id.rsplit_once('.').map(|(_, id)| id),
            Backend::Docker { .. } => provider_id.rsplit_once('/').map(|(_, name)| name),
        }
        .unwrap_or_default()
        .to_string()
    }
}

/// The gateway, as a user of the declarative API drives it: every write repeated until answered.
struct Api {
    http: reqwest::Client,
    gateway: String,
}

impl Api {
    fn url(&self, kind: &str, name: &str) -> String {
        format!("{}/v1/namespaces/{NS}/{kind}/{name}", self.gateway)
    }

    async fn put(&self, kind: &str, name: &str, mut body: Value) -> Result<(), String> {
        body["metadata"] = json!({"name": name});
        let url = self.url(kind, name);
        self.until_answered(|| self.http.put(&url).json(&body))
            .await
    }

    async fn patch(&self, kind: &str, name: &str, patch: Value) -> Result<(), String> {
        let url = self.url(kind, name);
        let body = patch.to_string();
        self.until_answered(|| {
            self.http
                .patch(&url)
                .header("content-type", "application/merge-patch+json")
                .body(body.clone())
        })
        .await
    }

    /// Sends the request until a 2xx; a refusal other than "not now" (5xx, 429) ends the round.
    async fn until_answered(
        &self,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let last = match request().bearer_auth(ADMIN_TOKEN).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    if !(status.is_server_error() || status == 429) {
                        return Err(format!("{status} {text}"));
                    }
                    format!("{status} {text}")
                }
                Err(e) => e.to_string(),
            };
            if started.elapsed() > SETTLE {
                return Err(format!(
                    "a write was not answered 2xx within the settle time; the last answer: {last}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The namespace's machines (those being deleted too), or None when the controller does not
    /// answer.
    async fn machines(&self) -> Option<Vec<Value>> {
        let list: Value = self
            .http
            .get(format!("{}/v1/namespaces/{NS}/machines", self.gateway))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        list["items"].as_array().cloned()
    }
}
