//! One name is one VM: creates racing across two driver processes.

use std::time::Duration;

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::MachineRequest;
use ecs_emulator::{Emulator, Faults};
use serde_json::{Value, json};
use service_kit::testing::spawn;

use crate::support::*;

/// A `machine-driver` process (the built binary), killed when dropped.
struct DriverProcess {
    _child: tokio::process::Child,
    machines: Client,
}

/// The `addr` of the binary's "listening" log line (JSON logs, flattened fields).
fn listening_addr(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let message = v["message"].as_str()?;
    if !message.ends_with("listening") {
        return None;
    }
    v["addr"].as_str().map(str::to_owned)
}

/// Starts the built `machine-driver` binary on port 0, configured only by `BERTH_*` variables and
/// pointed at `emulator_url`; learns its address from its "listening" log line.
async fn spawn_driver_process(emulator_url: &str) -> DriverProcess {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_machine-driver"))
        .env_clear()
        .env("BERTH_LISTEN", "127.0.0.1:0")
        .env("BERTH_ALICLOUD_ENDPOINT", emulator_url)
        .env("BERTH_LOG", "info")
        .env("BERTH_LOG_FORMAT", "json")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the machine-driver binary");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Keeps reading for the process's whole life, so a full pipe never blocks its logging.
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut tx = Some(tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = listening_addr(&line)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr);
            }
        }
    });
    let addr = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("the driver logs where it listens within 30 s")
        .expect("the driver started");
    let url = format!("http://{addr}");
    DriverProcess {
        _child: child,
        machines: Client::new(ServiceClient::new(&url, ClientOptions::default())),
    }
}

/// Tag `key` of an instance in the emulator's snapshot.
fn tag_of(instance: &Value, key: &str) -> Option<String> {
    instance["Tags"]["Tag"]
        .as_array()?
        .iter()
        .find(|t| t["TagKey"] == key)
        .and_then(|t| t["TagValue"].as_str().map(str::to_owned))
}

/// The race: four machines of one name (three UIDs and one without) created at once
/// through two driver processes. Every round must end with one instance for the name, created for
/// the one caller answered 200; the three others answer AlreadyExists naming that owner, and the
/// instances they made in the meantime are gone with their disks and interfaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_across_two_driver_processes_leave_one_vm_per_name() {
    let emulator = Emulator::new(
        ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET).with_lifecycle(
            ecs_emulator::Lifecycle {
                // Losers release instances that are still being launched (ECS refuses that with
                // IncorrectInstanceStatus.Initializing until they leave Pending).
                pending_ms: 400,
                starting_ms: 0,
                stopping_ms: 0,
            },
        ),
    );
    // Every ECS call waits a little, so all four lookups run before any RunInstances lands and
    // every round is a real race rather than four creates one after another.
    emulator
        .set_faults(Faults {
            latency_ms: 25,
            ..Faults::default()
        })
        .unwrap();
    let emulator_server = spawn(emulator.router()).await;
    let a = spawn_driver_process(&emulator_server.url).await;
    let b = spawn_driver_process(&emulator_server.url).await;
    for round in 0..20 {
        let name = format!("m-race-{round:02}");
        let contender = |uid: Option<String>| {
            let mut r = req(&name);
            r.machine.metadata.uid = uid.unwrap_or_default();
            r
        };
        let requests = [
            (&a, contender(Some(format!("uid-a-{round}")))),
            (&b, contender(Some(format!("uid-b-{round}")))),
            (&a, contender(Some(format!("uid-c-{round}")))),
            (&b, contender(None)),
        ];
        let answers =
            futures::future::join_all(requests.iter().map(|(driver, r)| driver.machines.create(r)))
                .await;
        let winners: Vec<usize> = (0..answers.len()).filter(|i| answers[*i].is_ok()).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: one caller gets the VM: {answers:?}"
        );
        let winner = winners[0];
        let owner_uid = requests[winner].1.machine.metadata.uid.clone();
        let created = answers[winner].as_ref().unwrap();
        for (i, answer) in answers.iter().enumerate().filter(|(i, _)| *i != winner) {
            let e = answer.as_ref().unwrap_err();
            assert_code(e, Code::AlreadyExists, 409);
            assert!(
                e.status.message.contains("is taken"),
                "round {round}, caller {i}: {:?}",
                e.status.message
            );
            // Never whose: the winner's UID and VM stay its own.
            assert!(
                owner_uid.is_empty() || !e.status.message.contains(&owner_uid),
                "{e}"
            );
            assert!(
                !e.status.message.contains(instance_id(&created.provider_id)),
                "{e}"
            );
        }

        let state = emulator.snapshot();
        let named: Vec<&Value> = state["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["InstanceName"] == name.as_str())
            .collect();
        assert_eq!(
            named.len(),
            1,
            "round {round}: one instance for {name}: {named:?}"
        );
        assert_eq!(
            named[0]["InstanceId"],
            instance_id(&created.provider_id),
            "round {round}"
        );
        assert_eq!(
            tag_of(named[0], "berth.io/machine-uid").as_deref(),
            Some(owner_uid.as_str()),
            "round {round}: the owner is recorded on the instance"
        );
        // What the losers made went with their instances: only the winner's three disks (one of
        // them the disk the spec keeps) and one interface carry the name.
        let tagged = |kind: &str| {
            state[kind]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| tag_of(r, "berth.io/machine").as_deref() == Some(name.as_str()))
                .count()
        };
        assert_eq!(tagged("disks"), 3, "round {round}");
        assert_eq!(tagged("networkInterfaces"), 1, "round {round}");

        // Status answers OK through either process, and the winner's retry adopts its VM.
        let winning = &requests[winner].1;
        for driver in [&a, &b] {
            let s = driver.machines.status(winning).await.unwrap();
            assert_eq!(s.provider_id, created.provider_id, "round {round}");
        }
        let again = b.machines.create(winning).await.unwrap();
        assert_eq!(again.provider_id, created.provider_id, "round {round}");
    }
    assert_eq!(emulator.instance_count(), 20);
    // The rounds were races, not queues: losers got as far as creating (and releasing) instances.
    let calls = emulator.stats().calls;
    assert!(calls["RunInstances"] > 20, "{calls:?}");
    assert!(calls["DeleteInstance"] > 0, "{calls:?}");
}

#[tokio::test]
async fn a_machine_that_lost_its_name_neither_adopts_nor_deletes_the_winners_vm() {
    let app = spawn_app().await;
    let winner = app.create(&req("m-owned")).await.unwrap();
    let mut loser = req("m-owned");
    loser.machine.metadata.uid = "uid-other".into();
    // MCM asks for the status first: the VM is not this machine's, so it is not found...
    let e = app.status(&loser).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    let e = app.initialize(&loser).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    // ...then creates, and learns only that the name is taken: not whose, nor which VM.
    let e = app.create(&loser).await.unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    assert_eq!(
        e.status.message,
        "machine name \"m-owned\" is taken: another machine's VM has it in this cluster; one name is one VM"
    );
    // Naming the winner's providerID does not make its VM the loser's either.
    let e = app
        .create(&with_provider_id(loser.clone(), &winner.provider_id))
        .await
        .unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    // Deleting the failed machine (no providerID) leaves the winner's VM alone.
    let d = app.delete(&loser).await.unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
    let s = app.status(&req("m-owned")).await.unwrap();
    assert_eq!(s.provider_id, winner.provider_id);
    // The orphan collector's delete names the VM by providerID and needs no UID.
    let mut orphan = req("m-owned");
    orphan.machine.metadata.uid.clear();
    app.delete(&with_provider_id(orphan, &winner.provider_id))
        .await
        .unwrap();
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn a_create_releases_what_an_earlier_attempt_of_it_left_behind() {
    let app = spawn_app().await;
    let scope = [(CLUSTER_TAG, "1"), (ROLE_TAG, "1")];
    // A replica created the winner, then another replica, creating for uid-late, crashed after
    // RunInstances: its instance was never released.
    let winner = app
        .run_directly(
            "m-left",
            &[scope[0], scope[1], ("berth.io/machine-uid", "uid-first")],
        )
        .await;
    let left = app
        .run_directly(
            "m-left",
            &[scope[0], scope[1], ("berth.io/machine-uid", "uid-late")],
        )
        .await;
    let mut late = req("m-left");
    late.machine.metadata.uid = "uid-late".into();
    let e = app.create(&late).await.unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    // The name is taken, and nothing else of the winner is told (it may be another tenant's).
    assert!(e.status.message.contains("\"m-left\" is taken"), "{e}");
    assert!(!e.status.message.contains(&winner), "{e}");
    assert!(!e.status.message.contains("uid-first"), "{e}");
    let named: Vec<String> = app
        .instances_named("m-left")
        .iter()
        .map(|i| i["InstanceId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(named, [winner], "{left} was released");
    assert_eq!(app.calls("RunInstances"), 2, "the driver created nothing");
}

#[tokio::test]
async fn a_uid_that_is_not_a_kubernetes_uid_is_invalid_argument() {
    let app = spawn_app().await;
    for uid in ["has space", "a/b", "x:y", &"u".repeat(129)] {
        let mut r = req("m-uid");
        r.machine.metadata.uid = uid.to_owned();
        let e = app.create(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status.message.starts_with("machine.metadata.uid:"),
            "{}",
            e.status.message
        );
        let e = app.status(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
    }
    assert_eq!(app.emulator.stats().total_calls(), 0);
}

#[tokio::test]
async fn the_operators_region_allow_list_narrows_the_regions() {
    let app = spawn_app_with(|c| {
        c.regions = vec![alicloud::Region::parse("cn-beijing").unwrap()];
    })
    .await;
    // A region ECS serves that the list leaves out: well-formed, refused by this driver's set-up.
    let e = app.create(&req("m-allow")).await.unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert_eq!(
        e.status.message,
        "machineClass.providerSpec.region: is not a region this driver is allowed to use (the operator's allow-list)"
    );
    let e = app
        .status(&with_provider_id(req("m-allow"), "cn-shanghai.i-abc"))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    // A well-formed region ECS is not known to serve is refused by this driver's set-up too (another
    // driver, pointed at an endpoint, takes it); only a malformed one is the request's mistake.
    let mut spec = provider_spec();
    spec["region"] = json!("xx-nowhere-1");
    let r = MachineRequest {
        machine_class: class_with(spec),
        ..req("m-allow")
    };
    assert_code(
        &app.create(&r).await.unwrap_err(),
        Code::FailedPrecondition,
        412,
    );
    let mut spec = provider_spec();
    spec["region"] = json!("cn_beijing");
    let r = MachineRequest {
        machine_class: class_with(spec),
        ..req("m-allow")
    };
    assert_code(
        &app.create(&r).await.unwrap_err(),
        Code::InvalidArgument,
        400,
    );
    // ... and a malformed field is reported before the region the operator leaves out.
    let mut spec = provider_spec();
    spec["imageID"] = json!("");
    let r = MachineRequest {
        machine_class: class_with(spec),
        ..req("m-allow")
    };
    assert_code(
        &app.create(&r).await.unwrap_err(),
        Code::InvalidArgument,
        400,
    );
    let mut spec = provider_spec();
    spec["region"] = json!("cn-beijing");
    let r = MachineRequest {
        machine_class: class_with(spec),
        ..req("m-allow")
    };
    let created = app.create(&r).await.unwrap();
    assert!(
        created.provider_id.starts_with("cn-beijing.i-"),
        "{created:?}"
    );
    // A providerID naming a region outside the list is refused before any lookup: a region ECS
    // serves, so a precondition of this driver's set-up.
    let e = app
        .status(&with_provider_id(r, "cn-shanghai.i-abc"))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status
            .message
            .starts_with("machine.spec.providerID: names region \"cn-shanghai\""),
        "{}",
        e.status.message
    );
}
