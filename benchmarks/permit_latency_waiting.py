"""The `waiting` scenario of benchmarks/permit_latency.py (see its docstring): thousands of open
long-poll acquires while heartbeats and the admin status are probed."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
from permit_latency_load import Conn, latency_stats, run_async, submit_all, table_row, tiny_job
from permit_latency_servers import Server

from rollmux.live.client import HttpPermitClient

GROUP = 5                  # the scheduler's max_group_size: tiny SLO-5 jobs pack 5 to a group
PROBED_HOLDERS = 100       # the heartbeat prober beats for the first this many holders in turn


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


async def _submit_waiting(server: Server, waiting: int) -> tuple[dict[int, list[str]], dict[str, str], int]:
    """Submit tiny SLO-5 jobs in batches until `waiting` of them can wait (every member of a group but
    the one whose turn it is): the members by group, every job's token, the number of jobs submitted."""
    members: dict[int, list[str]] = {}
    tokens: dict[str, str] = {}
    n = 0
    while sum(len(m) - 1 for m in members.values()) < waiting:
        short = waiting - sum(len(m) - 1 for m in members.values())
        batch = [tiny_job(f"w{i:05d}", 5.0) for i in range(n, n + -(-short * GROUP // (GROUP - 1)))]
        n += len(batch)
        for p in await submit_all(server.url, server.admin_token, batch):
            members.setdefault(p["group_id"], []).append(p["job_id"])
            tokens[p["job_id"]] = p["token"]
    return members, tokens, n


def _turns(groups: list[dict], waiting: int) -> tuple[list[str], list[str]]:
    """(holders, waiters) of the groups on a single rollout node with 2+ members: on each, the member
    whose turn it is, and the others (the first `waiting` of them)."""
    holders = [g["turn"]["rollout"][0] for g in groups if g["rollout_nodes"] == 1 and len(g["members"]) >= 2]
    waiters = [j for g in groups if g["rollout_nodes"] == 1 and len(g["members"]) >= 2
               for j in g["members"] if j not in set(g["turn"]["rollout"])][:waiting]
    return holders, waiters


async def _hold(server: Server, tokens: dict[str, str], holders: list[str]) -> None:
    """Each holder takes its group's rollout permit and keeps it (64 acquires at a time)."""
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


class _Waiters:
    """The waiters' long-poll acquires for rollout (wait_s 30, asked again on 204), one connection
    each, and the counts of polls sent, answered, granted and failed."""

    def __init__(self, server: Server, tokens: dict[str, str]) -> None:
        self.server, self.tokens = server, tokens
        self.counts = {"sent": 0, "answered": 0, "granted": 0, "errors": 0}
        self.connecting = asyncio.Semaphore(256)  # the listen backlog is 4096: connect in waves, not all at once
        self.tasks: list[asyncio.Future] = []

    def _sent(self) -> None:
        self.counts["sent"] += 1

    async def _wait(self, job_id: str) -> None:
        conn = Conn(self.server.url, self.tokens[job_id])
        async with self.connecting:
            await conn.open()
        try:
            while True:
                status, _ = await conn.call("POST", f"/v1/jobs/{job_id}/acquire", {"phase": "rollout", "wait_s": 30},
                                            sent=self._sent)
                self.counts["answered"] += 1
                if status != 204:
                    self.counts["granted" if status == 200 else "errors"] += 1
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.counts["errors"] += 1
        finally:
            conn.close()

    async def open(self, waiters: list[str]) -> float:
        """Start every waiter's poll; the seconds until all are written (or every poll has ended)."""
        t0 = time.monotonic()
        self.tasks = [asyncio.ensure_future(self._wait(j)) for j in waiters]
        while self.counts["sent"] < len(waiters) and not all(t.done() for t in self.tasks):
            await asyncio.sleep(0.05)
        return round(time.monotonic() - t0, 2)

    def outstanding(self) -> int:
        """Polls written and not answered yet."""
        return self.counts["sent"] - self.counts["answered"]

    def any_ended(self) -> bool:
        """Whether a poll was granted or failed."""
        return self.counts["granted"] + self.counts["errors"] > 0

    async def cancel(self) -> None:
        """Cancel every poll and wait for them."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _probe(server: Server, admin: httpx.Client, ring: list[str], tokens: dict[str, str],
                 probe_s: float) -> tuple[_Probe, _Probe]:
    """(heartbeats, statuses): for `probe_s`, from two threads, heartbeats of the jobs in `ring` in
    turn (20/s, `HttpPermitClient.heartbeat`) and GET /v1/status with the admin token (2/s)."""
    beats, stats = _Probe(), _Probe()
    hb = HttpPermitClient(server.url)
    for j in ring:
        hb.register(j, tokens[j])
    turn = [0]

    def beat() -> int:
        turn[0] += 1
        hb.heartbeat(ring[turn[0] % len(ring)])
        return 0

    def status() -> int:
        return len(admin.get("/v1/status").raise_for_status().content)
    until = time.monotonic() + probe_s
    try:
        await asyncio.gather(asyncio.to_thread(_prober, beat, 20.0, until, beats),
                             asyncio.to_thread(_prober, status, 2.0, until, stats))
    finally:
        hb.close()
    return beats, stats


async def _waiting(server: Server, store: str, waiting: int, probe_s: float) -> tuple[list[dict], dict]:
    t0 = time.monotonic()
    members, tokens, n = await _submit_waiting(server, waiting)
    info: dict[str, Any] = {"waiting_jobs": n, "waiting_groups": len(members),
                            "waiting_submit_s": round(time.monotonic() - t0, 1)}
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"},
                      timeout=120.0) as admin:
        holders, waiters = _turns(_all_groups(admin), waiting)
        await _hold(server, tokens, holders)
        polls = _Waiters(server, tokens)
        info["waiting_open_s"] = await polls.open(waiters)
        # Every poll is written; wait until the server counts them all as waiting and has gone idle.
        info["waiting_at_server_start"] = await asyncio.to_thread(_parked, admin, len(waiters), polls.any_ended)
        info["waiting_settle_s"] = await asyncio.to_thread(_wait_idle, server)
        info["outstanding_at_start"] = polls.outstanding()
        beats, stats = await _probe(server, admin, holders[:PROBED_HOLDERS], tokens, probe_s)
        info["outstanding_at_end"] = polls.outstanding()
        info["waiting_at_server_end"] = await asyncio.to_thread(_server_waiting, admin)
    info["waiters"], info["holders"] = len(waiters), len(holders)
    info["waiters_granted"], info["waiter_errors"] = polls.counts["granted"], polls.counts["errors"]
    info["status_bytes"] = stats.size
    info["probe_errors"] = beats.errors + stats.errors
    await polls.cancel()
    extra = {"outstanding": info["outstanding_at_end"]}
    return [table_row(store, "waiting", "heartbeat", latency_stats(beats.lat), **extra),
            table_row(store, "waiting", "GET /v1/status", latency_stats(stats.lat), **extra)], info


def waiting(server: Server, store: str, waiting: int, probe_s: float) -> tuple[list[dict], dict]:
    """`waiting` long-poll acquires held open while heartbeats and status are probed: their latency."""
    return run_async(_waiting(server, store, waiting, probe_s))
