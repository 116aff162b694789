//! A fleet of machines through the built `berth` binary against a real `berth up`, once on the
//! stack's embedded ECS emulator and once as containers on the local Docker Engine (the test
//! machine image the machine driver's tests build from nothing a registry serves):
//!
//! 1. a MachineDeployment of 10 reaches Running (`berth rollout status`), each machine backed by
//!    exactly the one VM the driver lists for it;
//! 2. `berth scale` to 12, then down to 4, each time until the machines, their phases and the VMs
//!    all agree;
//! 3. a class change rolls the 4 machines with maxSurge 2 and maxUnavailable 1, and two observers
//!    (the server's watch through `berth get machines -w`, and `berth get machines` every 200 ms)
//!    prove the bounds held throughout: at most 6 machines of the deployment at any moment (those
//!    being deleted counted, as they still hold their VMs) and at least 3 of them Running;
//!    afterwards every machine is of the new template, and so is every VM;
//! 4. a VM killed behind Berth's back (DeleteInstance on the emulator, `docker rm -f`): its machine
//!    turns Unknown, then Failed, and its set replaces it with a new machine and a new VM;
//! 5. orphans: a VM carrying Berth's tags for a machine the controller made, which stays behind
//!    when that machine is deleted, is deleted by the orphan collector, and not before the
//!    configured interval (`BERTH_CONTROLLER_ORPHAN_INTERVAL`) has passed; a VM carrying Berth's
//!    tags for a name the controller never made is never touched.
//!
//! The Docker half skips, saying why, when no Docker Engine answers; `BERTH_REQUIRE_DOCKER=1` makes
//! that a failure. Every container it makes carries a label naming its run, and a guard removes
//! them all when the test ends, passed or failed. The image is kept, as the driver's tests keep
//! it: its tag is the hash of the program inside, so every later run finds it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Stack, berth_command, stderr, stdout};
use serde_json::{Value, json};
use sha2::Digest as _;

/// The deployment's first size.
const REPLICAS: usize = 10;
/// The size the class change rolls.
const ROLLED: usize = 4;
const MAX_SURGE: usize = 2;
const MAX_UNAVAILABLE: usize = 1;
/// How often the orphan collector lists the VMs (two sightings this far apart delete one).
const ORPHAN_INTERVAL: Duration = Duration::from_secs(4);
/// The longest any one step may take.
const WAIT: Duration = Duration::from_secs(120);
/// The label every container of a Docker run carries (the driver's tests' name for it).
const RUN_LABEL: &str = "berth.test/run";
const REGION: &str = "cn-shanghai";
const TEMPLATE_HASH: &str = "berth.io/template-hash";
/// The program of the test machine image, as the driver's tests build it.
const MACHINE_SOURCE: &str =
    include_str!("../../../services/machine-driver/tests/fixtures/machine.rs");

#[test]
fn a_fleet_on_the_ecs_emulator_scales_rolls_within_bounds_heals_and_loses_its_orphans() {
    let stack = start_stack();
    let cloud = Cloud::Ecs {
        emulator: format!("http://127.0.0.1:{}", stack.base + 10),
        key: stack.emulator_key.clone(),
    };
    run_fleet(&stack, cloud, "ecs-fleet");
    let (exit, _, _) = stack.stop();
    assert!(exit.success(), "berth up ended with {exit}");
}

#[test]
fn a_fleet_of_docker_containers_scales_rolls_within_bounds_heals_and_loses_its_orphans() {
    if !docker_or_skip("a_fleet_of_docker_containers") {
        return;
    }
    let run = format!("fleet{}", std::process::id());
    // Declared before the stack, so it is dropped after it: no controller makes containers anew
    // while the sweep removes them.
    let _sweep = Sweep(run.clone());
    let image = machine_image();
    let stack = start_stack();
    run_fleet(&stack, Cloud::Docker { image, run }, "docker-fleet");
    let (exit, _, _) = stack.stop();
    assert!(exit.success(), "berth up ended with {exit}");
}

/// `berth up` with the controller looking often: resyncs every 500 ms, a machine without a VM
/// Failed after 2 s, retries at most 1 s apart, orphans looked for every [`ORPHAN_INTERVAL`].
fn start_stack() -> Stack {
    Stack::start_with(tempfile::tempdir().unwrap(), |cmd| {
        cmd.env("BERTH_CONTROLLER_RESYNC", "500ms")
            .env("BERTH_CONTROLLER_HEALTH_TIMEOUT", "2s")
            .env("BERTH_CONTROLLER_BACKOFF_MAX", "1s")
            .env(
                "BERTH_CONTROLLER_ORPHAN_INTERVAL",
                format!("{}s", ORPHAN_INTERVAL.as_secs()),
            );
    })
}

/// Every step, on one cloud.
fn run_fleet(stack: &Stack, cloud: Cloud, name: &'static str) {
    let started = Instant::now();
    let fleet = Fleet::new(stack, cloud, name);
    let step = |what: &str| eprintln!("[{name} +{:.1}s] {what}", started.elapsed().as_secs_f64());

    // 1. Ten machines reach Running.
    step("apply 10");
    let applied = fleet.ok(&["apply", "-f", &fleet.file("manifest.yaml")]);
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            format!("secret/{name}-cloud created"),
            format!("machineclass/{name}-class created"),
            format!("machinedeployment/{name} created"),
        ],
        "{applied}"
    );
    let rolled = fleet.ok(&[
        "rollout",
        "status",
        &format!("md/{name}"),
        "--timeout",
        "3m",
    ]);
    assert!(
        rolled.trim_end().ends_with(&format!(
            "machinedeployment \"{name}\" successfully rolled out"
        )),
        "{rolled}"
    );
    let first = fleet.settled(REPLICAS, &BTreeSet::new(), "10 machines Running");
    let md = fleet.deployment();
    assert_eq!(md["status"]["readyReplicas"], REPLICAS, "{md}");
    assert_eq!(md["status"]["updatedReplicas"], REPLICAS, "{md}");

    // 2. Scale up, then down.
    step("scale to 12");
    fleet.scale(12);
    let grown = fleet.settled(12, &BTreeSet::new(), "12 machines Running");
    let names = |ms: &[Value]| ms.iter().map(|m| s(m, "/metadata/name")).collect();
    let before: BTreeSet<String> = names(&first);
    let after: BTreeSet<String> = names(&grown);
    assert!(before.is_subset(&after), "a scale-up replaced machines");
    step("scale to 4");
    fleet.scale(ROLLED);
    let shrunk = fleet.settled(ROLLED, &BTreeSet::new(), "4 machines Running");
    let old_hash = s(&shrunk[0], &format!("/metadata/labels/{TEMPLATE_HASH}"));

    // 3. A class change rolls the four within maxSurge 2 and maxUnavailable 1.
    step("roll the class change");
    let bounds = fleet.roll_watched(&old_hash);
    let class: Value =
        serde_json::from_str(&fleet.ok(&["get", "mcc", &format!("{name}-class"), "-o", "json"]))
            .unwrap();
    let md = fleet.deployment();
    assert_eq!(
        md["status"]["observedClassGeneration"], class["metadata"]["generation"],
        "{md}"
    );
    let new_hash = s(&md, "/status/templateHash");
    assert_ne!(new_hash, old_hash, "the class change made no new template");
    let rolled = fleet.settled(ROLLED, &BTreeSet::new(), "4 machines of the new template");
    for m in &rolled {
        assert_eq!(
            s(m, &format!("/metadata/labels/{TEMPLATE_HASH}")),
            new_hash,
            "a machine of the old template is left: {m}"
        );
        let provider_id = s(m, "/status/providerID");
        if let Err(e) = fleet.cloud.holds_template(&provider_id, 2) {
            panic!(
                "machine {}'s VM is not of the new class: {e}",
                s(m, "/metadata/name")
            );
        }
    }
    let old_names: BTreeSet<String> = names(&shrunk);
    assert!(
        rolled
            .iter()
            .all(|m| !old_names.contains(&s(m, "/metadata/name"))),
        "a machine of before the roll survived it"
    );
    let observers = [("watch", &bounds.watch), ("poll", &bounds.poll)];
    for (observer, seen) in observers {
        eprintln!("[{name}] the roll as the {observer} saw it: {seen}");
    }
    for (observer, seen) in observers {
        assert!(
            seen.violations.is_empty(),
            "the roll broke its bounds (at most {} machines, at least {} Running) as the {observer} saw it:\n{}",
            ROLLED + MAX_SURGE,
            ROLLED - MAX_UNAVAILABLE,
            seen.violations.join("\n")
        );
        assert!(seen.max_total <= ROLLED + MAX_SURGE, "{observer}: {seen}");
        assert!(
            seen.min_running >= ROLLED - MAX_UNAVAILABLE,
            "{observer}: {seen}"
        );
    }
    // The observers watched a roll, not a still fleet: old and new machines side by side, and the
    // surge used.
    assert!(
        bounds.watch.mixed,
        "the watch saw no roll: {}",
        bounds.watch
    );
    assert!(
        bounds.watch.max_total > ROLLED,
        "the watch saw no surge: {}",
        bounds.watch
    );

    // 4. A VM killed behind Berth's back is replaced.
    step("kill a VM behind Berth's back");
    let victim = &rolled[0];
    let victim_name = s(victim, "/metadata/name");
    let victim_vm = s(victim, "/status/providerID");
    fleet.cloud.kill(&victim_vm);
    assert!(
        !fleet.vms().contains_key(&victim_vm),
        "the VM killed is still listed"
    );
    let mut phases = BTreeSet::new();
    until("the killed VM's machine is replaced", WAIT, || {
        let ms = fleet.machines();
        if let Some(m) = ms.iter().find(|m| s(m, "/metadata/name") == victim_name) {
            phases.insert(s(m, "/status/phase"));
            return Err(format!(
                "{victim_name} is still there: {}",
                s(m, "/status/phase")
            ));
        }
        Ok(())
    });
    assert!(
        phases.contains("Unknown") || phases.contains("Failed"),
        "the machine of the killed VM went without being found unhealthy: {phases:?}"
    );
    let replaced = fleet.settled(ROLLED, &BTreeSet::new(), "4 Running after the kill");
    let replacement: Vec<&Value> = replaced
        .iter()
        .filter(|m| {
            !rolled
                .iter()
                .any(|r| s(r, "/metadata/name") == s(m, "/metadata/name"))
        })
        .collect();
    assert_eq!(replacement.len(), 1, "not one new machine: {replaced:?}");
    assert_ne!(s(replacement[0], "/status/providerID"), victim_vm);
    assert_eq!(
        s(replacement[0], &format!("/metadata/labels/{TEMPLATE_HASH}")),
        new_hash
    );

    // 5. Orphans: the leaked VM of a deleted machine goes, after the interval; an outsider stays.
    step("orphans");
    let host = replaced
        .iter()
        .find(|m| s(m, "/status/phase") == "Running")
        .expect("a running machine");
    let host_name = s(host, "/metadata/name");
    let host_uid = s(host, "/metadata/uid");
    let host_vm = s(host, "/status/providerID");
    // A second VM for the machine, with every tag the driver put on its own: what a create that
    // finished after the machine's deletion leaves behind.
    let leaked = fleet.cloud.copy_vm(&host_vm, &host_name, &host_uid, "leak");
    // Berth's tags for a machine this controller never made: someone else's, never to be touched.
    // Named for this run, so that two runs on one Engine do not take each other's container name.
    let outsider_name = format!("{name}-outsider-{}", std::process::id());
    let outsider = fleet
        .cloud
        .copy_vm(&host_vm, &outsider_name, "outsider-uid", "vm");
    let listed = fleet.vms();
    assert_eq!(listed.get(&leaked), Some(&host_name), "{listed:?}");
    assert_eq!(listed.get(&outsider), Some(&outsider_name), "{listed:?}");
    let asked = Instant::now();
    fleet.ok(&["delete", "machine", &host_name, "--wait", "--timeout", "1m"]);
    let machine_gone = asked.elapsed();
    if machine_gone < ORPHAN_INTERVAL {
        assert!(
            fleet.cloud.exists(&leaked),
            "deleting the machine took the leaked VM"
        );
    }
    let gone = until(
        "the orphan collector deletes the leaked VM",
        2 * ORPHAN_INTERVAL + Duration::from_secs(30),
        || {
            let vms = fleet.vms();
            if vms.contains_key(&leaked) {
                return Err(format!("still listed: {vms:?}"));
            }
            Ok(asked.elapsed())
        },
    );
    eprintln!(
        "[{name}] machine deleted after {machine_gone:?}, its leaked VM {gone:?} after the delete was asked (interval {ORPHAN_INTERVAL:?})"
    );
    assert!(
        gone >= ORPHAN_INTERVAL,
        "the leaked VM went {gone:?} after its machine's delete was asked, sooner than the orphan interval ({ORPHAN_INTERVAL:?})"
    );
    assert!(
        !fleet.cloud.exists(&leaked),
        "the driver lists no VM the cloud still has"
    );
    // Another collection at least, and the outsider is still there.
    std::thread::sleep(ORPHAN_INTERVAL + Duration::from_secs(1));
    assert!(
        fleet.vms().contains_key(&outsider),
        "the orphan collector deleted a VM the controller never made"
    );
    let remaining = fleet.settled(
        ROLLED,
        &[outsider.clone()].into(),
        "4 Running after the orphan",
    );
    assert!(
        remaining
            .iter()
            .all(|m| s(m, "/metadata/name") != host_name),
        "the deleted machine is back"
    );

    // Delete the deployment: its VMs go, the outsider stays until this test removes it.
    step("delete");
    fleet.ok(&["delete", "md", name, "--wait", "--timeout", "2m"]);
    assert!(fleet.machines().is_empty());
    let left = fleet.vms();
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        [&outsider],
        "VMs left after the deployment's delete: {left:?}"
    );
    fleet.cloud.kill(&outsider);
    step("done");
}

/// Where the fleet's VMs are, and how the test reaches them behind Berth's back.
enum Cloud {
    /// The stack's embedded ECS emulator, called with its own key.
    Ecs {
        emulator: String,
        key: (String, String),
    },
    /// The local Docker Engine, through the `docker` command.
    Docker { image: String, run: String },
}

impl Cloud {
    fn provider(&self) -> &'static str {
        match self {
            Cloud::Ecs { .. } => "Alicloud",
            Cloud::Docker { .. } => "Docker",
        }
    }

    fn secret(&self) -> Value {
        match self {
            Cloud::Ecs { key, .. } => json!({
                "alicloudAccessKeyID": key.0, "alicloudAccessKeySecret": key.1,
            }),
            // Written into each container; with no bootstrap asked for, never run.
            Cloud::Docker { .. } => json!({"userData": "#!/bin/sh\necho fleet\n"}),
        }
    }

    /// The class's provider spec; version 2 is the class change.
    fn spec(&self, version: u32) -> Value {
        match self {
            Cloud::Ecs { .. } => json!({
                "imageID": "m-fleet-image",
                "instanceType": if version == 1 { "ecs.g6.large" } else { "ecs.g6.xlarge" },
                "region": REGION,
                "zoneID": "cn-shanghai-b",
                "securityGroupID": "sg-fleet",
                "vSwitchID": "vsw-fleet",
                "keyPairName": "fleet",
                "tags": {"kubernetes.io/cluster/fleet": "1", "kubernetes.io/role/node": "1"},
            }),
            Cloud::Docker { image, run } => json!({
                "image": image,
                "env": {"FLEET_TEMPLATE": format!("v{version}")},
                "labels": {RUN_LABEL: run},
                "memory": "64Mi",
                "stopGracePeriodSeconds": 2,
                "tags": {format!("kubernetes.io/cluster/{run}"): "1", "kubernetes.io/role/worker": "1"},
            }),
        }
    }

    /// Deletes a VM behind Berth's back.
    fn kill(&self, provider_id: &str) {
        match self {
            Cloud::Ecs { emulator, key } => {
                ecs_call(
                    emulator,
                    key,
                    "DeleteInstance",
                    &[
                        ("RegionId", REGION.into()),
                        ("InstanceId", instance_id(provider_id).into()),
                        ("Force", "true".into()),
                    ],
                );
            }
            Cloud::Docker { .. } => {
                docker_ok(&["rm", "-f", container_of(provider_id)]);
            }
        }
    }

    /// Whether the cloud itself still has the VM.
    fn exists(&self, provider_id: &str) -> bool {
        match self {
            Cloud::Ecs { emulator, .. } => {
                ecs_instance(emulator, instance_id(provider_id)).is_some()
            }
            Cloud::Docker { .. } => docker(&["inspect", container_of(provider_id)])
                .status
                .success(),
        }
    }

    /// Makes, behind Berth's back, a VM like `provider_id`'s, carrying the same tags but naming
    /// machine `name` of uid `uid`; returns its provider id. `what` tells VMs apart where the
    /// cloud needs unique names (containers).
    fn copy_vm(&self, provider_id: &str, name: &str, uid: &str, what: &str) -> String {
        match self {
            Cloud::Ecs { emulator, key } => {
                let source = ecs_instance(emulator, instance_id(provider_id))
                    .unwrap_or_else(|| panic!("no instance {provider_id}"));
                let mut params: Vec<(&str, String)> = vec![
                    ("RegionId", REGION.into()),
                    ("ZoneId", s(&source, "/ZoneId")),
                    ("ImageId", s(&source, "/ImageId")),
                    ("InstanceType", s(&source, "/InstanceType")),
                    ("InstanceName", name.into()),
                ];
                let mut keys = Vec::new();
                for tag in source["Tags"]["Tag"].as_array().unwrap() {
                    let k = s(tag, "/TagKey");
                    let v = match k.as_str() {
                        "berth.io/machine" => name.to_string(),
                        "berth.io/machine-uid" => uid.to_string(),
                        _ => s(tag, "/TagValue"),
                    };
                    keys.push((k, v));
                }
                assert!(
                    keys.iter().any(|(k, _)| k == "berth.io/machine-uid"),
                    "the driver's tags are not on {provider_id}: {keys:?}"
                );
                let numbered: Vec<(String, String, String)> = keys
                    .into_iter()
                    .enumerate()
                    .map(|(n, (k, v))| (format!("Tag.{}.Key", n + 1), k, v))
                    .collect();
                let value_names: Vec<String> = numbered
                    .iter()
                    .map(|(n, _, _)| n.replace(".Key", ".Value"))
                    .collect();
                for ((n, k, v), value_name) in numbered.iter().zip(&value_names) {
                    params.push((n, k.clone()));
                    params.push((value_name, v.clone()));
                }
                let made = ecs_call(emulator, key, "RunInstances", &params);
                let id = made["InstanceIdSets"]["InstanceIdSet"][0]
                    .as_str()
                    .unwrap_or_else(|| panic!("RunInstances answered {made}"))
                    .to_string();
                format!("{REGION}.{id}")
            }
            Cloud::Docker { image, .. } => {
                let source = container_of(provider_id);
                let labels: BTreeMap<String, String> = serde_json::from_str(&docker_ok(&[
                    "inspect",
                    "--format",
                    "{{json .Config.Labels}}",
                    source,
                ]))
                .unwrap();
                assert!(
                    labels.contains_key("berth.io/machine-uid"),
                    "the driver's labels are not on {source}: {labels:?}"
                );
                let container = format!("{name}-{what}");
                let mut args: Vec<String> = ["run", "-d", "--name", &container, "--memory", "64m"]
                    .map(String::from)
                    .into();
                for (k, v) in labels {
                    let v = match k.as_str() {
                        "berth.io/machine" => name.to_string(),
                        "berth.io/machine-uid" => uid.to_string(),
                        _ => v,
                    };
                    args.extend(["--label".into(), format!("{k}={v}")]);
                }
                args.push(image.clone());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                docker_ok(&args);
                format!("docker:///{container}")
            }
        }
    }

    /// Whether the VM is of the class as changed (version 2 of [`Cloud::spec`]).
    fn holds_template(&self, provider_id: &str, version: u32) -> Result<(), String> {
        match self {
            Cloud::Ecs { emulator, .. } => {
                let i = ecs_instance(emulator, instance_id(provider_id))
                    .ok_or_else(|| format!("no instance {provider_id}"))?;
                let want = self.spec(version)["instanceType"].clone();
                (i["InstanceType"] == want)
                    .then_some(())
                    .ok_or_else(|| format!("{provider_id} is an {}, not {want}", i["InstanceType"]))
            }
            Cloud::Docker { .. } => {
                let env = docker_ok(&[
                    "inspect",
                    "--format",
                    "{{json .Config.Env}}",
                    container_of(provider_id),
                ]);
                let want = format!("FLEET_TEMPLATE=v{version}");
                env.contains(&want)
                    .then_some(())
                    .ok_or_else(|| format!("{provider_id}'s environment is {env}, without {want}"))
            }
        }
    }
}

/// One deployment on one stack, and the files the CLI reads.
struct Fleet<'s> {
    stack: &'s Stack,
    cloud: Cloud,
    name: &'static str,
    dir: PathBuf,
}

impl<'s> Fleet<'s> {
    fn new(stack: &'s Stack, cloud: Cloud, name: &'static str) -> Self {
        let fleet = Fleet {
            stack,
            cloud,
            name,
            dir: stack.data.path().to_path_buf(),
        };
        let secret = json!({
            "apiVersion": "berth.io/v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-cloud")},
            "stringData": fleet.cloud.secret(),
        });
        let class = |version: u32| {
            json!({
                "apiVersion": "berth.io/v1", "kind": "MachineClass",
                "metadata": {"name": format!("{name}-class")},
                "provider": fleet.cloud.provider(),
                "providerSpec": fleet.cloud.spec(version),
                "secretRef": {"name": format!("{name}-cloud")},
            })
        };
        let deployment = json!({
            "apiVersion": "berth.io/v1", "kind": "MachineDeployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"pool": name}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": MAX_UNAVAILABLE}},
                "template": {
                    "metadata": {"labels": {"pool": name}},
                    "spec": {"class": {"name": format!("{name}-class")}},
                },
            },
        });
        // JSON documents are YAML documents.
        let docs = |docs: &[Value]| {
            docs.iter()
                .map(|d| format!("{d}\n"))
                .collect::<Vec<_>>()
                .join("---\n")
        };
        fleet.write(
            "manifest.yaml",
            &docs(&[secret.clone(), class(1), deployment]),
        );
        // The class change alone: the deployment's replicas stay as scaled.
        fleet.write("class-2.yaml", &docs(&[class(2)]));
        // What `berth machine list` sends the driver: the class (either version: the listing goes
        // by its cluster and role tags) and the secret, in the driver's own shapes.
        let listing_class = json!({
            "kind": "MachineClass",
            "metadata": {"name": format!("{name}-class")},
            "provider": fleet.cloud.provider(),
            "providerSpec": fleet.cloud.spec(1),
        });
        let listing_secret = json!({"kind": "Secret", "stringData": fleet.cloud.secret()});
        fleet.write("listing.yaml", &docs(&[listing_class, listing_secret]));
        fleet
    }

    fn write(&self, file: &str, text: &str) {
        std::fs::write(self.dir.join(file), text).unwrap();
    }

    fn file(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.stack.berth(args);
        assert!(
            out.status.success(),
            "berth {args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }

    fn selector(&self) -> String {
        format!("pool={}", self.name)
    }

    /// The deployment's machines (`berth get machines -l pool=NAME -o json`).
    fn machines(&self) -> Vec<Value> {
        machines_of(&self.ok(&["get", "machines", "-l", &self.selector(), "-o", "json"]))
    }

    fn deployment(&self) -> Value {
        serde_json::from_str(&self.ok(&["get", "md", self.name, "-o", "json"])).unwrap()
    }

    /// The VMs the driver lists for the class: provider id → machine name.
    fn vms(&self) -> BTreeMap<String, String> {
        let listed: Value = serde_json::from_str(&self.ok(&[
            "machine",
            "list",
            "-f",
            &self.file("listing.yaml"),
            "-o",
            "json",
        ]))
        .unwrap();
        serde_json::from_value(listed["machineList"].clone()).unwrap()
    }

    fn scale(&self, replicas: usize) {
        let said = self.ok(&[
            "scale",
            "md",
            self.name,
            "--replicas",
            &replicas.to_string(),
        ]);
        assert_eq!(
            said.trim(),
            format!("machinedeployment/{} scaled", self.name)
        );
    }

    /// Waits until the deployment has `n` machines, none being deleted, all Running, each with a
    /// VM of its own, and the driver lists exactly their VMs (and those of `extra`).
    fn settled(&self, n: usize, extra: &BTreeSet<String>, what: &str) -> Vec<Value> {
        until(what, WAIT, || {
            let ms = self.machines();
            let c = census(&ms);
            if c.total != n || c.running != n {
                return Err(format!(
                    "{} machines, {} of them Running",
                    c.total, c.running
                ));
            }
            let mut ids: BTreeSet<String> = ms.iter().map(|m| s(m, "/status/providerID")).collect();
            if ids.len() != n || ids.contains("") {
                return Err(format!("providerIDs {ids:?}"));
            }
            let vms = self.vms();
            for (id, machine) in &vms {
                if let Some(m) = ms.iter().find(|m| s(m, "/status/providerID") == *id)
                    && s(m, "/metadata/name") != *machine
                {
                    return Err(format!("VM {id} is listed for {machine}, backs {m}"));
                }
            }
            ids.extend(extra.iter().cloned());
            let listed: BTreeSet<String> = vms.keys().cloned().collect();
            if listed != ids {
                return Err(format!(
                    "the driver lists {listed:?}; the machines' and extra VMs are {ids:?}"
                ));
            }
            Ok(ms)
        })
    }

    /// Applies the class change and follows the roll to its end with two observers; returns what
    /// each saw.
    fn roll_watched(&self, old_hash: &str) -> Observed {
        let floor = ROLLED - MAX_UNAVAILABLE;
        let ceiling = ROLLED + MAX_SURGE;
        // The server's watch, through the CLI: every committed change of the machines, in order.
        let watch_seen = Arc::new(Mutex::new(Extremes::new(ceiling, floor)));
        let state = Arc::new(Mutex::new(BTreeMap::<String, Value>::new()));
        let armed = Arc::new(AtomicBool::new(false));
        let mut watch = berth_command(
            &self.stack.url,
            Some(&self.stack.admin_token),
            &[
                "get",
                "machines",
                "-l",
                &self.selector(),
                "-w",
                "-o",
                "json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let watcher = {
            let out = watch.stdout.take().unwrap();
            let (state, seen, armed) = (state.clone(), watch_seen.clone(), armed.clone());
            let old_hash = old_hash.to_string();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let event: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("watch printed {line:?}: {e}"));
                    let name = s(&event["object"], "/metadata/name");
                    let mut state = state.lock().unwrap();
                    if event["type"] == "DELETED" {
                        state.remove(&name);
                    } else {
                        state.insert(name, event["object"].clone());
                    }
                    if armed.load(Ordering::SeqCst) {
                        let ms: Vec<Value> = state.values().cloned().collect();
                        seen.lock().unwrap().record(&ms, &old_hash);
                    }
                }
            })
        };
        // The watch first lists the four: the bounds are looked at from then on.
        until("the watch lists the fleet", WAIT, || {
            let ms: Vec<Value> = state.lock().unwrap().values().cloned().collect();
            let c = census(&ms);
            (c.total == ROLLED && c.running == ROLLED)
                .then_some(())
                .ok_or_else(|| format!("{} listed, {} Running", c.total, c.running))
        });
        armed.store(true, Ordering::SeqCst);
        // `berth get machines` every 200 ms, independently of the watch.
        let poll_seen = Arc::new(Mutex::new(Extremes::new(ceiling, floor)));
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (seen, stop) = (poll_seen.clone(), stop.clone());
            let (url, token, selector) = (
                self.stack.url.clone(),
                self.stack.admin_token.clone(),
                self.selector(),
            );
            let old_hash = old_hash.to_string();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let out = berth_command(
                        &url,
                        Some(&token),
                        &["get", "machines", "-l", &selector, "-o", "json"],
                    )
                    .output()
                    .unwrap();
                    if out.status.success() {
                        seen.lock()
                            .unwrap()
                            .record(&machines_of(&stdout(&out)), &old_hash);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        let applied = self.ok(&["apply", "-f", &self.file("class-2.yaml")]);
        assert_eq!(
            applied.trim(),
            format!("machineclass/{}-class configured", self.name),
            "{applied}"
        );
        self.ok(&[
            "rollout",
            "status",
            &format!("md/{}", self.name),
            "--timeout",
            "3m",
        ]);
        // Done once the old machines are gone too (their VMs deleted).
        until("only new machines are left", WAIT, || {
            let ms = self.machines();
            let c = census(&ms);
            let old = ms
                .iter()
                .filter(|m| s(m, &format!("/metadata/labels/{TEMPLATE_HASH}")) == old_hash)
                .count();
            (c.total == ROLLED && c.running == ROLLED && old == 0)
                .then_some(())
                .ok_or_else(|| format!("{} machines, {} Running, {old} old", c.total, c.running))
        });
        // Let the watch catch up with the last changes before it stops.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        poller.join().unwrap();
        end(&mut watch);
        watcher.join().unwrap();
        let watch = watch_seen.lock().unwrap().clone();
        let poll = poll_seen.lock().unwrap().clone();
        Observed { watch, poll }
    }
}

/// The machines of a `get machines -o json` list.
fn machines_of(text: &str) -> Vec<Value> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let list: Value = serde_json::from_str(text).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// A string at a JSON pointer, empty when absent.
fn s(v: &Value, pointer: &str) -> String {
    let pointer = pointer.replace("berth.io/", "berth.io~1");
    v.pointer(&pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// How many machines, and how many of them Running and not being deleted.
struct Census {
    total: usize,
    running: usize,
}

fn census(ms: &[Value]) -> Census {
    Census {
        total: ms.len(),
        running: ms
            .iter()
            .filter(|m| {
                s(m, "/status/phase") == "Running" && m["metadata"]["deletionTimestamp"].is_null()
            })
            .count(),
    }
}

/// What the two observers of a roll saw.
struct Observed {
    watch: Extremes,
    poll: Extremes,
}

/// The most machines and the fewest Running an observer saw, and the states out of bounds.
#[derive(Debug, Clone)]
struct Extremes {
    ceiling: usize,
    floor: usize,
    states: usize,
    max_total: usize,
    min_running: usize,
    /// Old and new machines at once.
    mixed: bool,
    violations: Vec<String>,
}

impl Extremes {
    fn new(ceiling: usize, floor: usize) -> Self {
        Extremes {
            ceiling,
            floor,
            states: 0,
            max_total: 0,
            min_running: usize::MAX,
            mixed: false,
            violations: Vec::new(),
        }
    }

    fn record(&mut self, ms: &[Value], old_hash: &str) {
        let c = census(ms);
        self.states += 1;
        self.max_total = self.max_total.max(c.total);
        self.min_running = self.min_running.min(c.running);
        let hash = |m: &Value| s(m, &format!("/metadata/labels/{TEMPLATE_HASH}"));
        self.mixed |=
            ms.iter().any(|m| hash(m) == old_hash) && ms.iter().any(|m| hash(m) != old_hash);
        if (c.total > self.ceiling || c.running < self.floor) && self.violations.len() < 5 {
            let each: Vec<String> = ms
                .iter()
                .map(|m| {
                    format!(
                        "{} {}{} {}",
                        s(m, "/metadata/name"),
                        s(m, "/status/phase"),
                        if m["metadata"]["deletionTimestamp"].is_null() {
                            ""
                        } else {
                            " (deleting)"
                        },
                        if hash(m) == old_hash { "old" } else { "new" },
                    )
                })
                .collect();
            self.violations.push(format!(
                "{} machines, {} Running: {}",
                c.total,
                c.running,
                each.join(", ")
            ));
        }
    }
}

impl std::fmt::Display for Extremes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} states, at most {} machines (bound {}), at least {} Running (bound {}), old and new together: {}",
            self.states, self.max_total, self.ceiling, self.min_running, self.floor, self.mixed
        )
    }
}

/// Retries `check` every 200 ms until it is `Ok`, failing with its last word after `within`.
fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}; last: {last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills a child this test started and reaps it.
fn end(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

// The ECS emulator, called as ECS is: signature V3 (ACS3-HMAC-SHA256) with the stack's key.

/// The instance id of an Alicloud provider id (`<region>.<instance id>`).
fn instance_id(provider_id: &str) -> &str {
    provider_id
        .split_once('.')
        .map(|(_, id)| id)
        .unwrap_or_else(|| panic!("not an Alicloud provider id: {provider_id}"))
}

/// The instance as the emulator's admin state shows it.
fn ecs_instance(emulator: &str, id: &str) -> Option<Value> {
    let (status, body) = http("GET", &format!("{emulator}/_emulator/state"), &[]);
    assert_eq!(status, 200, "{body}");
    let state: Value = serde_json::from_str(&body).unwrap();
    state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["InstanceId"] == id)
        .cloned()
}

/// One signed ECS call; panics unless it is answered 200.
fn ecs_call(
    emulator: &str,
    key: &(String, String),
    action: &str,
    params: &[(&str, String)],
) -> Value {
    let sorted: BTreeMap<&str, &str> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let query = sorted
        .iter()
        .map(|(k, v)| format!("{}={}", rfc3986(k), rfc3986(v)))
        .collect::<Vec<_>>()
        .join("&");
    let host = emulator.trim_start_matches("http://").to_string();
    let date = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let nonce = format!("{:032x}", rand::random::<u128>());
    let payload = hex::encode(sha2::Sha256::digest(b""));
    let headers = [
        ("host", host.as_str()),
        ("x-acs-action", action),
        ("x-acs-content-sha256", payload.as_str()),
        ("x-acs-date", date.as_str()),
        ("x-acs-signature-nonce", nonce.as_str()),
        ("x-acs-version", "2014-05-26"),
    ];
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed = headers.map(|(k, _)| k).join(";");
    let canonical = format!("POST\n/\n{query}\n{canonical_headers}\n{signed}\n{payload}");
    let to_sign = format!(
        "ACS3-HMAC-SHA256\n{}",
        hex::encode(sha2::Sha256::digest(canonical.as_bytes()))
    );
    let signature = hex::encode(hmac_sha256(key.1.as_bytes(), to_sign.as_bytes()));
    let authorization = format!(
        "ACS3-HMAC-SHA256 Credential={},SignedHeaders={signed},Signature={signature}",
        key.0
    );
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    all.push(("authorization", &authorization));
    let (status, body) = http("POST", &format!("{emulator}/?{query}"), &all);
    assert_eq!(status, 200, "{action}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// RFC 3986 percent-encoding, as ECS canonicalises.
fn rfc3986(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha2::Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = sha2::Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = sha2::Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// One HTTP call with an empty body: status and body.
fn http(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut request = reqwest::Client::new()
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url)
            .timeout(Duration::from_secs(30));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    })
}

// The local Docker Engine, through the `docker` command.

/// Whether a Docker Engine answers; skips (or, with BERTH_REQUIRE_DOCKER=1, fails) when none does.
fn docker_or_skip(test: &str) -> bool {
    let answers = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !answers {
        assert!(
            std::env::var("BERTH_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "{test}: BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers the docker command"
        );
        eprintln!("SKIPPED {test}: no Docker Engine answers the docker command");
    }
    answers
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// `docker ARGS`, which must succeed; its stdout.
fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out).trim().to_string()
}

/// The container a Docker provider id names.
fn container_of(provider_id: &str) -> &str {
    provider_id
        .strip_prefix("docker:///")
        .unwrap_or_else(|| panic!("not a Docker provider id: {provider_id}"))
}

/// The test machine image (`berth-test-machine:<hash of its program>`), as the driver's tests make
/// it: the program compiled by `rustc` into a static binary, imported as a one-file root file
/// system. Nothing comes from a registry. Made only when the Engine does not have it yet.
fn machine_image() -> String {
    let hash = hex::encode(sha2::Sha256::digest(MACHINE_SOURCE.as_bytes()));
    let tag = &hash[..16];
    let image = format!("berth-test-machine:{tag}");
    if docker(&["image", "inspect", &image]).status.success() {
        return image;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let source = dir.path().join("machine.rs");
    std::fs::write(&source, MACHINE_SOURCE).unwrap();
    let binary = dir.path().join("berth-machine");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "opt-level=1",
            "-C",
            "strip=symbols",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling the test machine: {}",
        stderr(&out)
    );
    let rootfs = dir.path().join("rootfs.tar");
    let out = Command::new("tar")
        .arg("-C")
        .arg(dir.path())
        .arg("-cf")
        .arg(&rootfs)
        .arg("berth-machine")
        .output()
        .unwrap();
    assert!(out.status.success(), "tar: {}", stderr(&out));
    docker_ok(&[
        "import",
        "--change",
        r#"CMD ["/berth-machine"]"#,
        rootfs.to_str().unwrap(),
        &image,
    ]);
    image
}

/// Removes every container of a run (the label [`RUN_LABEL`]) when dropped, passed or failed.
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        let listed = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={RUN_LABEL}={}", self.0),
        ]);
        for id in stdout(&listed).split_whitespace() {
            let _ = docker(&["rm", "-fv", id]);
        }
    }
}
