//! The machine-driver over real HTTP against the ECS emulator over real HTTP: the scenario
//! suite, MCM's own Alicloud provider scenarios (reference/mcm.md §6), the negative paths of the AWS
//! provider that apply here, 200 concurrent creates under injected faults, and a TRACE-level log
//! capture that must never show a secret.
//!
//! Each test spawns its own emulator (instant lifecycle) and its own driver on port 0, so tests run
//! in parallel without sharing state. Backoffs are a few milliseconds, so retries cost little.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alicloud::{Credentials, Ecs, EcsConfig, RetryPolicy, RunInstances, Tag, deadline_in};
use base64::Engine as _;
use client::machines::Client;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::{
    CsiVolumeSource, FlexVolumeSource, ListMachinesRequest, Machine, MachineClass, MachineRequest,
    PersistentVolumeSpec, Secret,
};
use ecs_emulator::{Emulator, Faults, Seed};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, eventually, spawn};

const KEY_ID: &str = "test-key-id";
const KEY_SECRET: &str = "ak-secret-9f8e7d6c5b4a";
const USER_DATA: &str = "#!/bin/sh\necho bootstrap-token-7q3z9x.userdata-secret-value\n";
const REGION: &str = "cn-shanghai";
const ZONE: &str = "cn-shanghai-b";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--test";
const ROLE_TAG: &str = "kubernetes.io/role/worker/shoot--test";
const EXTRA_CSI: &str = "disk.csi.example.com";

struct App {
    emulator: Emulator,
    emulator_url: String,
    driver: TestServer,
    machines: Client,
    _emulator_server: TestServer,
}

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(50),
    }
}

/// An emulator accepting [`KEY_ID`] and a driver pointed at it, both on 127.0.0.1:0.
async fn spawn_app() -> App {
    spawn_app_with(|_| {}).await
}

async fn spawn_app_with(tune: impl FnOnce(&mut machine_driver::Config)) -> App {
    let emulator = Emulator::new(ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET));
    let emulator_server = spawn(emulator.router()).await;
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_ALICLOUD_ENDPOINT", emulator_server.url.clone())
        .with("BERTH_ALICLOUD_CSI_DRIVERS", EXTRA_CSI);
    let mut config = machine_driver::Config::from_env(&env).unwrap();
    config.ecs.retry = retry(10);
    tune(&mut config);
    let providers = machine_driver::providers(&config).unwrap();
    let driver = spawn(machine_driver::router(&config, providers)).await;
    let machines = Client::new(ServiceClient::new(&driver.url, ClientOptions::default()));
    App {
        emulator,
        emulator_url: emulator_server.url.clone(),
        driver,
        machines,
        _emulator_server: emulator_server,
    }
}

fn provider_spec() -> Value {
    json!({
        "apiVersion": "mcm.gardener.cloud/v1alpha1",
        "imageID": "m-image-1",
        "instanceType": "ecs.g6.large",
        "region": REGION,
        "zoneID": ZONE,
        "securityGroupID": "sg-1",
        "vSwitchID": "vsw-1",
        "systemDisk": {"category": "cloud_efficiency", "size": 50},
        "dataDisks": [
            {"name": "d1", "category": "cloud_efficiency", "size": 100, "description": "shoot--test-datavol-d1"},
            {"name": "keep", "category": "cloud_essd", "size": 40, "deleteWithInstance": false}
        ],
        "instanceChargeType": "PostPaid",
        "internetChargeType": "PayByTraffic",
        "internetMaxBandwidthIn": 5,
        "internetMaxBandwidthOut": 5,
        "spotStrategy": "NoSpot",
        "IoOptimized": "optimized",
        "keyPairName": "kp-1",
        "tags": {CLUSTER_TAG: "1", ROLE_TAG: "1", "pool": "a"}
    })
}

fn class_with(spec: Value) -> MachineClass {
    let mut c = MachineClass {
        provider: "Alicloud".into(),
        provider_spec: spec,
        ..MachineClass::default()
    };
    c.metadata.name = "shoot--test-pool-a-z1".into();
    c.metadata.namespace = "shoot--test".into();
    c
}

fn class() -> MachineClass {
    class_with(provider_spec())
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The merged secret MCM sends: only `data`, base64.
fn secret() -> Secret {
    let mut s = Secret::default();
    s.data.insert("alicloudAccessKeyID".into(), b64(KEY_ID));
    s.data.insert(
        "alicloudAccessKeySecret".into(),
        b64(&format!("{KEY_SECRET}\n")),
    );
    s.data.insert("userData".into(), b64(USER_DATA));
    s
}

fn machine(name: &str) -> Machine {
    let mut m = Machine::default();
    m.metadata.name = name.into();
    m.metadata.namespace = "shoot--test".into();
    m.metadata.uid = format!("uid-{name}");
    m.spec.class.kind = "MachineClass".into();
    m.spec.class.name = "shoot--test-pool-a-z1".into();
    m
}

fn req(name: &str) -> MachineRequest {
    MachineRequest {
        machine: machine(name),
        machine_class: class(),
        secret: secret(),
    }
}

fn with_provider_id(mut r: MachineRequest, provider_id: &str) -> MachineRequest {
    r.machine.spec.provider_id = provider_id.into();
    r
}

fn list_req() -> ListMachinesRequest {
    ListMachinesRequest {
        machine_class: class(),
        secret: secret(),
    }
}

impl App {
    async fn create(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::CreateMachineResponse, ClientError> {
        self.machines.create(r).await
    }

    async fn status(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::GetMachineStatusResponse, ClientError> {
        self.machines.status(r).await
    }

    async fn delete(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::DeleteMachineResponse, ClientError> {
        self.machines.delete(r).await
    }

    async fn initialize(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::InitializeMachineResponse, ClientError> {
        self.machines.initialize(r).await
    }

    async fn list(&self) -> Result<BTreeMap<String, String>, ClientError> {
        Ok(self.machines.list(&list_req()).await?.machine_list)
    }

    /// A raw POST, for what the typed client does not show (machineCodesError, headers).
    async fn raw(&self, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", self.driver.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.json().await.unwrap_or(Value::Null))
    }

    fn state(&self) -> Value {
        self.emulator.snapshot()
    }

    fn instances_named(&self, name: &str) -> Vec<Value> {
        self.state()["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["InstanceName"] == name)
            .cloned()
            .collect()
    }

    fn calls(&self, action: &str) -> u64 {
        self.emulator
            .stats()
            .calls
            .get(action)
            .copied()
            .unwrap_or(0)
    }

    /// An ECS client of the emulator, for arranging what the driver must then find.
    fn ecs(&self) -> alicloud::EcsClient {
        Ecs::new(EcsConfig {
            endpoint: Some(self.emulator_url.clone()),
            retry: retry(10),
            ..EcsConfig::default()
        })
        .unwrap()
        .client(
            &alicloud::Region::parse(REGION).unwrap(),
            Credentials::new(KEY_ID, KEY_SECRET),
        )
    }

    /// Creates an instance named `name` with these tags behind the driver's back.
    async fn run_directly(&self, name: &str, tags: &[(&str, &str)]) -> String {
        let run = RunInstances {
            image_id: "m-image-1".into(),
            instance_type: "ecs.g6.large".into(),
            zone_id: Some(ZONE.into()),
            instance_name: Some(name.into()),
            tags: tags.iter().map(|(k, v)| Tag::new(*k, *v)).collect(),
            ..RunInstances::default()
        };
        self.ecs()
            .run_instances(&run, deadline_in(Duration::from_secs(10)))
            .await
            .unwrap()
            .instance_ids[0]
            .clone()
    }
}

fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit_once('.').unwrap().1
}

fn assert_code(e: &ClientError, code: Code, http: u16) {
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.http_status, Some(http), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The service itself
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn standard_routes_answer() {
    let config =
        machine_driver::Config::from_env(&Env::default().with("BERTH_LISTEN", "127.0.0.1:0"))
            .unwrap();
    let app = machine_driver::build(config).await.unwrap();
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    let c = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = c.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc: Value = c
        .get(format!("{url}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth machine-driver");
    for path in [
        "/v1/machines:create",
        "/v1/machines:initialize",
        "/v1/machines:delete",
        "/v1/machines:status",
        "/v1/machines:list",
        "/v1/volume-ids",
    ] {
        assert!(doc["paths"][path]["post"].is_object(), "{path} in OpenAPI");
    }
    assert!(doc["paths"]["/v1/providers"]["get"].is_object());
}

#[tokio::test]
async fn providers_are_listed() {
    let app = spawn_app().await;
    let list = app.machines.providers().await.unwrap();
    let names: Vec<&str> = list.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["Alicloud", "Docker"]);
    assert!(list.providers[0].description.contains("ECS"));
    assert!(list.providers[1].description.contains("container"));
    // Driver calls are measured by method, provider and machine code.
    app.machines.volume_ids(&[]).await.unwrap();
    app.status(&req("m-metrics")).await.unwrap_err();
    let metrics = reqwest::get(format!("{}/metrics", app.driver.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "berth_driver_requests_total{method=\"GetVolumeIDs\",provider=\"*\",code=\"OK\"}",
        "berth_driver_requests_total{method=\"GetMachineStatus\",provider=\"Alicloud\",code=\"NotFound\"}",
        "berth_driver_request_duration_seconds",
    ] {
        assert!(metrics.contains(want), "{want} not in /metrics");
    }
}

#[tokio::test]
async fn wrong_provider_is_invalid_argument_naming_the_providers() {
    let app = spawn_app().await;
    let mut r = req("m-wrong");
    r.machine_class.provider = "AWS".into();
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "machineClass.provider: requested for Provider 'AWS', we only support 'Alicloud', 'Docker'"
    );
    for path in [
        "/v1/machines:create",
        "/v1/machines:initialize",
        "/v1/machines:delete",
        "/v1/machines:status",
    ] {
        let (status, _, body) = app.raw(path, &serde_json::to_value(&r).unwrap()).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(body["code"], 3);
        assert_eq!(
            body["machineCodesError"],
            "machine codes error: code = [InvalidArgument] message = [machineClass.provider: requested for Provider 'AWS', we only support 'Alicloud', 'Docker']"
        );
    }
    let mut l = list_req();
    l.machine_class.provider = String::new();
    let e = app.machines.list(&l).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(app.emulator.stats().total_calls(), 0);
}

#[tokio::test]
async fn malformed_bodies_answer_400_with_machine_codes_error() {
    let app = spawn_app().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/machines:create", app.driver.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], 3);
    assert!(
        body["machineCodesError"]
            .as_str()
            .unwrap()
            .starts_with("machine codes error: code = [InvalidArgument] message = [body:"),
        "{body}"
    );
    let (status, _, body) = app
        .raw(
            "/v1/machines:status",
            &json!({"machine": {"metadata": {"name": 5}}}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["detail"].as_str().unwrap().contains("machine"),
        "{body}"
    );
}

// ---------------------------------------------------------------------------------------------
// Validation: spec fields and secret keys (AWS provider's negative paths that apply here)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn bad_spec_fields_are_invalid_argument_naming_the_field() {
    let app = spawn_app().await;
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("imageID");
            }),
            "machineClass.providerSpec.imageID: ImageID is required",
        ),
        (
            Box::new(|s| s["region"] = json!("")),
            "machineClass.providerSpec.region: Region is required",
        ),
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("vSwitchID");
            }),
            "machineClass.providerSpec.vSwitchID: VSwitchID is required",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["size"] = json!(10)),
            "machineClass.providerSpec.dataDisks[0].size: Invalid value: 10: must be between 20 and 32768, inclusive",
        ),
        (
            Box::new(|s| s["dataDisks"][1]["name"] = json!("d1")),
            "Data Disk Name 'd1' duplicated 2 times, Name must be unique",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["name"] = json!("9lives")),
            "machineClass.providerSpec.dataDisks[0].name: Disk name given: 9lives does not match the expected pattern",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["size"] = json!("big")),
            "machineClass.providerSpec.dataDisks[0].size: invalid type: string, expected",
        ),
        (
            Box::new(|s| s["tags"] = json!({CLUSTER_TAG: "1"})),
            "machineClass.providerSpec.tags: Tag required of the form kubernetes.io/role/****",
        ),
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("tags");
            }),
            "machineClass.providerSpec.tags: Tags required for Alicloud machines",
        ),
        (
            Box::new(|s| s["IoOptimized"] = json!("maybe")),
            "machineClass.providerSpec.IoOptimized: Unsupported value: \"maybe\"",
        ),
        (
            Box::new(|s| *s = json!(["not", "an", "object"])),
            "machineClass.providerSpec: must be a JSON object",
        ),
    ];
    for (i, (mutate, want)) in cases.iter().enumerate() {
        let mut spec = provider_spec();
        mutate(&mut spec);
        let mut r = req(&format!("m-bad-{i}"));
        r.machine_class = class_with(spec);
        let e = app.create(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status.message.contains(want),
            "{want:?} not in {:?}",
            e.status.message
        );
    }
    // A bad machine name is refused before anything is asked of ECS, too.
    let mut r = req("m");
    r.machine.metadata.name = "*".into();
    let e = app.delete(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.starts_with("machine.metadata.name:"));
    assert_eq!(app.emulator.stats().total_calls(), 0, "nothing reached ECS");
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn missing_secret_keys_are_invalid_argument_naming_the_key_never_the_value() {
    let app = spawn_app().await;
    let mut r = req("m-secret");
    r.secret.data.remove("alicloudAccessKeySecret");
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "secret.data[alicloudAccessKeySecret]: is required (or its fallback accessKeySecret)"
    );
    let mut r = req("m-secret");
    r.secret.data.remove("alicloudAccessKeyID");
    let e = app.status(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.contains("alicloudAccessKeyID"));
    assert!(!e.status.message.contains(KEY_SECRET));
    let mut r = req("m-secret");
    r.secret
        .data
        .insert("alicloudAccessKeyID".into(), "%%%".into());
    let e = app
        .list()
        .await
        .map(|_| ())
        .and(app.create(&r).await.map(|_| ()));
    let e = e.unwrap_err();
    assert_eq!(
        e.status.message,
        "secret.data[alicloudAccessKeyID]: is not valid base64"
    );
    assert_eq!(app.emulator.instance_count(), 0);

    // The fallback keys and stringData work; a missing userData means none.
    let mut r = req("m-fallback");
    r.secret = Secret::from_string_data([("accessKeyID", KEY_ID), ("accessKeySecret", KEY_SECRET)]);
    app.create(&r).await.unwrap();
    let i = &app.instances_named("m-fallback")[0];
    assert_eq!(i["UserDataBytes"], 0);
}

// ---------------------------------------------------------------------------------------------
// CreateMachine (MCM alicloud: "should create machine successfully"; spi request building)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_machine_successfully_builds_the_request_as_mcm_does() {
    let app = spawn_app().await;
    let resp = app.create(&req("m-create")).await.unwrap();
    let id = instance_id(&resp.provider_id).to_owned();
    assert!(id.starts_with("i-"), "{id}");
    assert_eq!(resp.provider_id, format!("{REGION}.{id}"));
    assert_eq!(resp.node_name, format!("iz{}z", &id[2..]));
    assert_eq!(
        resp.last_known_state,
        format!("ECS instance {id} created for machine m-create")
    );
    assert!(resp.addresses.iter().any(|a| a.kind == "InternalIP"));
    assert!(
        resp.addresses
            .iter()
            .any(|a| a.kind == "Hostname" && a.address == resp.node_name)
    );

    let state = app.state();
    let i = &app.instances_named("m-create")[0];
    assert_eq!(i["InstanceId"], id.as_str());
    assert_eq!(i["ImageId"], "m-image-1");
    assert_eq!(i["InstanceType"], "ecs.g6.large");
    assert_eq!(i["ZoneId"], ZONE);
    assert_eq!(i["KeyPairName"], "kp-1");
    assert_eq!(i["InternetMaxBandwidthOut"], 5);
    assert_eq!(i["VpcAttributes"]["VSwitchId"], "vsw-1");
    assert_eq!(i["UserDataBytes"], USER_DATA.len());
    let tags: BTreeMap<String, String> = i["Tags"]["Tag"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["TagKey"].as_str().unwrap().to_owned(),
                t["TagValue"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(tags[CLUSTER_TAG], "1");
    assert_eq!(tags[ROLE_TAG], "1");
    assert_eq!(tags["pool"], "a");
    assert_eq!(tags["berth.io/machine"], "m-create");
    let disks: Vec<&Value> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["InstanceId"] == id.as_str())
        .collect();
    assert_eq!(disks.len(), 3, "system disk and two data disks");
    let system = disks.iter().find(|d| d["Type"] == "system").unwrap();
    assert_eq!(system["Category"], "cloud_efficiency");
    assert_eq!(system["Size"], 50);
    let d1 = disks
        .iter()
        .find(|d| d["DiskName"] == "m-create-d1-data-disk")
        .unwrap();
    assert_eq!(d1["DeleteWithInstance"], true, "default true");
    assert_eq!(d1["Size"], 100);
    assert_eq!(d1["Description"], "shoot--test-datavol-d1");
    let keep = disks
        .iter()
        .find(|d| d["DiskName"] == "m-create-keep-data-disk")
        .unwrap();
    assert_eq!(keep["DeleteWithInstance"], false, "explicit false");
    assert_eq!(keep["Category"], "cloud_essd");
}

#[tokio::test]
async fn create_twice_makes_one_instance() {
    let app = spawn_app().await;
    let first = app.create(&req("m-twice")).await.unwrap();
    let second = app.create(&req("m-twice")).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(first.node_name, second.node_name);
    assert!(second.last_known_state.contains("adopted"), "{second:?}");
    // Adoption by providerID works as well.
    let third = app
        .create(&with_provider_id(req("m-twice"), &first.provider_id))
        .await
        .unwrap();
    assert_eq!(third.provider_id, first.provider_id);
    assert_eq!(app.emulator.instance_count(), 1);
    assert_eq!(app.calls("RunInstances"), 1);
}

#[tokio::test]
async fn create_after_a_lost_response_makes_one_instance() {
    let app = spawn_app().await;
    // The caller gives up before the driver answers (the answer is lost), then retries.
    app.emulator
        .set_faults(Faults {
            latency_ms: 300,
            ..Faults::default()
        })
        .unwrap();
    let impatient = Client::new(ServiceClient::new(
        &app.driver.url,
        ClientOptions {
            timeout: Duration::from_millis(150),
            ..ClientOptions::default()
        },
    ));
    let lost = impatient.create(&req("m-lost")).await.unwrap_err();
    assert_eq!(lost.code(), Code::DeadlineExceeded, "{lost}");
    let retried = app.create(&req("m-lost")).await.unwrap();
    // A status call takes longer than any first attempt still in flight.
    let status = app.status(&req("m-lost")).await.unwrap();
    assert_eq!(status.provider_id, retried.provider_id);
    assert_eq!(app.instances_named("m-lost").len(), 1);

    // Concurrent duplicates all miss the name lookup and race to RunInstances: the machine's
    // ClientToken makes ECS answer them all with one instance.
    app.emulator.set_faults(Faults::default()).unwrap();
    let race = req("m-race");
    let answers = futures::future::join_all((0..8).map(|_| app.create(&race))).await;
    let ids: std::collections::BTreeSet<String> = answers
        .into_iter()
        .map(|a| a.unwrap().provider_id)
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(app.instances_named("m-race").len(), 1);
}

#[tokio::test]
async fn recreating_a_released_machine_without_uid_makes_a_new_instance() {
    let app = spawn_app().await;
    let mut r = req("m-again");
    r.machine.metadata.uid.clear();
    let first = app.create(&r).await.unwrap();
    app.delete(&with_provider_id(r.clone(), &first.provider_id))
        .await
        .unwrap();
    assert_eq!(app.emulator.instance_count(), 0);
    // Same namespace/name, so the same first ClientToken, which ECS answers with the released id.
    let second = app.create(&r).await.unwrap();
    assert_ne!(second.provider_id, first.provider_id);
    assert_eq!(app.instances_named("m-again").len(), 1);
    let status = app.status(&r).await.unwrap();
    assert_eq!(status.provider_id, second.provider_id);
    // And a retry of that create still gets the same new instance.
    let third = app.create(&r).await.unwrap();
    assert_eq!(third.provider_id, second.provider_id);
}

#[tokio::test]
async fn no_stock_is_resource_exhausted() {
    let app = spawn_app().await;
    app.emulator
        .set_faults(Faults {
            no_stock_zones: [ZONE.to_string()].into(),
            ..Faults::default()
        })
        .unwrap();
    let (status, headers, body) = app
        .raw(
            "/v1/machines:create",
            &serde_json::to_value(req("m-nostock")).unwrap(),
        )
        .await;
    assert_eq!(status, 429);
    assert_eq!(body["code"], 8);
    assert!(headers.contains_key("retry-after"));
    let mce = body["machineCodesError"].as_str().unwrap();
    assert!(
        mce.starts_with("machine codes error: code = [ResourceExhausted] message = ["),
        "{mce}"
    );
    assert!(mce.contains("OperationDenied.NoStock"), "{mce}");
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn bad_credentials_are_unauthenticated() {
    let app = spawn_app().await;
    let mut r = req("m-creds");
    r.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", "no-such-key"),
        ("alicloudAccessKeySecret", "whatever-secret-1"),
    ]);
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::Unauthenticated, 401);
    assert!(e.status.message.contains("InvalidAccessKeyId"), "{e}");
    assert!(!e.status.message.contains("whatever-secret-1"));
    r.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", "wrong-secret-2"),
    ]);
    let e = app.status(&r).await.unwrap_err();
    assert_code(&e, Code::Unauthenticated, 401);
    assert!(e.status.message.contains("SignatureDoesNotMatch"), "{e}");
    assert!(!e.status.message.contains("wrong-secret-2"));
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn throttling_is_absorbed_by_retries() {
    let app = spawn_app().await;
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.5,
            throttle_time_left_ms: 5,
            server_error_rate: 0.1,
            ..Faults::default()
        })
        .unwrap();
    for n in 0..5 {
        let name = format!("m-throttled-{n}");
        let created = app.create(&req(&name)).await.unwrap();
        let status = app.status(&req(&name)).await.unwrap();
        assert_eq!(status.provider_id, created.provider_id);
    }
    assert_eq!(app.list().await.unwrap().len(), 5);
    for n in 0..5 {
        app.delete(&req(&format!("m-throttled-{n}"))).await.unwrap();
    }
    assert_eq!(app.emulator.instance_count(), 0);
    let stats = app.emulator.stats();
    assert!(stats.throttled > 0, "{stats:?}");
}

// ---------------------------------------------------------------------------------------------
// GetMachineStatus
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn get_machine_status_successfully() {
    let app = spawn_app().await;
    let created = app.create(&req("m-status")).await.unwrap();
    let s = app.status(&req("m-status")).await.unwrap();
    assert_eq!(s.provider_id, created.provider_id);
    assert_eq!(s.node_name, created.node_name);
    assert!(s.addresses.iter().any(|a| a.kind == "InternalIP"));
    // The ECS status, and whether the VM is initialised (first_day.rs covers the `False` side).
    assert_eq!(s.conditions.len(), 2);
    assert_eq!(s.conditions[1].kind, "Initialized");
    assert_eq!(s.conditions[1].status, "True");
    assert_eq!(s.conditions[0].kind, "InstanceStatus");
    assert_eq!(s.conditions[0].reason, "Running");
    assert_eq!(s.conditions[0].status, "True");
    // By providerID first: found even when the name does not match.
    let mut other = with_provider_id(req("m-renamed"), &created.provider_id);
    other.machine.metadata.name = "m-renamed".into();
    let s = app.status(&other).await.unwrap();
    assert_eq!(s.provider_id, created.provider_id);
    // A stale providerID falls back to the name.
    let s = app
        .status(&with_provider_id(req("m-status"), "cn-shanghai.i-gone"))
        .await
        .unwrap();
    assert_eq!(s.provider_id, created.provider_id);
}

#[tokio::test]
async fn status_not_found_and_out_of_range() {
    let app = spawn_app().await;
    let (status, _, body) = app
        .raw(
            "/v1/machines:status",
            &serde_json::to_value(req("m-none")).unwrap(),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], 5);
    assert_eq!(
        body["machineCodesError"],
        "machine codes error: code = [NotFound] message = [VM instance not found backing this machine object \"m-none\"]"
    );
    // A same-named VM of another cluster is not this machine's.
    app.run_directly(
        "m-dup",
        &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
    )
    .await;
    let e = app.status(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    // Two in this cluster are.
    let a = app
        .run_directly("m-dup", &[(CLUSTER_TAG, "1"), (ROLE_TAG, "1")])
        .await;
    let b = app
        .run_directly("m-dup", &[(CLUSTER_TAG, "1"), (ROLE_TAG, "1")])
        .await;
    let e = app.status(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::OutOfRange, 409);
    assert_eq!(
        e.status.message,
        format!(
            "multiple VM instances found backing this machine object. IDs for all backing VMs - [{a} {b}]"
        )
    );
    // Create refuses to pick one.
    let e = app.create(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::OutOfRange, 409);
    assert_eq!(app.emulator.instance_count(), 3);
}

// ---------------------------------------------------------------------------------------------
// DeleteMachine
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn delete_machine_with_provider_id() {
    let app = spawn_app().await;
    let created = app.create(&req("m-del")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    let d = app
        .delete(&with_provider_id(req("m-del"), &created.provider_id))
        .await
        .unwrap();
    assert!(
        d.last_known_state
            .starts_with(&format!("ECS instance(s) [{id}] deleted for machine m-del")),
        "{d:?}"
    );
    assert_eq!(app.emulator.instance_count(), 0);
    assert_eq!(app.emulator.network_interface_count(), 0);
    // Only the disk the spec asked to keep stays, detached.
    let state = app.state();
    let disks = state["disks"].as_array().unwrap();
    assert_eq!(disks.len(), 1, "{disks:?}");
    assert_eq!(disks[0]["DiskName"], "m-del-keep-data-disk");
    assert_eq!(disks[0]["Status"], "Available");
    let e = app.status(&req("m-del")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
}

#[tokio::test]
async fn delete_machine_without_provider_id() {
    let app = spawn_app().await;
    app.create(&req("m-del2")).await.unwrap();
    app.create(&req("m-other")).await.unwrap();
    let d = app.delete(&req("m-del2")).await.unwrap();
    assert!(
        d.last_known_state.contains("deleted for machine m-del2"),
        "{d:?}"
    );
    assert!(app.instances_named("m-del2").is_empty());
    assert_eq!(
        app.instances_named("m-other").len(),
        1,
        "other machines untouched"
    );
}

#[tokio::test]
async fn delete_without_provider_id_releases_every_same_named_instance_across_pages() {
    let app = spawn_app().await;
    let ecs = app.ecs();
    let ids = futures::future::join_all((0..102).map(|n| {
        let ecs = ecs.clone();
        async move {
            let run = RunInstances {
                image_id: "m-image-1".into(),
                instance_type: "ecs.g6.large".into(),
                instance_name: Some("m-many".into()),
                tags: vec![Tag::new(CLUSTER_TAG, "1"), Tag::new(ROLE_TAG, "1")],
                client_token: Some(format!("token-{n}")),
                ..RunInstances::default()
            };
            ecs.run_instances(&run, deadline_in(Duration::from_secs(10)))
                .await
                .unwrap()
        }
    }))
    .await;
    assert_eq!(ids.len(), 102);
    let foreign = app
        .run_directly("m-many", &[("kubernetes.io/cluster/other", "1")])
        .await;
    let before = app.calls("DescribeInstances");
    app.delete(&req("m-many")).await.unwrap();
    assert_eq!(
        app.calls("DescribeInstances") - before,
        2,
        "two pages of 100"
    );
    let left = app.instances_named("m-many");
    assert_eq!(left.len(), 1, "only the other cluster's VM is left");
    assert_eq!(left[0]["InstanceId"], foreign.as_str());
}

#[tokio::test]
async fn delete_of_a_missing_machine_is_ok() {
    let app = spawn_app().await;
    let d = app.delete(&req("m-never")).await.unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
    // MCM alicloud answered NotFound here; the contract says OK.
    let d = app
        .delete(&with_provider_id(
            req("m-never"),
            "cn-shanghai.i-doesnotexist",
        ))
        .await
        .unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
}

#[tokio::test]
async fn delete_with_an_orphans_provider_id_never_touches_the_named_machine() {
    // MCM's orphan collector sends a live machine's name with an orphan VM's providerID.
    let app = spawn_app().await;
    let live = app.create(&req("m-live")).await.unwrap();
    app.delete(&with_provider_id(req("m-live"), "cn-shanghai.i-orphangone"))
        .await
        .unwrap();
    let s = app.status(&req("m-live")).await.unwrap();
    assert_eq!(s.provider_id, live.provider_id);
    // And another cluster's VM is out of reach even by its providerID.
    let foreign = app
        .run_directly(
            "m-foreign",
            &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
        )
        .await;
    app.delete(&with_provider_id(
        req("m-foreign"),
        &format!("{REGION}.{foreign}"),
    ))
    .await
    .unwrap();
    assert_eq!(app.instances_named("m-foreign").len(), 1);
}

#[tokio::test]
async fn delete_while_pending_is_unavailable() {
    let app = spawn_app().await;
    let created = app.create(&req("m-pending")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    app.emulator.pin_status(&id, "Pending").unwrap();
    let r = with_provider_id(req("m-pending"), &created.provider_id);
    let (status, headers, body) = app
        .raw("/v1/machines:delete", &serde_json::to_value(&r).unwrap())
        .await;
    assert_eq!(status, 503);
    assert_eq!(body["code"], 14);
    assert!(headers.contains_key("retry-after"));
    assert!(
        body["detail"].as_str().unwrap().contains(&format!(
            "ECS instance not in running/stopped state: {id} is Pending"
        )),
        "{body}"
    );
    assert_eq!(app.emulator.instance_count(), 1, "nothing released");
    app.emulator.pin_status(&id, "Stopping").unwrap();
    let e = app.delete(&r).await.unwrap_err();
    assert_code(&e, Code::Unavailable, 503);
    app.emulator.unpin(&id).unwrap();
    app.delete(&r).await.unwrap();
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn delete_cleans_leftover_disks_and_network_interfaces() {
    let app = spawn_app().await;
    let created = app.create(&req("m-leaky")).await.unwrap();
    app.create(&req("m-neighbour")).await.unwrap();
    // ECS releases the instance but leaves its disks and NIC behind, detached.
    app.emulator
        .set_faults(Faults {
            leak_on_delete: true,
            ..Faults::default()
        })
        .unwrap();
    let d = app
        .delete(&with_provider_id(req("m-leaky"), &created.provider_id))
        .await
        .unwrap();
    assert!(d.last_known_state.contains("leftovers deleted"), "{d:?}");
    let state = app.state();
    let nics = state["networkInterfaces"].as_array().unwrap();
    assert_eq!(nics.len(), 1, "only the neighbour's NIC: {nics:?}");
    assert_eq!(nics[0]["Status"], "InUse");
    let leaky_disks: Vec<&Value> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["InstanceId"] == "")
        .collect();
    assert_eq!(leaky_disks.len(), 1, "{leaky_disks:?}");
    assert_eq!(leaky_disks[0]["DiskName"], "m-leaky-keep-data-disk");
    // The neighbour's three disks are all still attached.
    assert_eq!(app.emulator.disk_count(), 4);

    // A machine whose VM is already gone still gets its leftovers cleaned (MCM #850).
    let created = app.create(&req("m-leaky2")).await.unwrap();
    app.ecs()
        .delete_instance(
            instance_id(&created.provider_id),
            true,
            deadline_in(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(app.emulator.network_interface_count(), 2);
    let d = app.delete(&req("m-leaky2")).await.unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
    assert!(d.last_known_state.contains("leftovers deleted"), "{d:?}");
    assert_eq!(app.emulator.network_interface_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// ListMachines
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn list_machines_successfully() {
    let app = spawn_app().await;
    assert!(app.list().await.unwrap().is_empty(), "empty result");
    let a = app.create(&req("m-list-a")).await.unwrap();
    let b = app.create(&req("m-list-b")).await.unwrap();
    app.run_directly(
        "m-other-cluster",
        &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
    )
    .await;
    app.run_directly("m-no-role", &[(CLUSTER_TAG, "1")]).await;
    let list = app.list().await.unwrap();
    assert_eq!(
        list,
        BTreeMap::from([
            (a.provider_id, "m-list-a".to_string()),
            (b.provider_id, "m-list-b".to_string()),
        ])
    );
}

#[tokio::test]
async fn list_machines_across_several_pages() {
    let app = spawn_app().await;
    let tags: BTreeMap<String, String> = [(CLUSTER_TAG, "1"), (ROLE_TAG, "1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    app.emulator
        .seed(&Seed {
            count: 260,
            region_id: Some(REGION.into()),
            name_prefix: "seed-".into(),
            tags,
            ..Seed::default()
        })
        .unwrap();
    app.emulator
        .seed(&Seed {
            count: 7,
            region_id: Some(REGION.into()),
            name_prefix: "foreign-".into(),
            tags: [("kubernetes.io/cluster/other".to_string(), "1".to_string())].into(),
            ..Seed::default()
        })
        .unwrap();
    let before = app.calls("DescribeInstances");
    let list = app.list().await.unwrap();
    assert_eq!(list.len(), 260);
    assert_eq!(app.calls("DescribeInstances") - before, 3, "pages of 100");
    assert!(list.keys().all(|k| k.starts_with("cn-shanghai.i-")));
    assert!(list.values().all(|v| v.starts_with("seed-")));
}

// ---------------------------------------------------------------------------------------------
// InitializeMachine
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn initialize_starts_a_stopped_instance_and_reports_uninitialized_until_running() {
    let app = spawn_app().await;
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    let created = app.create(&req("m-init")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    let ok = app.initialize(&req("m-init")).await.unwrap();
    assert_eq!(ok.provider_id, created.provider_id);
    assert_eq!(ok.node_name, created.node_name);
    assert!(!ok.addresses.is_empty());

    app.emulator.pin_status(&id, "Starting").unwrap();
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("is Starting"), "{e}");

    app.emulator.pin_status(&id, "Stopped").unwrap();
    app.emulator.unpin(&id).unwrap();
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(
        e.status.message.contains("was Stopped and is starting"),
        "{e}"
    );
    assert_eq!(app.calls("StartInstance"), 1);
    let ok = eventually("the instance runs", Duration::from_secs(5), || async {
        app.initialize(&req("m-init")).await.ok()
    })
    .await;
    assert_eq!(ok.provider_id, created.provider_id);
}

// ---------------------------------------------------------------------------------------------
// GetVolumeIDs (MCM alicloud: "should get volume IDs successfully")
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn get_volume_ids_maps_flex_and_alicloud_csi_volumes() {
    let app = spawn_app().await;
    let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
        csi: Some(CsiVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..CsiVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    };
    let flex = PersistentVolumeSpec {
        flex_volume: Some(FlexVolumeSource {
            driver: "alicloud/disk".into(),
            options: [("volumeId".to_string(), "d-flex".to_string())].into(),
        }),
        ..PersistentVolumeSpec::default()
    };
    let mut nfs = PersistentVolumeSpec::default();
    nfs.other
        .insert("nfs".into(), json!({"server": "x", "path": "/"}));
    let specs = vec![
        flex,
        csi("diskplugin.csi.alibabacloud.com", "d-csi"),
        csi("ebs.csi.aws.com", "vol-aws"),
        nfs,
        csi(EXTRA_CSI, "d-extra"),
        csi("diskplugin.csi.alibabacloud.com", ""),
    ];
    let ids = app.machines.volume_ids(&specs).await.unwrap();
    assert_eq!(ids, vec!["d-flex", "d-csi", "d-extra"]);
    assert!(app.machines.volume_ids(&[]).await.unwrap().is_empty());
    assert_eq!(app.emulator.stats().total_calls(), 0, "no ECS call");
}

// ---------------------------------------------------------------------------------------------
// Scale under faults
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_creates_under_throttling_and_server_errors() {
    let app = spawn_app_with(|c| c.ecs.retry = retry(30)).await;
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.2,
            throttle_time_left_ms: 20,
            server_error_rate: 0.05,
            ..Faults::default()
        })
        .unwrap();
    let results = futures::future::join_all((0..200).map(|n| {
        let app = &app;
        async move { app.create(&req(&format!("m-scale-{n:03}"))).await }
    }))
    .await;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    let ids: std::collections::BTreeSet<String> = results
        .into_iter()
        .map(|r| r.unwrap().provider_id)
        .collect();
    assert_eq!(ids.len(), 200);
    assert_eq!(app.emulator.instance_count(), 200);
    let stats = app.emulator.stats();
    assert!(stats.throttled > 0 && stats.server_errors > 0, "{stats:?}");
    app.emulator.set_faults(Faults::default()).unwrap();
    assert_eq!(app.list().await.unwrap().len(), 200);
}

// ---------------------------------------------------------------------------------------------
// One name is one VM: creates racing across two driver processes
// ---------------------------------------------------------------------------------------------

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
        let owner = if owner_uid.is_empty() {
            "a machine without a UID".to_owned()
        } else {
            format!("machine UID {owner_uid:?}")
        };
        let created = answers[winner].as_ref().unwrap();
        for (i, answer) in answers.iter().enumerate().filter(|(i, _)| *i != winner) {
            let e = answer.as_ref().unwrap_err();
            assert_code(e, Code::AlreadyExists, 409);
            assert!(
                e.status.message.contains(&owner),
                "round {round}, caller {i}: {owner} not named in {:?}",
                e.status.message
            );
            assert!(
                e.status.message.contains(instance_id(&created.provider_id)),
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
    // ...then creates, and learns whose the name is.
    let e = app.create(&loser).await.unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    assert_eq!(
        e.status.message,
        format!(
            "ECS instance {} already backs machine name \"m-owned\" in this cluster, for machine UID \"uid-m-owned\"; one name is one VM",
            instance_id(&winner.provider_id)
        )
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
    assert!(
        e.status
            .message
            .contains(&format!("{winner} already backs machine name")),
        "{e}"
    );
    assert!(
        e.status.message.contains("machine UID \"uid-first\""),
        "{e}"
    );
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
    let e = app.create(&req("m-allow")).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "machineClass.providerSpec.region: is not a region this driver is allowed to use (the operator's allow-list)"
    );
    let e = app
        .status(&with_provider_id(req("m-allow"), "cn-shanghai.i-abc"))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
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
    // A providerID naming a region outside the list is refused before any lookup.
    let e = app
        .status(&with_provider_id(r, "cn-shanghai.i-abc"))
        .await
        .unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status
            .message
            .starts_with("machine.spec.providerID: names region \"cn-shanghai\""),
        "{}",
        e.status.message
    );
}

// ---------------------------------------------------------------------------------------------
// URLs built from caller input: region and providerID never choose where the driver connects
// ---------------------------------------------------------------------------------------------

/// Regions that try to turn `https://ecs.<region>.aliyuncs.com` into another host, port or path,
/// or that are simply not ECS region ids.
fn hostile_regions(port: u16) -> Vec<String> {
    let mut v: Vec<String> = [
        "x@127.0.0.1:{port}/",
        "x@127.0.0.1:{port}",
        "x@127.0.0.1:{port}/#",
        "cn-shanghai@127.0.0.1:{port}/?",
        "cn-shanghai:{port}",
        "127.0.0.1:{port}/x",
        "x@localhost:{port}/",
        "cn-shanghai/../../x",
        "../x",
        "cn-shanghai\r\nHost: 127.0.0.1:{port}",
        "cn-shanghai%2f@127.0.0.1:{port}",
        "CN-SHANGHAI",
        "cn_shanghai",
        "cn-shanghai.",
        "-cn-shanghai",
        "cn-shanghai-",
        "cn--shanghai",
        " cn-shanghai",
        "cn",
    ]
    .iter()
    .map(|r| r.replace("{port}", &port.to_string()))
    .collect();
    v.push(format!("cn-{}", "a".repeat(80)));
    v
}

/// A driver that calls the regional endpoints (no `BERTH_ALICLOUD_ENDPOINT`), as in production.
async fn spawn_driver_without_endpoint() -> (TestServer, Client) {
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_REQUEST_TIMEOUT", "3s");
    let mut config = machine_driver::Config::from_env(&env).unwrap();
    config.ecs.retry = retry(2);
    config.ecs.connect_timeout = Duration::from_millis(500);
    let providers = machine_driver::providers(&config).unwrap();
    let driver = spawn(machine_driver::router(&config, providers)).await;
    let machines = Client::new(ServiceClient::new(&driver.url, ClientOptions::default()));
    (driver, machines)
}

fn assert_listener_untouched(listener: &std::net::TcpListener) {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((_, from)) => panic!("the driver connected to the test's port (from {from})"),
        Err(e) => panic!("accept failed: {e}"),
    }
}

#[tokio::test]
async fn a_region_never_chooses_the_host_the_driver_connects_to() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_driver, machines) = spawn_driver_without_endpoint().await;
    let mut regions = hostile_regions(port);
    // Well-formed, but not a region ECS has: no regional endpoint can ever answer for it.
    regions.push("xx-nowhere-1".into());
    for region in &regions {
        let mut spec = provider_spec();
        spec["region"] = json!(region);
        let r = MachineRequest {
            machine_class: class_with(spec),
            ..req("m-ssrf")
        };
        let l = ListMachinesRequest {
            machine_class: r.machine_class.clone(),
            secret: secret(),
        };
        let answers = [
            ("create", machines.create(&r).await.map(|_| ())),
            ("status", machines.status(&r).await.map(|_| ())),
            ("delete", machines.delete(&r).await.map(|_| ())),
            ("initialize", machines.initialize(&r).await.map(|_| ())),
            ("list", machines.list(&l).await.map(|_| ())),
        ];
        for (method, answer) in answers {
            let e = answer.expect_err(method);
            assert_code(&e, Code::InvalidArgument, 400);
            assert!(
                e.status
                    .message
                    .contains("machineClass.providerSpec.region"),
                "{method} with region {region:?}: {}",
                e.status.message
            );
            assert!(
                !e.status.message.contains(&port.to_string()),
                "the message does not echo the hostile value: {}",
                e.status.message
            );
        }
    }
    assert_listener_untouched(&listener);
}

#[tokio::test]
async fn a_provider_id_never_chooses_the_host_the_driver_connects_to() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_driver, machines) = spawn_driver_without_endpoint().await;
    let mut provider_ids: Vec<String> = hostile_regions(port)
        .into_iter()
        .map(|region| format!("{region}.i-abc123"))
        .collect();
    provider_ids.extend([
        format!("cn-shanghai.i-abc@127.0.0.1:{port}"),
        "cn-shanghai.i-../../x".to_owned(),
        "cn-shanghai.I-ABC".to_owned(),
        "cn-shanghai.".to_owned(),
    ]);
    for provider_id in &provider_ids {
        let r = with_provider_id(req("m-ssrf"), provider_id);
        let answers = [
            ("create", machines.create(&r).await.map(|_| ())),
            ("status", machines.status(&r).await.map(|_| ())),
            ("delete", machines.delete(&r).await.map(|_| ())),
            ("initialize", machines.initialize(&r).await.map(|_| ())),
        ];
        for (method, answer) in answers {
            let e = answer.expect_err(method);
            assert_code(&e, Code::InvalidArgument, 400);
            assert!(
                e.status.message.contains("machine.spec.providerID"),
                "{method} with providerID {provider_id:?}: {}",
                e.status.message
            );
        }
    }
    assert_listener_untouched(&listener);
}

#[tokio::test]
async fn a_region_outside_the_grammar_never_reaches_ecs_nor_a_provider_id() {
    // With the emulator as the endpoint, the region does not pick the host, but it still went into
    // RegionId and the providerID (`../x.i-...`).
    let app = spawn_app().await;
    for region in hostile_regions(1) {
        let mut spec = provider_spec();
        spec["region"] = json!(region);
        let r = MachineRequest {
            machine_class: class_with(spec),
            ..req("m-region")
        };
        let e = app.create(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status
                .message
                .starts_with("machineClass.providerSpec.region:"),
            "{region:?}: {}",
            e.status.message
        );
    }
    assert_eq!(app.emulator.stats().total_calls(), 0, "nothing reached ECS");
    assert_eq!(app.emulator.instance_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// No secret in logs
// ---------------------------------------------------------------------------------------------

/// A writer appending to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Runs a representative slice of the suite (every route, successes and the failures that quote
/// ECS) with a TRACE subscriber capturing every line of the driver, the ECS client, the emulator
/// and the HTTP stacks on this thread, then looks for every secret value in every form it travels.
#[tokio::test]
async fn no_secret_value_appears_in_trace_logs() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    // This test's runtime is single-threaded: the driver, the emulator and the client all run on
    // this thread, under this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    let leaked_secret = "another-secret-value-31337";
    let r = req("m-logs");
    let created = app.create(&r).await.unwrap();
    app.create(&r).await.unwrap();
    app.status(&r).await.unwrap();
    app.initialize(&r).await.unwrap();
    app.list().await.unwrap();
    app.machines.volume_ids(&[]).await.unwrap();
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.5,
            throttle_time_left_ms: 1,
            server_error_rate: 0.2,
            ..Faults::default()
        })
        .unwrap();
    app.status(&r).await.unwrap();
    app.emulator.set_faults(Faults::default()).unwrap();
    let mut bad = req("m-logs-bad");
    bad.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", leaked_secret),
        ("userData", USER_DATA),
    ]);
    app.create(&bad).await.unwrap_err();
    bad.secret.string_data.remove("alicloudAccessKeyID");
    app.create(&bad).await.unwrap_err();
    app.delete(&with_provider_id(r, &created.provider_id))
        .await
        .unwrap();
    drop(_guard);

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("TRACE"),
        "the subscriber captured TRACE lines"
    );
    assert!(logs.contains("DescribeInstances"), "ECS calls were logged");
    assert!(logs.contains("m-logs"), "driver spans were logged");
    let user_data_b64 = b64(USER_DATA);
    for (what, value) in [
        ("access key secret", KEY_SECRET),
        (
            "access key secret (base64)",
            &b64(&format!("{KEY_SECRET}\n")),
        ),
        ("other access key secret", leaked_secret),
        ("user data", USER_DATA),
        ("user data token", "bootstrap-token-7q3z9x"),
        ("user data (base64)", &user_data_b64),
        (
            "user data (base64, url-encoded prefix)",
            &user_data_b64[..24],
        ),
    ] {
        assert!(!logs.contains(value), "{what} appears in the logs");
    }
}
