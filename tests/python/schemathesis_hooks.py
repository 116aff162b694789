"""Schemathesis hooks for tests/python/run.sh.

The documents' example machine request carries placeholders where the Alibaba Cloud access key goes
(`berth up` makes the emulator's key per data directory, so no document can hold the real one, and the
driver refuses the placeholders with a 400 that says so). Before a case is sent, the placeholders are
replaced by the key this stack's emulator printed (BERTH_EMULATOR_KEY_ID / _SECRET), as a user
following the document's instructions would do. Nothing else is changed.
"""

from __future__ import annotations

import os

import schemathesis

PLACEHOLDERS = {
    "EMULATOR_ACCESS_KEY_ID": "BERTH_EMULATOR_KEY_ID",
    "EMULATOR_ACCESS_KEY_SECRET": "BERTH_EMULATOR_KEY_SECRET",
}


def _fill(data: object) -> None:
    if not isinstance(data, dict):
        return
    for key, value in list(data.items()):
        if isinstance(value, str) and value in PLACEHOLDERS:
            data[key] = os.environ.get(PLACEHOLDERS[value], value)


@schemathesis.hook
def before_call(context, case, kwargs):  # noqa: ARG001 (schemathesis' hook signature)
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("secret"), dict):
        _fill(body["secret"].get("stringData"))
