"""Fixtures for the flows in test_flows.py: the stack `run.sh` started, and the client generated from
the merged OpenAPI document, found by method and path.

The flows use only the generated package (`berth_api_client`, named by client-config.yaml). Its
modules are named after each operation's tag and operationId; rather than hard-code those names, an
operation is looked up here by its method and path in the same document the client was generated
from, and named the way openapi-python-client names it. So renaming an operationId or a tag in the
document does not break the flows; removing or moving a route does, as it should.

Environment (set by run.sh): BERTH_URL, BERTH_TOKEN (admin), BERTH_NARROW_TOKEN (volumes:read only),
BERTH_EMULATOR_KEY_ID and BERTH_EMULATOR_KEY_SECRET, BERTH_OPENAPI_DOCUMENT.
"""

from __future__ import annotations

import importlib
import json
import os
import typing
from types import ModuleType

import pytest
from openapi_python_client.parser.openapi import generate_operation_id
from openapi_python_client.strings import PythonIdentifier

PACKAGE = "berth_api_client"
# openapi-python-client's default, which client-config.yaml keeps.
FIELD_PREFIX = "field_"


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these flows through tests/python/run.sh")
    return value


class Api:
    """The generated client's operations, by method and path."""

    def __init__(self, document_path: str) -> None:
        with open(document_path, encoding="utf-8") as f:
            self.document = json.load(f)

    def operation(self, method: str, path: str) -> ModuleType:
        """The generated module of `method path`, with its `sync_detailed`."""
        item = self.document["paths"].get(path)
        assert item is not None, f"the document has no path {path}"
        op = item.get(method.lower())
        assert op is not None, f"the document has no {method} {path}"
        tag = (op.get("tags") or ["default"])[0]
        tag_module = PythonIdentifier(value=tag, prefix="tag")
        if op.get("operationId"):
            name = PythonIdentifier(op["operationId"], prefix=FIELD_PREFIX)
        else:
            name = generate_operation_id(path=path, method=method.lower(), prefix=FIELD_PREFIX)
        return importlib.import_module(f"{PACKAGE}.api.{tag_module}.{name}")

    @staticmethod
    def body_type(operation: ModuleType) -> type:
        """The generated model class of the operation's request body."""
        hints = typing.get_type_hints(operation.sync_detailed, vars(operation))
        return hints["body"]


@pytest.fixture(scope="session")
def api() -> Api:
    return Api(_env("BERTH_OPENAPI_DOCUMENT"))


@pytest.fixture(scope="session")
def package() -> ModuleType:
    return importlib.import_module(PACKAGE)


@pytest.fixture(scope="session")
def models() -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.models")


def _client(package: ModuleType, token: str | None):
    # raise_on_unexpected_status: an answer the document does not declare is an error here, never a
    # silent None.
    if token is None:
        return package.Client(base_url=_env("BERTH_URL"), raise_on_unexpected_status=True, timeout=60.0)
    return package.AuthenticatedClient(
        base_url=_env("BERTH_URL"), token=token, raise_on_unexpected_status=True, timeout=60.0
    )


@pytest.fixture(scope="session")
def admin(package: ModuleType):
    return _client(package, _env("BERTH_TOKEN"))


@pytest.fixture(scope="session")
def narrow(package: ModuleType):
    return _client(package, _env("BERTH_NARROW_TOKEN"))


@pytest.fixture(scope="session")
def wrong(package: ModuleType):
    # Well-formed, as a real token looks, and unknown.
    return _client(package, "berth_" + "0" * 64)


@pytest.fixture(scope="session")
def anonymous(package: ModuleType):
    return _client(package, None)


@pytest.fixture(scope="session")
def emulator_key() -> tuple[str, str]:
    return _env("BERTH_EMULATOR_KEY_ID"), _env("BERTH_EMULATOR_KEY_SECRET")
