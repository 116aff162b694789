//! The typed `client` crate → the gateway: what it sends, and every answer field it decodes.
//!
//! The consumer is the real typed client (the one the CLI and storage-ops use) with a user token,
//! pointed at a Pact mock standing in for the gateway. The answers state exactly the fields the
//! client's types require (the rest have defaults), with type or pattern matchers, and the
//! problem+json fields it reads from a refusal. The provider is the real gateway over the real
//! services, all in this process on port 0 (`berth_tests::Stack`); states are set through the
//! gateway's own API with the admin token.

use std::collections::HashMap;
use std::sync::Arc;

use berth_contracts::pactfile;
use berth_contracts::verify::{self, States};
use client::{ClientOptions, ServiceClient};
use pact_consumer::prelude::*;
use serde_json::json;

const CONSUMER: &str = "berth-client";
const PROVIDER: &str = "gateway";
const TOKEN: &str = "tok-admin";
const BASE_PATH: &str = "/tmp/berth-contracts/client-volumes";
/// Where the CLI provider test's volumes go: its own, as its stack runs beside the client's.
const CLI_BASE_PATH: &str = "/tmp/berth-contracts/cli-volumes";
/// The CLI's consumer name: it reads through the same client, but prints fields of its own choosing.
const CLI: &str = "berth-cli";

fn bearer() -> StringPattern {
    term!("^Bearer \\S+$", format!("Bearer {TOKEN}")).into()
}

fn kind() -> JsonPattern {
    term!("^(local|docker|kubernetes|nomad)$", "local").into()
}

fn orchestrator() -> JsonPattern {
    json_pattern!({
        "name": like!("contract-local"),
        "kind": kind(),
        "storageOps": like!(true),
    })
}

fn volume() -> JsonPattern {
    json_pattern!({
        "metadata": {
            "name": like!("contract-vol"),
            "namespace": like!("default"),
            "uid": like!("3f1c2a4e-0000-4000-8000-000000000000"),
            "creationTimestamp": term!("^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?Z$", "2026-01-01T00:00:00Z"),
        },
        "spec": {
            "orchestrator": like!("contract-local"),
            "capacity": like!("1Mi"),
            "capacityBytes": like!(1048576),
            "replicas": like!(1),
        },
        "status": {
            "phase": term!("^(Pending|Provisioning|Ready|Failed|Deleting)$", "Ready"),
        },
    })
}

/// The machine request the client sends: the emulator's Alicloud class and key.
fn machine_request() -> domain::machine::MachineRequest {
    serde_json::from_value(berth_tests::machine_request("contract-m1")).unwrap()
}

fn not_found() -> JsonPattern {
    json_pattern!({
        "title": like!("NotFound"),
        "status": 404,
        "code": 5,
        "detail": like!("'contract-missing' is not a registered orchestration provider"),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_client_reads_what_the_gateway_answers() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    {
        let mut pact = PactBuilder::new_v4(CONSUMER, PROVIDER);
        pact.with_output_dir(out.path());
        pact.interaction("list the orchestrator kinds", "", |mut i| {
            i.request
                .get()
                .path("/v1/kinds")
                .header("authorization", bearer());
            i.response.ok().json_body(each_like!({
                "kind": kind(),
                "storageOps": like!(true),
                "description": like!("directories on this host"),
                "configSchema": like!({"type": "object"}),
            }));
            i
        });
        pact.interaction("register an orchestrator", "", |mut i| {
            i.given("no orchestrator contract-local is registered");
            i.request
                .put()
                .path("/v1/orchestrators/contract-local")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(json!({"kind": "local", "config": {"basePath": BASE_PATH}}));
            i.response.status(201).json_body(orchestrator());
            i
        });
        pact.interaction("get an orchestrator", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .get()
                .path("/v1/orchestrators/contract-local")
                .header("authorization", bearer());
            i.response.ok().json_body(orchestrator());
            i
        });
        pact.interaction("get an orchestrator that is not registered", "", |mut i| {
            i.request
                .get()
                .path("/v1/orchestrators/contract-missing")
                .header("authorization", bearer());
            i.response
                .status(404)
                .content_type("application/problem+json")
                .json_body(not_found());
            i
        });
        pact.interaction("add a volume", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .post()
                .path("/v1/volumes")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(json!({"name": "contract-vol", "capacity": "1Mi", "orchestrator": "contract-local"}));
            i.response.status(201).json_body(volume());
            i
        });
        pact.interaction("read a volume", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .get()
                .path("/v1/volumes/default/contract-vol")
                .header("authorization", bearer());
            i.response.ok().json_body(volume());
            i
        });
        pact.interaction("list the volumes of a namespace", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .get()
                .path("/v1/volumes")
                .query_param("namespace", "default")
                .header("authorization", bearer());
            i.response
                .ok()
                .json_body(json_pattern!({"items": each_like!(volume())}));
            i
        });
        pact.interaction("delete a volume", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .delete()
                .path("/v1/volumes/default/contract-vol")
                .header("authorization", bearer());
            i.response
                .ok()
                .json_body(json_pattern!({"deleted": like!(true)}));
            i
        });
        pact.interaction("list the machine providers", "", |mut i| {
            i.request
                .get()
                .path("/v1/providers")
                .header("authorization", bearer());
            i.response.ok().json_body(json_pattern!({
                "providers": each_like!({"name": like!("Alicloud"), "description": like!("Alibaba Cloud ECS")}),
            }));
            i
        });
        pact.interaction("detect the environment's kind", "", |mut i| {
            i.request
                .get()
                .path("/v1/orchestrators:detect")
                .header("authorization", bearer());
            i.response.ok().json_body(json_pattern!({
                "kind": kind(),
                "rule": term!("^(kubernetesServiceHost|nomadAddr|dockerEngine|fallback)$", "fallback"),
                "reason": like!("no Kubernetes, Nomad or Docker Engine found"),
            }));
            i
        });
        pact.interaction("get the default orchestrator", "", |mut i| {
            i.request
                .get()
                .path("/v1/orchestrators:default")
                .header("authorization", bearer());
            i.response.ok().json_body(orchestrator());
            i
        });
        pact.interaction("ask whether an orchestrator is registered", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .method("HEAD")
                .path("/v1/orchestrators/contract-local")
                .header("authorization", bearer());
            i.response.ok();
            i
        });
        pact.interaction("deregister an orchestrator", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .delete()
                .path("/v1/orchestrators/contract-local")
                .header("authorization", bearer());
            i.response
                .ok()
                .json_body(json_pattern!({"deleted": like!(true)}));
            i
        });
        pact.interaction("a volume's stats", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .get()
                .path("/v1/volumes/default/contract-vol/stats")
                .header("authorization", bearer());
            i.response.ok().json_body(json_pattern!({
                "namespace": like!("default"),
                "name": like!("contract-vol"),
                "uid": like!("3f1c2a4e-0000-4000-8000-000000000000"),
                "capacityBytes": like!(1048576),
                "location": like!("/var/lib/berth/volumes/default/contract-vol"),
                "source": like!("filesystem"),
            }));
            i
        });
        pact.interaction("scan for orphans", "", |mut i| {
            i.request
                .get()
                .path("/v1/orphans")
                .header("authorization", bearer());
            i.response.ok().json_body(json_pattern!({
                "items": like!([]),
                "policy": like!("report"),
            }));
            i
        });
        let machine = machine_request();
        let body = serde_json::to_value(&machine).unwrap();
        let machine_status = || {
            json_pattern!({
                "providerID": term!("^[a-z0-9-]+\\.i-[0-9a-z]+$", "cn-shanghai.i-uf69zddmom11ci7est12"),
                "nodeName": like!("izuf69zddmom11ci7est12z"),
            })
        };
        pact.interaction("create a machine", "", |mut i| {
            i.request
                .post()
                .path("/v1/machines:create")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(body.clone());
            i.response.ok().json_body(machine_status());
            i
        });
        pact.interaction("get a machine's status", "", |mut i| {
            i.given("machine contract-m1 has a VM");
            i.request
                .post()
                .path("/v1/machines:status")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(body.clone());
            i.response.ok().json_body(machine_status());
            i
        });
        pact.interaction("delete a machine", "", |mut i| {
            i.given("machine contract-m1 has a VM");
            i.request
                .post()
                .path("/v1/machines:delete")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(body.clone());
            i.response.ok().json_body(json_pattern!({
                "lastKnownState": like!("ECS instance i-uf69zddmom11ci7est12 deleted for machine contract-m1"),
            }));
            i
        });
        pact.interaction("map volume ids", "", |mut i| {
            i.request
                .post()
                .path("/v1/volume-ids")
                .header("authorization", bearer())
                .header("content-type", "application/json")
                .json_body(json!({"pvSpecs": [{"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-contract"}}]}));
            i.response.ok().json_body(json_pattern!({"volumeIDs": each_like!("d-contract")}));
            i
        });
        let mock = pact.start_mock_server(None, None);
        let base = mock.url().to_string();
        let options = ClientOptions {
            bearer: Some(service_kit::SecretString::new(TOKEN)),
            attempts: 1,
            ..ClientOptions::default()
        };
        let service = ServiceClient::new(base.trim_end_matches('/'), options);
        let registry = client::registry::Client::new(service.clone());
        let storage = client::storage::Client::new(service.clone());
        let machines = client::machines::Client::new(service);

        let kinds = registry.kinds().await.unwrap();
        assert!(kinds[0].storage_ops);
        let registered = registry
            .register(
                "contract-local",
                &serde_json::from_value(
                    json!({"kind": "local", "config": {"basePath": BASE_PATH}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(registered.name, "contract-local");
        assert_eq!(
            registry.get("contract-local").await.unwrap().name,
            "contract-local"
        );
        let missing = registry.get("contract-missing").await.unwrap_err();
        assert_eq!(missing.code(), domain::Code::NotFound);
        let profile = serde_json::from_value(
            json!({"name": "contract-vol", "capacity": "1Mi", "orchestrator": "contract-local"}),
        )
        .unwrap();
        let (added, created) = storage.add(&profile).await.unwrap();
        assert!(created);
        assert_eq!(added.metadata.name, "contract-vol");
        assert_eq!(
            storage
                .get("default", "contract-vol")
                .await
                .unwrap()
                .metadata
                .namespace,
            "default"
        );
        let page = storage
            .list(&client::storage::ListParams {
                namespace: Some("default".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1);
        assert!(
            storage
                .delete("default", "contract-vol")
                .await
                .unwrap()
                .deleted
        );
        assert!(!machines.providers().await.unwrap().providers.is_empty());
        let detected = registry.detect().await.unwrap();
        assert!(!detected.reason.is_empty());
        assert_eq!(
            registry.default_orchestrator().await.unwrap().name,
            "contract-local"
        );
        assert!(registry.has("contract-local").await.unwrap());
        assert!(
            registry
                .deregister_reporting("contract-local")
                .await
                .unwrap()
        );
        let stats = storage.stats("default", "contract-vol").await.unwrap();
        assert_eq!(stats.capacity_bytes, 1048576);
        assert!(storage.orphans().await.unwrap().items.is_empty());
        let created = machines.create(&machine).await.unwrap();
        assert!(created.provider_id.contains(".i-"));
        assert_eq!(
            machines.status(&machine).await.unwrap().provider_id,
            created.provider_id
        );
        assert!(
            !machines
                .delete(&machine)
                .await
                .unwrap()
                .last_known_state
                .is_empty()
        );
        let pv: domain::machine::PersistentVolumeSpec = serde_json::from_value(
            json!({"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-contract"}}),
        )
        .unwrap();
        assert_eq!(machines.volume_ids(&[pv]).await.unwrap(), ["d-contract"]);
    }
    pactfile::check(out.path(), CONSUMER, PROVIDER);
}

/// States set through the gateway's own API with the admin token.
fn gateway_states(gateway: &str, base_path: &'static str) -> Arc<States> {
    let gw = gateway.to_string();
    States::new(move |name, _| {
        let gw = gw.clone();
        async move {
            let http = reqwest::Client::new();
            let orchestrator = format!("{gw}/v1/orchestrators/contract-local");
            let volume = format!("{gw}/v1/volumes/default/contract-vol");
            let register = || {
                http.put(&orchestrator)
                    .bearer_auth(TOKEN)
                    .json(&json!({"kind": "local", "config": {"basePath": base_path}}))
                    .send()
            };
            let answers = match name.as_str() {
                "no orchestrator contract-local is registered" => vec![
                    http.delete(&volume).bearer_auth(TOKEN).send().await?,
                    http.delete(&orchestrator).bearer_auth(TOKEN).send().await?,
                ],
                "the local orchestrator contract-local is registered" => vec![
                    register().await?,
                    http.delete(&volume).bearer_auth(TOKEN).send().await?,
                ],
                "volume default/contract-vol exists" => vec![
                    register().await?,
                    http.post(format!("{gw}/v1/volumes"))
                        .bearer_auth(TOKEN)
                        .json(&json!({"name": "contract-vol", "capacity": "1Mi", "orchestrator": "contract-local"}))
                        .send()
                        .await?,
                ],
                "machine contract-m1 has a VM" => vec![
                    http.post(format!("{gw}/v1/machines:create"))
                        .bearer_auth(TOKEN)
                        .json(&berth_tests::machine_request("contract-m1"))
                        .send()
                        .await?,
                ],
                other => anyhow::bail!("unknown provider state {other:?}"),
            };
            for answer in answers {
                let status = answer.status();
                anyhow::ensure!(
                    status.is_success(),
                    "setting up {name:?}: {status} {}",
                    answer.text().await?
                );
            }
            Ok(HashMap::new())
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_gateway_over_the_real_services_honours_the_client_pact() {
    let stack = Arc::new(berth_tests::Stack::spawn(&[("BERTH_LOCAL_BASE_PATH", BASE_PATH)]).await);
    let states = gateway_states(&stack.gateway, BASE_PATH);
    verify::verify(
        PROVIDER,
        &stack.gateway,
        &pactfile::committed(CONSUMER, PROVIDER),
        states,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_cli_reads_what_the_gateway_answers() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    {
        let mut pact = PactBuilder::new_v4(CLI, PROVIDER);
        pact.with_output_dir(out.path());
        pact.interaction("list the volumes of a namespace", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .get()
                .path("/v1/volumes")
                .query_param("namespace", "default")
                .header("authorization", bearer());
            i.response
                .ok()
                .json_body(json_pattern!({"items": each_like!(volume())}));
            i
        });
        pact.interaction("read a volume", "", |mut i| {
            i.given("volume default/contract-vol exists");
            i.request
                .get()
                .path("/v1/volumes/default/contract-vol")
                .header("authorization", bearer());
            i.response.ok().json_body(volume());
            i
        });
        pact.interaction("list the orchestrators", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .get()
                .path("/v1/orchestrators")
                .header("authorization", bearer());
            i.response
                .ok()
                .json_body(json_pattern!({"items": each_like!(orchestrator())}));
            i
        });
        pact.interaction("get an orchestrator that is not registered", "", |mut i| {
            i.request
                .get()
                .path("/v1/orchestrators/contract-missing")
                .header("authorization", bearer());
            i.response
                .status(404)
                .content_type("application/problem+json")
                .json_body(not_found());
            i
        });
        let mock = pact.start_mock_server(None, None);
        let server = mock.url().to_string().trim_end_matches('/').to_string();
        let berth = |args: &[&str]| {
            let mut argv: Vec<std::ffi::OsString> = vec!["berth".into()];
            argv.extend(args.iter().map(Into::into));
            argv.extend(["--server", &server, "--token", TOKEN].map(Into::into));
            berth::run(argv)
        };
        assert_eq!(
            berth(&["volume", "list"]).await,
            std::process::ExitCode::SUCCESS
        );
        assert_eq!(
            berth(&["volume", "get", "contract-vol"]).await,
            std::process::ExitCode::SUCCESS
        );
        assert_eq!(
            berth(&["orchestrator", "list"]).await,
            std::process::ExitCode::SUCCESS
        );
        // A refusal is exit 1, read from the problem's code.
        assert_eq!(
            berth(&["orchestrator", "get", "contract-missing"]).await,
            std::process::ExitCode::from(1)
        );
    }
    pactfile::check(out.path(), CLI, PROVIDER);
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_gateway_over_the_real_services_honours_the_cli_pact() {
    let stack =
        Arc::new(berth_tests::Stack::spawn(&[("BERTH_LOCAL_BASE_PATH", CLI_BASE_PATH)]).await);
    let states = gateway_states(&stack.gateway, CLI_BASE_PATH);
    verify::verify(
        PROVIDER,
        &stack.gateway,
        &pactfile::committed(CLI, PROVIDER),
        states,
    )
    .await;
}
