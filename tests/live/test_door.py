"""Bounded I/O at the door (live/door.py) through the real HTTP server, and fair liveness
(live/supervision.py): a stalled server fails nobody for missed heartbeats."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.door import DoorLimits
from rollmux.live.local import ProcessServer, ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN = "admin-token-for-tests-0123456789"
CLUSTER = default_cluster().model_dump()


def _job(jid: str) -> dict:
    return make_job(jid, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True)


@pytest.fixture
def served(request):
    """A served core (heartbeats judged after 5 s) with one submitted job, 'a', and its token."""
    limits = getattr(request, "param", None) or DoorLimits()
    core = SchedulerCore(CLUSTER, admin_token=ADMIN, heartbeat_timeout_s=5.0, check_every_s=0.1)
    with ThreadServer(core, door=limits) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post("/v1/jobs", json=_job("a"), headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 201, r.text
        yield server, http, r.json()["token"]


def _connect(server: ThreadServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30, source_address=(source, 0))
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a reset counts as closed)."""
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    return got


def _flood(server: ThreadServer, megabytes: int, outcome: list, done: threading.Event) -> None:
    """One connection sending a `megabytes` MB header to GET /metrics; what the server answered."""
    sock = _connect(server)
    chunk = b"a" * (1 << 20)
    sent = 0
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Flood: ")
        while sent < megabytes:
            sock.sendall(chunk)
            sent += 1
        sock.sendall(b"\r\n\r\n")
    except (ConnectionResetError, BrokenPipeError):
        pass  # the server closed it: that is the point
    outcome.append((sent, _read_all(sock)))
    sock.close()
    done.set()


def test_a_huge_header_costs_only_its_connection_and_a_tenant_still_beats(served):
    server, http, token = served
    floods = [(threading.Event(), []) for _ in range(3)]
    for done, outcome in floods:
        threading.Thread(target=_flood, args=(server, 64, outcome, done), daemon=True).start()
    t0 = time.monotonic()
    beat = http.post("/v1/jobs/a/heartbeat", json={}, headers={"Authorization": f"Bearer {token}"})
    assert beat.status_code == 200 and time.monotonic() - t0 < 5.0, beat.text
    for done, outcome in floods:
        assert done.wait(60)
        sent, answer = outcome[0]
        assert sent < 64, "the server read the whole header"
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert http.get("/v1/jobs/a", headers={"Authorization": f"Bearer {token}"}).json()["status"] == "running"


@pytest.mark.parametrize("served", [DoorLimits(max_head_bytes=4096, max_request_line=1024, max_headers=8)],
                         indirect=True)
def test_each_head_limit_answers_its_status(served):
    server, _, _ = served
    cases = [(b"GET /" + b"x" * 2000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 414"),
             (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(20)) + b"\r\n", b"HTTP/1.1 431"),
             (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n", b"HTTP/1.1 431")]
    for request, status in cases:
        with _connect(server) as sock:
            sock.sendall(request)
            assert _read_all(sock).startswith(status)
    with _connect(server) as sock:  # within every limit: served
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 ") and not answer.startswith((b"HTTP/1.1 414", b"HTTP/1.1 431"))


@pytest.mark.parametrize("served", [DoorLimits(header_timeout_s=0.5)], indirect=True)
def test_half_a_request_and_a_silent_connection_are_closed_within_the_header_timeout(served):
    server, _, _ = served
    half, silent = _connect(server), _connect(server)
    t0 = time.monotonic()
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the empty line that ends the head
    assert _read_all(half).startswith(b"HTTP/1.1 408")
    assert _read_all(silent) == b""
    assert time.monotonic() - t0 < 5.0
    half.close()
    silent.close()


def _get(sock: socket.socket) -> bytes:
    """GET /metrics on `sock` (closing it after); the whole answer."""
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return _read_all(sock)


@pytest.mark.parametrize("served", [DoorLimits(max_conns_per_client=3)], indirect=True)
def test_a_client_over_its_connection_cap_is_refused_and_another_address_is_not(served):
    server, _, _ = served
    client = "127.0.0.3"  # loopback, and an address no other connection of this test comes from
    held = [_connect(server, client) for _ in range(3)]
    for sock in held:  # each one served, and kept open: the server has counted it
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = sock.recv(12)
        assert answer.startswith(b"HTTP/1.1 ") and answer != b"HTTP/1.1 429", answer
    assert _get(_connect(server, client)).startswith(b"HTTP/1.1 429")
    other = _get(_connect(server, "127.0.0.2"))
    assert other.startswith(b"HTTP/1.1 ") and not other.startswith(b"HTTP/1.1 429")
    held.pop().close()
    deadline = time.monotonic() + 30
    while (again := _get(_connect(server, client))).startswith(b"HTTP/1.1 429") and time.monotonic() < deadline:
        pass  # the server uncounts the closed connection as soon as its loop sees it closed
    assert again.startswith(b"HTTP/1.1 ") and not again.startswith(b"HTTP/1.1 429")
    for sock in held:
        sock.close()


def _ticking(core: SchedulerCore, stop: threading.Event) -> threading.Thread:
    """A stand-in for the HTTP loop: it says it is serving every 0.1 s until `stop`."""
    def tick() -> None:
        while not stop.wait(0.1):
            core.note_serving()
    core.note_serving()
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    return thread


def test_a_stalled_server_fails_no_job_for_its_silence_and_a_silent_job_still_fails():
    core = SchedulerCore(CLUSTER, heartbeat_timeout_s=0.5, check_every_s=0.05)
    try:
        token = core.submit(_job("a"))["token"]
        stop = threading.Event()
        loop = _ticking(core, stop)
        stop.set()  # the HTTP loop stalls: no ticks, no heartbeats, for four heartbeat timeouts
        loop.join()
        threading.Event().wait(2.0)  # the stall itself
        core.note_serving()  # the loop is back, and so is the job's heartbeat
        core.heartbeat("a", token)
        assert core.status()["jobs"]["a"]["status"] == "running"
        stop = threading.Event()
        _ticking(core, stop)  # the loop serves on; now the scheduler thread stalls as long
        core._inbox.post(lambda: threading.Event().wait(2.0))
        core.heartbeat("a", token)  # queued behind the stall, answered after it
        assert core.status()["jobs"]["a"]["status"] == "running"
        deadline = time.monotonic() + 30  # serving, and the job goes silent: it is failed
        while core.status()["jobs"]["a"]["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the condition, with a deadline
        assert core.status()["jobs"]["a"]["status"] == "failed"
        stop.set()
    finally:
        core.shutdown()


def test_rollmux_serve_flags_set_the_door(tmp_path):
    server = ProcessServer(str(tmp_path / "j.db"), tmp_path,
                           extra=["--max-header-bytes", "2048", "--header-timeout", "0.5"])
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
            assert _read_all(sock).startswith(b"HTTP/1.1 431")
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            t0 = time.monotonic()
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            assert _read_all(sock).startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 10
    finally:
        server.signal()
