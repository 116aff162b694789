//! One stack for a test: the ECS emulator, a machine driver pointed at it, and a machine
//! controller (API and reconcilers) on a temporary data directory.

use std::sync::Arc;
use std::time::Duration;

use alicloud::{Credentials, Ecs, EcsConfig};
use ecs_emulator::Emulator;
use machine_controller::reconcile::{Controller, Settings};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

pub(crate) const KEY_ID: &str = "controller-key";
pub(crate) const KEY_SECRET: &str = "controller-secret-9a8b7c";
pub(crate) const REGION: &str = "cn-shanghai";
pub(crate) const NS: &str = "team-a";

pub(crate) struct App {
    pub(crate) emulator: Emulator,
    emulator_url: String,
    pub(crate) url: String,
    pub(crate) driver_url: String,
    pub(crate) controller: Arc<Controller>,
    pub(crate) dir: tempfile::TempDir,
    http: reqwest::Client,
    _servers: Vec<TestServer>,
    reconcilers: tokio::task::JoinHandle<()>,
}

impl Drop for App {
    fn drop(&mut self) {
        self.reconcilers.abort();
    }
}

/// Settings that make a test's timeouts and retries quick.
pub(crate) fn quick() -> Settings {
    Settings {
        creation_timeout: Duration::from_secs(30),
        health_timeout: Duration::from_secs(1),
        resync: Duration::from_millis(200),
        backoff_base: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        exhausted_retry: Duration::from_millis(500),
        ..Settings::default()
    }
}

pub(crate) async fn spawn_app(settings: Settings) -> App {
    let emulator = Emulator::new(ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET));
    let emulator_server = spawn(emulator.router()).await;
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_ALICLOUD_ENDPOINT", &emulator_server.url);
    let mut config = machine_driver::Config::from_env(&env).unwrap();
    config.ecs.retry = alicloud::RetryPolicy {
        max_attempts: 5,
        base_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
    };
    let providers = machine_driver::providers(&config).unwrap();
    let driver = spawn(machine_driver::router(&config, providers)).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, reconcilers, controller) =
        spawn_controller_with(dir.path(), &driver.url, settings).await;
    App {
        emulator,
        emulator_url: emulator_server.url.clone(),
        url: server.url.clone(),
        driver_url: driver.url.clone(),
        controller,
        dir,
        http: reqwest::Client::new(),
        _servers: vec![emulator_server, driver, server],
        reconcilers,
    }
}

/// A controller (API and reconcilers) on `data_dir`, calling the driver at `driver_url`.
pub(crate) async fn spawn_controller(
    data_dir: &std::path::Path,
    driver_url: &str,
    settings: Settings,
) -> (TestServer, tokio::task::JoinHandle<()>) {
    let (server, reconcilers, _) = spawn_controller_with(data_dir, driver_url, settings).await;
    (server, reconcilers)
}

/// [`spawn_controller`], with the reconcilers' shared state.
pub(crate) async fn spawn_controller_with(
    data_dir: &std::path::Path,
    driver_url: &str,
    settings: Settings,
) -> (TestServer, tokio::task::JoinHandle<()>, Arc<Controller>) {
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", data_dir.to_str().unwrap())
        .with("BERTH_MACHINE_DRIVER_URL", driver_url)
        .with("BERTH_WATCH_HEARTBEAT", "200ms");
    let mut config = machine_controller::Config::from_env(&env).unwrap();
    config.settings = settings.clone();
    let writer = machine_controller::writer(&config).await.unwrap();
    let controller = Controller::new(writer.clone(), settings);
    let reconcilers = tokio::spawn(controller.clone().run());
    let server = spawn(machine_controller::router(&config, writer)).await;
    (server, reconcilers, controller)
}

impl App {
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.url));
        if let Some(body) = body {
            let content_type = if method == reqwest::Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            request = request
                .header("content-type", content_type)
                .body(body.to_string());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn post(&self, plural: &str, body: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/{plural}"),
            Some(body),
        )
        .await
    }

    pub(crate) async fn get(&self, plural: &str, name: &str) -> (u16, Value) {
        self.call(
            reqwest::Method::GET,
            &format!("/v1/namespaces/{NS}/{plural}/{name}"),
            None,
        )
        .await
    }

    pub(crate) async fn list(&self, plural: &str) -> Vec<Value> {
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/namespaces/{NS}/{plural}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["items"].as_array().unwrap().clone()
    }

    pub(crate) async fn patch(&self, plural: &str, name: &str, patch: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::PATCH,
            &format!("/v1/namespaces/{NS}/{plural}/{name}"),
            Some(patch),
        )
        .await
    }

    pub(crate) async fn delete(&self, plural: &str, name: &str) -> (u16, Value) {
        self.call(
            reqwest::Method::DELETE,
            &format!("/v1/namespaces/{NS}/{plural}/{name}"),
            None,
        )
        .await
    }

    /// The emulator's instances that are not released.
    pub(crate) fn instances(&self) -> Vec<Value> {
        self.emulator.snapshot()["instances"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// A secret with the emulator's key, and an Alicloud class using it.
    pub(crate) async fn alicloud_class(&self, name: &str, instance_type: &str) {
        let (status, body) = self
            .post(
                "secrets",
                json!({"metadata": {"name": "alicloud"}, "stringData": {
                "alicloudAccessKeyID": KEY_ID, "alicloudAccessKeySecret": KEY_SECRET}}),
            )
            .await;
        assert!(status == 201 || status == 409, "{status} {body}");
        let (status, body) = self
            .post("machineclasses", class_body(name, instance_type))
            .await;
        assert_eq!(status, 201, "{body}");
    }

    /// An ECS client of the emulator, to act behind the controller's back.
    pub(crate) fn ecs(&self) -> alicloud::EcsClient {
        Ecs::new(EcsConfig {
            endpoint: Some(self.emulator_url.clone()),
            ..EcsConfig::default()
        })
        .unwrap()
        .client(
            &alicloud::Region::parse(REGION).unwrap(),
            Credentials::new(KEY_ID, KEY_SECRET),
        )
    }

    /// Waits until `check` holds for the namespace's machines.
    pub(crate) async fn machines_until(
        &self,
        what: &str,
        check: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        service_kit::testing::eventually(what, Duration::from_secs(30), || async {
            let machines = self.list("machines").await;
            check(&machines).then_some(machines)
        })
        .await
    }
}

pub(crate) fn class_body(name: &str, instance_type: &str) -> Value {
    json!({
        "apiVersion": "berth.io/v1",
        "kind": "MachineClass",
        "metadata": {"name": name},
        "provider": "Alicloud",
        "providerSpec": {
            "imageID": "m-image-1",
            "instanceType": instance_type,
            "region": REGION,
            "zoneID": "cn-shanghai-b",
            "securityGroupID": "sg-1",
            "vSwitchID": "vsw-1",
            "keyPairName": "kp-1",
            "tags": {"kubernetes.io/cluster/shoot--ctl": "1", "kubernetes.io/role/worker/shoot--ctl": "1"}
        },
        "secretRef": {"name": "alicloud"}
    })
}

pub(crate) fn phase(machine: &Value) -> &str {
    machine["status"]["phase"].as_str().unwrap_or_default()
}

pub(crate) fn running(machines: &[Value]) -> usize {
    machines.iter().filter(|m| phase(m) == "Running").count()
}

/// A refusal's `detail`, which every problem+json answer carries.
pub(crate) fn detail(problem: &Value) -> &str {
    problem["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("a problem+json answer has a detail: {problem}"))
}
