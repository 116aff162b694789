//! Two tokens in different namespaces, through the gateway in front of the real services: neither
//! can see, change or learn anything of the other's objects through any route (issue 30, point 6).
//!
//! Each tenant makes its objects; then the other walks every route of [`probes`] at them, and every
//! answer must be what a caller gets for objects that do not exist (404, `{deleted:false}`, empty
//! lists), or a refusal, never a uid or a label of the owner's. A route is one [`Probe`] in the
//! table: `{ns}` and `{name}` in its path and body stand for the owner's namespace and object.

use berth_tests::{Stack, TENANT_TOKENS};
use serde_json::{Value, json};

/// What an intruder must get.
enum Expect {
    /// This status (the body is checked for leaks either way).
    Status(u16),
    /// This status and exactly this body.
    Body(u16, Value),
}

/// One call an intruder makes at the owner's objects.
struct Probe {
    method: &'static str,
    /// With `{ns}` and `{name}`.
    path: &'static str,
    /// With `{ns}` and `{name}` in its strings.
    body: Option<Value>,
    expect: Expect,
}

fn probe(method: &'static str, path: &'static str, body: Option<Value>, expect: Expect) -> Probe {
    Probe {
        method,
        path,
        body,
        expect,
    }
}

/// Every volume and orchestrator route, as an intruder calls it at the owner's objects. The machine
/// routes join this table once the machine driver stamps namespaces.
fn probes() -> Vec<Probe> {
    use Expect::{Body, Status};
    let empty = json!({"items": []});
    vec![
        // Volumes: another namespace's are missing, lists leave them out.
        probe("GET", "/v1/volumes/{ns}/{name}", None, Status(404)),
        probe("GET", "/v1/volumes/{ns}/{name}/stats", None, Status(404)),
        probe(
            "DELETE",
            "/v1/volumes/{ns}/{name}",
            None,
            Body(200, json!({"deleted": false})),
        ),
        probe(
            "DELETE",
            "/v1/volumes/{ns}/{name}?reclaimPolicy=Retain",
            None,
            Body(200, json!({"deleted": false})),
        ),
        probe(
            "GET",
            "/v1/volumes?namespace={ns}",
            None,
            Body(200, empty.clone()),
        ),
        probe(
            "GET",
            "/v1/volumes?namespace={ns}&labelSelector=owner",
            None,
            Body(200, empty.clone()),
        ),
        probe("GET", "/v1/volumes", None, Status(200)),
        probe("GET", "/v1/volumes?labelSelector=owner", None, Status(200)),
        probe("GET", "/v1/volumes?limit=1", None, Status(200)),
        // Making (or re-making, with another spec) one in the owner's namespace: refused, naming
        // only the namespace the intruder named.
        probe(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "{name}", "namespace": "{ns}", "capacity": "1Mi"})),
            Status(403),
        ),
        probe(
            "POST",
            "/v1/volumes",
            Some(
                json!({"name": "{name}", "namespace": "{ns}", "capacity": "2Mi", "labels": {"owner": "intruder"}}),
            ),
            Status(403),
        ),
        // Orphans belong to no namespace.
        probe("GET", "/v1/orphans", None, Status(403)),
        // Orchestrators are cluster-wide: reading them is open, changing them is not.
        probe(
            "PUT",
            "/v1/orchestrators/tenancy-local",
            Some(json!({"kind": "nomad"})),
            Status(403),
        ),
        probe(
            "PUT",
            "/v1/orchestrators/intruder",
            Some(json!({"kind": "nomad"})),
            Status(403),
        ),
        probe(
            "DELETE",
            "/v1/orchestrators/tenancy-local",
            None,
            Status(403),
        ),
        probe("GET", "/v1/orchestrators/tenancy-local", None, Status(200)),
        probe("GET", "/v1/orchestrators", None, Status(200)),
        probe("GET", "/v1/orchestrators:default", None, Status(200)),
        probe("GET", "/v1/orchestrators:detect", None, Status(200)),
        probe("GET", "/v1/kinds", None, Status(200)),
    ]
}

fn fill(text: &str, ns: &str, name: &str) -> String {
    text.replace("{ns}", ns).replace("{name}", name)
}

fn fill_json(value: &Value, ns: &str, name: &str) -> Value {
    serde_json::from_str(&fill(&value.to_string(), ns, name)).unwrap()
}

/// What a tenant made: its volume as it read it back.
struct Owned {
    namespace: &'static str,
    volume: Value,
}

async fn send(
    stack: &Stack,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut request = stack.call(method, path, Some(token));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn two_tenants_cannot_see_change_or_learn_anything_of_each_others_objects() {
    let stack = Stack::spawn(&[]).await;
    let base = stack.data.path().join("volumes/tenancy");
    let (status, body) = send(
        &stack,
        "PUT",
        "/v1/orchestrators/tenancy-local",
        "tok-admin",
        Some(&json!({"kind": "local", "default": true, "config": {"basePath": base.to_str().unwrap()}})),
    )
    .await;
    assert!(status == 201 || status == 200, "{status} {body}");

    // Each tenant makes a volume of the same name, and one only it has, labelled as its own.
    let mut owned = Vec::new();
    for (token, namespace) in TENANT_TOKENS {
        for name in ["data", &format!("only-{namespace}")] {
            let (status, body) = send(
                &stack,
                "POST",
                "/v1/volumes",
                token,
                Some(
                    &json!({"name": name, "namespace": namespace, "capacity": "1Mi",
                    "labels": {"owner": format!("{namespace}-secret-label")}}),
                ),
            )
            .await;
            assert_eq!(status, 201, "{token}: {body}");
            owned.push((
                token,
                Owned {
                    namespace,
                    volume: serde_json::from_str(&body).unwrap(),
                },
            ));
        }
    }

    for (owner_token, owner_ns) in TENANT_TOKENS {
        let (intruder, _) = TENANT_TOKENS
            .iter()
            .find(|(t, _)| *t != owner_token)
            .unwrap();
        let secrets: Vec<String> = owned
            .iter()
            .filter(|(t, _)| *t == owner_token)
            .flat_map(|(_, o)| {
                [
                    o.volume["metadata"]["uid"].as_str().unwrap().to_string(),
                    format!("{}-secret-label", o.namespace),
                ]
            })
            .collect();
        for name in ["data", &format!("only-{owner_ns}")] {
            for p in probes() {
                let path = fill(p.path, owner_ns, name);
                let body = p.body.as_ref().map(|b| fill_json(b, owner_ns, name));
                let what = format!("{intruder} {} {path}", p.method);
                let (status, text) = send(&stack, p.method, &path, intruder, body.as_ref()).await;
                match &p.expect {
                    Expect::Status(want) => assert_eq!(status, *want, "{what}: {text}"),
                    Expect::Body(want, value) => {
                        assert_eq!(status, *want, "{what}: {text}");
                        assert_eq!(
                            serde_json::from_str::<Value>(&text).unwrap(),
                            *value,
                            "{what}"
                        );
                    }
                }
                for secret in &secrets {
                    assert!(
                        !text.contains(secret.as_str()),
                        "{what} disclosed {secret}: {text}"
                    );
                }
                // Lists of everything the intruder may see hold nothing of the owner's namespace.
                if p.method == "GET" && path.starts_with("/v1/volumes") && !path.contains(owner_ns)
                {
                    assert!(!text.contains(owner_ns), "{what}: {text}");
                }
            }
        }
    }

    // Nothing changed: each tenant reads its volumes exactly as it made them.
    for (token, o) in &owned {
        let name = o.volume["metadata"]["name"].as_str().unwrap();
        let (status, body) = send(
            &stack,
            "GET",
            &format!("/v1/volumes/{}/{name}", o.namespace),
            token,
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            o.volume,
            "{token} {name}"
        );
    }
    let (_, orchestrator) = send(
        &stack,
        "GET",
        "/v1/orchestrators/tenancy-local",
        "tok-admin",
        None,
    )
    .await;
    assert!(
        orchestrator.contains("\"kind\":\"local\""),
        "{orchestrator}"
    );
    let (_, intruders) = send(
        &stack,
        "GET",
        "/v1/orchestrators/intruder",
        "tok-admin",
        None,
    )
    .await;
    assert!(intruders.contains("\"status\":404"), "{intruders}");
}
