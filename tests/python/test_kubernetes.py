"""Volumes on Kubernetes as a cluster's own tooling sees them (issue 31): Berth makes claims on the
stand-in API server run.sh started (`kube-standin --bind-pending`), and the official Kubernetes
Python client (`kubernetes` on PyPI) lists and watches them, makes a claim Berth must refuse to adopt,
and deletes one behind Berth's back, which Berth's reconciler must notice.

Environment (set by run.sh): BERTH_URL, BERTH_TOKEN (admin), BERTH_KUBE_URL (the stand-in).
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes import watch

# The fixtures' one way to read run.sh's environment (failing, not skipping, when it is missing).
from conftest import _env

CLAIMS = "berth-volumes"
MANAGED = "app.kubernetes.io/managed-by=berth"


@pytest.fixture(scope="module")
def berth() -> httpx.Client:
    return httpx.Client(
        base_url=_env("BERTH_URL"),
        headers={"Authorization": f"Bearer {_env('BERTH_TOKEN')}"},
        timeout=30,
    )


@pytest.fixture(scope="module")
def core() -> k8s.CoreV1Api:
    config = k8s.Configuration()
    config.host = _env("BERTH_KUBE_URL")
    return k8s.CoreV1Api(k8s.ApiClient(config))


@pytest.fixture(scope="module")
def orchestrator(berth: httpx.Client) -> str:
    name = f"py-cluster-{uuid.uuid4().hex[:8]}"
    answer = berth.put(
        f"/v1/orchestrators/{name}",
        json={"kind": "kubernetes", "config": {"server": _env("BERTH_KUBE_URL"), "namespace": CLAIMS}},
    )
    assert answer.status_code == 201, answer.text
    return name


def wait_for(what: str, check, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {seconds}s"
        time.sleep(0.2)


def test_the_python_client_lists_and_watches_the_claims_berth_makes(berth, core, orchestrator):
    name = f"py-{uuid.uuid4().hex[:8]}"
    claim = f"default.{name}"
    made = berth.post("/v1/volumes", json={"name": name, "capacity": "1Gi", "orchestrator": orchestrator})
    assert made.status_code == 201, made.text
    assert made.json()["status"]["location"] == f"{CLAIMS}/{claim}"

    listed = core.list_namespaced_persistent_volume_claim(CLAIMS, label_selector=MANAGED)
    ours = {c.metadata.name: c for c in listed.items}
    assert claim in ours, sorted(ours)
    seen = ours[claim]
    assert seen.metadata.labels["berth.io/volume-uid"] == made.json()["metadata"]["uid"]
    assert seen.metadata.annotations["berth.io/name"] == name
    assert seen.spec.resources.requests["storage"] == str(1 << 30)

    # A watch from the list's resourceVersion sees it bound (the stand-in's PV controller binds
    # every claim), and Berth reads it Ready.
    stream = watch.Watch().stream(
        core.list_namespaced_persistent_volume_claim,
        CLAIMS,
        label_selector=MANAGED,
        timeout_seconds=10,
    )
    phases = set()
    for event in stream:
        if event["object"].metadata.name == claim:
            phases.add((event["type"], event["object"].status.phase))
            if event["object"].status.phase == "Bound":
                break
    assert any(phase == "Bound" for _, phase in phases), phases
    ready = wait_for(
        "the volume Ready",
        lambda: (v := berth.get(f"/v1/volumes/default/{name}").json())["status"]["phase"] == "Ready" and v,
    )
    assert "bound to PersistentVolume" in ready["status"]["message"]


def test_a_claim_made_outside_berth_is_never_adopted(berth, core, orchestrator):
    name = f"py-theirs-{uuid.uuid4().hex[:6]}"
    body = k8s.V1PersistentVolumeClaim(
        metadata=k8s.V1ObjectMeta(name=f"default.{name}", labels={"owner": "platform"}),
        spec=k8s.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=k8s.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    core.create_namespaced_persistent_volume_claim(CLAIMS, body)
    refused = berth.post("/v1/volumes", json={"name": name, "capacity": "1Gi", "orchestrator": orchestrator})
    assert refused.status_code == 409, refused.text
    assert "not made by Berth" in refused.json()["detail"]
    kept = core.read_namespaced_persistent_volume_claim(f"default.{name}", CLAIMS)
    assert kept.metadata.labels == {"owner": "platform"}
    # The volume the refusal left Failed goes; the claim that was never Berth's stays.
    assert berth.delete(f"/v1/volumes/default/{name}").status_code == 200
    kept = core.read_namespaced_persistent_volume_claim(f"default.{name}", CLAIMS)
    assert kept.metadata.labels == {"owner": "platform"}


def test_a_claim_deleted_behind_berths_back_fails_its_volume(berth, core, orchestrator):
    name = f"py-gone-{uuid.uuid4().hex[:6]}"
    made = berth.post("/v1/volumes", json={"name": name, "capacity": "1Gi", "orchestrator": orchestrator})
    assert made.status_code == 201, made.text
    wait_for(
        "the volume Ready",
        lambda: berth.get(f"/v1/volumes/default/{name}").json()["status"]["phase"] == "Ready",
    )
    core.delete_namespaced_persistent_volume_claim(f"default.{name}", CLAIMS)
    failed = wait_for(
        "Berth's reconciler noticing",
        lambda: (v := berth.get(f"/v1/volumes/default/{name}").json())["status"]["phase"] == "Failed" and v,
    )
    assert failed["status"]["reason"] == "ClaimMissing"
    assert berth.delete(f"/v1/volumes/default/{name}").status_code == 200
