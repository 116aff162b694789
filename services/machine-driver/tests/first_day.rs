//! Issue 14, the machine side of a first day with Berth, against the ECS emulator over real HTTP:
//!
//! - 1: a machine created again after its VM was released (the examples reuse one UID) gets a VM
//!   that exists, through the next ClientToken of its series, and retries stay idempotent;
//! - 4: an emulator with a state directory keeps instances and its access key across a restart,
//!   and a secret still holding the examples' placeholder key is refused naming the placeholder;
//! - 14: GetMachineStatus answers Uninitialized (17) for a VM that exists but is not initialised,
//!   carrying the providerID and nodeName MCM reads, and MCM's "17 → InitializeMachine" path
//!   brings such a VM up.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use client::machines::Client;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use ecs_emulator::{AccessKey, Emulator, Lifecycle, stored_access_key};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

const KEY_ID: &str = "first-day-key";
const KEY_SECRET: &str = "first-day-secret-4f3e2d";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--first";
const ROLE_TAG: &str = "kubernetes.io/role/worker/shoot--first";
/// The examples' UID: every `machine create -f examples/machine.yaml` sends it.
const EXAMPLE_UID: &str = "6a0c5d4e-0b7e-4d7c-9a55-2f3c8c1e9b01";

/// An emulator served on port 0 and a driver pointed at it.
struct App {
    emulator: Emulator,
    driver: TestServer,
    machines: Client,
    _emulator_server: TestServer,
}

async fn driver_for(emulator_url: &str) -> TestServer {
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_ALICLOUD_ENDPOINT", emulator_url);
    let mut config = machine_driver::Config::from_env(&env).unwrap();
    config.ecs.retry = alicloud::RetryPolicy {
        max_attempts: 5,
        base_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
    };
    let providers = machine_driver::providers(&config).unwrap();
    spawn(machine_driver::router(&config, providers)).await
}

async fn serve(emulator: Emulator) -> App {
    let emulator_server = spawn(emulator.router()).await;
    let driver = driver_for(&emulator_server.url).await;
    let machines = Client::new(ServiceClient::new(&driver.url, ClientOptions::default()));
    App {
        emulator,
        driver,
        machines,
        _emulator_server: emulator_server,
    }
}

/// An in-memory emulator accepting [`KEY_ID`], every transition immediate.
async fn spawn_app() -> App {
    serve(Emulator::new(ecs_emulator::Config::for_tests(
        KEY_ID, KEY_SECRET,
    )))
    .await
}

impl App {
    /// A raw POST: status and body, as an MCM adapter reads them.
    async fn raw(&self, path: &str, body: &impl serde::Serialize) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", self.driver.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    fn instance(&self, id: &str) -> Option<Value> {
        self.emulator.snapshot()["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["InstanceId"] == id)
            .cloned()
    }

    fn instances_named(&self, name: &str) -> usize {
        self.emulator.snapshot()["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["InstanceName"] == name)
            .count()
    }

    fn calls(&self, action: &str) -> u64 {
        self.emulator
            .stats()
            .calls
            .get(action)
            .copied()
            .unwrap_or(0)
    }
}

fn class() -> MachineClass {
    let mut c = MachineClass {
        provider: "Alicloud".into(),
        provider_spec: json!({
            "imageID": "m-image-1",
            "instanceType": "ecs.g6.large",
            "region": "cn-shanghai",
            "zoneID": "cn-shanghai-b",
            "securityGroupID": "sg-1",
            "vSwitchID": "vsw-1",
            "keyPairName": "kp-1",
            "tags": {CLUSTER_TAG: "1", ROLE_TAG: "1"}
        }),
        ..MachineClass::default()
    };
    c.metadata.name = "first-class".into();
    c
}

fn secret_for(id: &str, key_secret: &str) -> Secret {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut s = Secret::default();
    s.data.insert("alicloudAccessKeyID".into(), b64(id));
    s.data
        .insert("alicloudAccessKeySecret".into(), b64(key_secret));
    s
}

fn req_with(name: &str, uid: &str, secret: Secret) -> MachineRequest {
    let mut m = Machine::default();
    m.metadata.name = name.into();
    m.metadata.namespace = "shoot--first".into();
    m.metadata.uid = uid.into();
    m.spec.class.kind = "MachineClass".into();
    m.spec.class.name = "first-class".into();
    MachineRequest {
        machine: m,
        machine_class: class(),
        secret,
    }
}

fn req(name: &str) -> MachineRequest {
    req_with(name, &format!("uid-{name}"), secret_for(KEY_ID, KEY_SECRET))
}

fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit_once('.').unwrap().1
}

fn assert_code(e: &ClientError, code: Code, http: u16) {
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.http_status, Some(http), "{e}");
}

// ---------------------------------------------------------------------------------------------
// 1. A machine "created" that does not exist
// ---------------------------------------------------------------------------------------------

/// The sequence, three times over with one UID: create, delete, create. Each create must
/// answer an instance that exists (status finds it), differs from the released ones, and that a
/// retry of the create adopts rather than duplicates.
#[tokio::test]
async fn a_machine_created_again_after_its_vm_was_released_gets_a_vm_that_exists() {
    let app = spawn_app().await;
    let r = req_with("worker-1", EXAMPLE_UID, secret_for(KEY_ID, KEY_SECRET));
    let mut released: Vec<String> = Vec::new();
    for round in 0..3 {
        let created = app.machines.create(&r).await.unwrap();
        let id = instance_id(&created.provider_id).to_owned();
        assert!(
            created.last_known_state.contains("created"),
            "round {round}: {created:?}"
        );
        assert!(
            !released.contains(&created.provider_id),
            "round {round}: answered the released {id}"
        );
        assert!(
            app.instance(&id).is_some(),
            "round {round}: {id} does not exist"
        );
        let status = app.machines.status(&r).await.unwrap();
        assert_eq!(status.provider_id, created.provider_id, "round {round}");
        let again = app.machines.create(&r).await.unwrap();
        assert_eq!(again.provider_id, created.provider_id, "round {round}");
        assert_eq!(app.instances_named("worker-1"), 1, "round {round}");

        let mut delete = r.clone();
        delete.machine.spec.provider_id = created.provider_id.clone();
        app.machines.delete(&delete).await.unwrap();
        assert!(app.instance(&id).is_none());
        released.push(created.provider_id);
    }
    // Round n walks the n-1 released tokens before the one that makes its VM, but the driver
    // remembers the tokens it saw released, so it does not send each of them to ECS again: five
    // RunInstances in all, where walking every released token each time took six.
    assert_eq!(app.calls("RunInstances"), 1 + 2 + 2);
}

/// Creates racing after a release walk the same series, so they all land on one new instance.
#[tokio::test]
async fn concurrent_creates_after_a_release_make_one_vm() {
    let app = spawn_app().await;
    let r = req("m-again");
    let first = app.machines.create(&r).await.unwrap();
    let mut delete = r.clone();
    delete.machine.spec.provider_id = first.provider_id.clone();
    app.machines.delete(&delete).await.unwrap();

    let answers = futures::future::join_all((0..6).map(|_| app.machines.create(&r))).await;
    let ids: std::collections::BTreeSet<String> = answers
        .into_iter()
        .map(|a| a.unwrap().provider_id)
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids.into_iter().next().unwrap();
    assert_ne!(id, first.provider_id);
    assert!(app.instance(instance_id(&id)).is_some());
    assert_eq!(app.instances_named("m-again"), 1);
}

// ---------------------------------------------------------------------------------------------
// 4. Machines vanish on restart; the examples' placeholder key
// ---------------------------------------------------------------------------------------------

/// A unique empty directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path =
            std::env::temp_dir().join(format!("berth-{label}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What `berth up` does with its data dir: the emulator's key and account kept there.
fn kept_emulator(dir: &Path) -> (Emulator, AccessKey) {
    let key = stored_access_key(dir).unwrap();
    let emulator = Emulator::open(
        ecs_emulator::Config {
            access_keys: vec![key.clone()],
            ..ecs_emulator::Config::default()
        }
        .with_lifecycle(Lifecycle::instant())
        .with_state_dir(dir),
    )
    .unwrap();
    (emulator, key)
}

#[tokio::test]
async fn machines_and_the_key_survive_an_emulator_restart() {
    let dir = TempDir::new("emulator-restart");
    let (emulator, key) = kept_emulator(dir.path());
    let app = serve(emulator).await;
    let r = req_with("m-kept", "uid-kept", secret_for(&key.id, &key.secret));
    let created = app.machines.create(&r).await.unwrap();
    let listed = app
        .machines
        .list(&domain::machine::ListMachinesRequest {
            machine_class: class(),
            secret: r.secret.clone(),
        })
        .await
        .unwrap()
        .machine_list;
    drop(app);

    // The same secret works against the restarted emulator, which still has the machine.
    let (emulator, key_again) = kept_emulator(dir.path());
    assert_eq!(key_again, key);
    let app = serve(emulator).await;
    let list = app
        .machines
        .list(&domain::machine::ListMachinesRequest {
            machine_class: class(),
            secret: r.secret.clone(),
        })
        .await
        .unwrap()
        .machine_list;
    assert_eq!(list, listed);
    assert_eq!(
        list.get(&created.provider_id).map(String::as_str),
        Some("m-kept")
    );
    let status = app.machines.status(&r).await.unwrap();
    assert_eq!(status.provider_id, created.provider_id);
    assert_eq!(status.node_name, created.node_name);
    // And it is the same VM to create: adopted, not made again.
    let again = app.machines.create(&r).await.unwrap();
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(app.calls("RunInstances"), 0);
}

/// `examples/machine-request.json` as shipped: its secret holds the placeholders.
fn example_request() -> Value {
    serde_json::from_str(include_str!("../../../examples/machine-request.json")).unwrap()
}

#[tokio::test]
async fn the_examples_placeholder_key_is_refused_naming_it_before_any_ecs_call() {
    let app = spawn_app().await;
    let example = example_request();
    for path in ["/v1/machines:create", "/v1/machines:status"] {
        let (status, body) = app.raw(path, &example).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["code"], 3, "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("EMULATOR_ACCESS_KEY_ID"), "{detail}");
        assert!(detail.contains("placeholder"), "{detail}");
        assert!(detail.contains("berth up"), "how to fill it: {detail}");
        assert!(
            body["machineCodesError"]
                .as_str()
                .unwrap()
                .starts_with("machine codes error: code = [InvalidArgument] message = ["),
            "{body}"
        );
    }
    // Only the secret's placeholder: a real id with the placeholder secret names that one.
    let mut half = example.clone();
    half["secret"]["stringData"]["alicloudAccessKeyID"] = json!(KEY_ID);
    let (status, body) = app
        .raw(
            "/v1/machines:list",
            &json!({
                "machineClass": half["machineClass"],
                "secret": half["secret"],
            }),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("EMULATOR_ACCESS_KEY_SECRET"), "{detail}");
    assert!(!detail.contains(KEY_ID), "{detail}");
    let stats = app.emulator.stats();
    assert_eq!((stats.total_calls(), stats.rejected), (0, 0), "{stats:?}");
}

/// A key ECS does not know (the emulator restarted without keeping its key, say) is the cloud's
/// refusal of the secret's key, and the answer says so rather than reading like a Berth login.
#[tokio::test]
async fn a_key_the_cloud_refuses_is_named_as_the_secrets_cloud_key() {
    let app = spawn_app().await;
    let r = req_with(
        "m-nokey",
        "uid-nokey",
        secret_for("LTAIforgotten", "forgotten-secret"),
    );
    let e = app.machines.create(&r).await.unwrap_err();
    assert_code(&e, Code::Unauthenticated, 401);
    let message = &e.status.message;
    assert!(message.contains("InvalidAccessKeyId.NotFound"), "{message}");
    assert!(message.contains("alicloudAccessKeyID"), "{message}");
    assert!(message.contains("not a Berth credential"), "{message}");
    assert!(!message.contains("forgotten-secret"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// 14. GetMachineStatus says Uninitialized (17); MCM's path to InitializeMachine
// ---------------------------------------------------------------------------------------------

/// What one pass of MCM's `triggerCreationFlow` did.
#[derive(Debug, PartialEq)]
enum Pass {
    /// GetMachineStatus was OK: "Adopting existing machine".
    Adopted(Value),
    /// Code 17: providerID/nodeName taken from the answer, then InitializeMachine said OK.
    Initialized,
    /// Code 17, then InitializeMachine failed with this code (MCM: Failed, ShortRetry).
    InitializeFailed(u64),
}

/// One pass of MCM's creation flow (machine.go `triggerCreationFlow`), over REST: GetMachineStatus
/// first; on Uninitialized the providerID and nodeName come from the answer that carries the code
/// (MCM fails the pass with "nodeName or providerID is empty after creation flow" otherwise), are
/// written to the machine (`updateLabels`), and InitializeMachine is called.
async fn mcm_creation_pass(app: &App, r: &mut MachineRequest) -> Pass {
    let (status, body) = app.raw("/v1/machines:status", r).await;
    if status == 200 {
        return Pass::Adopted(body);
    }
    assert_eq!(
        body["code"], 17,
        "only OK or Uninitialized expected: {body}"
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["machineCodesError"]
            .as_str()
            .unwrap()
            .starts_with("machine codes error: code = [Uninitialized] message = ["),
        "{body}"
    );
    let provider_id = body["providerID"].as_str().unwrap_or_default();
    let node_name = body["nodeName"].as_str().unwrap_or_default();
    assert!(
        !provider_id.is_empty() && !node_name.is_empty(),
        "nodeName ({node_name:?}) or providerID ({provider_id:?}) is empty after creation flow: {body}"
    );
    r.machine.spec.provider_id = provider_id.to_owned();
    r.machine
        .metadata
        .labels
        .insert("node".into(), node_name.to_owned());
    let (status, body) = app.raw("/v1/machines:initialize", r).await;
    if status == 200 {
        assert_eq!(body["providerID"], provider_id, "{body}");
        Pass::Initialized
    } else {
        Pass::InitializeFailed(body["code"].as_u64().unwrap())
    }
}

#[tokio::test]
async fn status_is_uninitialized_for_a_vm_that_is_not_running_and_carries_what_mcm_reads() {
    let app = spawn_app().await;
    let created = app.machines.create(&req("m-17")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    let ok = app.machines.status(&req("m-17")).await.unwrap();
    let initialized = ok.conditions.iter().find(|c| c.kind == "Initialized");
    assert_eq!(
        initialized.map(|c| c.status.as_str()),
        Some("True"),
        "{ok:?}"
    );

    for ecs_status in ["Pending", "Starting", "Stopping", "Stopped"] {
        app.emulator.pin_status(&id, ecs_status).unwrap();
        let (status, body) = app.raw("/v1/machines:status", &req("m-17")).await;
        assert_eq!(status, 409, "{ecs_status}: {body}");
        assert_eq!(body["code"], 17);
        assert_eq!(body["title"], "Uninitialized");
        assert_eq!(body["providerID"], created.provider_id.as_str());
        assert_eq!(body["nodeName"], created.node_name.as_str());
        assert!(body["addresses"].as_array().is_some_and(|a| !a.is_empty()));
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains(&id) && detail.contains(ecs_status),
            "{detail}"
        );
        // The typed client reads the code, as MCM's status.FromError does.
        let e = app.machines.status(&req("m-17")).await.unwrap_err();
        assert_code(&e, Code::Uninitialized, 409);
    }
}

/// MCM restarts and finds its machine's VM Stopped: GetMachineStatus answers 17 with the VM's ids,
/// InitializeMachine starts it, and a later pass adopts it Running. Before the fix the first pass
/// adopted the stopped VM and InitializeMachine never ran.
#[tokio::test]
async fn mcm_initializes_a_stopped_vm_through_the_uninitialized_path() {
    let app = spawn_app().await;
    let created = app.machines.create(&req("m-stopped")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    app.emulator.pin_status(&id, "Stopped").unwrap();
    app.emulator.unpin(&id).unwrap();

    // The Machine as MCM holds it before the flow: no providerID yet.
    let mut machine = req("m-stopped");
    let first = mcm_creation_pass(&app, &mut machine).await;
    assert_ne!(
        std::mem::discriminant(&first),
        std::mem::discriminant(&Pass::Adopted(Value::Null)),
        "a stopped VM was adopted as it is: {first:?}"
    );
    assert_eq!(machine.machine.spec.provider_id, created.provider_id);
    assert_eq!(
        app.calls("StartInstance"),
        1,
        "InitializeMachine started it"
    );

    let mut passes = vec![first];
    let adopted = loop {
        assert!(passes.len() < 10, "never adopted: {passes:?}");
        match mcm_creation_pass(&app, &mut machine).await {
            Pass::Adopted(body) => break body,
            // MCM retries InitializeMachine's 17 on the next pass (ShortRetry).
            other @ (Pass::Initialized | Pass::InitializeFailed(17)) => passes.push(other),
            other => panic!("{other:?} after {passes:?}"),
        }
    };
    assert_eq!(adopted["providerID"], created.provider_id.as_str());
    assert_eq!(
        app.instance(&id).unwrap()["Status"],
        "Running",
        "{passes:?}"
    );
    assert_eq!(app.calls("StartInstance"), 1);
    assert_eq!(app.instances_named("m-stopped"), 1);
}

/// The OpenAPI document tells an MCM adapter where to find the VM in a 17.
#[tokio::test]
async fn the_openapi_document_says_what_a_17_carries() {
    let app = spawn_app().await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", app.driver.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let conflict = &doc["paths"]["/v1/machines:status"]["post"]["responses"]["409"];
    assert!(
        conflict["description"]
            .as_str()
            .unwrap()
            .contains("not initialised yet (code 17"),
        "{conflict}"
    );
    let schema = conflict["content"]["application/problem+json"]["schema"]["$ref"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    let extra = &doc["components"]["schemas"][schema]["allOf"][1]["properties"];
    for field in ["providerID", "nodeName", "addresses", "conditions"] {
        assert!(extra[field].is_object(), "{field} in {extra}");
    }
}

/// Issue 32, point 9: with the emulator as its endpoint the driver takes any well-formed region, and
/// the emulator refuses one ECS does not have, as ECS does; the driver tells it as the caller's
/// mistake (400), not a missing machine, and no VM is made.
#[tokio::test]
async fn a_misspelt_region_makes_no_machine() {
    let app = spawn_app().await;
    let mut r = req("m-region");
    r.machine_class.provider_spec["region"] = json!("cn-shanghia");
    r.machine_class.provider_spec["zoneID"] = json!("cn-shanghia-b");
    let e = app.machines.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.contains("InvalidRegionId.NotFound"), "{e}");
    assert!(
        e.status
            .message
            .starts_with("machineClass.providerSpec.region: "),
        "the field is named: {e}"
    );
    assert_eq!(app.instances_named("m-region"), 0);
    let e = app.machines.status(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
}
