//! The `Docker` provider over real HTTP against the local Docker Engine: create, adopt, status,
//! initialize, list and delete; a bootstrap that fails; a missing image; mounts, Engines and
//! privileges outside what the operator allows; 20 machines created concurrently, each twice.
//!
//! The machine image is built by the tests from nothing a registry serves ([`support`]). Tests skip
//! with a printed reason when no Engine answers, and fail instead when `BERTH_REQUIRE_DOCKER=1`.
//! How long machines take to become Running is measured by `benches/docker.rs`, not here.
//!
//! Every container a test makes carries a label naming the test's run (the process id and the
//! test), and a guard removes every container with that label when the test ends, failed or not.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bollard::Docker as Engine;
use bollard::exec::{CreateExecOptions, StartExecOptions};
use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use client::machines::Client;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::{
    CreateMachineResponse, ListMachinesRequest, Machine, MachineClass, MachineRequest, Secret,
};
use futures::StreamExt as _;
use machine_driver::docker::archive;
use machine_driver::docker::spec::{Record, bootstrap_record};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, eventually, spawn};
use support::{RUN_LABEL, Sweep, local_engine, machine_image};

/// How long a machine may take to become Running here.
const WAIT: Duration = Duration::from_secs(60);

/// The local Engine; skips (or, with BERTH_REQUIRE_DOCKER=1, fails) when none answers.
async fn engine_or_skip(test: &str) -> Option<Engine> {
    let engine = local_engine().await;
    if engine.is_none() {
        assert!(
            std::env::var("BERTH_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "{test}: BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers at unix:///var/run/docker.sock"
        );
        eprintln!("SKIPPED {test}: no Docker Engine answers at unix:///var/run/docker.sock");
    }
    engine
}

/// One test's driver, client, run id and sweep.
struct App {
    machines: Client,
    run: String,
    image: String,
    engine: Engine,
    _driver: TestServer,
    _sweep: Sweep,
}

/// A run id for `test`: unique per process and test, usable in machine names and labels.
fn run_id(test: &str) -> String {
    format!("bt{}-{test}", std::process::id())
}

async fn driver(env: Env) -> (TestServer, Client) {
    let config =
        machine_driver::Config::from_env(&env.with("BERTH_LISTEN", "127.0.0.1:0")).unwrap();
    let providers = machine_driver::providers(&config).unwrap();
    let server = spawn(machine_driver::router(&config, providers)).await;
    let client = Client::new(ServiceClient::new(
        &server.url,
        ClientOptions {
            timeout: Duration::from_secs(60),
            ..ClientOptions::default()
        },
    ));
    (server, client)
}

/// The driver for test `test` (a short DNS-1123 word) with these extra variables, or `None` (skipped)
/// without an Engine.
async fn spawn_app(test: &str, vars: &[(&str, &str)]) -> Option<App> {
    let engine = engine_or_skip(test).await?;
    let run = run_id(test);
    let sweep = Sweep(run.clone());
    let image = machine_image().await;
    let mut env = Env::default();
    for (k, v) in vars {
        env = env.with(k, *v);
    }
    let (server, machines) = driver(env).await;
    Some(App {
        machines,
        run,
        image,
        engine,
        _driver: server,
        _sweep: sweep,
    })
}

impl App {
    /// A class of this run: the test image, cluster = the run id, role `worker`, plus `extra`.
    fn class(&self, extra: Value) -> MachineClass {
        let mut spec = json!({
            "image": self.image,
            "tags": {format!("kubernetes.io/cluster/{}", self.run): "1", "kubernetes.io/role/worker": "1"},
            "labels": {RUN_LABEL: self.run},
            "stopGracePeriodSeconds": 20,
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let mut class = MachineClass {
            provider: "Docker".into(),
            provider_spec: spec,
            ..MachineClass::default()
        };
        class.metadata.name = format!("{}-class", self.run);
        class
    }

    fn machine(&self, n: usize) -> Machine {
        let mut m = Machine::default();
        m.metadata.name = format!("{}-{n}", self.run);
        m.metadata.namespace = "default".into();
        m.metadata.uid = format!("uid-{}-{n}", self.run);
        m
    }

    fn req(&self, n: usize, class: &MachineClass, user_data: Option<&str>) -> MachineRequest {
        MachineRequest {
            machine: self.machine(n),
            machine_class: class.clone(),
            secret: user_data
                .map(|d| Secret::from_string_data([("userData", d)]))
                .unwrap_or_default(),
        }
    }

    /// The run's containers.
    async fn containers(&self) -> Vec<String> {
        Sweep::containers(&self.engine, &self.run).await
    }

    /// A file in machine `n`'s container, as text.
    async fn file(&self, n: usize, path: &str) -> Option<String> {
        let mut stream = self.engine.download_from_container(
            &self.machine(n).metadata.name,
            Some(DownloadFromContainerOptions { path: path.into() }),
        );
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            tar.extend_from_slice(&chunk.ok()?);
        }
        archive::first_file(&tar).map(|b| String::from_utf8(b).unwrap())
    }

    /// The labels of a bootstrap record of machine `n`'s container, if it exists.
    async fn record(&self, n: usize, record: Record) -> Option<HashMap<String, String>> {
        let c = self
            .engine
            .inspect_container(&self.machine(n).metadata.name, None)
            .await
            .ok()?;
        let name = bootstrap_record(&c.id?, record);
        self.engine
            .inspect_volume(&name)
            .await
            .ok()
            .map(|v| v.labels)
    }

    /// Writes a file into machine `n`'s container, as a process of the machine could.
    async fn plant(&self, n: usize, path: &str, contents: &[u8]) {
        let tar = archive::single_file(path, 0o644, contents).unwrap();
        self.engine
            .upload_to_container(
                &self.machine(n).metadata.name,
                Some(UploadToContainerOptions {
                    path: "/".into(),
                    ..UploadToContainerOptions::default()
                }),
                bollard::body_full(tar.into()),
            )
            .await
            .unwrap();
    }

    /// Runs a test-machine script in machine `n`'s container as one of its own processes, to the
    /// end.
    async fn run_in(&self, n: usize, script: &str) {
        let path = "/tmp/hostile-script";
        self.plant(n, path, format!("{SHEBANG}{script}").as_bytes())
            .await;
        let name = self.machine(n).metadata.name;
        let exec = self
            .engine
            .create_exec(
                &name,
                CreateExecOptions {
                    cmd: Some(vec!["/berth-machine", "bootstrap", path]),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .unwrap();
        self.engine
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: true,
                    ..StartExecOptions::default()
                }),
            )
            .await
            .unwrap();
        let code = eventually("the machine's own process ends", WAIT, || async {
            let x = self.engine.inspect_exec(&exec.id).await.ok()?;
            (x.running == Some(false)).then_some(x.exit_code)?
        })
        .await;
        assert_eq!(code, 0, "{script}");
    }

    /// Starts a test-machine script in machine `n`'s container without waiting for it.
    async fn start_in(&self, n: usize, script: &str) {
        let path = "/tmp/hostile-start";
        self.plant(n, path, format!("{SHEBANG}{script}").as_bytes())
            .await;
        let exec = self
            .engine
            .create_exec(
                &self.machine(n).metadata.name,
                CreateExecOptions {
                    cmd: Some(vec!["/berth-machine", "bootstrap", path]),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .unwrap();
        self.engine
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: true,
                    ..StartExecOptions::default()
                }),
            )
            .await
            .unwrap();
    }

    /// Whether machine `n`'s container runs, and its restart policy.
    async fn running(&self, n: usize) -> (bool, String) {
        let c = self
            .engine
            .inspect_container(&self.machine(n).metadata.name, None)
            .await
            .unwrap();
        let running = c.state.and_then(|s| s.running).unwrap_or(false);
        let policy = c
            .host_config
            .and_then(|h| h.restart_policy)
            .and_then(|p| p.name)
            .map(|n| n.to_string())
            .unwrap_or_default();
        (running, policy)
    }

    /// Polls status until OK.
    async fn until_running(&self, req: &MachineRequest) {
        eventually("machine Running", WAIT, || async {
            self.machines.status(req).await.ok().map(|_| ())
        })
        .await
    }
}

fn assert_code(e: &ClientError, code: Code, http: u16) {
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.http_status, Some(http), "{e}");
}

fn condition<'a>(
    conditions: &'a [domain::machine::Condition],
    kind: &str,
) -> &'a domain::machine::Condition {
    conditions
        .iter()
        .find(|c| c.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} condition in {conditions:?}"))
}

const SHEBANG: &str = "#!/berth-machine bootstrap\n";

#[tokio::test]
async fn a_machine_is_created_adopted_bootstrapped_once_listed_and_deleted() {
    let Some(app) = spawn_app("life", &[]).await else {
        return;
    };
    let class = app.class(json!({"bootstrap": "exec"}));
    let user_data = format!(
        "{SHEBANG}# token: bootstrap-token-abc123\nappend /var/lib/berth/runs ran\nsleep 2000\n"
    );
    let req = app.req(0, &class, Some(&user_data));
    let name = req.machine.metadata.name.clone();

    let made: CreateMachineResponse = app.machines.create(&req).await.unwrap();
    assert_eq!(made.provider_id, format!("docker:///{name}"));
    assert_eq!(made.node_name, name);
    assert!(
        made.last_known_state.contains("created"),
        "{}",
        made.last_known_state
    );
    assert!(
        made.addresses.iter().any(|a| a.kind == "InternalIP"),
        "{:?}",
        made.addresses
    );
    assert!(
        made.addresses
            .iter()
            .any(|a| a.kind == "Hostname" && a.address == name)
    );

    // The bootstrap is still running: not initialised yet.
    let e = app.machines.status(&req).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("is running"), "{e}");

    // Again: the same container is adopted, no second one is made, the bootstrap is not rerun.
    let again = app.machines.create(&req).await.unwrap();
    assert_eq!(again.provider_id, made.provider_id);
    assert!(
        again.last_known_state.contains("adopted"),
        "{}",
        again.last_known_state
    );

    // InitializeMachine waits for the running bootstrap.
    let init = app.machines.initialize(&req).await.unwrap();
    assert_eq!(init.provider_id, made.provider_id);
    app.until_running(&req).await;

    let status = app.machines.status(&req).await.unwrap();
    assert_eq!(status.provider_id, made.provider_id);
    assert_eq!(status.node_name, name);
    for kind in ["ContainerProvisioned", "BootstrapCompleted", "Ready"] {
        assert_eq!(condition(&status.conditions, kind).status, "True", "{kind}");
    }
    assert_eq!(
        condition(&status.conditions, "BootstrapCompleted").reason,
        "Completed"
    );
    app.machines.initialize(&req).await.unwrap();
    app.machines.create(&req).await.unwrap();

    // The user data was in place before the container's own init started, and ran exactly once.
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );
    assert_eq!(
        app.file(0, "/tmp/boot").await.as_deref(),
        Some("user-data present\n")
    );
    assert_eq!(
        app.file(0, "/var/lib/berth/user-data").await.as_deref(),
        Some(user_data.as_str())
    );
    // Its run is recorded where only the driver writes: a volume labelled with the exit code.
    let record = app.record(0, Record::Exited).await.expect("an exit record");
    assert_eq!(
        record.get("berth.io/bootstrap-exit").map(String::as_str),
        Some("0")
    );
    assert_eq!(app.file(0, "/var/lib/berth/bootstrap.exit").await, None);

    // One container, labelled with the class's cluster and role and the machine's name and UID.
    assert_eq!(app.containers().await.len(), 1);
    let inspected = app.engine.inspect_container(&name, None).await.unwrap();
    let config = inspected.config.unwrap();
    let labels = config.labels.unwrap();
    assert_eq!(labels["berth.io/cluster"], app.run);
    assert_eq!(labels["berth.io/role"], "worker");
    assert_eq!(labels["berth.io/machine"], name);
    assert_eq!(labels["berth.io/machine-uid"], req.machine.metadata.uid);
    assert_eq!(config.hostname.as_deref(), Some(name.as_str()));
    assert_eq!(config.image.as_deref(), Some(app.image.as_str()));

    // A container that stopped is still the machine's, not Ready; CreateMachine starts it again.
    app.engine
        .stop_container(
            &name,
            None::<bollard::query_parameters::StopContainerOptions>,
        )
        .await
        .unwrap();
    let stopped = app.machines.status(&req).await.unwrap();
    let ready = condition(&stopped.conditions, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NotReady")
    );
    assert!(ready.message.contains("exited"), "{ready:?}");
    app.machines.create(&req).await.unwrap();
    let restarted = app.machines.status(&req).await.unwrap();
    assert_eq!(condition(&restarted.conditions, "Ready").status, "True");
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );

    // Found by providerID too.
    let mut by_id = req.clone();
    by_id.machine.spec.provider_id = made.provider_id.clone();
    app.machines.status(&by_id).await.unwrap();

    // Listed under the class's cluster and role; another role sees nothing.
    let list = app
        .machines
        .list(&ListMachinesRequest {
            machine_class: class.clone(),
            secret: Secret::default(),
        })
        .await
        .unwrap();
    assert_eq!(
        list.machine_list,
        BTreeMap::from([(made.provider_id.clone(), name.clone())])
    );
    let mut other_role = class.clone();
    other_role.provider_spec["tags"] = json!({
        format!("kubernetes.io/cluster/{}", app.run): "1", "kubernetes.io/role/control-plane": "1"
    });
    let none = app
        .machines
        .list(&ListMachinesRequest {
            machine_class: other_role,
            secret: Secret::default(),
        })
        .await
        .unwrap();
    assert!(none.machine_list.is_empty(), "{none:?}");

    // Without its UID (or with another), a delete leaves it and says its name is held (a
    // break-it finding: it said only "nothing to delete" of a running container).
    for uid in ["", "someone-else"] {
        let mut other = req.clone();
        other.machine.metadata.uid = uid.into();
        let kept = app.machines.delete(&other).await.unwrap();
        assert!(
            kept.last_known_state
                .contains("is held by a container made for another machine UID"),
            "{uid:?}: {}",
            kept.last_known_state
        );
        assert_eq!(app.containers().await.len(), 1, "left running");
    }

    // Delete stops it within its grace period (the machine stops on SIGTERM) and removes it.
    let deleting = Instant::now();
    let gone = app.machines.delete(&req).await.unwrap();
    assert!(
        deleting.elapsed() < Duration::from_secs(15),
        "a graceful stop took {:?}",
        deleting.elapsed()
    );
    assert!(
        gone.last_known_state.contains("removed"),
        "{}",
        gone.last_known_state
    );
    assert!(app.containers().await.is_empty());
    let e = app.machines.status(&req).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    let again = app.machines.delete(&req).await.unwrap();
    assert!(again.last_known_state.contains("nothing to delete"));
    let list = app
        .machines
        .list(&ListMachinesRequest {
            machine_class: class,
            secret: Secret::default(),
        })
        .await
        .unwrap();
    assert!(list.machine_list.is_empty());
}

/// A container is found only for its own cluster, role, machine name and UID: another role's class
/// (unless the machine itself names its container by providerID), or a request naming the
/// container by providerID for another machine, gets the 404 of a missing machine and changes
/// nothing.
#[tokio::test]
async fn a_provider_id_or_another_role_never_reaches_another_machines_container() {
    let Some(app) = spawn_app("scope", &[]).await else {
        return;
    };
    let class = app.class(json!({}));
    let made = app
        .machines
        .create(&app.req(0, &class, None))
        .await
        .unwrap();
    let mut other_role = class.clone();
    other_role.provider_spec["tags"] = json!({
        format!("kubernetes.io/cluster/{}", app.run): "1", "kubernetes.io/role/control-plane": "1"
    });
    let mut strangers = vec![app.req(0, &other_role, None)];
    // Another machine's name, or this name with another UID, naming the container by providerID.
    let mut other_name = app.req(1, &class, None);
    other_name.machine.spec.provider_id = made.provider_id.clone();
    strangers.push(other_name);
    let mut other_uid = app.req(0, &class, None);
    other_uid.machine.metadata.uid = "uid-someone-else".into();
    other_uid.machine.spec.provider_id = made.provider_id.clone();
    strangers.push(other_uid);
    for req in &strangers {
        let e = app.machines.status(req).await.unwrap_err();
        assert_code(&e, Code::NotFound, 404);
        let e = app.machines.initialize(req).await.unwrap_err();
        assert_code(&e, Code::NotFound, 404);
        let deleted = app.machines.delete(req).await.unwrap();
        assert!(
            deleted.last_known_state.contains("nothing to delete"),
            "{deleted:?}"
        );
        assert_eq!(app.containers().await.len(), 1, "{req:?}");
    }
    // The machine itself (its name and UID) naming its container by providerID is found under a
    // class whose role or cluster changed since the container was made: else a class change would
    // leave the container running behind a deleted machine (a break-it finding).
    let mut moved = app.req(0, &other_role, None);
    moved.machine.spec.provider_id = made.provider_id.clone();
    app.machines.status(&moved).await.unwrap();
    // The machine itself, by providerID and without its UID (as the orphan collector asks), is
    // still found.
    let mut own = app.req(0, &class, None);
    own.machine.spec.provider_id = made.provider_id.clone();
    app.machines.status(&own).await.unwrap();
    own.machine.metadata.uid.clear();
    app.machines.delete(&own).await.unwrap();
    assert!(app.containers().await.is_empty());
}

/// Issue 32, point 10: two stacks on one Engine (each driver with its own BERTH_DOCKER_INSTANCE),
/// and a driver with none, never list, block, find or delete each other's machines, even of the
/// same namespace, name, UID and class.
#[tokio::test]
async fn stacks_on_one_engine_keep_their_machines_apart() {
    let Some(app) = spawn_app("stacks", &[("BERTH_DOCKER_INSTANCE", "stack-a")]).await else {
        return;
    };
    let (_b_server, stack_b) =
        driver(Env::default().with("BERTH_DOCKER_INSTANCE", "stack-b")).await;
    let (_none_server, no_stack) = driver(Env::default()).await;
    let class = app.class(json!({}));
    let req = app.req(0, &class, None);
    let list = |client: Client| {
        let class = class.clone();
        async move {
            client
                .list(&ListMachinesRequest {
                    machine_class: class,
                    secret: Secret::default(),
                })
                .await
                .unwrap()
                .machine_list
        }
    };

    let a = app.machines.create(&req).await.unwrap();
    assert!(
        a.provider_id.ends_with(&format!("_{}-0_stack-a", app.run)),
        "{a:?}"
    );
    assert_eq!(list(app.machines.clone()).await.len(), 1);
    assert!(
        list(stack_b.clone()).await.is_empty(),
        "B lists A's machine"
    );
    assert!(
        list(no_stack.clone()).await.is_empty(),
        "no stack lists A's machine"
    );

    // The same machine made by B is B's own container, not A's adopted nor a clash.
    let b = stack_b.create(&req).await.unwrap();
    assert_ne!(a.provider_id, b.provider_id);
    assert_eq!(app.containers().await.len(), 2);
    let mut by_id = req.clone();
    by_id.machine.spec.provider_id = a.provider_id.clone();
    // A's providerID tells B nothing: B answers for its own container of the machine.
    let seen = stack_b.status(&by_id).await.unwrap();
    assert_eq!(seen.provider_id, b.provider_id);
    let e = no_stack.status(&by_id).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    let answer = no_stack.delete(&req).await.unwrap();
    assert!(
        answer.last_known_state.contains("nothing to delete"),
        "{answer:?}"
    );

    // B's delete takes B's container only; A's machine runs on.
    stack_b.delete(&req).await.unwrap();
    assert_eq!(app.containers().await.len(), 1);
    app.machines.status(&req).await.unwrap();
    assert_eq!(list(app.machines.clone()).await.len(), 1);
    app.machines.delete(&req).await.unwrap();
    assert!(app.containers().await.is_empty());
}

/// An image whose labels the Engine would copy onto the container under a reserved prefix
/// (`com.docker.*`, `berth.io/*` but the driver's own) is refused before any container is made.
#[tokio::test]
async fn an_image_with_reserved_labels_is_refused() {
    let Some(app) = spawn_app("imglabels", &[]).await else {
        return;
    };
    let base = app
        .engine
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(format!("{}-base", app.run)),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(app.image.clone()),
                labels: Some(HashMap::from([(RUN_LABEL.to_owned(), app.run.clone())])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut refused = Vec::new();
    for (n, label) in [
        "com.docker.compose.project=evil",
        "berth.io/bootstrap-exec=evil",
        "Berth.IO/cluster=evil",
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("{}-{n}", app.run);
        app.engine
            .commit_container(
                bollard::query_parameters::CommitContainerOptions {
                    container: Some(base.id.clone()),
                    repo: Some("berth-test-labelled".into()),
                    tag: Some(tag.clone()),
                    changes: Some(format!("LABEL {label}")),
                    ..Default::default()
                },
                bollard::models::ContainerConfig::default(),
            )
            .await
            .unwrap();
        let image = format!("berth-test-labelled:{tag}");
        let e = app
            .machines
            .create(&app.req(n, &app.class(json!({"image": image})), None))
            .await
            .unwrap_err();
        let _ = app
            .engine
            .remove_image(
                &image,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
        refused.push((label, e));
    }
    for (label, e) in refused {
        assert_code(&e, Code::FailedPrecondition, 412);
        let key = label.split('=').next().unwrap();
        assert!(
            e.status
                .message
                .contains("machineClass.providerSpec.image: image \"berth-test-labelled:")
                && e.status.message.contains(&format!("carries label {key:?}")),
            "{e}"
        );
    }
    assert_eq!(
        app.containers().await,
        vec![base.id],
        "a refused create made a container"
    );
}

/// A container whose first start fails is removed with the failed create, so the next create,
/// with a corrected spec, makes a fresh one instead of adopting the broken one.
#[tokio::test]
async fn a_failed_first_start_leaves_no_container_behind() {
    let Some(app) = spawn_app("firststart", &[]).await else {
        return;
    };
    let broken = app.class(json!({"args": ["/nonexistent"]}));
    let e = app
        .machines
        .create(&app.req(0, &broken, None))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.contains("/nonexistent"), "{e}");
    assert!(app.containers().await.is_empty(), "{e}");
    let fixed = app.req(0, &app.class(json!({})), None);
    app.machines.create(&fixed).await.unwrap();
    let c = app
        .engine
        .inspect_container(&fixed.machine.metadata.name, None)
        .await
        .unwrap();
    assert_ne!(c.args, Some(vec!["/nonexistent".to_owned()]));
    app.until_running(&fixed).await;
    app.machines.delete(&fixed).await.unwrap();
}

/// A stopped machine with mounts and no bootstrap is started again by InitializeMachine (after the
/// mount checks), as by CreateMachine.
#[tokio::test]
async fn initialize_restarts_a_stopped_machine_with_mounts_without_a_bootstrap() {
    let root = std::env::temp_dir().join(format!("berth-docker-restart-{}", std::process::id()));
    std::fs::create_dir_all(root.join("default")).unwrap();
    let r = root.display().to_string();
    let Some(app) = spawn_app("restart", &[("BERTH_DOCKER_MOUNT_PATHS", &r)]).await else {
        std::fs::remove_dir_all(&root).unwrap();
        return;
    };
    let class = app.class(json!({
        "mounts": [{"hostPath": format!("{r}/default"), "containerPath": "/data", "readOnly": true}]
    }));
    let req = app.req(0, &class, None);
    app.machines.create(&req).await.unwrap();
    app.until_running(&req).await;
    app.start_in(0, "end-machine\n").await;
    eventually("machine 0 has ended", WAIT, || async {
        (!app.running(0).await.0).then_some(())
    })
    .await;
    app.machines.initialize(&req).await.unwrap();
    assert_eq!(app.running(0).await, (true, "no".to_owned()));
    app.machines.delete(&req).await.unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn a_failing_bootstrap_leaves_the_machine_uninitialized_and_is_not_rerun() {
    let Some(app) = spawn_app("fail", &[]).await else {
        return;
    };
    let class = app.class(json!({"bootstrap": "exec"}));
    let failing = app.req(
        0,
        &class,
        Some(&format!(
            "{SHEBANG}append /var/lib/berth/runs ran\nexit 3\n"
        )),
    );
    // The kernel cannot run this one at all: its interpreter does not exist.
    let unrunnable = app.req(1, &class, Some("#!/no/such/interpreter\n"));
    app.machines.create(&failing).await.unwrap();
    app.machines.create(&unrunnable).await.unwrap();

    let e = eventually("the failure is reported", WAIT, || async {
        let e = app.machines.status(&failing).await.unwrap_err();
        e.status.message.contains("failed").then_some(e)
    })
    .await;
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("exit code 3"), "{e}");
    let e = app.machines.initialize(&failing).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("exit code 3"), "{e}");
    app.machines.create(&failing).await.unwrap();
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );

    let e = eventually("the unrunnable bootstrap is reported", WAIT, || async {
        let e = app.machines.initialize(&unrunnable).await.unwrap_err();
        e.status.message.contains("failed").then_some(e)
    })
    .await;
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("failed with exit code"), "{e}");
    assert!(!e.status.message.contains("exit code 0"), "{e}");

    for r in [&failing, &unrunnable] {
        app.machines.delete(r).await.unwrap();
    }
    assert!(app.containers().await.is_empty());
}

#[tokio::test]
async fn initialize_runs_a_pending_bootstrap() {
    let Some(app) = spawn_app("pend", &[]).await else {
        return;
    };
    let plain = app.class(json!({}));
    let exec = app.class(json!({"bootstrap": "exec"}));
    let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
    // Made by a class without a bootstrap: the user data is written, not run.
    app.machines
        .create(&app.req(0, &plain, Some(&user_data)))
        .await
        .unwrap();
    let status = app
        .machines
        .status(&app.req(0, &plain, Some(&user_data)))
        .await
        .unwrap();
    assert_eq!(
        condition(&status.conditions, "BootstrapCompleted").reason,
        "NotRequested"
    );
    assert_eq!(app.file(0, "/var/lib/berth/runs").await, None);
    // Seen through a class that wants one, the bootstrap is pending until InitializeMachine.
    let req = app.req(0, &exec, Some(&user_data));
    let e = app.machines.status(&req).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("has not run yet"), "{e}");
    app.machines.initialize(&req).await.unwrap();
    app.machines.status(&req).await.unwrap();
    app.machines.initialize(&req).await.unwrap();
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );
    app.machines.delete(&req).await.unwrap();
    assert!(app.containers().await.is_empty());
}

#[tokio::test]
async fn a_missing_image_is_failed_precondition_and_nothing_is_pulled() {
    let Some(app) = spawn_app("img", &[]).await else {
        return;
    };
    let missing = format!("berth-test-missing-{}:none", std::process::id());
    let e = app
        .machines
        .create(&app.req(0, &app.class(json!({"image": missing})), None))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(e.status.message.contains(&missing), "{e}");
    assert!(e.status.message.contains("pull: IfNotPresent"), "{e}");
    assert!(app.engine.inspect_image(&missing).await.is_err());

    // Pulling from a registry the operator does not allow is refused before the Engine is asked:
    // a well-formed request this driver's settings refuse.
    let e = app
        .machines
        .create(&app.req(
            0,
            &app.class(json!({"image": "localhost:1/berth/none:v1", "pull": "IfNotPresent"})),
            None,
        ))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status.message.contains(
            "machineClass.providerSpec.pull: IfNotPresent would pull from registry \"localhost:1\""
        ),
        "{e}"
    );
    assert!(e.status.message.contains("BERTH_DOCKER_REGISTRIES"), "{e}");

    // A network the Engine does not have is a precondition too, naming it.
    let network = format!("berth-test-nonet-{}", std::process::id());
    let e = app
        .machines
        .create(&app.req(0, &app.class(json!({"network": network})), None))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(e.status.message.contains(&network), "{e}");
    assert!(app.containers().await.is_empty());

    // An allowed registry that does not answer: the pull fails, naming the image.
    let (_server, pulling) =
        driver(Env::default().with("BERTH_DOCKER_REGISTRIES", "localhost:1")).await;
    let e = pulling
        .create(&app.req(
            0,
            &app.class(json!({"image": "localhost:1/berth/none:v1", "pull": "IfNotPresent"})),
            None,
        ))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status.message.contains(
            "\"localhost:1/berth/none:v1\" is not on the Docker Engine and pulling it failed"
        ),
        "{e}"
    );
    assert!(app.containers().await.is_empty());
}

#[tokio::test]
async fn host_paths_and_privileges_outside_what_the_operator_allows_are_refused() {
    let allowed = std::env::temp_dir().join(format!("berth-docker-mounts-{}", std::process::id()));
    std::fs::create_dir_all(allowed.join("data")).unwrap();
    let escape = allowed.join("escape");
    let _ = std::fs::remove_file(&escape);
    std::os::unix::fs::symlink("/etc", &escape).unwrap();
    let root = allowed.display().to_string();
    let Some(app) = spawn_app("mnt", &[("BERTH_DOCKER_MOUNT_PATHS", &root)]).await else {
        return;
    };
    let mount = |host: &str| json!({"mounts": [{"hostPath": host, "containerPath": "/data", "readOnly": true}]});
    // A path that is not one is malformed (400); a path outside what the operator allows is a
    // precondition of this driver (412).
    for (host, rule, code, http) in [
        (
            "/etc".to_owned(),
            "outside the host directories BERTH_DOCKER_MOUNT_PATHS allows",
            Code::FailedPrecondition,
            412,
        ),
        (
            format!("{root}/../.."),
            "must not contain '..' components",
            Code::InvalidArgument,
            400,
        ),
        (
            format!("{root}/escape"),
            "through a symbolic link",
            Code::FailedPrecondition,
            412,
        ),
        (
            format!("{root}-other"),
            "outside the host directories BERTH_DOCKER_MOUNT_PATHS allows",
            Code::FailedPrecondition,
            412,
        ),
        // Inside the root, but not in the machine's namespace's directory (`default` here): a
        // machine never mounts another namespace's data (a break-it finding: two namespaces'
        // machines shared one writable directory, and the refusals between their mounts told one
        // of the other's).
        (
            format!("{root}/data"),
            "outside namespace default's host directories",
            Code::FailedPrecondition,
            412,
        ),
        (
            format!("{root}/team-a/data"),
            "outside namespace default's host directories",
            Code::FailedPrecondition,
            412,
        ),
    ] {
        let e = app
            .machines
            .create(&app.req(0, &app.class(mount(&host)), None))
            .await
            .unwrap_err();
        assert_code(&e, code, http);
        assert!(
            e.status
                .message
                .starts_with("machineClass.providerSpec.mounts[0].hostPath: "),
            "{e}"
        );
        assert!(e.status.message.contains(rule), "{host}: {e}");
    }
    let e = app
        .machines
        .create(&app.req(0, &app.class(json!({"privileged": true})), None))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status.message.contains("BERTH_DOCKER_ALLOW_PRIVILEGED"),
        "{e}"
    );
    assert!(app.containers().await.is_empty());

    // Inside the namespace's directory under the allowed one: bound, read-only.
    std::fs::create_dir_all(allowed.join("default/data")).unwrap();
    let req = app.req(0, &app.class(mount(&format!("{root}/default/data"))), None);
    app.machines.create(&req).await.unwrap();
    let inspected = app
        .engine
        .inspect_container(&req.machine.metadata.name, None)
        .await
        .unwrap();
    let mounts = inspected.mounts.unwrap();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(
        mounts[0].source.as_deref(),
        Some(format!("{root}/default/data").as_str())
    );
    assert_eq!(mounts[0].destination.as_deref(), Some("/data"));
    assert_eq!(mounts[0].rw, Some(false));
    app.machines.delete(&req).await.unwrap();
    assert!(app.containers().await.is_empty());
    std::fs::remove_dir_all(&allowed).unwrap();
}

/// No Engine needed: the checks happen before any connection, and a dead Engine is Unavailable.
#[tokio::test]
async fn engine_addresses_are_checked_and_a_silent_engine_is_unavailable() {
    let dead = format!(
        "unix:///nonexistent-berth-{}/docker.sock",
        std::process::id()
    );
    let (_server, machines) =
        driver(Env::default().with("BERTH_DOCKER_ENDPOINTS", dead.as_str())).await;
    let providers = machines.providers().await.unwrap();
    let names: Vec<&str> = providers
        .providers
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["Alicloud", "Docker"]);

    let mut class = MachineClass {
        provider: "Docker".into(),
        provider_spec: json!({
            "image": "berth/none:v1",
            "tags": {"kubernetes.io/cluster/c": "1", "kubernetes.io/role/r": "1"}
        }),
        ..MachineClass::default()
    };
    class.metadata.name = "c".into();
    let mut machine = Machine::default();
    machine.metadata.name = "m-dead".into();
    let req = |host: &str| MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: Secret::from_string_data([("dockerHost", host)]),
    };
    let e = machines
        .create(&req("tcp://10.9.8.7:2375"))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert_eq!(
        e.status.message,
        "secret.data[dockerHost]: names a Docker Engine this driver may not use; the operator allows Engine addresses with BERTH_DOCKER_ENDPOINTS"
    );
    let e = machines
        .status(&req("ssh://root@10.9.8.7"))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(!e.status.message.contains("10.9.8.7"), "{e}");

    for call in ["create", "status", "delete"] {
        let r = req(&dead);
        let e = match call {
            "create" => machines.create(&r).await.unwrap_err(),
            "status" => machines.status(&r).await.unwrap_err(),
            _ => machines.delete(&r).await.unwrap_err(),
        };
        assert_code(&e, Code::Unavailable, 503);
        assert!(e.status.message.contains("does not answer"), "{call}: {e}");
        assert!(!e.status.message.contains("nonexistent"), "{call}: {e}");
    }
}

#[tokio::test]
async fn twenty_machines_created_twice_concurrently_make_twenty_containers() {
    let Some(app) = spawn_app("conc", &[]).await else {
        return;
    };
    let class = app.class(json!({"bootstrap": "exec"}));
    let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
    let reqs: Vec<MachineRequest> = (0..20)
        .map(|n| app.req(n, &class, Some(&user_data)))
        .collect();

    let made = futures::future::join_all(
        reqs.iter()
            .chain(reqs.iter())
            .map(|r| app.machines.create(r)),
    )
    .await;
    let mut ids = BTreeMap::new();
    for (r, m) in reqs.iter().chain(reqs.iter()).zip(made) {
        let m = m.unwrap_or_else(|e| panic!("{}: {e}", r.machine.metadata.name));
        let prev = ids.insert(r.machine.metadata.name.clone(), m.provider_id.clone());
        assert!(prev.is_none_or(|p| p == m.provider_id));
    }
    assert_eq!(ids.len(), 20);
    assert_eq!(app.containers().await.len(), 20);

    futures::future::join_all(reqs.iter().map(|r| app.until_running(r))).await;
    for n in 0..20 {
        assert_eq!(
            app.file(n, "/var/lib/berth/runs").await.as_deref(),
            Some("ran\n"),
            "machine {n}"
        );
    }
    let list = app
        .machines
        .list(&ListMachinesRequest {
            machine_class: class.clone(),
            secret: Secret::default(),
        })
        .await
        .unwrap();
    assert_eq!(list.machine_list.len(), 20);

    let deleted = futures::future::join_all(
        reqs.iter()
            .chain(reqs.iter())
            .map(|r| app.machines.delete(r)),
    )
    .await;
    for d in deleted {
        // Both deletes of a machine succeed: the second finds nothing left, or the Engine tells it
        // removal is under way (retry); either way nothing remains.
        if let Err(e) = d {
            assert_code(&e, Code::Unavailable, 503);
        }
    }
    eventually("every container removed", WAIT, || async {
        app.containers().await.is_empty().then_some(())
    })
    .await;
}

/// The resident set of this process, in bytes (the driver runs in it).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// F1: the files a machine writes where earlier drivers kept the bootstrap's state are data, never
/// ids the driver sends to the Engine: a planted exec id that walks to another container's start,
/// to the machine's own export, or that is not UTF-8, starts nothing, pulls nothing into memory and
/// fails no call.
#[tokio::test]
async fn what_a_machine_writes_never_steers_the_driver() {
    let Some(app) = spawn_app("steer", &[]).await else {
        return;
    };
    // A container that is nobody's machine, never started.
    let victim = app
        .engine
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(format!("{}-victim", app.run)),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(app.image.clone()),
                labels: Some(HashMap::from([(RUN_LABEL.to_owned(), app.run.clone())])),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .id;
    let plain = app.class(json!({}));
    let exec = app.class(json!({"bootstrap": "exec"}));
    let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
    app.machines
        .create(&app.req(0, &plain, Some(&user_data)))
        .await
        .unwrap();
    let req = app.req(0, &exec, Some(&user_data));
    let name = req.machine.metadata.name.clone();

    // A big file, and an "exec id" that walks to the machine's own export.
    app.run_in(0, "fill /big 256\n").await;
    let planted: Vec<Vec<u8>> = vec![
        format!("../v1.23/containers/{victim}").into_bytes(),
        format!("../containers/{name}/export?").into_bytes(),
        [b"a".as_slice(), &[0xff; 5], &[0xe2, 0x82]].concat(),
    ];
    let before = rss();
    for exec_id in &planted {
        app.plant(0, "/var/lib/berth/bootstrap.exec", exec_id).await;
        for _ in 0..2 {
            let e = app.machines.status(&req).await.unwrap_err();
            assert_code(&e, Code::Uninitialized, 409);
            assert!(e.status.message.contains("has not run yet"), "{e}");
        }
    }
    // A claimed exit code is no result either.
    app.plant(0, "/var/lib/berth/bootstrap.exit", b"0").await;
    let e = app.machines.status(&req).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 96 << 20,
        "the driver's memory grew by {} MiB while the machine offered 256 MiB",
        grown >> 20
    );

    // InitializeMachine runs the machine's own bootstrap, once, and starts nothing else.
    app.machines.initialize(&req).await.unwrap();
    app.machines.status(&req).await.unwrap();
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );
    let v = app.engine.inspect_container(&victim, None).await.unwrap();
    let state = v.state.unwrap();
    assert_eq!(state.running, Some(false));
    assert_eq!(
        state.started_at.as_deref(),
        Some("0001-01-01T00:00:00Z"),
        "the victim was started"
    );
    let started = app
        .record(0, Record::Started)
        .await
        .expect("a started record");
    let exec_id = &started["berth.io/bootstrap-exec"];
    assert!(
        machine_driver::docker::spec::is_engine_id(exec_id),
        "{exec_id}"
    );
    let x = app.engine.inspect_exec(exec_id).await.unwrap();
    let own = app.engine.inspect_container(&name, None).await.unwrap().id;
    assert_eq!(x.container_id, own);

    // A planted id after the bootstrap changes nothing either; delete takes the records along.
    for exec_id in &planted {
        app.plant(0, "/var/lib/berth/bootstrap.exec", exec_id).await;
        app.plant(0, "/var/lib/berth/bootstrap.exit", exec_id).await;
        app.machines.status(&req).await.unwrap();
        app.machines.initialize(&req).await.unwrap();
    }
    assert_eq!(
        app.file(0, "/var/lib/berth/runs").await.as_deref(),
        Some("ran\n")
    );
    app.machines.delete(&req).await.unwrap();
    assert_eq!(app.record(0, Record::Started).await, None);
    let own = own.unwrap();
    for record in [Record::Started, Record::Exited] {
        assert!(
            app.engine
                .inspect_volume(&bootstrap_record(&own, record))
                .await
                .is_err()
        );
    }
}

/// F3: a machine gets the operator's ceilings when its class names no limits, a class's lower ones
/// when it does, and never more; every capability but a documented few is dropped, no process gains
/// privileges, and only allowed networks are joined.
#[tokio::test]
async fn machines_get_the_operators_limits_and_never_more() {
    let Some(app) = spawn_app("limits", &[]).await else {
        return;
    };
    let app = &app;
    let host_config = |n: usize| async move {
        app.engine
            .inspect_container(&app.machine(n).metadata.name, None)
            .await
            .unwrap()
            .host_config
            .unwrap()
    };
    app.machines
        .create(&app.req(0, &app.class(json!({})), None))
        .await
        .unwrap();
    let h = host_config(0).await;
    assert_eq!(h.memory, Some(512 << 20));
    assert_eq!(h.memory_swap, Some(512 << 20));
    assert_eq!(h.nano_cpus, Some(1_000_000_000));
    assert_eq!(h.pids_limit, Some(256));
    assert_eq!(h.cap_drop.as_deref(), Some(["ALL".to_owned()].as_slice()));
    let mut caps = h.cap_add.unwrap();
    caps.sort();
    let mut documented: Vec<String> = machine_driver::docker::spec::CAPABILITIES
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    documented.sort();
    assert_eq!(caps, documented);
    assert!(!caps.iter().any(|c| c.contains("NET_RAW")));
    assert_eq!(
        h.security_opt.as_deref(),
        Some(["no-new-privileges:true".to_owned()].as_slice())
    );
    // Without mounts, nothing can lead it outside at a restart: the Engine restarts it.
    assert_eq!(
        h.restart_policy.and_then(|p| p.name).map(|n| n.to_string()),
        Some("unless-stopped".to_owned()),
    );

    // Lower limits are the class's to ask for.
    app.machines
        .create(&app.req(
            1,
            &app.class(json!({"cpus": 0.5, "memory": "64Mi", "pids": 64})),
            None,
        ))
        .await
        .unwrap();
    let h = host_config(1).await;
    assert_eq!(
        (h.memory, h.nano_cpus, h.pids_limit),
        (Some(64 << 20), Some(500_000_000), Some(64))
    );

    // Above a ceiling, or on a network the operator does not allow: refused, naming the field and
    // the ceiling, and nothing is made.
    for (extra, want) in [
        (
            json!({"cpus": 2}),
            "machineClass.providerSpec.cpus: must be at most 1, the operator's ceiling (BERTH_DOCKER_CPUS)",
        ),
        (
            json!({"memory": "1Gi"}),
            "machineClass.providerSpec.memory: must be at most 512Mi, the operator's ceiling (BERTH_DOCKER_MEMORY)",
        ),
        (
            json!({"pids": 100000}),
            "machineClass.providerSpec.pids: must be at most 256, the operator's ceiling (BERTH_DOCKER_PIDS)",
        ),
        (
            json!({"network": "none"}),
            "machineClass.providerSpec.network: \"none\" is not a network the operator allows machines to join (BERTH_DOCKER_NETWORKS: bridge)",
        ),
    ] {
        let e = app
            .machines
            .create(&app.req(2, &app.class(extra.clone()), None))
            .await
            .unwrap_err();
        assert_code(&e, Code::FailedPrecondition, 412);
        assert_eq!(e.status.message, want, "{extra}");
    }
    assert_eq!(app.containers().await.len(), 2);

    // The operator may raise them.
    let (_server, raised) = driver(
        Env::default()
            .with("BERTH_DOCKER_CPUS", "2")
            .with("BERTH_DOCKER_MEMORY", "1Gi")
            .with("BERTH_DOCKER_PIDS", "1024")
            .with("BERTH_DOCKER_NETWORKS", "bridge,none"),
    )
    .await;
    raised
        .create(&app.req(
            2,
            &app.class(json!({"cpus": 2, "memory": "1Gi", "pids": 1000, "network": "none"})),
            None,
        ))
        .await
        .unwrap();
    let h = host_config(2).await;
    assert_eq!(
        (
            h.memory,
            h.nano_cpus,
            h.pids_limit,
            h.network_mode.as_deref()
        ),
        (Some(1 << 30), Some(2_000_000_000), Some(1000), Some("none"))
    );
    for n in 0..3 {
        app.machines
            .delete(&app.req(n, &app.class(json!({})), None))
            .await
            .unwrap();
    }
    assert!(app.containers().await.is_empty());
}

/// Point 7 and 11: a name held by a container Berth did not make is only "taken"; Docker's own label
/// keys are reserved; a 100,000-character value is a 400 naming the field and its bound.
#[tokio::test]
async fn a_clash_tells_nothing_about_the_holder_and_huge_values_are_400() {
    let Some(app) = spawn_app("clash", &[]).await else {
        return;
    };
    let foreign = app
        .engine
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(app.machine(0).metadata.name),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(app.image.clone()),
                labels: Some(HashMap::from([
                    (RUN_LABEL.to_owned(), app.run.clone()),
                    ("owner.example/secret".to_owned(), "s3cr3t-value".to_owned()),
                ])),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .id;
    let e = app
        .machines
        .create(&app.req(0, &app.class(json!({})), None))
        .await
        .unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    assert_eq!(
        e.status.message,
        format!(
            "the name {:?} is taken on the Docker Engine; one name is one machine",
            app.machine(0).metadata.name
        )
    );
    for secret in [
        &foreign[..12],
        "s3cr3t",
        "owner.example",
        "Berth did not make",
    ] {
        assert!(!e.status.message.contains(secret), "{secret}: {e}");
    }

    let e = app
        .machines
        .create(&app.req(
            1,
            &app.class(json!({"labels": {"com.docker.compose.project": "x", RUN_LABEL: app.run}})),
            None,
        ))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status
            .message
            .contains("machineClass.providerSpec.labels[com.docker.compose.project]: keys under com.docker. are reserved"),
        "{e}"
    );

    let huge = "a".repeat(100_000);
    for (extra, want) in [
        (
            json!({"image": huge}),
            "machineClass.providerSpec.image: must be an image reference",
        ),
        (
            json!({"env": {"X": huge}}),
            "machineClass.providerSpec.env[X]: must be at most 32768 characters",
        ),
        (
            json!({"kind": huge}),
            "machineClass.providerSpec.kind: must be at most 256 characters",
        ),
    ] {
        let e = app
            .machines
            .create(&app.req(1, &app.class(extra), None))
            .await
            .unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(e.status.message.contains(want), "{want}: {e}");
        assert!(e.status.message.len() < 1000, "{want}: the value is echoed");
    }
    assert_eq!(app.containers().await, [foreign]);
}

/// F2: a machine with a writable mount replaces a directory another machine mounts with a link to a
/// host directory outside the allowed root, and the other machine ends. The Engine does not restart
/// it into the link, and the driver refuses to start it while the link is there.
#[tokio::test]
async fn a_link_planted_between_starts_never_takes_a_mount_outside_its_root() {
    let base = std::env::temp_dir().join(format!("berth-docker-swap-{}", std::process::id()));
    // The machines are in namespace `default`: they mount from its directory under the root.
    let allowed = base.join("allowed");
    let root = allowed.join("default");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("shared/data")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("shared/data/inside"), "inside\n").unwrap();
    std::fs::write(outside.join("secret"), "host secret\n").unwrap();
    let r = root.display().to_string();
    let allowed = allowed.display().to_string();
    let Some(app) = spawn_app("swap", &[("BERTH_DOCKER_MOUNT_PATHS", &allowed)]).await else {
        std::fs::remove_dir_all(&base).unwrap();
        return;
    };
    // In one class, a writable mount that holds another's source is refused outright.
    let e = app
        .machines
        .create(&app.req(
            0,
            &app.class(json!({"mounts": [
                {"hostPath": format!("{r}/shared"), "containerPath": "/shared"},
                {"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}
            ]})),
            None,
        ))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status.message.contains(
            "machineClass.providerSpec.mounts[0].hostPath: is writable and holds another mount's hostPath"
        ),
        "{e}"
    );

    // Machine 0 may write the shared directory; machine 1 reads the data directory inside it: the
    // same rule across machines, whichever is created first (else machine 0 could swap the data
    // directory for a link while machine 1 is checked and started).
    let writer = app.class(
        json!({"mounts": [{"hostPath": format!("{r}/shared"), "containerPath": "/shared"}]}),
    );
    let reader = app.class(json!({
        "bootstrap": "exec",
        "mounts": [{"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}]
    }));
    let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
    let reading = app.req(1, &reader, Some(&user_data));
    app.machines
        .create(&app.req(0, &writer, None))
        .await
        .unwrap();
    let e = app.machines.create(&reading).await.unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status.message.contains(&format!(
            "machineClass.providerSpec.mounts: hostPath \"{r}/shared/data\" lies inside another machine's writable mount"
        )),
        "{e}"
    );
    app.machines
        .delete(&app.req(0, &writer, None))
        .await
        .unwrap();
    app.machines.create(&reading).await.unwrap();
    let e = app
        .machines
        .create(&app.req(0, &writer, None))
        .await
        .unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(
        e.status
            .message
            .contains("is writable and holds another machine's mount"),
        "{e}"
    );
    assert_eq!(
        app.containers().await.len(),
        1,
        "a refused create made a container"
    );
    // Two of one writable source are fine: neither can replace the other's root.
    let lone = app
        .class(json!({"mounts": [{"hostPath": format!("{r}/lone"), "containerPath": "/shared"}]}));
    std::fs::create_dir_all(root.join("lone")).unwrap();
    app.machines.create(&app.req(3, &lone, None)).await.unwrap();
    app.machines.create(&app.req(4, &lone, None)).await.unwrap();
    for n in [3, 4] {
        app.machines.delete(&app.req(n, &lone, None)).await.unwrap();
    }

    app.until_running(&reading).await;
    assert_eq!(
        app.file(1, "/data/inside").await.as_deref(),
        Some("inside\n")
    );
    assert_eq!(app.running(1).await, (true, "no".to_owned()));
    // A machine with mounts an earlier driver made (the Engine restarting it) is taken back by the
    // next call that may start it.
    app.engine
        .update_container(
            &reading.machine.metadata.name,
            bollard::models::ContainerUpdateBody {
                restart_policy: Some(bollard::models::RestartPolicy {
                    name: Some(bollard::models::RestartPolicyNameEnum::UNLESS_STOPPED),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(app.running(1).await, (true, "unless-stopped".to_owned()));
    app.machines.create(&reading).await.unwrap();
    assert_eq!(app.running(1).await, (true, "no".to_owned()));

    // Someone on the host (no machine may now) swaps the data directory for a link while the
    // machine is down.
    std::fs::remove_dir_all(root.join("shared/data")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("shared/data")).unwrap();
    app.start_in(1, "end-machine\n").await;
    eventually("machine 1 has ended", WAIT, || async {
        (!app.running(1).await.0).then_some(())
    })
    .await;

    // Neither CreateMachine nor InitializeMachine starts it through the link.
    let e = app.machines.create(&reading).await.unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(e.status.message.contains("symbolic link"), "{e}");
    let e = app.machines.initialize(&reading).await.unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
    assert!(e.status.message.contains("symbolic link"), "{e}");
    let c = app
        .engine
        .inspect_container(&reading.machine.metadata.name, None)
        .await
        .unwrap();
    assert_eq!(c.state.unwrap().running, Some(false));
    assert_eq!(c.restart_count, Some(0), "the Engine restarted it");

    // The directory put back, it starts again, still inside.
    std::fs::remove_file(root.join("shared/data")).unwrap();
    std::fs::create_dir_all(root.join("shared/data")).unwrap();
    std::fs::write(root.join("shared/data/inside"), "inside\n").unwrap();
    app.machines.create(&reading).await.unwrap();
    assert!(app.running(1).await.0);
    assert_eq!(
        app.file(1, "/data/inside").await.as_deref(),
        Some("inside\n")
    );
    assert_eq!(app.file(1, "/data/secret").await, None);
    app.machines.delete(&reading).await.unwrap();
    std::fs::remove_dir_all(&base).unwrap();
}

/// A container an earlier driver made (no bootstrap records) keeps the result that driver wrote in
/// it: its exit-code file is read as a small number and nothing else; without one readable (none,
/// only an exec file, a word, a link), its bootstrap is unknown and never run by this driver.
#[tokio::test]
async fn an_earlier_drivers_container_keeps_its_recorded_result_read_as_data_only() {
    let Some(app) = spawn_app("legacy", &[]).await else {
        return;
    };
    let m = app.machine(0);
    let labels = HashMap::from([
        (RUN_LABEL.to_owned(), app.run.clone()),
        ("berth.io/cluster".to_owned(), app.run.clone()),
        ("berth.io/role".to_owned(), "worker".to_owned()),
        ("berth.io/machine".to_owned(), m.metadata.name.clone()),
        ("berth.io/machine-uid".to_owned(), m.metadata.uid.clone()),
    ]);
    let id = app
        .engine
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(m.metadata.name.clone()),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(app.image.clone()),
                labels: Some(labels),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .id;
    app.engine.start_container(&id, None).await.unwrap();
    let req = app.req(
        0,
        &app.class(json!({"bootstrap": "exec"})),
        Some(&format!("{SHEBANG}append /var/lib/berth/runs ran\n")),
    );
    let status = || async { app.machines.status(&req).await };
    // Nothing readable says how its bootstrap ended (no file, an exec file only, a word, too many
    // digits, a link): unknown, and never run (again) by this driver.
    let unknown = |e: ClientError| {
        assert_code(&e, Code::FailedPrecondition, 412);
        assert!(
            e.status.message.contains("left by an earlier driver")
                && e.status.message.contains("never run again"),
            "{e}"
        );
    };
    let never_ran = || async {
        assert_eq!(app.record(0, Record::Started).await, None);
        assert_eq!(app.file(0, "/var/lib/berth/runs").await, None);
    };
    unknown(status().await.unwrap_err());
    unknown(app.machines.initialize(&req).await.unwrap_err());
    never_ran().await;
    app.plant(
        0,
        "/var/lib/berth/bootstrap.exec",
        b"../containers/x/export?",
    )
    .await;
    unknown(status().await.unwrap_err());
    for (exit, answer) in [
        ("3", Some("failed with exit code 3")),
        ("not a number", None),
        (&"7".repeat(100)[..], None),
        ("0\n", Some("")),
    ] {
        app.plant(0, "/var/lib/berth/bootstrap.exit", exit.as_bytes())
            .await;
        match answer {
            None => unknown(status().await.unwrap_err()),
            Some("") => {
                status().await.unwrap();
            }
            Some(words) => {
                let e = status().await.unwrap_err();
                assert_code(&e, Code::Uninitialized, 409);
                assert!(e.status.message.contains(words), "{exit:?}: {e}");
            }
        }
    }
    // The machine swaps its recorded 0 for a link: unknown again, not "not run yet".
    app.run_in(
        0,
        "remove /var/lib/berth/bootstrap.exit\nsymlink /berth-machine /var/lib/berth/bootstrap.exit\n",
    )
    .await;
    unknown(status().await.unwrap_err());
    unknown(app.machines.initialize(&req).await.unwrap_err());
    app.run_in(0, "remove /var/lib/berth/bootstrap.exit\n")
        .await;
    unknown(app.machines.initialize(&req).await.unwrap_err());
    never_ran().await;
    app.machines.delete(&req).await.unwrap();
    assert!(app.containers().await.is_empty());
}

/// No Engine needed: the README's example class is one the driver accepts as it is.
#[test]
fn the_example_docker_machine_is_valid() {
    use machine_driver::docker::settings::Settings;
    use machine_driver::docker::spec::{Bootstrap, ProviderSpec, machine_name, user_data};
    use serde::Deserialize as _;

    let text = include_str!("../../../examples/docker-machine.yaml");
    let mut kinds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let doc = Value::deserialize(doc).unwrap();
        let kind = doc["kind"].as_str().unwrap().to_owned();
        match kind.as_str() {
            "Machine" => {
                let m: Machine = serde_json::from_value(doc).unwrap();
                machine_name(&m).unwrap();
            }
            "MachineClass" => {
                let c: MachineClass = serde_json::from_value(doc).unwrap();
                assert_eq!(c.provider, "Docker");
                let plan = ProviderSpec::decode(&c.provider_spec)
                    .unwrap()
                    .plan(
                        &Settings::default(),
                        machine_driver::docker::settings::EngineSite::Elsewhere,
                    )
                    .unwrap();
                assert_eq!(plan.bootstrap, Bootstrap::Exec);
            }
            "Secret" => {
                let s: Secret = serde_json::from_value(doc).unwrap();
                assert!(user_data(&s, Bootstrap::Exec).unwrap().is_some());
            }
            other => panic!("unexpected kind {other}"),
        }
        kinds.push(kind);
    }
    assert_eq!(kinds, ["Machine", "MachineClass", "Secret"]);
}

/// Tenancy (issue 30 point 6) on a real Engine: two callers in different namespaces walk every
/// driver route, and neither sees, changes or learns the other's machine.
mod tenancy {
    use service_kit::tenancy::{NAMESPACES_HEADER, TOKEN_NAME_HEADER};

    use super::*;

    impl App {
        /// A POST as a caller of `namespaces`, as the gateway forwards it.
        async fn as_tenant(&self, namespaces: &str, path: &str, body: &Value) -> (u16, Value) {
            let r = reqwest::Client::new()
                .post(format!("{}{path}", self._driver.url))
                .header(TOKEN_NAME_HEADER, format!("token-{namespaces}"))
                .header(NAMESPACES_HEADER, namespaces)
                .json(body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
        }
    }

    fn learns_nothing(body: &Value, secrets: &[&str]) {
        let text = body.to_string();
        for s in secrets {
            assert!(!text.contains(s), "{s:?} leaked in {text}");
        }
    }

    #[tokio::test]
    async fn two_tenants_neither_see_nor_change_nor_learn_each_others_containers() {
        let Some(app) = spawn_app("tenants", &[]).await else {
            return;
        };
        let class = app.class(json!({}));
        let mut a_req = serde_json::to_value(app.req(0, &class, None)).unwrap();
        a_req["machine"]["metadata"]["namespace"] = json!("team-a");
        let (code, made) = app.as_tenant("team-a", "/v1/machines:create", &a_req).await;
        assert_eq!(code, 200, "{made}");
        let name = a_req["machine"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let a_uid = a_req["machine"]["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        let a_container = format!("team-a_{name}");
        assert_eq!(made["providerID"], format!("docker:///{a_container}"));
        let inspected = app
            .engine
            .inspect_container(&a_container, None)
            .await
            .unwrap();
        let id = inspected.id.unwrap();
        let labels = inspected.config.unwrap().labels.unwrap();
        assert_eq!(labels["berth.io/namespace"], "team-a");
        let never = [id.as_str(), &id[..12], "team-a"];

        // What a machine that does not exist gets, for comparison.
        let mut missing_req = a_req.clone();
        missing_req["machine"]["metadata"]["namespace"] = json!("team-b");
        missing_req["machine"]["metadata"]["uid"] = json!("uid-nobody");
        let (code, missing) = app
            .as_tenant("team-b", "/v1/machines:status", &missing_req)
            .await;
        assert_eq!(code, 404, "{missing}");

        // B names A's machine in A's namespace, with and without its providerID.
        let mut with_id = a_req.clone();
        with_id["machine"]["spec"]["providerID"] = made["providerID"].clone();
        for body in [&a_req, &with_id] {
            for route in ["status", "initialize"] {
                let (code, answer) = app
                    .as_tenant("team-b", &format!("/v1/machines:{route}"), body)
                    .await;
                assert_eq!(code, 404, "{route}: {answer}");
                assert_eq!(answer["detail"], missing["detail"], "{route}: {answer}");
                learns_nothing(&answer, &never);
            }
            // A create names the namespace itself: refused for it.
            let (code, answer) = app.as_tenant("team-b", "/v1/machines:create", body).await;
            assert_eq!(code, 403, "{answer}");
            learns_nothing(&answer, &never[..2]);
            let (code, answer) = app.as_tenant("team-b", "/v1/machines:delete", body).await;
            assert_eq!(code, 200, "{answer}");
            assert!(
                answer["lastKnownState"]
                    .as_str()
                    .unwrap()
                    .contains("nothing to delete"),
                "{answer}"
            );
        }
        // B names it in its own namespace: another tenant's container, whatever B sends.
        let mut other_uid = a_req.clone();
        other_uid["machine"]["metadata"]["uid"] = json!("uid-b-own");
        for body in [&a_req, &with_id, &other_uid] {
            let mut body = body.clone();
            body["machine"]["metadata"]["namespace"] = json!("team-b");
            for route in ["status", "initialize"] {
                let (code, answer) = app
                    .as_tenant("team-b", &format!("/v1/machines:{route}"), &body)
                    .await;
                assert_eq!(code, 404, "{route}: {answer}");
                learns_nothing(&answer, &never);
            }
            let (code, answer) = app.as_tenant("team-b", "/v1/machines:delete", &body).await;
            assert_eq!(code, 200, "{answer}");
            learns_nothing(&answer, &never);
            let (code, answer) = app.as_tenant("team-b", "/v1/machines:create", &body).await;
            learns_nothing(&answer, &never);
            if body["machine"]["metadata"]["uid"] == a_uid.as_str() {
                // A's UID sent in B's namespace: a UID is one machine, and this one is not B's.
                assert_eq!(code, 409, "{answer}");
                assert!(
                    answer["detail"].as_str().unwrap().contains("is taken"),
                    "{answer}"
                );
            } else {
                // B's own machine of the same name: made beside A's, in a container of B's
                // namespace (before, the Engine's name clash told B that A's existed).
                assert_eq!(code, 200, "{answer}");
                assert_eq!(
                    answer["providerID"],
                    format!("docker:///team-b_{name}"),
                    "{answer}"
                );
                learns_nothing(&answer, &[&a_uid]);
            }
        }
        // A's container is untouched; B's stands beside it.
        assert_eq!(app.containers().await.len(), 2);
        let a_after = app
            .engine
            .inspect_container(&a_container, None)
            .await
            .unwrap();
        assert_eq!(a_after.id.as_deref(), Some(id.as_str()));
        let mut b_own = other_uid.clone();
        b_own["machine"]["metadata"]["namespace"] = json!("team-b");
        let (code, b_status) = app.as_tenant("team-b", "/v1/machines:status", &b_own).await;
        assert_eq!(code, 200, "{b_status}");
        learns_nothing(&b_status, &never);
        let (code, _) = app.as_tenant("team-b", "/v1/machines:delete", &b_own).await;
        assert_eq!(code, 200);
        assert_eq!(app.containers().await.len(), 1);
        let list = serde_json::to_value(ListMachinesRequest {
            machine_class: class.clone(),
            secret: Secret::default(),
        })
        .unwrap();
        let (code, b_list) = app.as_tenant("team-b", "/v1/machines:list", &list).await;
        assert_eq!(code, 200, "{b_list}");
        assert_eq!(b_list["machineList"], json!({}));
        let (_, a_list) = app.as_tenant("team-a", "/v1/machines:list", &list).await;
        assert_eq!(
            a_list["machineList"][made["providerID"].as_str().unwrap()],
            name.as_str()
        );
        let (code, status) = app.as_tenant("team-a", "/v1/machines:status", &a_req).await;
        assert_eq!(code, 200, "{status}");
        let (code, _) = app.as_tenant("team-a", "/v1/machines:delete", &a_req).await;
        assert_eq!(code, 200);
        assert!(app.containers().await.is_empty());
    }

    #[tokio::test]
    async fn a_namespace_has_at_most_the_quota_of_containers() {
        let Some(app) = spawn_app("quota", &[("BERTH_QUOTA_MACHINES", "1")]).await else {
            return;
        };
        let class = app.class(json!({}));
        let mut first = serde_json::to_value(app.req(0, &class, None)).unwrap();
        first["machine"]["metadata"]["namespace"] = json!("team-q");
        let (code, answer) = app.as_tenant("team-q", "/v1/machines:create", &first).await;
        assert_eq!(code, 200, "{answer}");
        let (code, answer) = app.as_tenant("team-q", "/v1/machines:create", &first).await;
        assert_eq!(
            code, 200,
            "creating it again is not a new machine: {answer}"
        );
        let mut second = serde_json::to_value(app.req(1, &class, None)).unwrap();
        second["machine"]["metadata"]["namespace"] = json!("team-q");
        let (code, answer) = app
            .as_tenant("team-q", "/v1/machines:create", &second)
            .await;
        assert_eq!(code, 429, "{answer}");
        let detail = answer["detail"].as_str().unwrap();
        assert!(
            detail.contains("BERTH_QUOTA_MACHINES") && detail.contains("\"team-q\""),
            "{detail}"
        );
        assert!(
            detail.contains("has 1 machine(s) and the limit is 1"),
            "{detail}"
        );
        // A malformed request at the quota is told what is wrong with it, not to delete a machine
        // (a break-it finding).
        let mut malformed = second.clone();
        malformed["machineClass"]["providerSpec"]["labels"] = json!({"Berth.IO/machine": "x"});
        let (code, answer) = app
            .as_tenant("team-q", "/v1/machines:create", &malformed)
            .await;
        assert_eq!(code, 400, "{answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains("labels"),
            "{answer}"
        );
        assert_eq!(app.containers().await.len(), 1);
    }
}
