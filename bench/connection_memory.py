#!/usr/bin/env python3
"""What one held connection costs a proxy in resident memory.

    bench/connection_memory.py HOST:PORT N MODE PID[,PID...] [HEADER]

MODE is `idle` (each connection sends one keep-alive GET /v1/kinds, reads the whole answer, then
sits idle) or `loris` (each sends the start of a request head and never finishes it). PIDs are the
proxy's processes (every nginx worker, say): their resident memory (Rss of smaps_rollup, summed) is
read before the connections open and once all N are held, and the difference per connection is
printed. HEADER (such as `Authorization: Bearer ...`) goes into the idle requests.

Connections are opened one after another so each has finished its call before the next starts:
what is measured is what stays behind per connection, not the peak of many calls at once.
"""

import socket
import sys
import time


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    total += int(line.split()[1])
    return total


def one_call(sock, host, header):
    extra = f"{header}\r\n" if header else ""
    sock.sendall(f"GET /v1/kinds HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("closed before the answer's head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if not head.startswith(b"HTTP/1.1 200") or length is None:
        raise RuntimeError(f"unexpected answer: {head[:200]!r}")
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("closed mid-answer")
        body += chunk


def main():
    target, n, mode, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    header = sys.argv[5] if len(sys.argv) > 5 else ""
    host, port = target.rsplit(":", 1)
    pids = [int(p) for p in pids.split(",")]
    # Warm up: the proxy's pools, buffers and first-call allocations are not per connection.
    for _ in range(50):
        with socket.create_connection((host, int(port))) as s:
            one_call(s, host, header)
    time.sleep(1)
    before = rss_kib(pids)
    held = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)))
        if mode == "idle":
            one_call(s, host, header)
        else:
            s.sendall(f"GET /v1/kinds HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
        held.append(s)
    # Let the proxy take in the last bytes before reading its memory.
    time.sleep(2)
    after = rss_kib(pids)
    # Every connection must still be open: a proxy that closed some would look cheaper than it is.
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                raise RuntimeError("a held connection was closed by the proxy")
        except BlockingIOError:
            pass
    per = (after - before) * 1024 / n
    print(f"{mode}: {n} connections, RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB, "
          f"{per / 1000:.2f} kB per connection")
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
