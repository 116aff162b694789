//! Two tokens in different namespaces, through the gateway in front of the real services: neither
//! can see, change or learn anything of the other's objects through any route (issue 30, point 6).
//!
//! Each tenant makes its objects; then the other walks every route of [`probes`] at them, and every
//! answer must be what a caller gets for objects that do not exist (404, `{deleted:false}`, empty
//! lists), or a refusal, never a uid or a label of the owner's. A route is one [`Probe`] in the
//! table: `{ns}` and `{name}` in its path and body stand for the owner's namespace and object,
//! `{own}` for the intruder's own namespace, and `{uid}` and `{pid}` for the UID and providerID of
//! the owner's machine (which an intruder might learn elsewhere: a UID or an instance id is no
//! secret to count on, so only the namespace may keep the intruder out).
//!
//! Machines are Alicloud ones on the stack's ECS emulator. Their names are one per cluster, so each
//! tenant's machine has a name of its own (`m-{ns}`) and [`machine_probes`] is walked at that name
//! only. `/v1/volume-ids` is left out: it maps the persistent volume specs in its request to disk
//! ids and reads no machine, volume or namespace, so there is nothing of another tenant's to reach.

use berth_tests::{AlicloudMachine, ECS_KEY_ID, ECS_KEY_SECRET, Stack, TENANT_TOKENS};
use serde_json::{Value, json};

/// What an intruder must get.
enum Expect {
    /// This status (the body is checked for leaks either way).
    Status(u16),
    /// This status and exactly this body (with the placeholders of [`Probe`] in its strings).
    Body(u16, Value),
    /// This status and a problem whose `detail` is exactly this (with the placeholders of [`Probe`]).
    Detail(u16, &'static str),
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

/// Every volume and orchestrator route, as an intruder calls it at the owner's objects.
fn probes() -> Vec<Probe> {
    use Expect::{Body, Status};
    // Another namespace lists as an empty one, and tells no version of its own.
    let empty = json!({"metadata": {"resourceVersion": "0"}, "items": []});
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
        // Its watch streams bookmarks only (timeoutSeconds=1: the stream ends), with no version.
        probe(
            "GET",
            "/v1/volumes?namespace={ns}&watch=true&timeoutSeconds=1",
            None,
            Status(200),
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
        // The gateway's counts are every namespace's calls together: a tenant learns from them
        // when another works, so its token is refused them.
        probe("GET", "/metrics", None, Status(403)),
    ]
}

/// An Alicloud machine request for the emulator: machine `name` in namespace `ns`, of a class
/// whose cluster tag is `shoot--{cluster}` and which tags its VMs with `label`.
fn machine(name: &str, ns: &str, uid: &str, cluster: &str, label: &str) -> Value {
    let mut req = berth_tests::alicloud_machine_request(&AlicloudMachine {
        name,
        uid,
        cluster: &format!("shoot--{cluster}"),
        class: &format!("class-{cluster}"),
        key_id: ECS_KEY_ID,
        key_secret: ECS_KEY_SECRET,
        user_data: "#!/bin/sh\necho hi\n",
    });
    req["machine"]["metadata"]["namespace"] = json!(ns);
    req["machineClass"]["providerSpec"]["tags"]["owner"] = json!(label);
    req
}

/// The class and secret of [`machine`]'s request: a ListMachines body.
fn machine_class(cluster: &str) -> Value {
    let mut req = machine("-", "-", "-", cluster, "intruder");
    req.as_object_mut().unwrap().remove("machine");
    req
}

/// The 409 of a create that sends the UID another machine's VM was made for (its ClientToken
/// cannot make a second): it names neither that machine nor its namespace.
const UID_TAKEN: &str = "machine.metadata.uid: the UID already stands for another machine's VM in this cluster; machine \"{name}\" needs a UID of its own";

/// The intruder's UID: it does not know the owner's.
const INTRUDER_UID: &str = "uid-intruder";

/// Every machine route, as an intruder calls it at the owner's machine `{name}`: named in the
/// owner's namespace (turned away before any provider call), and named in the intruder's own (the
/// provider finds the owner's VM by name and must not take it as the intruder's).
fn machine_probes() -> Vec<Probe> {
    use Expect::{Body, Detail, Status};
    let missing = "VM instance not found backing this machine object \"{name}\"";
    let nothing =
        json!({"lastKnownState": "no ECS instance backs machine {name}; nothing to release"});
    let empty = json!({"machineList": {}});
    let at = |ns: &str, cluster: &str| machine("{name}", ns, INTRUDER_UID, cluster, "intruder");
    // In namespace `ns`, of the owner's cluster, with the owner's UID (and providerID).
    let known = |ns: &str, with_provider_id: bool| {
        let mut req = machine("{name}", ns, "{uid}", "{ns}", "intruder");
        if with_provider_id {
            req["machine"]["spec"] = json!({"providerID": "{pid}"});
        }
        req
    };
    vec![
        // In the owner's namespace: as if the machine did not exist.
        probe(
            "POST",
            "/v1/machines:status",
            Some(at("{ns}", "{ns}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(at("{ns}", "{ns}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(at("{ns}", "{ns}")),
            Body(200, nothing.clone()),
        ),
        // Except a create, which names the namespace itself: refused for it, saying no more.
        probe(
            "POST",
            "/v1/machines:create",
            Some(at("{ns}", "{ns}")),
            Detail(
                403,
                "machine.metadata.namespace: the token may not act in namespace \"{ns}\"",
            ),
        ),
        // In the intruder's own namespace, of the owner's cluster (its class's cluster tag): the
        // owner's VM of that name is another tenant's, so it is missing. Of the intruder's own
        // cluster: nothing by that name there.
        probe(
            "POST",
            "/v1/machines:status",
            Some(at("{own}", "{ns}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:status",
            Some(at("{own}", "{own}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(at("{own}", "{ns}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(at("{own}", "{own}")),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(at("{own}", "{ns}")),
            Body(200, nothing.clone()),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(at("{own}", "{own}")),
            Body(200, nothing.clone()),
        ),
        // (Creating the owner's name in the intruder's own namespace, of the owner's cluster, makes
        // the intruder a VM of its own, as another namespace's VMs are not there for it: the test
        // does it after the walk, as it makes a VM.)
        // Even knowing the owner's UID, and its providerID too: only the namespace stamp stands
        // between the intruder and the VM.
        probe(
            "POST",
            "/v1/machines:status",
            Some(known("{own}", false)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:status",
            Some(known("{own}", true)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:status",
            Some(known("{ns}", true)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(known("{own}", false)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(known("{own}", true)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:initialize",
            Some(known("{ns}", true)),
            Detail(404, missing),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(known("{own}", false)),
            Body(200, nothing.clone()),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(known("{own}", true)),
            Body(200, nothing.clone()),
        ),
        probe(
            "POST",
            "/v1/machines:delete",
            Some(known("{ns}", true)),
            Body(200, nothing.clone()),
        ),
        probe(
            "POST",
            "/v1/machines:create",
            Some(known("{own}", false)),
            Detail(409, UID_TAKEN),
        ),
        probe(
            "POST",
            "/v1/machines:create",
            Some(known("{own}", true)),
            Detail(409, UID_TAKEN),
        ),
        probe(
            "POST",
            "/v1/machines:create",
            Some(known("{ns}", true)),
            Detail(
                403,
                "machine.metadata.namespace: the token may not act in namespace \"{ns}\"",
            ),
        ),
        // (Creating the name in the intruder's own cluster is no clash, names being one per
        // cluster: the test does it after the walk, as it makes a VM.)
        // Listing the owner's cluster: none of its VMs; the intruder's own: only its own.
        probe(
            "POST",
            "/v1/machines:list",
            Some(machine_class("{ns}")),
            Body(200, empty),
        ),
        probe(
            "POST",
            "/v1/machines:list",
            Some(machine_class("{own}")),
            Status(200),
        ),
    ]
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

/// A request body for a failure message: a machine request by its machine and class tags (not its
/// secret), anything else as it is.
fn described(body: &Value) -> String {
    match body.get("machineClass") {
        Some(class) => {
            json!({"machine": body.get("machine"), "tags": class["providerSpec"]["tags"]})
                .to_string()
        }
        None => body.to_string(),
    }
}

/// Who walks the probes at whom.
struct Walk<'a> {
    intruder: &'a str,
    /// The intruder's own namespace.
    own: &'a str,
    owner_ns: &'a str,
    /// The owner's machine's UID and providerID, which an intruder may have learnt elsewhere.
    uid: &'a str,
    pid: &'a str,
    /// What no answer may contain.
    secrets: &'a [String],
}

impl Walk<'_> {
    /// `text` with the placeholders filled in, at the owner's object `name`.
    fn fill(&self, text: &str, name: &str) -> String {
        text.replace("{ns}", self.owner_ns)
            .replace("{name}", name)
            .replace("{own}", self.own)
            .replace("{uid}", self.uid)
            .replace("{pid}", self.pid)
    }

    fn fill_json(&self, value: &Value, name: &str) -> Value {
        serde_json::from_str(&self.fill(&value.to_string(), name)).unwrap()
    }

    /// Makes `probes` at the owner's object `name` and checks every answer.
    async fn walk(&self, stack: &Stack, name: &str, probes: Vec<Probe>) {
        let ns = self.owner_ns;
        for p in probes {
            let path = self.fill(p.path, name);
            let body = p.body.as_ref().map(|b| self.fill_json(b, name));
            let what = format!(
                "{} {} {path} {}",
                self.intruder,
                p.method,
                body.as_ref().map(described).unwrap_or_default()
            );
            let (status, text) = send(stack, p.method, &path, self.intruder, body.as_ref()).await;
            match &p.expect {
                Expect::Status(want) => assert_eq!(status, *want, "{what}: {text}"),
                Expect::Body(want, value) => {
                    assert_eq!(status, *want, "{what}: {text}");
                    assert_eq!(
                        serde_json::from_str::<Value>(&text).unwrap(),
                        self.fill_json(value, name),
                        "{what}"
                    );
                }
                Expect::Detail(want, detail) => {
                    assert_eq!(status, *want, "{what}: {text}");
                    let problem: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(
                        problem["detail"],
                        json!(self.fill(detail, name)),
                        "{what}: {text}"
                    );
                }
            }
            for secret in self.secrets {
                assert!(
                    !text.contains(secret.as_str()),
                    "{what} disclosed {secret}: {text}"
                );
            }
            // Lists of everything the intruder may see hold nothing of the owner's namespace.
            if p.method == "GET" && path.starts_with("/v1/volumes") && !path.contains(ns) {
                assert!(!text.contains(ns), "{what}: {text}");
            }
        }
    }
}

/// The owner's machine `m-{ns}`'s request, as the owner makes it.
fn owners_machine(ns: &str) -> Value {
    machine(
        &format!("m-{ns}"),
        ns,
        &format!("uid-{ns}-secret-machine"),
        ns,
        &format!("{ns}-secret-label"),
    )
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

    // And a machine, initialised, as it reads its status back.
    let mut machines = Vec::new();
    for (token, namespace) in TENANT_TOKENS {
        let req = owners_machine(namespace);
        for route in ["/v1/machines:create", "/v1/machines:initialize"] {
            let (status, body) = send(&stack, "POST", route, token, Some(&req)).await;
            assert_eq!(status, 200, "{token} {route}: {body}");
        }
        let (status, body) = send(&stack, "POST", "/v1/machines:status", token, Some(&req)).await;
        assert_eq!(status, 200, "{token}: {body}");
        let vm: Value = serde_json::from_str(&body).unwrap();
        machines.push((token, namespace, req, vm));
    }

    for (owner_token, owner_ns) in TENANT_TOKENS {
        let (intruder, own) = TENANT_TOKENS
            .iter()
            .find(|(t, _)| *t != owner_token)
            .unwrap();
        let (_, _, req, vm) = machines.iter().find(|(t, ..)| *t == owner_token).unwrap();
        let provider_id = vm["providerID"].as_str().unwrap();
        let instance_id = provider_id.rsplit(['.', '/']).next().unwrap();
        assert!(instance_id.starts_with("i-"), "{provider_id}");
        let secrets: Vec<String> = owned
            .iter()
            .filter(|(t, _)| *t == owner_token)
            .flat_map(|(_, o)| {
                [
                    o.volume["metadata"]["uid"].as_str().unwrap().to_string(),
                    format!("{}-secret-label", o.namespace),
                ]
            })
            .chain([
                req["machine"]["metadata"]["uid"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                instance_id.to_string(),
                vm["nodeName"].as_str().unwrap().to_string(),
                format!("kubernetes.io/cluster/shoot--{owner_ns}"),
            ])
            .collect();
        let walk = Walk {
            intruder,
            own,
            owner_ns,
            uid: req["machine"]["metadata"]["uid"].as_str().unwrap(),
            pid: provider_id,
            secrets: &secrets,
        };
        for name in ["data", &format!("only-{owner_ns}")] {
            walk.walk(&stack, name, probes()).await;
        }
        walk.walk(&stack, &format!("m-{owner_ns}"), machine_probes())
            .await;

        // The owner's machine name in the intruder's own namespace is free, in the owner's
        // cluster (another namespace's VMs are not there for it: a 409 there told the intruder
        // the owner's machine existed) as in its own: a VM of the intruder's each time, never the
        // owner's adopted; the intruder then releases it, and only it.
        let beside = machine(
            &format!("m-{owner_ns}"),
            own,
            &format!("{INTRUDER_UID}-beside"),
            owner_ns,
            "intruder",
        );
        for route in ["/v1/machines:create", "/v1/machines:delete"] {
            let (status, body) = send(&stack, "POST", route, intruder, Some(&beside)).await;
            assert_eq!(status, 200, "{intruder} {route}: {body}");
            assert!(
                !body.contains(instance_id),
                "{intruder} got or released {instance_id}: {body}"
            );
        }
        let theirs = machine(&format!("m-{owner_ns}"), own, INTRUDER_UID, own, "intruder");
        let (status, body) = send(
            &stack,
            "POST",
            "/v1/machines:create",
            intruder,
            Some(&theirs),
        )
        .await;
        assert_eq!(status, 200, "{intruder}: {body}");
        for secret in &secrets {
            assert!(
                !body.contains(secret.as_str()),
                "{intruder} got {secret}: {body}"
            );
        }
        let (status, body) = send(
            &stack,
            "POST",
            "/v1/machines:delete",
            intruder,
            Some(&theirs),
        )
        .await;
        assert_eq!(status, 200, "{intruder}: {body}");
        assert!(
            !body.contains(instance_id),
            "{intruder} released {instance_id}: {body}"
        );
    }

    // Nothing changed: each tenant reads its volumes exactly as it made them, its machine's status
    // as before, and lists its machine, the only one of its cluster.
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
    for (token, namespace, req, vm) in &machines {
        let (status, body) = send(&stack, "POST", "/v1/machines:status", token, Some(req)).await;
        assert_eq!(status, 200, "{token}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            *vm,
            "{token}"
        );
        let (status, body) = send(
            &stack,
            "POST",
            "/v1/machines:list",
            token,
            Some(&machine_class(namespace)),
        )
        .await;
        assert_eq!(status, 200, "{token}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"machineList": {vm["providerID"].as_str().unwrap(): format!("m-{namespace}")}}),
            "{token}"
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
