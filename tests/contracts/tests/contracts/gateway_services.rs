//! gateway → machine-driver, orchestrator-registry, storage-ops, machine-controller: what the
//! gateway forwards.
//!
//! The consumer is the real gateway, its three upstream URLs pointing at Pact mock servers; a
//! caller with a user token and its own trace context drives each route through it. The pacts say
//! which method and path reach which service, that the caller's token is replaced by the internal
//! credential, that `traceparent` and `x-request-id` travel on, that bodies pass unchanged, and
//! that the gateway's `/readyz` asks each service's. The gateway reads no answer field, only the
//! status, so the answers state only that.

use std::collections::HashMap;
use std::sync::Arc;

use berth_contracts::pactfile;
use berth_contracts::spawn::{self, INTERNAL_TOKEN};
use berth_contracts::verify::{self, States};
use pact_consumer::prelude::*;
use serde_json::{Value, json};

const CONSUMER: &str = "gateway";
/// A caller's trace context, as a W3C `traceparent`.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const REQUEST_ID: &str = "contract-request-1";
/// The base path the example orchestrator registration points at (allowed by the provider's
/// `BERTH_LOCAL_ROOTS`).
const BASE_PATH: &str = "/tmp/berth-contracts/gateway-volumes";

/// One forwarded call: the state it needs, method, path, body and the status the gateway relays.
struct Call {
    description: &'static str,
    state: Option<&'static str>,
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
    status: u16,
}

fn call(
    description: &'static str,
    state: Option<&'static str>,
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
    status: u16,
) -> Call {
    Call {
        description,
        state,
        method,
        path,
        body,
        status,
    }
}

fn machine_calls() -> Vec<Call> {
    let request = berth_tests::machine_request("contract-m1");
    let list = json!({"machineClass": request["machineClass"], "secret": request["secret"]});
    vec![
        call(
            "list the providers",
            None,
            "GET",
            "/v1/providers",
            None,
            200,
        ),
        call(
            "create a machine",
            None,
            "POST",
            "/v1/machines:create",
            Some(request.clone()),
            200,
        ),
        call(
            "get a machine's status",
            Some("machine contract-m1 has a VM"),
            "POST",
            "/v1/machines:status",
            Some(request.clone()),
            200,
        ),
        call(
            "initialize a machine",
            Some("machine contract-m1 has a VM"),
            "POST",
            "/v1/machines:initialize",
            Some(request.clone()),
            200,
        ),
        call(
            "list the machines of a class",
            Some("machine contract-m1 has a VM"),
            "POST",
            "/v1/machines:list",
            Some(list),
            200,
        ),
        call(
            "delete a machine",
            Some("machine contract-m1 has a VM"),
            "POST",
            "/v1/machines:delete",
            Some(request),
            200,
        ),
        call(
            "map volume ids",
            None,
            "POST",
            "/v1/volume-ids",
            Some(
                json!({"pvSpecs": [{"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-1"}}]}),
            ),
            200,
        ),
        call("ask readiness", None, "GET", "/readyz", None, 200),
    ]
}

fn registry_calls() -> Vec<Call> {
    vec![
        call("list the kinds", None, "GET", "/v1/kinds", None, 200),
        call(
            "register an orchestrator",
            Some("no orchestrator contract-local is registered"),
            "PUT",
            "/v1/orchestrators/contract-local",
            Some(json!({"kind": "local", "config": {"basePath": BASE_PATH}})),
            201,
        ),
        call(
            "get an orchestrator",
            Some("the local orchestrator contract-local is registered"),
            "GET",
            "/v1/orchestrators/contract-local",
            None,
            200,
        ),
        call(
            "ask whether an orchestrator is registered",
            Some("the local orchestrator contract-local is registered"),
            "HEAD",
            "/v1/orchestrators/contract-local",
            None,
            200,
        ),
        call(
            "list the orchestrators",
            None,
            "GET",
            "/v1/orchestrators",
            None,
            200,
        ),
        call(
            "get the default orchestrator",
            None,
            "GET",
            "/v1/orchestrators:default",
            None,
            200,
        ),
        call(
            "detect the environment's kind",
            None,
            "GET",
            "/v1/orchestrators:detect",
            None,
            200,
        ),
        call(
            "deregister an orchestrator",
            Some("the local orchestrator contract-local is registered"),
            "DELETE",
            "/v1/orchestrators/contract-local",
            None,
            200,
        ),
        call("ask readiness", None, "GET", "/readyz", None, 200),
    ]
}

fn storage_calls() -> Vec<Call> {
    vec![
        call(
            "add a volume",
            Some("the local orchestrator contract-local is registered"),
            "POST",
            "/v1/volumes",
            Some(
                json!({"name": "contract-vol", "capacity": "1Mi", "orchestrator": "contract-local"}),
            ),
            201,
        ),
        call(
            "read a volume",
            Some("volume default/contract-vol exists"),
            "GET",
            "/v1/volumes/default/contract-vol",
            None,
            200,
        ),
        call(
            "list volumes",
            Some("volume default/contract-vol exists"),
            "GET",
            "/v1/volumes",
            None,
            200,
        ),
        call(
            "a volume's stats",
            Some("volume default/contract-vol exists"),
            "GET",
            "/v1/volumes/default/contract-vol/stats",
            None,
            200,
        ),
        call(
            "delete a volume",
            Some("volume default/contract-vol exists"),
            "DELETE",
            "/v1/volumes/default/contract-vol",
            None,
            200,
        ),
        call("scan for orphans", None, "GET", "/v1/orphans", None, 200),
        call("ask readiness", None, "GET", "/readyz", None, 200),
    ]
}

/// The machine controller's routes, through one kind (secrets need no driver behind the provider;
/// every kind shares the routes' handling).
fn controller_calls() -> Vec<Call> {
    const ITEM: &str = "/v1/namespaces/default/secrets/contract-secret";
    let secret = json!({"metadata": {"name": "contract-secret"}, "stringData": {"k": "v"}});
    vec![
        call(
            "make a secret",
            Some("no secret contract-secret"),
            "POST",
            "/v1/namespaces/default/secrets",
            Some(secret.clone()),
            201,
        ),
        call(
            "read a secret",
            Some("secret contract-secret exists"),
            "GET",
            ITEM,
            None,
            200,
        ),
        call(
            "list machines",
            None,
            "GET",
            "/v1/namespaces/default/machines",
            None,
            200,
        ),
        call(
            "replace a secret",
            Some("secret contract-secret exists"),
            "PUT",
            ITEM,
            Some(secret),
            200,
        ),
        call(
            "label a secret",
            Some("secret contract-secret exists"),
            "PATCH",
            ITEM,
            Some(json!({"metadata": {"labels": {"team": "a"}}})),
            200,
        ),
        call(
            "delete a secret",
            Some("secret contract-secret exists"),
            "DELETE",
            ITEM,
            None,
            200,
        ),
        call("ask readiness", None, "GET", "/readyz", None, 200),
    ]
}

/// The pact the gateway has with `provider`, one interaction per call.
fn pact_for(provider: &str, calls: &[Call], out: &std::path::Path) -> PactBuilder {
    let mut pact = PactBuilder::new_v4(CONSUMER, provider);
    pact.with_output_dir(out);
    for c in calls {
        pact.interaction(c.description, "", |mut i| {
            if let Some(state) = c.state {
                i.given(state);
            }
            let r = &mut i.request;
            r.method(c.method).path(c.path);
            if c.path != "/readyz" {
                // Forwarded calls carry the internal credential instead of the caller's token,
                // and the caller's trace context and request id.
                r.header("authorization", format!("Bearer {INTERNAL_TOKEN}"))
                    .header(
                        "traceparent",
                        term!("^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$", TRACEPARENT),
                    )
                    .header("x-request-id", term!("^[A-Za-z0-9._-]{1,128}$", REQUEST_ID));
            }
            if let Some(body) = &c.body {
                r.header("content-type", "application/json")
                    .json_body(body.clone());
            }
            i.response.status(c.status);
            i
        });
    }
    pact
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_gateway_forwards_every_route_to_its_service() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    let sets = [
        ("machine-driver", machine_calls()),
        ("orchestrator-registry", registry_calls()),
        ("storage-ops", storage_calls()),
        ("machine-controller", controller_calls()),
    ];
    {
        let mocks: Vec<_> = sets
            .iter()
            .map(|(provider, calls)| {
                pact_for(provider, calls, out.path()).start_mock_server(None, None)
            })
            .collect();
        let url = |i: usize| mocks[i].url().to_string().trim_end_matches('/').to_string();
        let gw = spawn::gateway(&url(0), &url(1), &url(2), &url(3)).await;
        let http = reqwest::Client::new();
        for (_, calls) in &sets {
            for c in calls.iter().filter(|c| c.path != "/readyz") {
                let mut r = http
                    .request(c.method.parse().unwrap(), format!("{}{}", gw.url, c.path))
                    .bearer_auth("tok-admin")
                    .header("traceparent", TRACEPARENT)
                    .header("x-request-id", REQUEST_ID);
                if let Some(body) = &c.body {
                    r = r.json(body);
                }
                let answer = r.send().await.unwrap();
                assert_eq!(
                    answer.status().as_u16(),
                    c.status,
                    "{} {}: {}",
                    c.method,
                    c.path,
                    answer.text().await.unwrap()
                );
            }
        }
        let ready = http.get(format!("{}/readyz", gw.url)).send().await.unwrap();
        assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());
    }
    for (provider, _) in &sets {
        pactfile::check(out.path(), CONSUMER, provider);
    }
}

async fn ok(answer: reqwest::Response, what: &str) -> anyhow::Result<()> {
    let status = answer.status();
    anyhow::ensure!(
        status.is_success(),
        "setting up {what:?}: {status} {}",
        answer.text().await?
    );
    Ok(())
}

/// Registers (or forgets) `contract-local` on the registry at `registry`.
async fn orchestrator_state(registry: &str, name: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let item = format!("{registry}/v1/orchestrators/contract-local");
    let answer = match name {
        "the local orchestrator contract-local is registered" => {
            http.put(&item)
                .bearer_auth(INTERNAL_TOKEN)
                .json(&json!({"kind": "local", "config": {"basePath": BASE_PATH}}))
                .send()
                .await?
        }
        "no orchestrator contract-local is registered" => {
            http.delete(&item)
                .bearer_auth(INTERNAL_TOKEN)
                .send()
                .await?
        }
        other => anyhow::bail!("unknown provider state {other:?}"),
    };
    ok(answer, name).await
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_registry_honours_the_gateway_pact() {
    let registry = spawn::registry(&[("BERTH_LOCAL_ROOTS", BASE_PATH)]).await;
    let url = registry.url.clone();
    let states = States::new(move |name, _| {
        let url = url.clone();
        async move {
            orchestrator_state(&url, &name).await?;
            Ok(HashMap::new())
        }
    });
    let pact = pactfile::committed(CONSUMER, "orchestrator-registry");
    verify::verify("orchestrator-registry", &registry.url, &pact, states).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_storage_ops_honours_the_gateway_pact() {
    let roots = [("BERTH_LOCAL_ROOTS", BASE_PATH)];
    let registry = spawn::registry(&roots).await;
    let so = Arc::new(spawn::storage_ops(&registry.url, &roots).await);
    let (reg, url) = (registry.url.clone(), so.url.clone());
    let states = States::new(move |name, _| {
        let (reg, url) = (reg.clone(), url.clone());
        async move {
            match name.as_str() {
                "volume default/contract-vol exists" => {
                    orchestrator_state(&reg, "the local orchestrator contract-local is registered")
                        .await?;
                    let answer = reqwest::Client::new()
                        .post(format!("{url}/v1/volumes"))
                        .bearer_auth(INTERNAL_TOKEN)
                        .json(&json!({"name": "contract-vol", "capacity": "1Mi", "orchestrator": "contract-local"}))
                        .send()
                        .await?;
                    ok(answer, &name).await?;
                }
                "the local orchestrator contract-local is registered" => {
                    // A volume an earlier interaction made would make "add" answer 200, not 201.
                    let answer = reqwest::Client::new()
                        .delete(format!("{url}/v1/volumes/default/contract-vol"))
                        .bearer_auth(INTERNAL_TOKEN)
                        .send()
                        .await?;
                    ok(answer, &name).await?;
                    orchestrator_state(&reg, &name).await?;
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            }
            Ok(HashMap::new())
        }
    });
    let pact = pactfile::committed(CONSUMER, "storage-ops");
    verify::verify("storage-ops", &so.url, &pact, states).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_machine_driver_honours_the_gateway_pact() {
    let (_emulator, ecs) = spawn::emulator().await;
    let md = spawn::machine_driver(&ecs).await;
    let url = md.url.clone();
    let states = States::new(move |name, _| {
        let url = url.clone();
        async move {
            match name.as_str() {
                "machine contract-m1 has a VM" => {
                    let answer = reqwest::Client::new()
                        .post(format!("{url}/v1/machines:create"))
                        .bearer_auth(INTERNAL_TOKEN)
                        .json(&berth_tests::machine_request("contract-m1"))
                        .send()
                        .await?;
                    ok(answer, &name).await?;
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            }
            Ok(HashMap::new())
        }
    });
    let pact = pactfile::committed(CONSUMER, "machine-driver");
    verify::verify("machine-driver", &md.url, &pact, states).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_machine_controller_honours_the_gateway_pact() {
    // Secrets need no driver: nothing listens at its address.
    let mc = spawn::machine_controller("http://127.0.0.1:9").await;
    let url = mc.url.clone();
    let states = States::new(move |name, _| {
        let url = url.clone();
        async move {
            let item = format!("{url}/v1/namespaces/default/secrets/contract-secret");
            let http = reqwest::Client::new();
            match name.as_str() {
                "secret contract-secret exists" => {
                    let answer = http
                        .put(&item)
                        .bearer_auth(INTERNAL_TOKEN)
                        .json(&json!({"metadata": {"name": "contract-secret"}, "stringData": {"k": "v"}}))
                        .send()
                        .await?;
                    ok(answer, &name).await?;
                }
                "no secret contract-secret" => {
                    let answer = http
                        .delete(&item)
                        .bearer_auth(INTERNAL_TOKEN)
                        .send()
                        .await?;
                    anyhow::ensure!(
                        answer.status().is_success() || answer.status() == 404,
                        "setting up {name:?}: {}",
                        answer.status()
                    );
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            }
            Ok(HashMap::new())
        }
    });
    let pact = pactfile::committed(CONSUMER, "machine-controller");
    verify::verify("machine-controller", &mc.url, &pact, states).await;
}
