//! storage-ops → the Kubernetes API (issue 31): what the kubernetes backend asks of an API server
//! and reads from its answers, written by the real backend (kube-rs) against a Pact mock, and
//! replayed against the stand-in API server (`kube-standin`), whose own strictness is held to the
//! official client (tests/python) and schemas (tests/tests/kubernetes_objects.rs).
//!
//! Each operation of the backend is its own exchange: make a claim (GET finds none, POST makes it),
//! read a Pending one and its events, read a Bound one, delete one a pod still mounts (GET, DELETE
//! with the uid as precondition: it stays, terminating), let a retained one go (GET, merge PATCH
//! taking the managed-by label off), and list this stack's claims for the orphan scan.

use berth_contracts::pactfile;
use berth_contracts::verify::{self, States};
use domain::orchestrator::KubernetesConfig;
use kube_standin::StandIn;
use pact_consumer::prelude::*;
use serde_json::json;
use std::sync::Arc;
use storage_ops::backend::kubernetes::{KubernetesBackend, SharedClient};
use storage_ops::backend::{Backend, ObjectRef, Observed};

const CONSUMER: &str = "storage-ops";
const PROVIDER: &str = "kubernetes-api";
const NS: &str = "berth-volumes";
const CLAIMS: &str = "/api/v1/namespaces/berth-volumes/persistentvolumeclaims";
const INSTANCE: &str = "pact-instance";

fn uid(name: &str) -> String {
    // Fixed per claim, so the pact's examples and the provider's states agree.
    let n: u32 = name.bytes().map(u32::from).sum();
    format!("00000000-0000-4000-8000-{n:012}")
}

fn object(name: &str) -> ObjectRef {
    ObjectRef {
        uid: uid(name),
        namespace: "pact".into(),
        name: name.into(),
        capacity_bytes: 1 << 30,
        file: false,
    }
}

/// A claim as the API server answers it, made by Berth for `name`.
fn claim(name: &str, phase: &str) -> JsonPattern {
    let mut status = json_pattern!({"phase": like!(phase)});
    if phase == "Bound" {
        status = json_pattern!({
            "phase": like!("Bound"),
            "capacity": {"storage": like!("1073741824")},
            "accessModes": each_like!("ReadWriteOnce"),
        });
    }
    json_pattern!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": like!(format!("pact.{name}")),
            "namespace": like!(NS),
            "uid": like!(format!("k8s-uid-{name}")),
            "resourceVersion": like!("7"),
            "labels": {
                "app.kubernetes.io/managed-by": like!("berth"),
                "berth.io/volume-uid": like!(uid(name)),
                "berth.io/instance": like!(INSTANCE),
            },
            "annotations": {"berth.io/namespace": like!("pact"), "berth.io/name": like!(name)},
        },
        "spec": {
            "accessModes": each_like!("ReadWriteOnce"),
            "resources": {"requests": {"storage": like!("1073741824")}},
            "volumeName": like!(format!("pvc-k8s-uid-{name}")),
            "storageClassName": like!("standard"),
        },
        "status": status,
    })
}

fn backend(server: &str) -> KubernetesBackend {
    let config =
        KubernetesConfig::from_config(&json!({"server": server, "namespace": NS})).unwrap();
    KubernetesBackend::new(
        config,
        SharedClient::new(Some(server.to_string()), None),
        INSTANCE,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_storage_ops_keeps_its_volumes_as_claims() {
    pactfile::no_tracking();
    let out = tempfile::tempdir().unwrap();
    {
        let mut pact = PactBuilder::new_v4(CONSUMER, PROVIDER);
        pact.with_output_dir(out.path());
        pact.interaction("get a claim that does not exist", "", |mut i| {
            i.given("no claim pact.new exists");
            i.request.get().path(format!("{CLAIMS}/pact.new"));
            i.response
                .status(404)
                .content_type("application/json")
                .json_body(json_pattern!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404,
                    "message": like!("persistentvolumeclaims \"pact.new\" not found"),
                }));
            i
        });
        pact.interaction("create a claim", "", |mut i| {
            i.given("no claim pact.new exists");
            i.request
                .post()
                .path(CLAIMS)
                .content_type("application/json")
                .json_body(json_pattern!({
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": "pact.new",
                        "namespace": NS,
                        "labels": {
                            "app.kubernetes.io/managed-by": "berth",
                            "berth.io/volume-uid": uid("new"),
                            "berth.io/instance": INSTANCE,
                        },
                        "annotations": {"berth.io/namespace": "pact", "berth.io/name": "new"},
                    },
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1073741824"}},
                        "volumeMode": "Filesystem",
                    },
                }));
            i.response
                .status(201)
                .content_type("application/json")
                .json_body(json_pattern!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": like!("pact.new"), "uid": like!("k8s-uid-new")},
                    "status": {"phase": like!("Pending")},
                }));
            i
        });
        pact.interaction("get a pending claim", "", |mut i| {
            i.given("claim pact.pending is Pending, waiting for a first consumer");
            i.request.get().path(format!("{CLAIMS}/pact.pending"));
            i.response
                .ok()
                .content_type("application/json")
                .json_body(json_pattern!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": like!("pact.pending"),
                        "uid": like!("k8s-uid-pending"),
                        "labels": {"berth.io/volume-uid": like!(uid("pending")), "berth.io/instance": like!(INSTANCE)},
                    },
                    "status": {"phase": like!("Pending")},
                }));
            i
        });
        pact.interaction("list a claim's events", "", |mut i| {
            i.given("claim pact.pending is Pending, waiting for a first consumer");
            i.request
                .get()
                .path("/api/v1/namespaces/berth-volumes/events")
                .query_param(
                    "fieldSelector",
                    "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=pact.pending",
                )
                .query_param("limit", "50");
            i.response.ok().content_type("application/json").json_body(json_pattern!({
                "kind": "EventList", "apiVersion": "v1",
                "metadata": {"resourceVersion": like!("9")},
                "items": each_like!({
                    "metadata": {"name": like!("pact.pending.0"), "namespace": like!(NS)},
                    "involvedObject": {"kind": "PersistentVolumeClaim", "name": like!("pact.pending")},
                    "reason": like!("WaitForFirstConsumer"),
                    "message": like!("waiting for first consumer to be created before binding"),
                }),
            }));
            i
        });
        pact.interaction("get a bound claim", "", |mut i| {
            i.given("claim pact.bound is Bound");
            i.request.get().path(format!("{CLAIMS}/pact.bound"));
            i.response
                .ok()
                .content_type("application/json")
                .json_body(claim("bound", "Bound"));
            i
        });
        pact.interaction("get a claim a pod mounts", "", |mut i| {
            i.given("claim pact.mounted is Bound and mounted by a pod");
            i.request.get().path(format!("{CLAIMS}/pact.mounted"));
            i.response
                .ok()
                .content_type("application/json")
                .json_body(claim("mounted", "Bound"));
            i
        });
        pact.interaction("delete a claim a pod mounts", "", |mut i| {
            i.given("claim pact.mounted is Bound and mounted by a pod");
            i.request
                .method("DELETE")
                .path(format!("{CLAIMS}/pact.mounted"))
                .json_body(json_pattern!({"preconditions": {"uid": "k8s-uid-mounted"}}));
            i.response
                .ok()
                .content_type("application/json")
                .json_body(json_pattern!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": like!("pact.mounted"),
                        "deletionTimestamp": like!("2026-12-04T00:00:00Z"),
                    },
                }));
            i
        });
        pact.interaction("get a claim to retain", "", |mut i| {
            i.given("claim pact.kept is Bound");
            i.request.get().path(format!("{CLAIMS}/pact.kept"));
            i.response
                .ok()
                .content_type("application/json")
                .json_body(claim("kept", "Bound"));
            i
        });
        pact.interaction("take Berth's label off a retained claim", "", |mut i| {
            i.given("claim pact.kept is Bound");
            i.request
                .method("PATCH")
                .path(format!("{CLAIMS}/pact.kept"))
                .content_type("application/merge-patch+json")
                .json_body(json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}}));
            i.response.ok().content_type("application/json").json_body(json_pattern!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": like!("pact.kept"), "labels": {"berth.io/volume-uid": like!(uid("kept")), "berth.io/instance": like!(INSTANCE)}},
            }));
            i
        });
        pact.interaction("list this stack's claims", "", |mut i| {
            i.given("claim pact.bound is Bound");
            i.request
                .get()
                .path(CLAIMS)
                .query_param(
                    "labelSelector",
                    format!("app.kubernetes.io/managed-by=berth,berth.io/instance={INSTANCE}"),
                )
                .query_param("limit", "500");
            i.response
                .ok()
                .content_type("application/json")
                .json_body(json_pattern!({
                    "kind": "PersistentVolumeClaimList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": like!("9")},
                    // What the orphan scan reads of each: its name, Berth's labels and annotations.
                "items": each_like!({
                    "metadata": {
                        "name": like!("pact.bound"),
                        "labels": {
                            "app.kubernetes.io/managed-by": like!("berth"),
                            "berth.io/volume-uid": like!(uid("bound")),
                            "berth.io/instance": like!(INSTANCE),
                        },
                        "annotations": {"berth.io/namespace": like!("pact"), "berth.io/name": like!("bound")},
                    },
                    "status": {"phase": like!("Bound")},
                }),
                }));
            i
        });
        let mock = pact.start_mock_server(None, None);
        let server = mock.url().to_string().trim_end_matches('/').to_string();
        let b = backend(&server);
        assert_eq!(
            b.create(&object("new")).await.unwrap(),
            format!("{NS}/pact.new")
        );
        match b.observe(&object("pending")).await.unwrap() {
            Observed::Pending { message } => {
                assert!(message.contains("first consumer"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        match b.observe(&object("bound")).await.unwrap() {
            Observed::Ready { location, message } => {
                assert_eq!(location, format!("{NS}/pact.bound"));
                assert!(message.contains("pvc-k8s-uid-bound"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let e = b.delete(&object("mounted")).await.unwrap_err();
        assert_eq!(e.code, domain::Code::Unavailable, "{e}");
        b.release(&object("kept")).await.unwrap();
        let found = b.scan().await.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].namespace.as_str(), found[0].name.as_str()),
            ("pact", "bound")
        );
    }
    pactfile::check(out.path(), CONSUMER, PROVIDER);
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_the_stand_in_honours_the_storage_ops_pact() {
    let standin = Arc::new(StandIn::start(&[NS]).await);
    let url = standin.url.clone();
    let provider_url = url.clone();
    let states = States::new(move |name, _params| {
        let standin = standin.clone();
        let url = url.clone();
        async move {
            match name.as_str() {
                "no claim pact.new exists" => {
                    standin.delete_claim(NS, "pact.new");
                }
                "claim pact.pending is Pending, waiting for a first consumer" => {
                    if standin.claim(NS, "pact.pending").is_none() {
                        made_by_berth(&standin, &url, "pending").await?;
                    }
                    standin.event(
                        NS,
                        "pact.pending",
                        "WaitForFirstConsumer",
                        "waiting for first consumer to be created before binding",
                    );
                }
                "claim pact.bound is Bound" | "claim pact.kept is Bound" => {
                    let short = if name.contains("bound") {
                        "bound"
                    } else {
                        "kept"
                    };
                    if standin.claim(NS, &format!("pact.{short}")).is_none() {
                        made_by_berth(&standin, &url, short).await?;
                    }
                    standin.bind(NS, &format!("pact.{short}"));
                }
                "claim pact.mounted is Bound and mounted by a pod" => {
                    if standin.claim(NS, "pact.mounted").is_none() {
                        made_by_berth(&standin, &url, "mounted").await?;
                    }
                    standin.bind(NS, "pact.mounted");
                    standin.set_in_use(NS, "pact.mounted", true);
                }
                other => anyhow::bail!("unknown provider state {other:?}"),
            }
            Ok(Default::default())
        }
    });
    verify::verify(
        PROVIDER,
        &provider_url,
        &pactfile::committed(CONSUMER, PROVIDER),
        states,
    )
    .await;
}

/// A claim Berth made for the volume `pact/<name>`, with the uid the pact's examples use.
async fn made_by_berth(standin: &StandIn, url: &str, name: &str) -> anyhow::Result<()> {
    backend(url)
        .create(&object(name))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(standin.set_uid(NS, &format!("pact.{name}"), &format!("k8s-uid-{name}")));
    Ok(())
}
