"""Permit latency of the scheduler's HTTP API over loopback, with the SQLite journal and without.

Usage: .venv/bin/python benchmarks/permit_latency.py [--store both|sqlite|memory] [--server process|thread]
           [--scenarios lone,loaded,waiting] [--permits 1000] [--jobs 100] [--seconds 10]
           [--waiting 10000] [--probe-seconds 20] [--json OUT]

The server: by default a child process per scenario, as an operator runs it:
`rollmux serve --store FRESH.db` (`ProcessServer`; SQLite, WAL, synchronous=FULL)
or, for `memory` (no journal; `rollmux serve` always journals), the same
`SchedulerCore` + `rollmux.live.server.serve` built the way `rollmux serve` builds
them, started from this script (`--serve-memory`). Both with Prometheus telemetry,
uvicorn (backlog 4096), heartbeat timeout and minimum lease of an hour (the waiting
jobs sit for minutes; the heartbeat and lease checks still run every 0.5 s).
`--server thread` serves the core from a thread of this process (`ThreadServer`):
the client and the server then share one interpreter (and its GIL).

Scenarios, each on a fresh server (and a fresh journal):
  lone     one job alone in its group (SLO 1.0: nobody may share its nodes)
           acquires and releases --permits permits in a row through
           `HttpPermitClient` (the jobs' client): round trip of `acquire` and of
           `release` (p50/p99/mean); a grant is committed to the journal before
           its reply. Then the same loop through the lean client below (rows
           "(lean client)"): the server's share of the round trip.
           Target: acquire p50 <= 3 ms.
  loaded   --jobs jobs (tiny profile, SLO 5: packed 5 to a group) each loop
           acquire -> release, one keep-alive connection per job, from one asyncio
           loop in this process, for --seconds (after 1 s of warm-up). Acquires
           include waiting for the job's turn in its group. permits/s = grants
           returned in the window / window. Target (SQLite): >= 1,000 permits/s.
  waiting  jobs are submitted (admin route) until --waiting of them can wait:
           groups of 5 where the member whose turn it is holds the rollout
           permit and the 4 others each keep a long-poll acquire for rollout open
           (wait_s 30, re-asked on 204), one connection each. Once the server
           counts every poll as waiting and is idle, two probers run for
           --probe-seconds: heartbeats of holders (20/s, `HttpPermitClient.heartbeat`)
           and GET /v1/status (its default page; 2/s, admin token; the body is
           read, not parsed).
           Target: p99 < 200 ms for both.

The load generator (loaded, waiting, the lean rows) is a minimal HTTP/1.1 keep-alive client on
asyncio streams (uvloop if installed): httpx's AsyncClient spends most of its CPU
scanning its connection pool (O(connections) per request: about 38 permits/s with
100 connections on one core here), which would measure the client, not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.local import ProcessServer, ThreadServer, free_port, wait_until_up
from rollmux.shim import PhaseTimings

PHASES = ("rollout", "train")
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.0, "offload_s": 0.0}
WARMUP_PERMITS = 20        # unrecorded permits of the lone job first
WARMUP_S = 1.0             # loaded: the first second is not counted
GROUP = 5                  # the scheduler's max_group_size: tiny SLO-5 jobs pack 5 to a group
HOUR = 3600.0
SERVER_FLAGS = ["--heartbeat-timeout", str(HOUR), "--lease-min", str(HOUR)]
TARGETS = {"lone": ("p50_ms", "<=", 3.0), "loaded": ("per_s", ">=", 1000.0),
           "waiting": ("p99_ms", "<", 200.0)}


def _profile(job_id: str, slo: float) -> dict:
    """A tiny live job: 20 s rollout and train, 1 s sync, one node per pool."""
    return live_job_record(job_id, 20.0, 20.0, slo, sync_s=1.0)


# -- servers ---------------------------------------------------------------------------------------

def _telemetry_core(store: str | None, token: str) -> tuple[Any, Any]:
    """The core as `rollmux serve` builds it (telemetry on), with the benchmark's long timeouts."""
    from rollmux.live.service import SchedulerCore
    from rollmux.live.telemetry import Telemetry
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    holder["core"] = SchedulerCore(default_cluster().model_dump(), store=store, heartbeat_timeout_s=HOUR,
                                   admin_token=token, lease_min_s=HOUR, telemetry=telemetry)
    return holder["core"], telemetry


def serve_memory(listen: str, token_file: str) -> None:
    """Child process of `--store memory`: `rollmux serve` without a journal."""
    import logging

    from rollmux.live.server import admin_token, parse_listen, serve
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    core, telemetry = _telemetry_core(None, admin_token(Path(token_file)))
    serve(core, parse_listen(listen), telemetry)


class _MemoryProcessServer:
    """A child process serving a core without a journal (`serve_memory`), like `ProcessServer`."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = workdir / "admin.token"
        self._log = open(workdir / f"serve-{self.port}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-memory",
                                      f"127.0.0.1:{self.port}", str(self.token_file)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_until_up(self.url, proc=self.proc)

    @property
    def admin_token(self) -> str:
        """The admin token the child created."""
        return self.token_file.read_text().strip()

    def signal(self) -> int:
        """SIGTERM and wait."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self._log.close()


@dataclass
class Server:
    """One scheduler server for one scenario: its URL, admin token and (child) pid."""

    url: str
    admin_token: str
    pid: int | None
    stop: Callable[[], Any]

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server process has used, or None in thread mode."""
        return _proc_cpu_s(self.pid) if self.pid is not None else None


def start_server(kind: str, store: str) -> Server:
    """A fresh server (`process` or `thread`) with a fresh journal (`sqlite`) or none (`memory`)."""
    workdir = Path(tempfile.mkdtemp(prefix="rollmux-permit-bench-"))
    journal = str(workdir / "journal.db") if store == "sqlite" else None

    def stopper(stop: Callable[[], Any]) -> Callable[[], None]:
        def both() -> None:
            try:
                stop()
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return both
    if kind == "thread":
        token = "bench-admin-" + os.urandom(16).hex()
        core, telemetry = _telemetry_core(journal, token)
        ts = ThreadServer(core, telemetry)
        return Server(ts.url, token, None, stopper(ts.stop))
    ps = ProcessServer(journal, workdir, extra=SERVER_FLAGS) if journal else _MemoryProcessServer(workdir)
    return Server(ps.url, ps.admin_token, ps.proc.pid, stopper(ps.signal))


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- a lean HTTP/1.1 client for the load -------------------------------------------------------------

class Conn:
    """One keep-alive HTTP/1.1 connection of one caller (its bearer token), on asyncio streams."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        self.host, self.port, self.token = host, int(port), token
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect (again)."""
        self.close()
        self._r, self._w = await asyncio.open_connection(self.host, self.port)

    async def call(self, method: str, path: str, body: dict | None = None,
                   sent: Callable[[], None] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON body or None); `sent()` once the request is written. Reconnects first if
        the server closed the idle connection (uvicorn's keep-alive timeout)."""
        data = json.dumps(body).encode() if body is not None else b""
        request = (f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                   f"authorization: Bearer {self.token}\r\ncontent-type: application/json\r\n"
                   f"content-length: {len(data)}\r\n\r\n").encode() + data
        if self._w is None or self._r is None or self._r.at_eof():
            await self.open()
        assert self._r is not None and self._w is not None
        self._w.write(request)
        if sent is not None:
            sent()
        head = await self._r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise RuntimeError(f"{path}: chunked responses are not expected from the API")
        raw = await self._r.readexactly(length) if length else b""
        return status, (json.loads(raw) if raw else None)

    def close(self) -> None:
        """Close the socket (if open)."""
        if self._w is not None:
            self._w.close()
        self._r = self._w = None


async def _submit_all(url: str, admin: str, records: list[dict], concurrency: int = 8) -> list[dict]:
    """Submit job records with the admin token over `concurrency` connections; the answers in order."""
    out: list[dict | None] = [None] * len(records)
    it = iter(enumerate(records))

    async def worker() -> None:
        conn = Conn(url, admin)
        for i, rec in it:
            status, body = await conn.call("POST", "/v1/jobs", rec)
            if status != 201:
                raise RuntimeError(f"submit {rec['job_id']}: {status} {body}")
            out[i] = body
        conn.close()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out  # type: ignore[return-value]


def _run_async(coro: Any) -> Any:
    """Run a coroutine on uvloop if it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


# -- statistics ------------------------------------------------------------------------------------

def _stats(lat_s: list[float]) -> dict:
    """p50/p99/mean in ms of a list of seconds."""
    a = np.array(lat_s) * 1e3
    pct = lambda q: round(float(np.percentile(a, q)), 3) if a.size else None  # noqa: E731
    return {"n": int(a.size), "p50_ms": pct(50), "p99_ms": pct(99),
            "mean_ms": round(float(a.mean()), 3) if a.size else None}


def _row(store: str, scenario: str, call: str, stats: dict, per_s: float | None = None, target: bool = True,
         **extra: Any) -> dict:
    """One table row, with its target (if the scenario has one) and whether it was met."""
    row = {"store": store, "scenario": scenario, "call": call, **stats,
           "per_s": None if per_s is None else round(per_s, 1), "target": None, "met": None, **extra}
    if target and scenario in TARGETS:
        key, op, bound = TARGETS[scenario]
        row["target"] = f"{'permits/s' if key == 'per_s' else key.split('_')[0]} {op} {bound:g}" + (
            "" if key == "per_s" else " ms")
        value = row[key]
        row["met"] = None if value is None else bool(value <= bound if op == "<=" else
                                                      value >= bound if op == ">=" else value < bound)
    return row


# -- scenarios -------------------------------------------------------------------------------------

def lone(server: Server, store: str, permits: int) -> tuple[list[dict], dict]:
    """One job alone in its group: `permits` uncontended acquire/release round trips, through
    `HttpPermitClient` (what a job sees), then as many through the lean client (the server's share)."""
    admin = HttpPermitClient(server.url, admin_token=server.admin_token)
    client = HttpPermitClient(server.url)
    try:
        placed = admin.submit(_profile("lone", 1.0))  # SLO 1.0: nobody can share its nodes
        client.register("lone", placed["token"])
        acq: list[float] = []
        rel: list[float] = []
        t0 = time.perf_counter()
        for n in range(WARMUP_PERMITS + permits):
            phase = PHASES[n % 2]
            t = time.perf_counter()
            client.acquire_dict("lone", phase)
            got = time.perf_counter()
            client.release(PhaseTimings("lone", phase, got - t, 0.0, 0.0, 0.0, placed["epoch"]))
            done = time.perf_counter()
            if n == WARMUP_PERMITS - 1:
                t0 = done
            if n >= WARMUP_PERMITS:
                acq.append(got - t)
                rel.append(done - got)
        rate = permits / (time.perf_counter() - t0)
        client.finish("lone")
        lean_acq, lean_rel, lean_rate = _run_async(_lone_lean(server, permits))
    finally:
        client.close()
        admin.close()
    return [_row(store, "lone", "acquire", _stats(acq), rate),
            _row(store, "lone", "release", _stats(rel), target=False),
            _row(store, "lone", "acquire (lean client)", _stats(lean_acq), lean_rate, target=False),
            _row(store, "lone", "release (lean client)", _stats(lean_rel), target=False)], {}


async def _lone_lean(server: Server, permits: int) -> tuple[list[float], list[float], float]:
    """The lone loop through `Conn`: one write per request, TCP_NODELAY, no client library."""
    placed = (await _submit_all(server.url, server.admin_token, [_profile("lone-lean", 1.0)], 1))[0]
    conn = Conn(server.url, placed["token"])
    acq: list[float] = []
    rel: list[float] = []
    last = None
    t0 = time.perf_counter()
    for n in range(WARMUP_PERMITS + permits):
        phase = PHASES[n % 2]
        t = time.perf_counter()
        status, grant = await conn.call("POST", "/v1/jobs/lone-lean/acquire",
                                        {"phase": phase, "last_grant": last, "wait_s": 30})
        got = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"acquire lone-lean: {status} {grant}")
        last = grant["grant_no"]
        status, body = await conn.call("POST", "/v1/jobs/lone-lean/release",
                                       {"grant_no": last, "phase": phase, "timings": TIMINGS})
        done = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"release lone-lean: {status} {body}")
        if n == WARMUP_PERMITS - 1:
            t0 = done
        if n >= WARMUP_PERMITS:
            acq.append(got - t)
            rel.append(done - got)
    conn.close()
    return acq, rel, permits / (time.perf_counter() - t0)


async def _loaded(server: Server, store: str, jobs: int, seconds: float) -> tuple[list[dict], dict]:
    ids = [f"j{i:04d}" for i in range(jobs)]
    placed = await _submit_all(server.url, server.admin_token, [_profile(j, 5.0) for j in ids])
    groups: dict[int, int] = {}
    for p in placed:
        groups[p["group_id"]] = groups.get(p["group_id"], 0) + 1
    sizes = sorted(groups.values())
    start = time.monotonic() + 0.2
    window = (start + WARMUP_S, start + WARMUP_S + seconds)
    lat: list[float] = []
    counted = [0]

    async def loop(job_id: str, token: str) -> None:
        conn = Conn(server.url, token)
        await conn.open()
        await asyncio.sleep(max(0.0, start - time.monotonic()))  # everyone starts together
        last, n = None, 0
        while time.monotonic() < window[1]:
            phase = PHASES[n % 2]
            t = time.monotonic()
            status, grant = await conn.call("POST", f"/v1/jobs/{job_id}/acquire",
                                            {"phase": phase, "last_grant": last, "wait_s": 5})
            if status == 204:
                continue
            if status != 200:
                raise RuntimeError(f"acquire {job_id}: {status} {grant}")
            got = time.monotonic()
            if window[0] <= got <= window[1]:
                lat.append(got - t)
                counted[0] += 1
            last = grant["grant_no"]
            status, body = await conn.call("POST", f"/v1/jobs/{job_id}/release",
                                           {"grant_no": last, "phase": phase, "timings": TIMINGS})
            if status != 200:
                raise RuntimeError(f"release {job_id}: {status} {body}")
            n += 1
        conn.close()

    cpu0, scpu0 = time.process_time(), server.cpu_s()
    t0 = time.monotonic()
    await asyncio.gather(*(loop(j, p["token"]) for j, p in zip(ids, placed)))
    span = time.monotonic() - t0
    scpu = server.cpu_s()
    info = {"loaded_groups": len(groups), "loaded_group_sizes": {str(s): sizes.count(s) for s in sorted(set(sizes))},
            "loaded_client_cpu": round((time.process_time() - cpu0) / span, 2),
            "loaded_server_cpu": None if scpu is None or scpu0 is None else round((scpu - scpu0) / span, 2)}
    per_s = counted[0] / seconds
    return [_row(store, "loaded", "acquire (incl. turn wait)", _stats(lat), per_s,
                 target=store == "sqlite")], info


def loaded(server: Server, store: str, jobs: int, seconds: float) -> tuple[list[dict], dict]:
    """`jobs` jobs in groups of 5 loop acquire -> release for `seconds`: throughput in permits/s."""
    return _run_async(_loaded(server, store, jobs, seconds))


def _wait_idle(server: Server, limit_s: float = 60.0) -> float:
    """Return once the server process has been idle (< 5% CPU) for half a second; seconds waited.

    Start-up pacing, not a measurement: the re-polls and connections have settled."""
    if server.pid is None:
        return 0.0
    t0 = time.monotonic()
    quiet, last = 0, server.cpu_s() or 0.0
    while quiet < 2 and time.monotonic() - t0 < limit_s:
        time.sleep(0.25)
        now = server.cpu_s() or 0.0
        quiet = quiet + 1 if now - last < 0.0125 else 0
        last = now
    return round(time.monotonic() - t0, 2)


def _all_groups(admin: httpx.Client) -> list[dict]:
    """Every group of the admin status, page by page."""
    groups: list[dict] = []
    while True:
        st = admin.get("/v1/status", params={"offset": len(groups), "limit": 1000}).raise_for_status().json()
        groups += st["groups"]
        if not st["groups"] or len(groups) >= st.get("page", {}).get("groups_total", len(groups)):
            return groups


def _server_waiting(admin: httpx.Client) -> int | None:
    """How many permit requests the server has parked (its status' `waiting`)."""
    return admin.get("/v1/status", params={"limit": 1}).raise_for_status().json().get("waiting")


def _parked(admin: httpx.Client, n: int, failed: Callable[[], bool], limit_s: float = 120.0) -> int | None:
    """Poll the server until it has `n` requests parked (or `failed()`, or `limit_s`); the last count.

    Start-up pacing of the waiting scenario, not a measurement."""
    deadline = time.monotonic() + limit_s
    while True:
        parked = _server_waiting(admin)
        if parked is None or parked >= n or time.monotonic() > deadline or failed():
            return parked
        time.sleep(0.1)


@dataclass
class _Probe:
    """Latencies of one prober thread."""

    lat: list[float] = field(default_factory=list)
    errors: int = 0
    size: int = 0


def _prober(call: Callable[[], int], hz: float, until: float, out: _Probe) -> None:
    """Call `call` at `hz` (or back to back if slower) until `until` (monotonic)."""
    tick = time.monotonic()
    while tick < until:
        t = time.perf_counter()
        try:
            out.size = max(out.size, call())
            out.lat.append(time.perf_counter() - t)
        except Exception:  # noqa: BLE001 -- counted and reported
            out.errors += 1
        tick += 1.0 / hz
        time.sleep(max(0.0, tick - time.monotonic()))


async def _waiting(server: Server, store: str, waiting: int, probe_s: float) -> tuple[list[dict], dict]:
    info: dict[str, Any] = {}
    # -- submit until `waiting` jobs can wait: every member but the one whose turn it is
    t0 = time.monotonic()
    members: dict[int, list[str]] = {}
    tokens: dict[str, str] = {}
    n = 0
    while sum(len(m) - 1 for m in members.values()) < waiting:
        short = waiting - sum(len(m) - 1 for m in members.values())
        batch = [_profile(f"w{i:05d}", 5.0) for i in range(n, n + -(-short * GROUP // (GROUP - 1)))]
        n += len(batch)
        for p in await _submit_all(server.url, server.admin_token, batch):
            members.setdefault(p["group_id"], []).append(p["job_id"])
            tokens[p["job_id"]] = p["token"]
    info["waiting_jobs"] = n
    info["waiting_groups"] = len(members)
    info["waiting_submit_s"] = round(time.monotonic() - t0, 1)
    # -- the member whose turn it is on each group's (single) rollout node takes the permit and keeps it
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"},
                         timeout=120.0)
    groups = _all_groups(admin)
    holders = [g["turn"]["rollout"][0] for g in groups if g["rollout_nodes"] == 1 and len(g["members"]) >= 2]
    waiters = [j for g in groups if g["rollout_nodes"] == 1 and len(g["members"]) >= 2
               for j in g["members"] if j not in set(g["turn"]["rollout"])][:waiting]

    async def hold(job_id: str) -> None:
        conn = Conn(server.url, tokens[job_id])
        status, body = await conn.call("POST", f"/v1/jobs/{job_id}/acquire", {"phase": "rollout", "wait_s": 10})
        conn.close()
        if status != 200:
            raise RuntimeError(f"holder {job_id}: {status} {body}")
    sem = asyncio.Semaphore(64)

    async def bounded(coro: Any) -> None:
        async with sem:
            await coro
    await asyncio.gather(*(bounded(hold(j)) for j in holders))
    # -- every waiter opens its connection and its long poll
    counts = {"sent": 0, "answered": 0, "granted": 0, "errors": 0}

    def sent() -> None:
        counts["sent"] += 1
    connecting = asyncio.Semaphore(256)  # the listen backlog is 4096: connect in waves, not all at once

    async def wait(job_id: str) -> None:
        conn = Conn(server.url, tokens[job_id])
        async with connecting:
            await conn.open()
        try:
            while True:
                status, _ = await conn.call("POST", f"/v1/jobs/{job_id}/acquire", {"phase": "rollout", "wait_s": 30},
                                            sent=sent)
                counts["answered"] += 1
                if status != 204:
                    counts["granted" if status == 200 else "errors"] += 1
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            counts["errors"] += 1
        finally:
            conn.close()
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(wait(j)) for j in waiters]
    while counts["sent"] < len(waiters) and not all(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    info["waiting_open_s"] = round(time.monotonic() - t0, 2)
    # Every poll is written; wait until the server counts them all as waiting and has gone idle.
    info["waiting_at_server_start"] = await asyncio.to_thread(_parked, admin, len(waiters),
                                                                lambda: counts["granted"] + counts["errors"] > 0)
    info["waiting_settle_s"] = await asyncio.to_thread(_wait_idle, server)
    info["outstanding_at_start"] = counts["sent"] - counts["answered"]
    # -- probe: heartbeats of holders and the admin status, from two threads
    beats, stats = _Probe(), _Probe()
    hb = HttpPermitClient(server.url)
    for j in holders[:100]:
        hb.register(j, tokens[j])
    ring = holders[:100]
    turn = [0]

    def beat() -> int:
        turn[0] += 1
        hb.heartbeat(ring[turn[0] % len(ring)])
        return 0

    def status() -> int:
        return len(admin.get("/v1/status").raise_for_status().content)
    until = time.monotonic() + probe_s
    await asyncio.gather(asyncio.to_thread(_prober, beat, 20.0, until, beats),
                         asyncio.to_thread(_prober, status, 2.0, until, stats))
    info["outstanding_at_end"] = counts["sent"] - counts["answered"]
    info["waiting_at_server_end"] = await asyncio.to_thread(_server_waiting, admin)
    info["waiters"], info["holders"] = len(waiters), len(holders)
    info["waiters_granted"], info["waiter_errors"] = counts["granted"], counts["errors"]
    info["status_bytes"] = stats.size
    info["probe_errors"] = beats.errors + stats.errors
    hb.close()
    admin.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    extra = {"outstanding": info["outstanding_at_end"]}
    return [_row(store, "waiting", "heartbeat", _stats(beats.lat), **extra),
            _row(store, "waiting", "GET /v1/status", _stats(stats.lat), **extra)], info


def waiting(server: Server, store: str, waiting: int, probe_s: float) -> tuple[list[dict], dict]:
    """`waiting` long-poll acquires held open while heartbeats and status are probed: their latency."""
    return _run_async(_waiting(server, store, waiting, probe_s))


# -- the run ---------------------------------------------------------------------------------------

def _raise_nofile() -> int:
    """Raise this process's open-file limit to the hard limit (children inherit it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


SCENARIOS = ("lone", "loaded", "waiting")


def run(stores: tuple[str, ...] = ("sqlite", "memory"), server: str = "process", permits: int = 1000,
        jobs: int = 100, seconds: float = 10.0, waiting_jobs: int = 10_000, probe_s: float = 20.0,
        scenarios: tuple[str, ...] = SCENARIOS, say: Callable[[str], None] = lambda s: None) -> dict:
    """The scenarios for each store, each on a fresh server; the report written by --json."""
    nofile = _raise_nofile()
    need = waiting_jobs * (2 if server == "thread" else 1) + 512
    if "waiting" in scenarios and need > nofile:
        raise SystemExit(f"--waiting {waiting_jobs} needs about {need} open files in this process; the limit is "
                         f"{nofile}" + (" (use --server process)" if server == "thread" else ""))
    t_run = time.monotonic()
    rows: list[dict] = []
    setup: dict[str, dict] = {}
    for store in stores:
        info: dict[str, Any] = {}
        for name, fn, args in (("lone", lone, (permits,)), ("loaded", loaded, (jobs, seconds)),
                               ("waiting", waiting, (waiting_jobs, probe_s))):
            if name not in scenarios:
                continue
            t0 = time.monotonic()
            srv = start_server(server, store)
            try:
                more, extra = fn(srv, store, *args)
            finally:
                srv.stop()
            rows += more
            info.update(extra)
            info[f"{name}_wall_s"] = round(time.monotonic() - t0, 1)
            say(f"{store} {name}: {info[f'{name}_wall_s']} s")
        setup[store] = info
    config = {"stores": list(stores), "scenarios": list(scenarios), "server": server, "permits": permits,
              "jobs": jobs, "seconds": seconds, "waiting": waiting_jobs, "probe_seconds": probe_s,
              "cpus": os.cpu_count(), "python": sys.version.split()[0], "open_files": nofile,
              "wall_s": round(time.monotonic() - t_run, 1)}
    return {"rows": rows, "setup": setup, "config": config}


def _print(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    c = report["config"]
    table = Table(title=f"Permit API over loopback HTTP ({c['server']} server, {c['cpus']} CPUs): round trips in ms")
    for col in ("store", "scenario", "call", "n", "p50", "p99", "mean", "permits/s", "target", "met"):
        table.add_column(col, justify="left" if col in ("store", "scenario", "call", "target") else "right")
    for r in report["rows"]:
        met = "-" if r["met"] is None else ("[green]yes[/]" if r["met"] else "[red]no[/]")
        table.add_row(r["store"], r["scenario"], r["call"], str(r["n"]), fmt(r["p50_ms"], ".2f"),
                      fmt(r["p99_ms"], ".2f"), fmt(r["mean_ms"], ".2f"), fmt(r["per_s"], ".0f"), r["target"] or "-",
                      met)
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(table)
    for store, info in report["setup"].items():
        if "loaded_groups" not in info or "waiters" not in info:
            console.print(f"{store}: {info}", highlight=False)
            continue
        console.print(f"{store}: loaded {info['loaded_groups']} groups {info['loaded_group_sizes']}, CPU client "
                      f"{info['loaded_client_cpu']} server {info['loaded_server_cpu']}; waiting: {info['waiters']} "
                      f"long polls ({info['outstanding_at_start']} open at the probe's start, "
                      f"{info['outstanding_at_end']} at its end; the server counted {info['waiting_at_server_start']} "
                      f"and {info['waiting_at_server_end']} waiting; {info['waiters_granted']} granted, "
                      f"{info['waiter_errors']} errors) behind {info['holders']} holders; {info['waiting_jobs']} "
                      f"jobs submitted in {info['waiting_submit_s']} s; status {info['status_bytes'] / 1e6:.1f} MB; "
                      f"wall lone {info['lone_wall_s']} s, loaded {info['loaded_wall_s']} s, "
                      f"waiting {info['waiting_wall_s']} s", highlight=False)
    console.print(f"permits {c['permits']}, jobs {c['jobs']} for {c['seconds']} s, {c['waiting']} waiting, "
                  f"probes {c['probe_seconds']} s, Python {c['python']}; wall {c['wall_s']} s", highlight=False)


def main() -> None:
    """The command line (see the module docstring)."""
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-memory":
        serve_memory(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=("both", "sqlite", "memory"), default="both",
                    help="journal: a fresh SQLite file, none, or both side by side (default both)")
    ap.add_argument("--server", choices=("process", "thread"), default="process",
                    help="a child process (as deployed) or a thread of this process (default process)")
    ap.add_argument("--permits", type=int, default=1000, help="lone: permits in a row (default 1000)")
    ap.add_argument("--jobs", type=int, default=100, help="loaded: jobs, 5 to a group (default 100)")
    ap.add_argument("--seconds", type=float, default=10.0, help="loaded: measured window (default 10)")
    ap.add_argument("--waiting", type=int, default=10_000, help="waiting: open long polls (default 10000)")
    ap.add_argument("--probe-seconds", type=float, default=20.0, help="waiting: probe window (default 20)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset of lone,loaded,waiting")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args()
    scenarios = tuple(x.strip() for x in args.scenarios.split(",") if x.strip())
    if not scenarios or set(scenarios) - set(SCENARIOS):
        ap.error(f"--scenarios: choose from {', '.join(SCENARIOS)}")
    stores = ("sqlite", "memory") if args.store == "both" else (args.store,)
    report = run(stores, args.server, args.permits, args.jobs, args.seconds, args.waiting, args.probe_seconds,
                 scenarios, say=lambda s: print(s, flush=True))
    _print(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
