"""Hostile load on a scheduler's door (live/door.py): a tenant's timed heartbeat, huge-header floods and
half-open connections; used by `benchmarks/header_flood.py` and the header-flood scenario of `rollmux chaos`."""

from __future__ import annotations

import selectors
import socket
import statistics
import threading
import time

import httpx

CHUNK = b"a" * (1 << 20)


class Prober:
    """A tenant's heartbeat every 0.1 s, each latency filed under the phase it started in."""

    def __init__(self, url: str, token: str, job_id: str = "tenant") -> None:
        self.http = httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"})
        self.path = f"/v1/jobs/{job_id}/heartbeat"
        self.phase, self.lat, self.errors = "quiet", {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            phase, t0 = self.phase, time.monotonic()
            try:
                ok = self.http.post(self.path, json={}).status_code == 200
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
