//! The emulator and a driver on port 0, the MCM objects the tests send, one helper per call.

use std::collections::BTreeMap;
use std::time::Duration;

use alicloud::{Credentials, Ecs, EcsConfig, RetryPolicy, RunInstances, Tag, deadline_in};
use base64::Engine as _;
use client::machines::Client;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::{ListMachinesRequest, Machine, MachineClass, MachineRequest, Secret};
use ecs_emulator::Emulator;
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

pub(crate) const KEY_ID: &str = "test-key-id";
pub(crate) const KEY_SECRET: &str = "ak-secret-9f8e7d6c5b4a";
pub(crate) const USER_DATA: &str = "#!/bin/sh\necho bootstrap-token-7q3z9x.userdata-secret-value\n";
pub(crate) const REGION: &str = "cn-shanghai";
pub(crate) const ZONE: &str = "cn-shanghai-b";
pub(crate) const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--test";
pub(crate) const ROLE_TAG: &str = "kubernetes.io/role/worker/shoot--test";
pub(crate) const EXTRA_CSI: &str = "disk.csi.example.com";
/// The namespace of the test machines ([`machine`]).
pub(crate) const NAMESPACE: &str = "shoot--test";
/// The tag the driver stamps a machine's namespace with.
pub(crate) const NAMESPACE_STAMP: &str = machine_driver::provider::NAMESPACE_STAMP;

pub(crate) struct App {
    pub(crate) emulator: Emulator,
    pub(crate) emulator_url: String,
    pub(crate) driver: TestServer,
    pub(crate) machines: Client,
    pub(crate) _emulator_server: TestServer,
}

pub(crate) fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(50),
    }
}

/// An emulator accepting [`KEY_ID`] and a driver pointed at it, both on 127.0.0.1:0.
pub(crate) async fn spawn_app() -> App {
    spawn_app_with(|_| {}).await
}

pub(crate) async fn spawn_app_with(tune: impl FnOnce(&mut machine_driver::Config)) -> App {
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

pub(crate) fn provider_spec() -> Value {
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

pub(crate) fn class_with(spec: Value) -> MachineClass {
    let mut c = MachineClass {
        provider: "Alicloud".into(),
        provider_spec: spec,
        ..MachineClass::default()
    };
    c.metadata.name = "shoot--test-pool-a-z1".into();
    c.metadata.namespace = "shoot--test".into();
    c
}

pub(crate) fn class() -> MachineClass {
    class_with(provider_spec())
}

pub(crate) fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The merged secret MCM sends: only `data`, base64.
pub(crate) fn secret() -> Secret {
    let mut s = Secret::default();
    s.data.insert("alicloudAccessKeyID".into(), b64(KEY_ID));
    s.data.insert(
        "alicloudAccessKeySecret".into(),
        b64(&format!("{KEY_SECRET}\n")),
    );
    s.data.insert("userData".into(), b64(USER_DATA));
    s
}

pub(crate) fn machine(name: &str) -> Machine {
    let mut m = Machine::default();
    m.metadata.name = name.into();
    m.metadata.namespace = NAMESPACE.into();
    m.metadata.uid = format!("uid-{name}");
    m.spec.class.kind = "MachineClass".into();
    m.spec.class.name = "shoot--test-pool-a-z1".into();
    m
}

pub(crate) fn req(name: &str) -> MachineRequest {
    MachineRequest {
        machine: machine(name),
        machine_class: class(),
        secret: secret(),
    }
}

pub(crate) fn with_provider_id(mut r: MachineRequest, provider_id: &str) -> MachineRequest {
    r.machine.spec.provider_id = provider_id.into();
    r
}

pub(crate) fn list_req() -> ListMachinesRequest {
    ListMachinesRequest {
        machine_class: class(),
        secret: secret(),
    }
}

impl App {
    pub(crate) async fn create(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::CreateMachineResponse, ClientError> {
        self.machines.create(r).await
    }

    pub(crate) async fn status(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::GetMachineStatusResponse, ClientError> {
        self.machines.status(r).await
    }

    pub(crate) async fn delete(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::DeleteMachineResponse, ClientError> {
        self.machines.delete(r).await
    }

    pub(crate) async fn initialize(
        &self,
        r: &MachineRequest,
    ) -> Result<domain::InitializeMachineResponse, ClientError> {
        self.machines.initialize(r).await
    }

    pub(crate) async fn list(&self) -> Result<BTreeMap<String, String>, ClientError> {
        Ok(self.machines.list(&list_req()).await?.machine_list)
    }

    /// A raw POST, for what the typed client does not show (machineCodesError, headers).
    pub(crate) async fn raw(
        &self,
        path: &str,
        body: &Value,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
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

    pub(crate) fn state(&self) -> Value {
        self.emulator.snapshot()
    }

    pub(crate) fn instances_named(&self, name: &str) -> Vec<Value> {
        self.state()["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["InstanceName"] == name)
            .cloned()
            .collect()
    }

    pub(crate) fn calls(&self, action: &str) -> u64 {
        self.emulator
            .stats()
            .calls
            .get(action)
            .copied()
            .unwrap_or(0)
    }

    /// An ECS client of the emulator, for arranging what the driver must then find.
    pub(crate) fn ecs(&self) -> alicloud::EcsClient {
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

    /// Creates an instance named `name` with these tags behind the driver's back, stamped with the
    /// test machines' namespace ([`NAMESPACE`]) unless the tags stamp another.
    pub(crate) async fn run_directly(&self, name: &str, tags: &[(&str, &str)]) -> String {
        let mut tags: Vec<Tag> = tags.iter().map(|(k, v)| Tag::new(*k, *v)).collect();
        if !tags.iter().any(|t| t.key == NAMESPACE_STAMP) {
            tags.push(Tag::new(NAMESPACE_STAMP, NAMESPACE));
        }
        let run = RunInstances {
            image_id: "m-image-1".into(),
            instance_type: "ecs.g6.large".into(),
            zone_id: Some(ZONE.into()),
            instance_name: Some(name.into()),
            tags,
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

pub(crate) fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit_once('.').unwrap().1
}

pub(crate) fn assert_code(e: &ClientError, code: Code, http: u16) {
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.http_status, Some(http), "{e}");
}
