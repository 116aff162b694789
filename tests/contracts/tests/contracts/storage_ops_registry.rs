//! storage-ops → orchestrator-registry: resolving the orchestrator a volume names, the default one
//! when it names none, a name the registry does not know, and the list the orphan scan walks.
//!
//! Storage ops reads an orchestrator's `name`, `kind`, `config` and `storageOps` (what it needs to
//! pick and build a backend) and, from a refusal, the problem's `status`, `title` and `code`.

use berth_contracts::pactfile;
use berth_contracts::spawn::{self, INTERNAL_TOKEN};
use berth_contracts::verify::{self, States};
use pact_consumer::prelude::*;
use serde_json::json;

const CONSUMER: &str = "storage-ops";
const PROVIDER: &str = "orchestrator-registry";
/// The base path the pact's example orchestrators point at; the consumer's storage-ops allows it.
const BASE_PATH: &str = "/tmp/berth-contracts/volumes";

fn orchestrator(name: &str) -> JsonPattern {
    json_pattern!({
        "name": like!(name),
        "kind": term!("^(local|docker|kubernetes|nomad)$", "local"),
        "config": like!({"basePath": BASE_PATH}),
        "storageOps": like!(true),
    })
}

fn internal_credential() -> StringPattern {
    term!("^Bearer .+$", format!("Bearer {INTERNAL_TOKEN}")).into()
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_storage_ops_resolves_orchestrators_through_the_registry() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    {
        let mut pact = PactBuilder::new_v4(CONSUMER, PROVIDER);
        pact.with_output_dir(out.path());
        pact.interaction("get a registered orchestrator", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .get()
                .path("/v1/orchestrators/contract-local")
                .header("authorization", internal_credential());
            i.response
                .ok()
                .content_type("application/json")
                .json_body(orchestrator("contract-local"));
            i
        });
        pact.interaction("get the default orchestrator", "", |mut i| {
            i.given("a default local orchestrator is registered");
            i.request
                .get()
                .path("/v1/orchestrators:default")
                .header("authorization", internal_credential());
            i.response
                .ok()
                .content_type("application/json")
                .json_body(orchestrator("contract-default"));
            i
        });
        pact.interaction("get an orchestrator that is not registered", "", |mut i| {
            i.given("no orchestrator contract-missing is registered");
            i.request
                .get()
                .path("/v1/orchestrators/contract-missing")
                .header("authorization", internal_credential());
            i.response
                .status(404)
                .content_type("application/problem+json")
                .json_body(json_pattern!({
                    "title": like!("NotFound"),
                    "status": 404,
                    "code": 5,
                    "detail": like!("'contract-missing' is not a registered orchestration provider"),
                }));
            i
        });
        pact.interaction("list the orchestrators", "", |mut i| {
            i.given("the local orchestrator contract-local is registered");
            i.request
                .get()
                .path("/v1/orchestrators")
                .header("authorization", internal_credential());
            i.response
                .ok()
                .content_type("application/json")
                .json_body(json_pattern!({"items": each_like!(orchestrator("contract-local"))}));
            i
        });
        let mock = pact.start_mock_server(None, None);
        let registry = mock.url().to_string();
        let so = spawn::storage_ops(
            registry.trim_end_matches('/'),
            &[("BERTH_LOCAL_ROOTS", BASE_PATH)],
        )
        .await;
        let http = reqwest::Client::new();
        let post = |body: serde_json::Value| {
            http.post(format!("{}/v1/volumes", so.url))
                .bearer_auth(INTERNAL_TOKEN)
                .json(&body)
                .send()
        };
        let named = post(
            json!({"name": "pact-named", "capacity": "1Mi", "orchestrator": "contract-local"}),
        )
        .await
        .unwrap();
        assert_eq!(named.status(), 201, "{}", named.text().await.unwrap());
        let defaulted = post(json!({"name": "pact-default", "capacity": "1Mi"}))
            .await
            .unwrap();
        assert_eq!(
            defaulted.status(),
            201,
            "{}",
            defaulted.text().await.unwrap()
        );
        let missing = post(
            json!({"name": "pact-missing", "capacity": "1Mi", "orchestrator": "contract-missing"}),
        )
        .await
        .unwrap();
        assert_eq!(missing.status(), 412);
        let problem: serde_json::Value = missing.json().await.unwrap();
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("not a registered orchestration provider"),
            "{problem}"
        );
        let orphans = http
            .get(format!("{}/v1/orphans", so.url))
            .bearer_auth(INTERNAL_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(orphans.status(), 200, "{}", orphans.text().await.unwrap());
        let _ = std::fs::remove_dir_all(BASE_PATH);
    }
    pactfile::check(out.path(), CONSUMER, PROVIDER);
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_registry_honours_the_storage_ops_pact() {
    let registry = spawn::registry(&[]).await;
    let url = registry.url.clone();
    let volumes = registry.data.path().join("volumes").display().to_string();
    let states = States::new(move |name, _params| {
        let url = url.clone();
        let volumes = volumes.clone();
        async move {
            let http = reqwest::Client::new();
            let register = |name: &str, default: bool| {
                http.put(format!("{url}/v1/orchestrators/{name}"))
                    .bearer_auth(INTERNAL_TOKEN)
                    // Each in its own directory beside the first start's default: local base paths
                    // may not nest.
                    .json(&json!({"kind": "local", "config": {"basePath": format!("{volumes}/{name}")}, "default": default}))
                    .send()
            };
            let answer = match name.as_str() {
                "the local orchestrator contract-local is registered" => {
                    register("contract-local", false).await?
                }
                "a default local orchestrator is registered" => {
                    register("contract-default", true).await?
                }
                "no orchestrator contract-missing is registered" => {
                    http.delete(format!("{url}/v1/orchestrators/contract-missing"))
                        .bearer_auth(INTERNAL_TOKEN)
                        .send()
                        .await?
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            };
            anyhow::ensure!(
                answer.status().is_success(),
                "setting {name:?} up: {}",
                answer.text().await?
            );
            Ok(Default::default())
        }
    });
    verify::verify(
        PROVIDER,
        &registry.url,
        &pactfile::committed(CONSUMER, PROVIDER),
        states,
    )
    .await;
}
