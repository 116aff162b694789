//! machine-controller → machine-driver: every call the controller's reconcilers and its class
//! check make, and what they read from each answer.
//!
//! The consumer is the real controller: its API, store and driver client (`client::machines`,
//! built by `machine_controller::writer` exactly as the service builds it), pointed at a Pact mock
//! standing in for the driver. The test writes a secret, a class and machines through the API, then
//! runs the reconcilers' own steps (`reconcile::machine::reconcile`, `reconcile::orphans::collect`)
//! one at a time, so every request is built by the controller's code and every answer is read by
//! it; the test then checks that the stored objects show what the answers said.
//!
//! The calls, one interaction each: the class check (accepted, and refused with code 3 naming the
//! field), CreateMachine, GetMachineStatus answered three ways (the VM runs; Uninitialized, code
//! 17, with the VM, after which the controller calls InitializeMachine; NotFound, code 5, after
//! which it creates the VM again), InitializeMachine, ListMachines (the orphan collector) and
//! DeleteMachine, both for a machine being deleted and for a VM whose machine is gone. The answers
//! state the fields the controller or its client's types read, as matchers; the requests carry the
//! controller's stored class (its version fields as patterns), the secret's emulator key, and the
//! machine's UID as a pattern.
//!
//! The provider is the real machine driver in front of the ECS emulator (instant lifecycle), on port
//! 0. Provider states are set through the driver's own API: a machine "has a VM" once the driver
//! created it (and, for one stopped before, started it with InitializeMachine); a "stopped VM" is
//! the one ECS operation the driver has no call for, so the emulator stops it. A state that made a
//! VM hands its `providerID` back, and the interactions that name the VM by `providerID` take it
//! from there (a provider-state generator), so they reach the real instance.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use berth_contracts::pactfile;
use berth_contracts::spawn::{self, INTERNAL_TOKEN};
use berth_contracts::verify::{self, StateValues, States};
use machine_controller::reconcile::{Controller, Settings, machine, orphans};
use pact_consumer::prelude::*;
use pact_consumer::{object_matching, term};
use pact_models::expression_parser::DataType;
use pact_models::generators::Generator;
use serde_json::{Value, json};

const CONSUMER: &str = "machine-controller";
const PROVIDER: &str = "machine-driver";

/// The namespace the controller's objects live in (also the class's cluster tag).
const NS: &str = "shoot--e2e";
const SECRET: &str = "contract-secret";
const CLASS: &str = "contract-class";
/// A class whose spec lacks `imageID`: the controller's own checks pass it, the driver's do not.
const BAD_CLASS: &str = "contract-bad-class";
/// Reaches Running: created, its status read.
const M1: &str = "contract-m1";
/// Its VM is not initialised yet: status says Uninitialized, then InitializeMachine.
const M2: &str = "contract-m2";
/// Its VM is gone while it is being created: status says NotFound.
const M3: &str = "contract-m3";

/// The example values the pact records for what the controller generates (UIDs, versions, times)
/// or reads back (providerID, node name, address); the real ones only have to match the patterns.
const UUID: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
const TIME: &str = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?Z$";
const PROVIDER_ID_PATTERN: &str = "^[a-z0-9-]+\\.i-[0-9a-z]+$";
const PROVIDER_ID: &str = "cn-shanghai.i-uf69zddmom11ci7est12";
const NODE_NAME: &str = "izuf69zddmom11ci7est12z";
const ADDRESS: &str = "192.168.0.10";
const CLASS_UID: &str = "6c0b3f4e-2d1a-4e8b-9a7c-5f3e2d1c0b9a";

/// The example UID of each machine; the provider states make their VMs with it.
fn uid_of(machine: &str) -> &'static str {
    match machine {
        M1 => "0e6f1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a01",
        M2 => "0e6f1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a02",
        _ => "0e6f1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a03",
    }
}

/// The Alicloud spec of the emulator (`berth_tests`' class), and the secret with its key.
fn provider_spec() -> Value {
    berth_tests::machine_request(M1)["machineClass"]["providerSpec"].clone()
}

fn secret_values() -> Value {
    berth_tests::machine_request(M1)["secret"]["stringData"].clone()
}

/// The bad class's spec: the good one without `imageID`.
fn bad_provider_spec() -> Value {
    let mut spec = provider_spec();
    spec.as_object_mut()
        .expect("the spec is an object")
        .remove("imageID");
    spec
}

fn internal_credential() -> String {
    format!("Bearer {INTERNAL_TOKEN}")
}

/// The secret as the controller sends it: the values it stores, sealed, and opens for each call.
fn secret() -> JsonPattern {
    json_pattern!({"stringData": secret_values()})
}

/// CheckMachineClass's body: the class as written (not yet stored, so no version fields) and a
/// machine that stands for any machine of it.
fn check_request(class: &str, spec: Value) -> JsonPattern {
    json_pattern!({
        "machine": {
            "metadata": {"name": class, "namespace": NS},
            "spec": {"class": {"kind": "", "name": ""}},
        },
        "machineClass": {
            "apiVersion": "berth.io/v1",
            "kind": "MachineClass",
            "metadata": {"name": class, "namespace": NS},
            "provider": "Alicloud",
            "providerSpec": spec,
            "secretRef": {"name": SECRET, "namespace": ""},
        },
        "secret": secret(),
    })
}

/// The class as the controller stores it and sends it with every machine call.
fn stored_class() -> JsonPattern {
    json_pattern!({
        "apiVersion": "berth.io/v1",
        "kind": "MachineClass",
        "metadata": {
            "creationTimestamp": term!(TIME, "2026-01-01T00:00:00Z"),
            "generation": like!(1),
            "name": CLASS,
            "namespace": NS,
            "resourceVersion": term!("^[0-9]+$", "2"),
            "uid": term!(UUID, CLASS_UID),
        },
        "provider": "Alicloud",
        "providerSpec": provider_spec(),
        "secretRef": {"name": SECRET, "namespace": NS},
    })
}

/// How a machine call names the machine: by name only, or with the VM's `providerID` too.
#[derive(Clone, Copy, PartialEq)]
enum Named {
    /// Before the VM exists (CreateMachine).
    ByName,
    /// After CreateMachine answered: the controller sends the `providerID` it stored.
    WithProviderId,
    /// The orphan collector: the `providerID` the listing gave, and the class by kind and name.
    Orphan,
}

/// A machine call's body: the machine as the controller builds it from the stored one, its class
/// and its class's secret. `name` is a pattern for CreateMachine (any of the test's machines).
fn machine_request(name: &str, named: Named) -> JsonPattern {
    let uid = uid_of(name);
    let name: JsonPattern = if named == Named::ByName {
        term!("^contract-m[0-9]+$", name).into()
    } else {
        name.into()
    };
    let kind = if named == Named::Orphan {
        "MachineClass"
    } else {
        ""
    };
    let mut spec = json_pattern!({"class": {"kind": kind, "name": CLASS}});
    if named != Named::ByName
        && let JsonPattern::Object(fields) = &mut spec
    {
        fields.insert(
            "providerID".into(),
            term!(PROVIDER_ID_PATTERN, PROVIDER_ID).into(),
        );
    }
    json_pattern!({
        "machine": {
            "metadata": {"name": name, "namespace": NS, "uid": term!(UUID, uid)},
            "spec": spec,
        },
        "machineClass": stored_class(),
        "secret": secret(),
    })
}

/// The body the provider states create `machine`'s VM with: the CreateMachine interaction's
/// example, for that machine (its example UID, which the pact's later calls for it carry too).
fn create_body(machine: &str) -> Value {
    machine_request(machine, Named::ByName).to_example()
}

fn addresses() -> JsonPattern {
    each_like!({"type": like!("InternalIP"), "address": like!(ADDRESS)}).into()
}

/// The VM's conditions; the example's `Initialized` one says whether it is initialised.
fn conditions(initialized: &str) -> JsonPattern {
    each_like!({"type": like!("Initialized"), "status": like!(initialized)}).into()
}

/// What the controller reads of the VM, from CreateMachine's answer (no conditions) and
/// GetMachineStatus's (`initialized` is the example's `Initialized` condition).
fn vm(initialized: Option<&str>) -> JsonPattern {
    let mut vm = json_pattern!({
        "providerID": term!(PROVIDER_ID_PATTERN, PROVIDER_ID),
        "nodeName": like!(NODE_NAME),
        "addresses": addresses(),
    });
    if let (Some(initialized), JsonPattern::Object(fields)) = (initialized, &mut vm) {
        fields.insert("conditions".into(), conditions(initialized));
    }
    vm
}

/// A refusal as the client decodes it (`title`, `status`, `code`) and the controller reads it
/// (`code`, `detail`).
fn problem(status: u16, title: &str, code: u32, detail: JsonPattern) -> JsonPattern {
    json_pattern!({
        "title": like!(title),
        "status": status,
        "code": code,
        "detail": detail,
    })
}

/// The interactions, each with its provider state and whether its request names the VM by the
/// `providerID` that state made.
fn interactions(pact: &mut PactBuilder) {
    let with_provider_id = |request: &mut pact_consumer::builders::RequestBuilder| {
        request.body_generator(
            "$.machine.spec.providerID",
            Generator::ProviderStateGenerator("${providerID}".into(), Some(DataType::STRING)),
        );
    };
    pact.interaction("check a machine class", "", |mut i| {
        i.request
            .post()
            .path("/v1/machineclasses:check")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(check_request(CLASS, provider_spec()));
        i.response
            .ok()
            .json_body(json_pattern!({"provider": like!("Alicloud")}));
        i
    });
    pact.interaction("check a machine class the driver refuses", "", |mut i| {
        i.request
            .post()
            .path("/v1/machineclasses:check")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(check_request(BAD_CLASS, bad_provider_spec()));
        // The controller passes the driver's words on with the `machineClass.` prefix taken off.
        i.response
            .status(400)
            .content_type("application/problem+json")
            .json_body(problem(
                400,
                "InvalidArgument",
                3,
                term!(
                    "^machineClass\\.providerSpec\\.imageID\\b.*$",
                    "machineClass.providerSpec.imageID: ImageID is required"
                )
                .into(),
            ));
        i
    });
    pact.interaction("create a machine", "", |mut i| {
        i.request
            .post()
            .path("/v1/machines:create")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M1, Named::ByName));
        i.response.ok().json_body(vm(None));
        i
    });
    pact.interaction("get a machine's status", "", |mut i| {
        i.given(format!("machine {M1} has a VM"));
        i.request
            .post()
            .path("/v1/machines:status")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M1, Named::WithProviderId));
        with_provider_id(&mut i.request);
        i.response.ok().json_body(vm(Some("True")));
        i
    });
    pact.interaction(
        "get the status of a machine whose VM is not initialised",
        "",
        |mut i| {
            i.given(format!("machine {M2} has a stopped VM"));
            i.request
                .post()
                .path("/v1/machines:status")
                .header("authorization", internal_credential())
                .header("content-type", "application/json")
                .json_body(machine_request(M2, Named::WithProviderId));
            with_provider_id(&mut i.request);
            // Uninitialized (17) with the VM, as a 200 would describe it: the controller reads both.
            let mut body = problem(
                409,
                "Uninitialized",
                17,
                like!("ECS instance i-uf69zddmom11ci7est12 backing machine \"contract-m2\" exists but is not initialised: it is Stopped; InitializeMachine starts it").into(),
            );
            if let (JsonPattern::Object(fields), JsonPattern::Object(vm)) = (&mut body, vm(Some("False"))) {
                fields.extend(vm);
            }
            i.response
                .status(409)
                .content_type("application/problem+json")
                .json_body(body);
            i
        },
    );
    pact.interaction("get the status of a machine no VM backs", "", |mut i| {
        i.given(format!("no VM backs machine {M3}"));
        // The providerID CreateMachine gave names no instance any more.
        i.request
            .post()
            .path("/v1/machines:status")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M3, Named::WithProviderId));
        i.response
            .status(404)
            .content_type("application/problem+json")
            .json_body(problem(
                404,
                "NotFound",
                5,
                like!("no VM backs machine \"contract-m3\"").into(),
            ));
        i
    });
    pact.interaction("initialize a machine", "", |mut i| {
        i.given(format!("machine {M2} has a VM"));
        i.request
            .post()
            .path("/v1/machines:initialize")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M2, Named::WithProviderId));
        with_provider_id(&mut i.request);
        // Only success counts; the fields are the ones the client's type requires.
        i.response.ok().json_body(json_pattern!({
            "providerID": term!(PROVIDER_ID_PATTERN, PROVIDER_ID),
            "nodeName": like!(NODE_NAME),
        }));
        i
    });
    pact.interaction(
        "initialize a machine whose VM is not running yet",
        "",
        |mut i| {
            i.given(format!("machine {M1} has a stopped VM"));
            // M1 and M3 both meet this answer in the consumer's run.
            let mut body = machine_request(M1, Named::WithProviderId);
            if let JsonPattern::Object(fields) = &mut body
                && let Some(JsonPattern::Object(machine)) = fields.get_mut("machine")
                && let Some(JsonPattern::Object(meta)) = machine.get_mut("metadata")
            {
                meta.insert("name".into(), term!("^contract-m[13]$", M1).into());
            }
            i.request
                .post()
                .path("/v1/machines:initialize")
                .header("authorization", internal_credential())
                .header("content-type", "application/json")
                .json_body(body);
            with_provider_id(&mut i.request);
            i.response
                .status(409)
                .content_type("application/problem+json")
                .json_body(problem(
                    409,
                    "Uninitialized",
                    17,
                    like!("ECS instance i-uf69zddmom11ci7est12 was Stopped and is starting; initialization completes once it is Running").into(),
                ));
            i
        },
    );
    pact.interaction("list the machines of a class", "", |mut i| {
        i.given(format!("machine {M1} has a VM"));
        i.request
            .post()
            .path("/v1/machines:list")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(json_pattern!({"machineClass": stored_class(), "secret": secret()}));
        // providerID → machine name, for every VM of the class.
        i.response.ok().json_body(json_pattern!({
            "machineList": object_matching!(
                json_pattern!({PROVIDER_ID: M1}),
                [
                    each_key(term!(PROVIDER_ID_PATTERN, PROVIDER_ID)),
                    each_value(like!(M1))
                ]
            ),
        }));
        i
    });
    pact.interaction("delete a machine", "", |mut i| {
        i.given(format!("machine {M1} has a VM"));
        i.request
            .post()
            .path("/v1/machines:delete")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M1, Named::WithProviderId));
        with_provider_id(&mut i.request);
        // Only success counts: a JSON object, every field of which the client's type defaults.
        i.response.ok().json_body(json_pattern!({}));
        i
    });
    pact.interaction("delete a VM whose machine is gone", "", |mut i| {
        i.given(format!("machine {M1} has a VM"));
        i.request
            .post()
            .path("/v1/machines:delete")
            .header("authorization", internal_credential())
            .header("content-type", "application/json")
            .json_body(machine_request(M1, Named::Orphan));
        with_provider_id(&mut i.request);
        i.response.ok().json_body(json_pattern!({}));
        i
    });
}

/// The controller's API, with the internal credential.
struct Api {
    url: String,
    http: reqwest::Client,
}

impl Api {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}/v1/namespaces/{NS}/{path}", self.url))
            .bearer_auth(INTERNAL_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.expect("the controller answers");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, plural: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, plural, Some(body)).await
    }

    /// A stored machine, which must exist.
    async fn machine(&self, name: &str) -> Value {
        let (status, body) = self
            .send(reqwest::Method::GET, &format!("machines/{name}"), None)
            .await;
        assert_eq!(status, 200, "machine {name}: {body}");
        body
    }
}

/// One step of `name`'s reconcile, as a worker runs it.
async fn step(controller: &Arc<Controller>, name: &str) -> Option<Duration> {
    machine::reconcile(controller, NS, name)
        .await
        .unwrap_or_else(|e| panic!("reconciling {name}: {e}"))
}

fn class_body(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "berth.io/v1",
        "kind": "MachineClass",
        "metadata": {"name": name},
        "provider": "Alicloud",
        "providerSpec": spec,
        "secretRef": {"name": SECRET},
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_machine_controller_drives_the_driver() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    {
        let mut pact = PactBuilder::new_v4(CONSUMER, PROVIDER);
        pact.with_output_dir(out.path());
        interactions(&mut pact);
        let mock = pact.start_mock_server(None, None);
        // Two listings a millisecond apart are enough to delete an orphan.
        let settings = Settings {
            orphan_interval: Duration::from_millis(1),
            ..Settings::default()
        };
        let (running, controller) =
            spawn::machine_controller_stepped(mock.url().as_str().trim_end_matches('/'), settings)
                .await;
        let api = Api {
            url: running.url.clone(),
            http: reqwest::Client::new(),
        };

        let (status, body) = api
            .post(
                "secrets",
                json!({"metadata": {"name": SECRET}, "stringData": secret_values()}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        // A class is written only once the driver's check passes it ...
        let (status, body) = api
            .post("machineclasses", class_body(CLASS, provider_spec()))
            .await;
        assert_eq!(status, 201, "{body}");
        // ... and a refusal is passed on with its code, naming the field in the class's own terms.
        let (status, body) = api
            .post("machineclasses", class_body(BAD_CLASS, bad_provider_spec()))
            .await;
        assert_eq!(status, 400, "{body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("providerSpec.imageID"),
            "the driver's refusal, in the class's terms: {body}"
        );
        for name in [M1, M2, M3] {
            let (status, body) = api
                .post(
                    "machines",
                    json!({"metadata": {"name": name}, "spec": {"class": {"name": CLASS}}}),
                )
                .await;
            assert_eq!(status, 201, "{body}");
        }

        // One step each, as MCM's creation flow: Creating (with the made-machines record, in one
        // commit), CreateMachine, then at once InitializeMachine.
        // M2: initialised at once → Running with the VM's fields; its conditions come from the
        // first health check, soon after.
        assert_eq!(
            step(&controller, M2).await,
            Some(Settings::default().backoff_base)
        );
        let m2 = api.machine(M2).await;
        assert_eq!(m2["status"]["phase"], "Running", "{m2}");
        assert_eq!(m2["status"]["lastOperation"]["type"], "Initialize", "{m2}");
        assert_eq!(m2["status"]["lastOperation"]["state"], "Successful", "{m2}");
        assert_eq!(m2["status"]["providerID"], PROVIDER_ID, "{m2}");
        assert_eq!(m2["status"]["nodeName"], NODE_NAME, "{m2}");
        // M1 and M3: the VM is not running yet (Uninitialized): Creating, with the fields
        // CreateMachine gave, looked at again after the backoff.
        for name in [M1, M3] {
            assert_eq!(
                step(&controller, name).await,
                Some(Settings::default().backoff_base),
                "{name}"
            );
            let made = api.machine(name).await;
            assert_eq!(made["status"]["phase"], "Creating", "{made}");
            assert_eq!(made["status"]["providerID"], PROVIDER_ID, "{made}");
            assert_eq!(made["status"]["nodeName"], NODE_NAME, "{made}");
            assert_eq!(made["status"]["addresses"][0]["address"], ADDRESS, "{made}");
            assert_eq!(
                made["status"]["lastOperation"]["errorCode"], "Uninitialized",
                "{made}"
            );
        }
        // M1: GetMachineStatus says it runs and is initialised → Running with its conditions.
        step(&controller, M1).await;
        let m1 = api.machine(M1).await;
        assert_eq!(m1["status"]["phase"], "Running", "{m1}");
        assert_eq!(m1["status"]["conditions"][0]["type"], "Initialized", "{m1}");
        assert_eq!(m1["status"]["conditions"][0]["status"], "True", "{m1}");

        // M2's health check: GetMachineStatus says Uninitialized (the VM was stopped behind
        // Berth's back), with the VM: a Running machine whose VM does not run is Unknown.
        step(&controller, M2).await;
        let m2 = api.machine(M2).await;
        assert_eq!(m2["status"]["phase"], "Unknown", "{m2}");
        assert_eq!(m2["status"]["lastOperation"]["type"], "HealthCheck", "{m2}");

        // M3: GetMachineStatus says NotFound while Creating: the VM is to be made again.
        assert_eq!(step(&controller, M3).await, Some(Duration::ZERO));
        let m3 = api.machine(M3).await;
        assert_eq!(m3["status"]["phase"], "Creating", "{m3}");
        assert!(m3["status"]["providerID"].is_null(), "{m3}");
        assert_eq!(m3["status"]["lastOperation"]["type"], "Create", "{m3}");
        assert_eq!(
            m3["status"]["lastOperation"]["errorCode"], "NotFound",
            "{m3}"
        );

        // The orphan collector lists the class: M1's VM backs a machine, so nothing is an orphan.
        let collected = orphans::collect(&controller).await.unwrap();
        assert_eq!(
            (collected.listed, collected.orphans),
            (1, 0),
            "{collected:?}"
        );

        // M1 is deleted: Terminating (no call), DeleteMachine, and the machine is gone.
        let (status, body) = api
            .send(reqwest::Method::DELETE, &format!("machines/{M1}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(step(&controller, M1).await, Some(Duration::ZERO));
        assert_eq!(api.machine(M1).await["status"]["phase"], "Terminating");
        assert_eq!(step(&controller, M1).await, None);
        let (status, _) = api
            .send(reqwest::Method::GET, &format!("machines/{M1}"), None)
            .await;
        assert_eq!(status, 404, "M1 is gone once its VM is deleted");

        // A listing that still shows M1's VM makes it an orphan; the second, an interval later,
        // deletes it through the driver.
        let first = orphans::collect(&controller).await.unwrap();
        assert_eq!((first.orphans, first.deleted), (1, 0), "{first:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = orphans::collect(&controller).await.unwrap();
        assert_eq!((second.orphans, second.deleted), (1, 1), "{second:?}");
    }
    pactfile::check(out.path(), CONSUMER, PROVIDER);
}

/// Sends `body` to the driver's `route` with the internal credential.
async fn driver(url: &str, route: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
    let answer = reqwest::Client::new()
        .post(format!("{url}{route}"))
        .bearer_auth(INTERNAL_TOKEN)
        .json(body)
        .send()
        .await?;
    let status = answer.status().as_u16();
    Ok((status, answer.json().await.unwrap_or(Value::Null)))
}

/// Makes (or adopts) `machine`'s VM through the driver; its providerID.
async fn create(url: &str, machine: &str) -> anyhow::Result<String> {
    let (status, body) = driver(url, "/v1/machines:create", &create_body(machine)).await?;
    anyhow::ensure!(status == 200, "creating {machine}'s VM: {status} {body}");
    body["providerID"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no providerID in {body}"))
}

/// `machine`'s VM, running: made, and started through InitializeMachine if it was stopped.
async fn running_vm(url: &str, machine: &str) -> anyhow::Result<String> {
    let provider_id = create(url, machine).await?;
    let mut body = create_body(machine);
    body["machine"]["spec"]["providerID"] = json!(provider_id);
    for _ in 0..100 {
        let (status, answer) = driver(url, "/v1/machines:status", &body).await?;
        match status {
            200 => return Ok(provider_id),
            409 if answer["code"] == 17 => {
                let (status, answer) = driver(url, "/v1/machines:initialize", &body).await?;
                anyhow::ensure!(
                    status == 200 || answer["code"] == 17,
                    "initializing {machine}: {status} {answer}"
                );
            }
            _ => anyhow::bail!("the status of {machine}: {status} {answer}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("{machine}'s VM did not start")
}

fn with_provider_id(provider_id: String) -> StateValues {
    HashMap::from([("providerID".to_string(), json!(provider_id))])
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_machine_driver_honours_the_controller_pact() {
    let (ecs_emulator, ecs) = spawn::emulator().await;
    let md = spawn::machine_driver(&ecs).await;
    let (url, emulator) = (md.url.clone(), ecs_emulator.clone());
    let states = States::new(move |name, _| {
        let (url, emulator) = (url.clone(), emulator.clone());
        async move {
            let m1_has_vm = format!("machine {M1} has a VM");
            let m2_has_vm = format!("machine {M2} has a VM");
            let m2_stopped = format!("machine {M2} has a stopped VM");
            let m1_stopped = format!("machine {M1} has a stopped VM");
            let m3_has_none = format!("no VM backs machine {M3}");
            if name == m1_has_vm {
                Ok(with_provider_id(create(&url, M1).await?))
            } else if name == m2_has_vm {
                Ok(with_provider_id(running_vm(&url, M2).await?))
            } else if name == m2_stopped || name == m1_stopped {
                let machine = if name == m1_stopped { M1 } else { M2 };
                let provider_id = create(&url, machine).await?;
                let id = provider_id
                    .split_once('.')
                    .map(|(_, id)| id.to_string())
                    .unwrap_or_default();
                // Stopped, and left there: no lifecycle moves a stopped instance on its own.
                emulator.pin_status(&id, "Stopped")?;
                emulator.unpin(&id)?;
                Ok(with_provider_id(provider_id))
            } else if name == m3_has_none {
                let (status, body) = driver(&url, "/v1/machines:delete", &create_body(M3)).await?;
                anyhow::ensure!(status == 200, "deleting {M3}'s VM: {status} {body}");
                Ok(HashMap::new())
            } else {
                anyhow::bail!("unknown provider state {name:?}")
            }
        }
    });
    verify::verify(
        PROVIDER,
        &md.url,
        &pactfile::committed(CONSUMER, PROVIDER),
        states,
    )
    .await;
    // Both deletes named the instance their state made (the providerID the state handed back),
    // so each released it: with the example providerID they would have found nothing to delete.
    assert_eq!(
        ecs_emulator.stats().calls.get("DeleteInstance"),
        Some(&2),
        "{:?}",
        ecs_emulator.stats()
    );
}
