"""What platform tooling does with a client generated from the gateway's merged OpenAPI document:
kinds, a volume's life, a machine's life on the ECS emulator `berth up` embeds, and the typed
`Problem` of a 401, a 403 and a 404. Every call goes through the generated client; every answer is
checked as the parsed model it must be, field by field, not only by its status.
"""

from __future__ import annotations

import json
import time
import uuid
from http import HTTPStatus

import pytest

# How long a flow waits for a machine or volume to settle (the emulator moves a VM between states
# in about a second each).
SETTLE_SECONDS = 60


def call(operation, client, **kwargs):
    """One call; the detailed response, with `.parsed` the generated model of its status."""
    return operation.sync_detailed(client=client, **kwargs)


def retrying(operation, client, models, **kwargs):
    """Calls until the answer is not a 503 (a VM between states says so, with Retry-After)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        response = call(operation, client, **kwargs)
        if response.status_code != HTTPStatus.SERVICE_UNAVAILABLE or time.monotonic() > deadline:
            return response
        assert isinstance(response.parsed, models.Problem), response.content
        assert response.headers.get("retry-after"), "a 503 says when to come back"
        time.sleep(min(float(response.headers["retry-after"]), 2.0))


def assert_problem(response, models, status: int, title: str) -> None:
    """The answer is the typed `Problem` of `status`, with the fields every problem carries."""
    assert response.status_code == status, (response.status_code, response.content)
    problem = response.parsed
    assert isinstance(problem, models.Problem), f"{status} parsed as {type(problem).__name__}"
    assert problem.status == status
    assert problem.title == title
    assert isinstance(problem.code, int) and 0 <= problem.code <= 17
    assert isinstance(problem.detail, str) and problem.detail
    assert isinstance(problem.request_id, str) and problem.request_id
    assert response.headers["content-type"].startswith("application/problem+json")


def test_kinds_are_listed_with_their_config_schemas(api, admin, models):
    response = call(api.operation("GET", "/v1/kinds"), admin)
    assert response.status_code == HTTPStatus.OK
    kinds = response.parsed
    assert isinstance(kinds, list) and kinds
    assert all(isinstance(k, models.KindInfo) for k in kinds)
    by_kind = {k.kind.value: k for k in kinds}
    assert {"local", "docker"} <= set(by_kind), sorted(by_kind)
    assert by_kind["local"].storage_ops is True
    assert isinstance(by_kind["local"].description, str) and by_kind["local"].description
    assert "basePath" in by_kind["local"].config_schema.to_dict().get("properties", {})


def test_a_volume_is_created_read_listed_and_deleted(api, admin, models):
    name = f"py-{uuid.uuid4().hex[:8]}"
    add = api.operation("POST", "/v1/volumes")
    read = api.operation("GET", "/v1/volumes/{namespace}/{name}")
    list_ = api.operation("GET", "/v1/volumes")
    delete = api.operation("DELETE", "/v1/volumes/{namespace}/{name}")
    body = api.body_type(add).from_dict(
        {"name": name, "capacity": "16Mi", "labels": {"suite": "python", "run": name}}
    )

    created = call(add, admin, body=body)
    assert created.status_code in (HTTPStatus.OK, HTTPStatus.CREATED), created.content
    volume = created.parsed
    assert isinstance(volume, models.Volume)
    assert volume.metadata.name == name
    assert volume.metadata.namespace == "default"
    assert volume.metadata.uid and volume.metadata.creation_timestamp
    assert volume.metadata.labels.to_dict() == {"suite": "python", "run": name}
    assert volume.spec.capacity == "16Mi"
    assert volume.spec.capacity_bytes == 16 * 1024 * 1024
    assert volume.spec.replicas == 1
    assert isinstance(volume.status.phase, models.VolumePhase)

    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        got = call(read, admin, namespace="default", name=name)
        assert got.status_code == HTTPStatus.OK, got.content
        assert isinstance(got.parsed, models.Volume)
        if got.parsed.status.phase.value == "Ready" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got.parsed.status.phase.value == "Ready", got.parsed.status.to_dict()
    assert got.parsed.metadata.uid == volume.metadata.uid
    assert got.parsed.spec.orchestrator == volume.spec.orchestrator
    assert isinstance(got.parsed.status.location, str) and got.parsed.status.location

    listed = call(list_, admin, label_selector=f"run={name}")
    assert listed.status_code == HTTPStatus.OK, listed.content
    assert isinstance(listed.parsed, models.VolumeList)
    assert [v.metadata.name for v in listed.parsed.items] == [name]
    assert all(isinstance(v, models.Volume) for v in listed.parsed.items)

    deleted = call(delete, admin, namespace="default", name=name)
    assert deleted.status_code == HTTPStatus.OK, deleted.content
    assert isinstance(deleted.parsed, models.DeleteResult)
    assert deleted.parsed.to_dict(), "the delete says what it did"

    gone = call(read, admin, namespace="default", name=name)
    assert_problem(gone, models, 404, "NotFound")
    assert name in gone.parsed.detail


def machine_request(api, emulator_key, name: str):
    """examples/machine-request.json with the emulator's key and a fresh name."""
    key_id, key_secret = emulator_key
    create = api.operation("POST", "/v1/machines:create")
    return api.body_type(create).from_dict(
        {
            "machine": {
                "metadata": {"name": name, "namespace": "shoot--python", "uid": str(uuid.uuid4())},
                "spec": {"class": {"kind": "MachineClass", "name": "python-class"}},
            },
            "machineClass": {
                "metadata": {"name": "python-class", "namespace": "shoot--python"},
                "provider": "Alicloud",
                "providerSpec": {
                    "apiVersion": "mcm.gardener.cloud/v1alpha1",
                    "imageID": "m-demo-image",
                    "instanceType": "ecs.g6.large",
                    "region": "cn-shanghai",
                    "zoneID": "cn-shanghai-b",
                    "securityGroupID": "sg-demo",
                    "vSwitchID": "vsw-demo",
                    "keyPairName": "demo",
                    "systemDisk": {"category": "cloud_efficiency", "size": 50},
                    "tags": {"kubernetes.io/cluster/shoot--python": "1", "kubernetes.io/role/node": "1"},
                },
            },
            "secret": {"stringData": {"alicloudAccessKeyID": key_id, "alicloudAccessKeySecret": key_secret}},
        }
    )


def test_a_machine_is_created_inspected_and_deleted(api, admin, models, emulator_key):
    name = f"py-worker-{uuid.uuid4().hex[:6]}"
    request = machine_request(api, emulator_key, name)
    create = api.operation("POST", "/v1/machines:create")
    status = api.operation("POST", "/v1/machines:status")
    delete = api.operation("POST", "/v1/machines:delete")

    created = retrying(create, admin, models, body=request)
    assert created.status_code == HTTPStatus.OK, created.content
    assert isinstance(created.parsed, models.CreateMachineResponse)
    # MCM's Alicloud form: `<region>.<instance id>`.
    assert created.parsed.provider_id.startswith("cn-shanghai.i-"), created.parsed.provider_id
    assert created.parsed.node_name

    # Until the VM runs, status is MCM's Uninitialized (409): a typed problem that still names the VM.
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        seen = retrying(status, admin, models, body=request)
        if seen.status_code != HTTPStatus.CONFLICT or time.monotonic() > deadline:
            break
        assert isinstance(seen.parsed, models.StatusProblem), type(seen.parsed).__name__
        assert seen.parsed.title == "Uninitialized"
        assert seen.parsed.provider_id == created.parsed.provider_id
        time.sleep(0.3)
    assert seen.status_code == HTTPStatus.OK, seen.content
    assert isinstance(seen.parsed, models.GetMachineStatusResponse)
    assert seen.parsed.provider_id == created.parsed.provider_id
    assert seen.parsed.node_name == created.parsed.node_name

    deleted = retrying(delete, admin, models, body=request)
    assert deleted.status_code == HTTPStatus.OK, deleted.content
    assert isinstance(deleted.parsed, models.DeleteMachineResponse)

    # Gone: the driver's NotFound, typed (its problem may carry the MCM status string too).
    after = retrying(status, admin, models, body=request)
    assert_problem(after, models, 404, "NotFound")


@pytest.mark.parametrize("who", ["anonymous", "wrong"])
def test_a_caller_without_a_known_token_gets_a_typed_401(api, models, who, request):
    client = request.getfixturevalue(who)
    response = call(api.operation("GET", "/v1/volumes"), client)
    assert_problem(response, models, 401, "Unauthenticated")


def test_a_token_without_the_scope_gets_a_typed_403(api, narrow, models):
    # The narrow token may read volumes...
    read = call(api.operation("GET", "/v1/volumes"), narrow)
    assert read.status_code == HTTPStatus.OK, read.content
    assert isinstance(read.parsed, models.VolumeList)
    # ...and nothing else: not create one, not list kinds.
    add = api.operation("POST", "/v1/volumes")
    body = api.body_type(add).from_dict({"name": "py-narrow", "capacity": "1Mi"})
    refused = call(add, narrow, body=body)
    assert_problem(refused, models, 403, "PermissionDenied")
    assert "volumes:write" in refused.parsed.detail
    kinds = call(api.operation("GET", "/v1/kinds"), narrow)
    assert_problem(kinds, models, 403, "PermissionDenied")


def test_an_unknown_orchestrator_is_a_typed_404(api, admin, models):
    response = call(api.operation("GET", "/v1/orchestrators/{name}"), admin, name="no-such-orchestrator")
    assert_problem(response, models, 404, "NotFound")
    assert "no-such-orchestrator" in response.parsed.detail


def watch_events(admin, path: str, params: dict, until, seconds: float = SETTLE_SECONDS):
    """Reads a watch's newline-delimited events until `until(event)` holds; returns that event."""
    deadline = time.monotonic() + seconds
    version = params.get("resourceVersion")
    httpx_client = admin.get_httpx_client()
    while time.monotonic() < deadline:
        query = dict(params, watch="true", timeoutSeconds="10")
        if version:
            query["resourceVersion"] = version
        with httpx_client.stream("GET", path, params=query) as response:
            assert response.status_code == HTTPStatus.OK, response.read()
            assert response.headers["content-type"].startswith("application/x-ndjson")
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                assert event["type"] in {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}, event
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK" and until(event):
                    return event
    raise AssertionError(f"no event satisfied the watch of {path} within {seconds}s")


def test_a_deployment_rolls_and_a_watch_sees_it(api, admin, models, emulator_key):
    key_id, key_secret = emulator_key
    ns = f"py-{uuid.uuid4().hex[:6]}"
    base = f"/v1/namespaces/{{namespace}}"
    make_secret = api.operation("POST", base + "/secrets")
    make_class = api.operation("POST", base + "/machineclasses")
    make_deployment = api.operation("POST", base + "/machinedeployments")
    patch_class = api.operation("PATCH", base + "/machineclasses/{name}")
    list_deployments = api.operation("GET", base + "/machinedeployments")
    delete_deployment = api.operation("DELETE", base + "/machinedeployments/{name}")

    secret = api.body_type(make_secret).from_dict(
        {"metadata": {"name": "cloud"}, "stringData": {"alicloudAccessKeyID": key_id, "alicloudAccessKeySecret": key_secret}}
    )
    made = call(make_secret, admin, namespace=ns, body=secret)
    assert made.status_code == HTTPStatus.CREATED, made.content
    assert isinstance(made.parsed, models.SecretResource)
    assert made.parsed.keys == ["alicloudAccessKeyID", "alicloudAccessKeySecret"]
    assert key_secret not in made.content.decode()
    spec = {
        "imageID": "m-demo-image", "instanceType": "ecs.g6.large", "region": "cn-shanghai",
        "zoneID": "cn-shanghai-b", "securityGroupID": "sg-demo", "vSwitchID": "vsw-demo", "keyPairName": "demo",
        "tags": {f"kubernetes.io/cluster/{ns}": "1", "kubernetes.io/role/node": "1"},
    }
    klass = api.body_type(make_class).from_dict(
        {"metadata": {"name": "small"}, "provider": "Alicloud", "providerSpec": spec, "secretRef": {"name": "cloud"}}
    )
    made = call(make_class, admin, namespace=ns, body=klass)
    assert made.status_code == HTTPStatus.CREATED, made.content
    listed = call(list_deployments, admin, namespace=ns)
    assert listed.status_code == HTTPStatus.OK, listed.content
    version = json.loads(listed.content)["metadata"]["resourceVersion"]
    deployment = api.body_type(make_deployment).from_dict(
        {
            "metadata": {"name": "pool"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"pool": "p"}},
                "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "small"}}},
            },
        }
    )
    made = call(make_deployment, admin, namespace=ns, body=deployment)
    assert made.status_code == HTTPStatus.CREATED, made.content
    assert isinstance(made.parsed, models.MachineDeployment)

    path = f"/v1/namespaces/{ns}/machinedeployments"

    def rolled(event):
        status = event["object"].get("status", {})
        return status.get("readyReplicas") == 2 and status.get("updatedReplicas") == 2 and status.get("replicas") == 2

    ran = watch_events(admin, path, {"resourceVersion": version}, rolled)
    first_hash = ran["object"]["status"]["templateHash"]
    # A JSON merge patch, sent as one (the generated client has no form for that media type).
    assert patch_class is not None
    changed = admin.get_httpx_client().patch(
        f"/v1/namespaces/{ns}/machineclasses/small",
        content=json.dumps({"providerSpec": {"instanceType": "ecs.g6.xlarge"}}),
        headers={"content-type": "application/merge-patch+json"},
    )
    assert changed.status_code == HTTPStatus.OK, changed.content
    version = json.loads(changed.content)["metadata"]["resourceVersion"]
    rolled_again = watch_events(
        admin, path, {"resourceVersion": version}, lambda e: rolled(e) and e["object"]["status"]["templateHash"] != first_hash
    )
    assert rolled_again["object"]["metadata"]["name"] == "pool"
    deleted = call(delete_deployment, admin, namespace=ns, name="pool")
    assert deleted.status_code == HTTPStatus.OK, deleted.content
    watch_events(admin, path, {"resourceVersion": version}, lambda e: e["type"] == "DELETED")
