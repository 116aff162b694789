"""Schemathesis hooks for tests/python/run.sh.

The documents' example machine request carries placeholders where the Alibaba Cloud access key goes
(`berth up` makes the emulator's key per data directory, so no document can hold the real one, and the
driver refuses the placeholders with a 400 that says so). Before a case is sent, the placeholders are
replaced by the key this stack's emulator printed (BERTH_EMULATOR_KEY_ID / _SECRET), as a user
following the document's instructions would do.

InitializeMachine's example initialises the machine CreateMachine's example makes, and says so: it
needs that machine to exist (a provider state, as a Pact provider state sets one up). Before the
documented initialize example is sent, its machine is created with the same body through the target's
own CreateMachine (BERTH_PY_TARGET_URL, BERTH_PY_TARGET_TOKEN), as a user following the examples in
order would have done, and the hook waits until the machine's status is answered 200 (Running). A
case that is not the documented example is sent as generated.

The machine controller's examples (secrets, classes, machines, sets, deployments under
`/v1/namespaces/{namespace}/`) depend on stored objects as its documents say: a class on the secret
`alicloud`, the machines, sets and deployments on the class `small`, and a read, replace, patch or
delete on the object its path names. Before any controller case in a namespace, the secret and class
are made there from the documented secret and class examples under those two names (PUT, which
changes nothing when they are there); before the documented read, patch or delete, the object the
example names is made from the documented replace example, and before the documented create, an
object of its name left by an earlier target is deleted (`_ensure_controller_state`). Generated
cases are sent as generated.

A few rules of the machine documents cannot be stated in JSON Schema (exactly one cluster and one role
tag of a Docker class, unique data disk names and mount paths); a generated valid-data case breaking one
is not sent (`filter_case`). Nothing else is changed.
"""

from __future__ import annotations

import copy
import json
import os
import re
import time
import urllib.error
import urllib.request

import schemathesis

PLACEHOLDERS = {
    "EMULATOR_ACCESS_KEY_ID": "BERTH_EMULATOR_KEY_ID",
    "EMULATOR_ACCESS_KEY_SECRET": "BERTH_EMULATOR_KEY_SECRET",
}
INITIALIZE = "/v1/machines:initialize"


def _fill(data: object) -> None:
    if not isinstance(data, dict):
        return
    for key, value in list(data.items()):
        if isinstance(value, str) and value in PLACEHOLDERS:
            data[key] = os.environ.get(PLACEHOLDERS[value], value)


def _fill_body(body: object) -> None:
    if isinstance(body, dict) and isinstance(body.get("secret"), dict):
        _fill(body["secret"].get("stringData"))
    # A stored secret of the machine controller.
    if isinstance(body, dict) and body.get("kind") == "Secret":
        _fill(body.get("stringData"))


def _documented_example(case) -> object:
    try:
        content = case.operation.definition.raw["requestBody"]["content"]
        example = copy.deepcopy(content["application/json"]["example"])
    except (AttributeError, KeyError, TypeError):
        return None
    _fill_body(example)
    return example


def _post(path: str, body: object) -> int:
    return _send("POST", path, body)


def _send(method: str, path: str, body: object) -> int:
    url = os.environ["BERTH_PY_TARGET_URL"] + path
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ['BERTH_PY_TARGET_TOKEN']}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def _ensure_machine(body: object) -> None:
    """The example's machine exists and is Running (200 from GetMachineStatus), or 10 s have passed."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _post("/v1/machines:create", body) // 100 == 2 and _post("/v1/machines:status", body) == 200:
            return
        time.sleep(0.2)


STORED = re.compile(r"^/v1/namespaces/\{namespace\}/(secrets|machineclasses|machines|machinesets|machinedeployments)(/\{name\})?$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Namespaces whose secret `alicloud` and class `small` were made (a class in use cannot be deleted,
# and nothing deletes the secret a class uses, so both stay).
_PREPARED: set[str] = set()


def _replace_example(case, plural: str) -> tuple[object, object]:
    """The documented replace example of `plural` and the name its path example gives."""
    try:
        operation = case.operation.schema.raw_schema["paths"][f"/v1/namespaces/{{namespace}}/{plural}/{{name}}"]["put"]
        body = copy.deepcopy(operation["requestBody"]["content"]["application/json"]["example"])
        name = next(p["example"] for p in operation["parameters"] if p["name"] == "name")
    except (AttributeError, KeyError, TypeError, StopIteration):
        return None, None
    _fill_body(body)
    return body, name


def _ensure_object(namespace: str, plural: str, name: str, body: object) -> None:
    """The object exists (made or replaced by PUT), waiting while an earlier one of its name is
    still being deleted (412), for at most 10 s."""
    body = copy.deepcopy(body)
    body["metadata"]["name"] = name
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _send("PUT", f"/v1/namespaces/{namespace}/{plural}/{name}", body) != 412:
            return
        time.sleep(0.2)


def _ensure_absent(namespace: str, plural: str, name: str) -> None:
    """The object is gone (deleted, and its finalizers done), or 10 s have passed."""
    path = f"/v1/namespaces/{namespace}/{plural}/{name}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _send("DELETE", path, None) != 404:
        time.sleep(0.2)


def _ensure_controller_state(case) -> None:
    match = STORED.match(case.path)
    namespace = (case.path_parameters or {}).get("namespace")
    if not match or "BERTH_PY_TARGET_URL" not in os.environ or not isinstance(namespace, str) or not LABEL.match(namespace):
        return
    plural, item = match.group(1), match.group(2)
    if namespace not in _PREPARED:
        secret, _ = _replace_example(case, "secrets")
        machine_class, _ = _replace_example(case, "machineclasses")
        if secret is None or machine_class is None:
            return
        _ensure_object(namespace, "secrets", "alicloud", secret)
        _ensure_object(namespace, "machineclasses", "small", machine_class)
        _PREPARED.add(namespace)
    if not item and case.method.upper() == "POST" and case.body == _documented_example(case):
        # The documented create makes a name of its own; an earlier target (the gateway's run
        # shares this stack) may have made it already, so it is deleted first and waited for.
        name = case.body.get("metadata", {}).get("name") if isinstance(case.body, dict) else None
        if isinstance(name, str) and LABEL.match(name):
            _ensure_absent(namespace, plural, name)
    if item and case.method.upper() in ("GET", "PATCH", "DELETE"):
        body, name = _replace_example(case, plural)
        if body is not None and case.path_parameters.get("name") == name:
            _ensure_object(namespace, plural, name, body)


@schemathesis.hook
def before_call(context, case, kwargs):  # noqa: ARG001 (schemathesis' hook signature)
    body = case.body
    _fill_body(body)
    _ensure_controller_state(case)
    if case.path == INITIALIZE and "BERTH_PY_TARGET_URL" in os.environ and body == _documented_example(case):
        _ensure_machine(body)


# Rules of the machine documents that JSON Schema cannot state (it cannot count the keys matching a
# pattern, nor compare one field across array items): the documents say them in prose, the driver
# refuses a body breaking them with a 400 naming the field. A generated body breaking one is not sent
# as valid data; nothing else is filtered.
SCOPE_PREFIXES = ("kubernetes.io/cluster/", "kubernetes.io/role/")


def _breaks_an_unstatable_rule(body: object) -> bool:
    if not isinstance(body, dict):
        return False
    machine_class = body.get("machineClass")
    if not isinstance(machine_class, dict) or not isinstance(machine_class.get("providerSpec"), dict):
        return False
    spec = machine_class["providerSpec"]
    provider = machine_class.get("provider")
    tags = spec.get("tags")
    # Docker: exactly one cluster key and one role key (each names the scope).
    if provider == "Docker" and isinstance(tags, dict):
        for prefix in SCOPE_PREFIXES:
            if sum(1 for key in tags if isinstance(key, str) and key.startswith(prefix)) > 1:
                return True
    # Docker: each mount at its own containerPath; Alicloud: each data disk a name of its own.
    for field, key in (("mounts", "containerPath"), ("dataDisks", "name")):
        items = spec.get(field)
        if isinstance(items, list):
            seen = [item.get(key) for item in items if isinstance(item, dict) and isinstance(item.get(key), str)]
            normalised = ["/" + "/".join(p for p in v.split("/") if p not in ("", ".")) for v in seen] if field == "mounts" else seen
            if len(normalised) != len(set(normalised)):
                return True
    return False


@schemathesis.hook
def filter_case(context, case):  # noqa: ARG001 (schemathesis' hook signature)
    meta = getattr(case, "meta", None)
    positive = meta is None or getattr(getattr(meta, "generation", None), "mode", None) is None or meta.generation.mode.is_positive
    return not (positive and _breaks_an_unstatable_rule(case.body))
