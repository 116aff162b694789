//! The Alicloud client (`crates/alicloud`) → ECS, with the ECS emulator as provider.
//!
//! The consumer is the real client, signing with signature V1 as the machine driver does, in front
//! of a Pact mock through a small tap that keeps every body it sends. The pact states the actions,
//! every parameter the client sends (the per-call timestamp, nonce and signature as patterns) and
//! the answer fields the client reads. The provider replay re-signs each request with the
//! emulator's key ([`ReSign`]), so the emulator's real signature check runs. And because client and
//! emulator could share a mistake, the pact and the client's real requests are held to Alibaba's
//! published facts too (`pact_agrees_with_the_published_facts`, and the tap's check).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alicloud::{Credentials, DescribeInstances, Ecs, EcsConfig, Region, RunInstances, Tag};
use berth_contracts::ecs::{
    self, COMMON_PARAMS, ReSign, SDK_ANSWER_FIELDS, SDK_STATUSES, TIMESTAMP_REGEX,
};
use berth_contracts::pactfile;
use berth_contracts::spawn::{self, ECS_KEY_ID, ECS_KEY_SECRET};
use berth_contracts::verify::{self, States};
use pact_consumer::builders::InteractionBuilder;
use pact_consumer::prelude::*;
use pact_models::matchingrules::{MatchingRule, RuleLogic};
use pact_models::path_exp::DocPath;
use serde_json::Value;

const CONSUMER: &str = "alicloud";
const PROVIDER: &str = "ecs-emulator";
const REGION: &str = "cn-shanghai";
/// The example per-call values the pact records; the real ones only have to match the patterns.
const EXAMPLE_TIMESTAMP: &str = "2026-01-01T00:00:00Z";
const EXAMPLE_NONCE: &str = "0123456789abcdef0123456789abcdef";
/// The placeholder id of the instance the "delete" interaction removes; the provider state makes a
/// real one and [`ReSign`] swaps it in.
const PLACEHOLDER_ID: &str = "i-contract0000000001";
const MISSING_ID: &str = "i-contract0000000404";
const FORM: &str = "application/x-www-form-urlencoded";

/// The parameters of one call: the action's own plus the common ones, with the example timestamp
/// and nonce, signed with the emulator's key by the documented algorithm.
fn signed_example(action: &str, own: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut p: BTreeMap<String, String> = own
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in [
        ("Action", action),
        ("Version", alicloud::API_VERSION),
        ("Format", "JSON"),
        ("AccessKeyId", ECS_KEY_ID),
        ("SignatureMethod", "HMAC-SHA1"),
        ("SignatureVersion", "1.0"),
        ("SignatureNonce", EXAMPLE_NONCE),
        ("Timestamp", EXAMPLE_TIMESTAMP),
    ] {
        p.insert(k.into(), v.into());
    }
    let signature = ecs::v1_signature("POST", &p, ECS_KEY_SECRET);
    p.insert("Signature".into(), signature);
    p
}

/// Adds a signed V1 form request for `action` to an interaction: the per-call values as
/// patterns, every other parameter as it is.
fn signed_request(i: &mut InteractionBuilder, action: &str, own: &[(&str, &str)]) {
    let params = signed_example(action, own);
    let r = &mut i.request;
    r.post()
        .path("/")
        .header("content-type", FORM)
        .body2(ecs::form_body(&params), FORM.to_string());
    let (_, rules) = r.body_and_matching_rules_mut();
    let body = rules.add_category("body");
    for (field, regex) in [
        ("Timestamp", TIMESTAMP_REGEX),
        ("SignatureNonce", "^[0-9A-Za-z-]{16,64}$"),
        ("Signature", "^[A-Za-z0-9+/]{27}=$"),
    ] {
        body.add_rule(
            DocPath::root().join(field),
            MatchingRule::Regex(regex.into()),
            RuleLogic::And,
        );
    }
}

/// A tap in front of the mock: forwards each call and keeps its form body, so the client's real
/// signatures can be checked against the documented algorithm.
async fn tap(target: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let keep = seen.clone();
    let http = reqwest::Client::new();
    let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (keep, http, target) = (keep.clone(), http.clone(), target.clone());
        async move {
            let content_type = request
                .headers()
                .get("content-type")
                .cloned()
                .unwrap_or(axum::http::HeaderValue::from_static(FORM));
            let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap();
            keep.lock()
                .unwrap()
                .push(String::from_utf8(body.to_vec()).unwrap());
            let answer = http
                .post(format!("{target}/"))
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let content_type = answer.headers().get("content-type").cloned();
            let bytes = answer.bytes().await.unwrap();
            let mut response = axum::response::Response::new(axum::body::Body::from(bytes));
            *response.status_mut() = status;
            if let Some(ct) = content_type {
                response.headers_mut().insert("content-type", ct);
            }
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, seen)
}

fn run_params() -> Vec<(&'static str, &'static str)> {
    vec![
        ("RegionId", REGION),
        ("ImageId", "m-image"),
        ("InstanceType", "ecs.g6.large"),
        ("Amount", "1"),
        ("ClientToken", "contract-client-token"),
        ("ZoneId", "cn-shanghai-b"),
        ("SecurityGroupId", "sg-1"),
        ("VSwitchId", "vsw-1"),
        ("InstanceName", "contract-vm"),
        ("KeyPairName", "kp"),
        ("SystemDisk.Category", "cloud_efficiency"),
        ("SystemDisk.Size", "50"),
        ("Tag.1.Key", "kubernetes.io/cluster/contract"),
        ("Tag.1.Value", "1"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_alicloud_client_calls_ecs() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    let sent;
    {
        let mut pact = PactBuilder::new_v4(CONSUMER, PROVIDER);
        pact.with_output_dir(out.path());
        pact.interaction(
            "RunInstances for one named, tagged instance",
            "",
            |mut i| {
                signed_request(&mut i, "RunInstances", &run_params());
                i.response.ok().json_body(json_pattern!({
                    "RequestId": like!("4C2A3D1E-0000-4000-8000-000000000000"),
                    "InstanceIdSets": {"InstanceIdSet": each_like!("i-uf69zddmom11ci7est12")},
                }));
                i
            },
        );
        pact.interaction("DescribeInstances by name", "", |mut i| {
            i.given("an instance named contract-vm runs");
            signed_request(
                &mut i,
                "DescribeInstances",
                &[
                    ("RegionId", REGION),
                    ("InstanceName", "contract-vm"),
                    ("MaxResults", "100"),
                ],
            );
            i.response.ok().json_body(json_pattern!({
                "RequestId": like!("4C2A3D1E-0000-4000-8000-000000000001"),
                "Instances": {"Instance": each_like!({
                    "InstanceId": like!("i-uf69zddmom11ci7est12"),
                    "InstanceName": like!("contract-vm"),
                    "Status": term!("^(Pending|Running|Starting|Stopping|Stopped)$", "Running"),
                })},
            }));
            i
        });
        pact.interaction("DeleteInstance, forced", "", |mut i| {
            i.given("instance i-contract0000000001 exists");
            signed_request(
                &mut i,
                "DeleteInstance",
                &[("InstanceId", PLACEHOLDER_ID), ("Force", "true")],
            );
            i.response.ok().json_body(json_pattern!({
                "RequestId": like!("4C2A3D1E-0000-4000-8000-000000000002"),
            }));
            i
        });
        pact.interaction(
            "DeleteInstance of an instance that does not exist",
            "",
            |mut i| {
                signed_request(
                    &mut i,
                    "DeleteInstance",
                    &[("InstanceId", MISSING_ID), ("Force", "true")],
                );
                i.response.status(404).json_body(json_pattern!({
                    "RequestId": like!("4C2A3D1E-0000-4000-8000-000000000003"),
                    "Code": "InvalidInstanceId.NotFound",
                    "Message": like!("The specified InstanceId does not exist."),
                }));
                i
            },
        );
        let mock = pact.start_mock_server(None, None);
        let (tap_url, seen) = tap(mock.url().to_string().trim_end_matches('/').to_string()).await;
        sent = seen;
        let mut config = EcsConfig {
            endpoint: Some(tap_url),
            ..EcsConfig::default()
        };
        config.retry.max_attempts = 1;
        let ecs = Ecs::new(config).unwrap();
        let client = ecs.client(
            &Region::parse(REGION).unwrap(),
            Credentials::new(ECS_KEY_ID, ECS_KEY_SECRET),
        );
        let deadline = || alicloud::deadline_in(Duration::from_secs(20));
        let run = RunInstances {
            image_id: "m-image".into(),
            instance_type: "ecs.g6.large".into(),
            zone_id: Some("cn-shanghai-b".into()),
            security_group_id: Some("sg-1".into()),
            v_switch_id: Some("vsw-1".into()),
            instance_name: Some("contract-vm".into()),
            key_pair_name: Some("kp".into()),
            system_disk: Some(alicloud::SystemDisk {
                category: Some("cloud_efficiency".into()),
                size_gib: Some(50),
                ..Default::default()
            }),
            tags: vec![Tag::new("kubernetes.io/cluster/contract", "1")],
            client_token: Some("contract-client-token".into()),
            ..Default::default()
        };
        let created = client.run_instances(&run, deadline()).await.unwrap();
        assert_eq!(created.instance_ids.len(), 1);
        let found = client
            .describe_all_instances(
                &DescribeInstances {
                    instance_name: Some("contract-vm".into()),
                    ..Default::default()
                },
                deadline(),
            )
            .await
            .unwrap();
        assert_eq!(found[0].instance_name, "contract-vm");
        client
            .delete_instance(PLACEHOLDER_ID, true, deadline())
            .await
            .unwrap();
        let missing = client
            .delete_instance(MISSING_ID, true, deadline())
            .await
            .unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
    }
    pactfile::check(out.path(), CONSUMER, PROVIDER);
    // The client's real requests, not only the pact's examples, carry signatures the documented
    // algorithm reproduces.
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 4, "one request per interaction");
    for body in sent.iter() {
        let params = ecs::parse_form(body);
        assert_eq!(
            params["Signature"],
            ecs::v1_signature("POST", &params, ECS_KEY_SECRET),
            "the client signed {} differently from Alibaba's documented algorithm",
            params["Action"]
        );
    }
}

/// The committed pact against what Alibaba publishes: the common parameters and their documented
/// values, signatures the documented algorithm reproduces (its published example is reproduced by
/// `berth_contracts::ecs`' own test), and answer fields spelt as the official SDK's models spell
/// them.
#[test]
fn pact_agrees_with_the_published_facts() {
    let pact = pactfile::read(&pactfile::committed(CONSUMER, PROVIDER));
    let interactions = pactfile::interactions(&pact);
    assert!(!interactions.is_empty());
    for interaction in &interactions {
        let what = interaction["description"].as_str().unwrap_or("?");
        let request = &interaction["request"];
        let form = request["body"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: a form body"));
        let params = ecs::parse_form(form);
        for (name, fixed) in COMMON_PARAMS {
            let value = params
                .get(*name)
                .unwrap_or_else(|| panic!("{what}: the common parameter {name} is missing"));
            if let Some(fixed) = fixed {
                assert_eq!(value, fixed, "{what}: {name}");
            }
        }
        assert_eq!(
            params["Signature"],
            ecs::v1_signature("POST", &params, ECS_KEY_SECRET),
            "{what}: the example's signature is not the documented one"
        );
        let timestamp_rule = &request["matchingRules"]["body"]["$.Timestamp"]["matchers"][0];
        assert_eq!(
            timestamp_rule["regex"], TIMESTAMP_REGEX,
            "{what}: Timestamp's pattern"
        );
        let response = &interaction["response"];
        let status = response["status"].as_u64().unwrap_or(200);
        let action = if (200..300).contains(&status) {
            params["Action"].as_str()
        } else {
            "error"
        };
        let allowed = SDK_ANSWER_FIELDS
            .iter()
            .find(|(a, _)| *a == action)
            .unwrap_or_else(|| panic!("{what}: no SDK answer shape for {action}"))
            .1;
        let body = &response["body"]["content"];
        for path in ecs::field_paths(body) {
            assert!(
                allowed.contains(&path.as_str()),
                "{what}: the answer field {path} is not in the official SDK's {action} answer"
            );
        }
        for instance in body["Instances"]["Instance"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let status = instance["Status"].as_str().unwrap_or_default();
            assert!(SDK_STATUSES.contains(&status), "{what}: status {status}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_ecs_emulator_honours_the_alicloud_pact() {
    let (_emulator, url) = spawn::emulator().await;
    let resign = ReSign::new(ECS_KEY_SECRET);
    let ids = resign.ids.clone();
    // States are set through ECS's own API: RunInstances, signed by the client under test's
    // sibling, the emulator's real check included.
    let ecs = Ecs::new(EcsConfig {
        endpoint: Some(url.clone()),
        ..EcsConfig::default()
    })
    .unwrap();
    let client = ecs.client(
        &Region::parse(REGION).unwrap(),
        Credentials::new(ECS_KEY_ID, ECS_KEY_SECRET),
    );
    let states = States::new(move |name, _| {
        let (client, ids) = (client.clone(), ids.clone());
        async move {
            let run = |name: &str| RunInstances {
                image_id: "m-image".into(),
                instance_type: "ecs.g6.large".into(),
                zone_id: Some("cn-shanghai-b".into()),
                instance_name: Some(name.into()),
                ..Default::default()
            };
            let deadline = alicloud::deadline_in(Duration::from_secs(20));
            match name.as_str() {
                "an instance named contract-vm runs" => {
                    client.run_instances(&run("contract-vm"), deadline).await?;
                }
                "instance i-contract0000000001 exists" => {
                    let made = client
                        .run_instances(&run("contract-delete"), deadline)
                        .await?;
                    let id =
                        made.instance_ids.first().cloned().ok_or_else(|| {
                            anyhow::anyhow!("RunInstances answered no instance id")
                        })?;
                    ids.lock().unwrap().insert(PLACEHOLDER_ID.into(), id);
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            }
            Ok(HashMap::<String, Value>::new())
        }
    });
    verify::verify_filtered(
        PROVIDER,
        &url,
        &pactfile::committed(CONSUMER, PROVIDER),
        states,
        Some(resign),
    )
    .await;
}
