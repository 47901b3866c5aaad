"""Another tenant's heartbeat while clients flood `rollmux serve` with huge headers and half-open connections.

    .venv/bin/python benchmarks/header_flood.py [--floods 4] [--megabytes 48] [--flood-seconds 20]
           [--half-open 1000] [--header-timeout 10] [--json OUT]

One `rollmux serve` child process (a fresh SQLite journal, its default door: live/door.py) and one
submitted tenant job, whose heartbeat (`POST /v1/jobs/tenant/heartbeat`, keep-alive) is sent every
0.1 s and timed throughout. Phases:

  quiet      5 s of heartbeats alone (the baseline).
  flood      --floods connections at once, each sending `GET /metrics` with a --megabytes MB header
             (1 MiB writes); when the server closes one, it connects and starts over, for
             --flood-seconds. Reported: floods started, the most header bytes one of them got
             written before the server closed it, and what the server answered (431 or a reset).
  half-open  --half-open connections each send half a request (`GET /metrics HTTP/1.1` and one
             header, never the empty line that ends the head) and wait; reported: how many the
             server closed, and the slowest close after the half request (the header timeout
             bounds it).

Heartbeat p50/p99/max are reported per phase, and the tenant job's status at the end (it must
still be running: nobody was failed for missed heartbeats).
"""

from __future__ import annotations

import argparse
import json
import resource
import selectors
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from rollmux.live.local import ProcessServer

CHUNK = b"a" * (1 << 20)


def _job() -> dict:
    """The tenant: a small job the default cluster places at once."""
    from rollmux.core.spec import JobSpec
    fields = {"job_id": "tenant", "arrival_s": 0, "duration_s": 3600, "slo": 2.0, "model": "bench",
              "rollout_gpus": 8, "train_gpus": 8, "rollout_s": {"median": 100.0, "sigma": 0.1, "max": 120.0},
              "tail_frac": 0.3, "train_s": 100.0, "sync_s": 5.0, "host_gb": {"rollout": 10.0, "train": 10.0}}
    return JobSpec.model_validate(fields).model_dump(exclude_none=True)


class Prober:
    """The tenant's heartbeat every 0.1 s, each latency filed under the phase it started in."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"})
        self.phase, self.lat, self.errors = "quiet", {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            phase, t0 = self.phase, time.monotonic()
            try:
                ok = self.http.post("/v1/jobs/tenant/heartbeat", json={}).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.lat.setdefault(phase, []).append(time.monotonic() - t0)
            if not ok:
                self.errors[phase] = self.errors.get(phase, 0) + 1

    def summary(self, phase: str) -> dict:
        """p50/p99/max heartbeat latency (ms) in `phase`."""
        xs = sorted(self.lat.get(phase, []))
        if not xs:
            return {"beats": 0}
        return {"beats": len(xs), "errors": self.errors.get(phase, 0),
                "p50_ms": round(statistics.median(xs) * 1e3, 2),
                "p99_ms": round(xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3, 2),
                "max_ms": round(xs[-1] * 1e3, 2)}


def _flooder(port: int, megabytes: int, until: float, out: dict, lock: threading.Lock) -> None:
    """Send huge headers, one connection after another, until `until`."""
    while time.monotonic() < until:
        sent, answer = 0, b""
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            try:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Flood: ")
                while sent < megabytes << 20:
                    sock.sendall(CHUNK)
                    sent += len(CHUNK)
                sock.sendall(b"\r\n\r\n")
                answer = sock.recv(64)
            except OSError:  # reset or broken pipe: the server closed it
                pass
        with lock:
            out["floods"] += 1
            out["max_sent_bytes"] = max(out["max_sent_bytes"], sent)
            key = answer.split(b"\r\n")[0].decode(errors="replace") or "closed"
            out["answers"][key] = out["answers"].get(key, 0) + 1


def flood(port: int, floods: int, megabytes: int, seconds: float) -> dict:
    """`floods` concurrent huge-header floods for `seconds`."""
    out: dict = {"floods": 0, "max_sent_bytes": 0, "answers": {}}
    lock = threading.Lock()
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_flooder, args=(port, megabytes, until, out, lock), daemon=True)
               for _ in range(floods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def half_open(port: int, count: int, limit_s: float) -> dict:
    """`count` connections that each send half a request; when the server closes each."""
    sel = selectors.DefaultSelector()
    t_open = time.monotonic()
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, time.monotonic())
    opened_s = time.monotonic() - t_open
    closed, slowest, answers = 0, 0.0, {}
    deadline = time.monotonic() + limit_s
    while closed < count and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1.0):
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if data:
                status = data.split(b"\r\n")[0].decode(errors="replace")
                answers[status] = answers.get(status, 0) + 1
                continue  # the close follows the answer
            closed += 1
            slowest = max(slowest, time.monotonic() - key.data)
            sel.unregister(key.fileobj)
            key.fileobj.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return {"connections": count, "opened_in_s": round(opened_s, 2), "closed_by_server": closed,
            "slowest_close_s": round(slowest, 2), "answers": answers}


def run(floods: int, megabytes: int, flood_s: float, half: int, header_timeout: float) -> dict:
    """Every phase against one fresh server; the report."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, half + 512)), hard))
    workdir = Path(tempfile.mkdtemp(prefix="rollmux-flood-"))
    server = ProcessServer(str(workdir / "journal.db"), workdir, extra=["--header-timeout", str(header_timeout)])
    admin = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {server.admin_token}"})
    try:
        placed = admin.post("/v1/jobs", json=_job())
        placed.raise_for_status()
        probe = Prober(server.url, placed.json()["token"])
        time.sleep(5.0)  # the quiet window's length
        probe.phase = "flood"
        flooded = flood(server.port, floods, megabytes, flood_s)
        probe.phase = "half_open"
        halves = half_open(server.port, half, header_timeout * 3 + 30)
        probe.phase = "after"
        time.sleep(1.0)  # a few beats after the last phase
        probe.stop.set()
        probe.thread.join()
        status = admin.get("/v1/jobs/tenant").json()["status"]
        return {"config": {"floods": floods, "megabytes": megabytes, "flood_seconds": flood_s, "half_open": half,
                           "header_timeout_s": header_timeout},
                "heartbeat": {p: probe.summary(p) for p in ("quiet", "flood", "half_open", "after")},
                "flood": flooded, "half_open": halves, "tenant_status": status}
    finally:
        admin.close()
        server.signal()


def main() -> None:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floods", type=int, default=4, help="concurrent huge-header connections (default 4)")
    ap.add_argument("--megabytes", type=int, default=48, help="header size per flood, MB (default 48)")
    ap.add_argument("--flood-seconds", type=float, default=20.0, help="flood phase length (default 20)")
    ap.add_argument("--half-open", type=int, default=1000, help="half-open connections (default 1000)")
    ap.add_argument("--header-timeout", type=float, default=10.0, help="the server's --header-timeout (default 10)")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = ap.parse_args()
    report = run(args.floods, args.megabytes, args.flood_seconds, args.half_open, args.header_timeout)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
