#!/usr/bin/env python3
"""Machine soak: create/delete cycles against `berth up` (release build) while its resident memory is sampled.

Starts `berth up` on a fresh data directory (port base 18580 unless BASE says otherwise), with the embedded
ECS emulator moving instances between states at once, then runs WORKERS loops for SOAK_SECONDS: each creates an
Alicloud machine with a new name and UID through the gateway and deletes it again. Every SAMPLE seconds it
prints the cycles done, `berth up`'s resident memory (one process: gateway, services and the emulator) and
the emulator's held ClientTokens and nonces. At the end: RSS after the first sample (start-up and first
allocations settled) and at the end, and the growth rate between them; and the same over the last 10
minutes, once the emulator's bounded structures have filled (run SOAK_SECONDS=900 for a 10-minute window
after 5 minutes of filling).

    cargo build --release -p berth && python3 bench/machine-soak.py   # SOAK_SECONDS=600 by default

Nothing here asserts: it prints figures, and the figures are read (RELIABILITY.md quotes one run).
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SOAK_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "berth")
BASE = int(os.environ.get("BASE", "18580"))
SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
SAMPLE = int(os.environ.get("SAMPLE", "30"))
WORKERS = int(os.environ.get("WORKERS", "4"))
REQUEST = json.load(open(os.path.join(ROOT, "examples", "machine-request.json")))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def call(conn, method, path, body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    return resp.status, resp.read()


def main():
    data = tempfile.mkdtemp(prefix="berth-soak-")
    env = dict(os.environ)
    env.update(
        BERTH_ECS_EMULATOR_PENDING="0s",
        BERTH_ECS_EMULATOR_STARTING="0s",
        BERTH_ECS_EMULATOR_STOPPING="0s",
        BERTH_RATE_LIMIT_RPS="1000000",
        BERTH_LOG="warn",
    )
    out = open(os.path.join(data, "stdout"), "w+")
    err = open(os.path.join(data, "stderr"), "w")
    proc = subprocess.Popen(
        [BIN, "up", "--port-base", str(BASE), "--data-dir", os.path.join(data, "state")],
        stdout=out, stderr=err, env=env,
    )
    try:
        banner = {}
        deadline = time.time() + 120
        while not {"token", "key_id", "key_secret"} <= banner.keys():
            if proc.poll() is not None or time.time() > deadline:
                err.flush()
                sys.exit("berth up did not start:\n" + open(os.path.join(data, "stderr")).read())
            time.sleep(0.2)
            out.seek(0)
            text = out.read()
            for name, pattern in [("token", r"admin token: (\S+)"),
                                  ("key_id", r"emulator access key id: (\S+)"),
                                  ("key_secret", r"emulator access key secret: (\S+)")]:
                m = re.search(pattern, text)
                if m:
                    banner[name] = m.group(1)
        secret = REQUEST["secret"]["stringData"]
        secret["alicloudAccessKeyID"] = banner["key_id"]
        secret["alicloudAccessKeySecret"] = banner["key_secret"]
        headers = {"Authorization": f"Bearer {banner['token']}", "content-type": "application/json"}

        cycles = [0]
        failures = {}
        lock = threading.Lock()
        stop = time.time() + SECONDS

        def worker():
            conn = http.client.HTTPConnection("127.0.0.1", BASE, timeout=60)
            while time.time() < stop:
                req = json.loads(json.dumps(REQUEST))
                name = f"soak-{uuid.uuid4().hex[:12]}"
                req["machine"]["metadata"]["name"] = name
                req["machine"]["metadata"]["uid"] = str(uuid.uuid4())
                body = json.dumps(req)
                ok = True
                for op in ("create", "delete"):
                    try:
                        status, answer = call(conn, "POST", f"/v1/machines:{op}", body, headers)
                    except (OSError, http.client.HTTPException) as e:
                        status, answer = type(e).__name__, b""
                        conn = http.client.HTTPConnection("127.0.0.1", BASE, timeout=60)
                    if status != 200:
                        ok = False
                        with lock:
                            key = f"{op} {status}"
                            failures[key] = failures.get(key, 0) + 1
                        break
                if ok:
                    with lock:
                        cycles[0] += 1

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
        started = time.time()
        for t in threads:
            t.start()
        print(f"{'seconds':>8} {'cycles':>8} {'RSS MB':>8} {'tokens':>8} {'nonces':>8} {'instances':>10}")
        samples = []
        while True:
            now = time.time()
            elapsed = now - started
            # A connection per sample: an idle one is closed by the server between samples.
            admin = http.client.HTTPConnection("127.0.0.1", BASE + 10, timeout=60)
            _, state = call(admin, "GET", "/_emulator/state")
            admin.close()
            state = json.loads(state)
            rss = rss_mb(proc.pid)
            samples.append((elapsed, rss))
            print(f"{elapsed:8.0f} {cycles[0]:8d} {rss:8.1f} {state['clientTokens']:8d} "
                  f"{state.get('nonces', '?'):>8} {len(state['instances']):10d}", flush=True)
            if now >= stop:
                break
            time.sleep(min(SAMPLE, max(0.0, stop - now)))
        for t in threads:
            t.join()
        (t0, first), (t1, last) = samples[1] if len(samples) > 1 else samples[0], samples[-1]
        print(f"cycles: {cycles[0]} in {SECONDS} s ({cycles[0] / SECONDS:.1f}/s); failed: {failures or 'none'}")
        print(f"RSS: {first:.1f} MB at {t0:.0f} s, {last:.1f} MB at {t1:.0f} s: "
              f"{(last - first) / max(t1 - t0, 1) * 60:+.2f} MB/min")
        # The last 10 minutes, once the emulator's bounded structures have filled (ClientTokens reach
        # their cap or their 5-minute retention within the first minutes at this rate).
        window = [(t, r) for t, r in samples if t >= t1 - 600]
        if t1 >= 600 and window:
            (w0, wfirst) = window[0]
            print(f"last {t1 - w0:.0f} s: {wfirst:.1f} MB at {w0:.0f} s, {last:.1f} MB at {t1:.0f} s: "
                  f"{(last - wfirst) / max(t1 - w0, 1) * 60:+.2f} MB/min; "
                  f"min {min(r for _, r in window):.1f}, max {max(r for _, r in window):.1f} MB")
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
