"""run.sh's helpers, in Python so they need nothing but the standard library.

harness.py fetch URL PATH
    Saves the document a running service serves (when none is committed).
harness.py accepted URL TOKEN
    Waits (5 s at most) until the gateway at URL accepts TOKEN: it re-reads its tokens file once a
    second, and a token just added must work before the flows use it.
harness.py regions DOCUMENT
    Prints, comma-separated, the Alibaba Cloud regions the machine driver's document lists (its
    `region` enum), for BERTH_ALICLOUD_REGIONS.
harness.py reset-emulator URL
    Empties the ECS emulator at URL (`POST /_emulator/reset`): no instance, disk or client token.
harness.py summarize REPORT_DIR DOCUMENT GATEWAY_DOCUMENT
    Reads schemathesis' NDJSON and JSON reports and prints, per operation, how many cases ran and
    how many were answered 2xx, then one verdict line per check (`ok: …` or `FAILED: …`), the
    failures grouped by kind under the failed ones, and one verdict per mutating operation (it must
    have been answered 2xx at least once). Which operations mutate: those whose `x-berth-scope` in
    the gateway's document is a `:write` scope (so `POST /v1/machines:status`, a read, is not one).
    Exits 2 when the reports are missing or say the run did not complete.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import urllib.request

# Without an `x-berth-scope` to go by, these methods are taken to change something.
MUTATING_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def fetch(url: str, path: str) -> None:
    with urllib.request.urlopen(url, timeout=10) as response, open(path, "wb") as out:
        out.write(response.read())


def regions(document: str) -> int:
    with open(document, encoding="utf-8") as f:
        doc = json.load(f)
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            region = (node.get("properties") or {}).get("region") if isinstance(node.get("properties"), dict) else None
            # The document states ECS's region grammar, with the regions ECS is known to serve as
            # its examples (an enum in older documents).
            for listed in ("examples", "enum"):
                if isinstance(region, dict) and isinstance(region.get(listed), list):
                    found.update(str(r) for r in region[listed])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc.get("components", {}).get("schemas", {}))
    if not found:
        print(f"{document} lists no Alibaba Cloud regions", file=sys.stderr)
        return 1
    print(",".join(sorted(found)))
    return 0


def reset_emulator(url: str) -> int:
    request = urllib.request.Request(f"{url}/_emulator/reset", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        return 0


def accepted(url: str, token: str) -> int:
    import time
    import urllib.error

    deadline = time.monotonic() + 5
    while True:
        request = urllib.request.Request(f"{url}/v1/volumes", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5):
                return 0
        except urllib.error.HTTPError as e:
            if e.code != 401:
                return 0
        if time.monotonic() > deadline:
            print(f"the gateway at {url} did not accept a new token within 5s", file=sys.stderr)
            return 1
        time.sleep(0.1)


def _write_scopes(gateway_document: str) -> dict[tuple[str, str], bool]:
    with open(gateway_document, encoding="utf-8") as f:
        doc = json.load(f)
    scopes = {}
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if isinstance(op, dict) and "x-berth-scope" in op:
                scopes[(method.upper(), path)] = str(op["x-berth-scope"]).endswith(":write")
    return scopes


KNOWN_DISAGREEMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known-disagreements.txt")


def _known_disagreements() -> set[tuple[str, str]]:
    """(check, operation) pairs of known-disagreements.txt: `check | METHOD /path`, `#` comments."""
    known = set()
    with open(KNOWN_DISAGREEMENTS, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                check, operation = (part.strip() for part in line.split("|", 1))
                known.add((check, operation))
    return known


def summarize(report_dir: str, document: str, gateway_document: str) -> int:
    ndjson = sorted(glob.glob(os.path.join(report_dir, "ndjson-*.ndjson")))
    reports = sorted(glob.glob(os.path.join(report_dir, "json-*.json")))
    if not ndjson or not reports:
        print(f"schemathesis wrote no reports in {report_dir}; its output:")
        try:
            with open(os.path.join(report_dir, "output.txt"), encoding="utf-8") as f:
                print("".join(f.readlines()[-20:]))
        except OSError:
            pass
        return 2
    with open(reports[-1], encoding="utf-8") as f:
        report = json.load(f)

    with open(document, encoding="utf-8") as f:
        doc = json.load(f)
    operations = [
        (method.upper(), path)
        for path, item in doc.get("paths", {}).items()
        for method in item
        if method.upper() in {"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"}
    ]
    cases = collections.Counter()
    successes = collections.Counter()
    statuses: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    check_runs = collections.Counter()
    check_failures = collections.Counter()
    # check → (code, title, operation, first line of the message) → count
    failure_kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with open(ndjson[-1], encoding="utf-8") as f:
        for line in f:
            event = json.loads(line).get("ScenarioFinished")
            if not event:
                continue
            recorder = event.get("recorder") or {}
            for case_id, case in (recorder.get("cases") or {}).items():
                value = case.get("value") or {}
                key = (str(value.get("method", "")).upper(), str(value.get("path", "")))
                interaction = (recorder.get("interactions") or {}).get(case_id)
                if interaction and interaction.get("response"):
                    status = interaction["response"]["status_code"]
                    cases[key] += 1
                    statuses[key][status] += 1
                    if 200 <= status < 300:
                        successes[key] += 1
                for check in (recorder.get("checks") or {}).get(case_id, []):
                    name = check["name"]
                    check_runs[name] += 1
                    if check["status"] == "failure":
                        check_failures[name] += 1
                        failure = (check.get("failure_info") or {}).get("failure") or {}
                        message = (failure.get("message") or "").strip().splitlines()
                        failure_kinds[name][
                            (
                                failure.get("code", "?"),
                                failure.get("title", "?"),
                                failure.get("operation") or " ".join(key),
                                message[0] if message else "",
                            )
                        ] += 1

    total = sum(cases.values())
    print(
        f"{total} cases answered, {report['test_cases']['generated']} generated, "
        f"in {report['running_time']:.0f}s; phases: "
        + ", ".join(f"{name} {p['status']}" for name, p in (report.get("phases") or {}).items())
    )

    def seen(counter: collections.Counter) -> str:
        return ", ".join(f"{s}×{n}" for s, n in sorted(counter.items()))

    print(f"{'operation':<48} {'cases':>6} {'2xx':>6}  statuses")
    for key in sorted(operations):
        print(f"{' '.join(key):<48} {cases[key]:>6} {successes[key]:>6}  {seen(statuses[key])}")
    # unsupported_method's probes: methods the document does not list on a path, each one case.
    probes = collections.Counter()
    for key in set(cases) - set(operations):
        probes.update(statuses[key])
    if probes:
        print(
            f"{'(methods the document does not list)':<48} {sum(probes.values()):>6} "
            f"{sum(n for s, n in probes.items() if 200 <= s < 300):>6}  {seen(probes)}"
        )

    known = _known_disagreements()
    for name in sorted(check_runs):
        if check_failures[name] == 0:
            print(f"ok: check {name} ({check_runs[name]} cases)")
            continue
        kinds = sorted(failure_kinds[name].items())
        # Failures on (check, operation) pairs the known list names are reported, not fatal; one
        # anywhere else fails the run, so the list can only shrink.
        if all((name, operation) in known for (_, _, operation, _), _ in kinds):
            print(f"KNOWN: check {name} ({check_failures[name]} of {check_runs[name]} cases, on listed operations)")
        else:
            print(f"FAILED: check {name} ({check_failures[name]} of {check_runs[name]} cases failed)")
        for (code, title, operation, first), count in kinds:
            mark = " (known)" if (name, operation) in known else ""
            print(f"  {code} {title} ×{count}: {operation}{mark}: {first}")
    errors = report.get("errors") or []
    if errors:
        print(
            "FAILED: schemathesis ran without errors: "
            + "; ".join(f"{e['title']} ×{e['count']}" for e in errors)
        )
    if not report.get("complete", False):
        print(f"FAILED: schemathesis completed its run (stop reason: {report.get('stop_reason')})")

    write_scopes = _write_scopes(gateway_document)
    for key in sorted(operations):
        mutating = write_scopes.get(key, key[0] in MUTATING_METHODS and key not in write_scopes)
        if not mutating:
            continue
        verdict = "ok" if successes[key] else "KNOWN" if ("no-2xx", " ".join(key)) in known else "FAILED"
        print(f"{verdict}: {' '.join(key)} answered 2xx at least once ({successes[key]} of {cases[key]})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "fetch":
        fetch(argv[1], argv[2])
        return 0
    if len(argv) == 2 and argv[0] == "regions":
        return regions(argv[1])
    if len(argv) == 2 and argv[0] == "reset-emulator":
        return reset_emulator(argv[1])
    if len(argv) == 3 and argv[0] == "accepted":
        return accepted(argv[1], argv[2])
    if len(argv) == 4 and argv[0] == "summarize":
        return summarize(argv[1], argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
