"""`N waiting jobs`, a scenario of `rollmux chaos`: N long-poll acquires outstanding at once while
heartbeats and GET /v1/status stay answered.

A server of the scenario's own runs a cluster of one node per pool, so the first jobs fill one
group and every later one waits in the FIFO queue; nobody ever releases. N jobs are submitted
(`SUBMIT_AT_ONCE` connections), then each asks for its rollout permit with the longest long poll
(30 s, asked again on 204) on a keep-alive connection of its own, ramped up in batches that each
wait until their requests are on the wire (and, where the status counts them, until the server
holds them all). With all N asks outstanding, the scenario's thread times heartbeats of randomly
drawn jobs (a seeded numpy Generator) and, every `STATUS_EVERY` beats, GET /v1/status, with
httpx. Passes if both p99s are under `P99_LIMIT_MS` (as `rollmux chaos` runs it; the test suite
only reports them) and every ask is still outstanding (or was granted) at the end. RLIMIT_NOFILE
is raised to its hard limit first (the server inherits it): the client and the server each hold
one descriptor per outstanding request.

The waiting side speaks HTTP/1.1 over asyncio streams by hand (`_Conn`), not through httpx:
N asks re-asked every 30 s are N/30 requests a second for as long as they wait, and on two cores
httpx's asyncio client manages about a hundred requests a second against uvicorn, while a raw
stream client reaches a couple of thousand against this server; with httpx the scenario would
measure the client. A broken connection is reopened: an ask is asked again (`reasks`; an ask
re-attaches to the same request), a submit whose reply was lost is recovered (its job cancelled
and submitted again, `resubmits`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import resource
import threading
import time
from typing import Callable

import httpx

from rollmux.harness.chaos.checks import percentiles_ms
from rollmux.harness.chaos.job import job_record
from rollmux.harness.chaos.run import CLUSTER, PHASE_S, WAIT_S, Run

POLL_S = 30.0          # the longest long poll the API allows
SUBMIT_AT_ONCE = 32    # connections submitting jobs
RAMP_BATCH = 250       # asks started together; the next batch waits until these are sent
HEARTBEATS = 300       # heartbeats timed
STATUS_EVERY = 10      # one GET /v1/status per this many heartbeats
P99_LIMIT_MS = 200.0
FD_MARGIN = 1024       # descriptors beyond one per outstanding request
TRIES = 3              # attempts of one submission or ask over broken connections


def _tight_cluster() -> dict:
    """The chaos cluster with one node per pool: five jobs fill it, the rest queue."""
    cluster = copy.deepcopy(CLUSTER)
    for pool in ("rollout", "train"):
        cluster["pools"][pool]["max_nodes"] = 1
    return cluster


def _raise_fd_limit(need: int) -> str | None:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; why not enough, or None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        return f"RLIMIT_NOFILE hard limit {hard} is below the {need} descriptors this many waiting jobs need"
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return None


class _Conn:
    """One keep-alive HTTP/1.1 connection, requests one at a time (JSON in, status and JSON out)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, token: str, body: dict | None = None,
                      sent: Callable[[], None] | None = None, timeout_s: float = WAIT_S) -> tuple[int, dict | None]:
        """Send one request (`sent()` once it is on the wire) and read its answer within `timeout_s`;
        ConnectionError if the connection breaks or the answer is late (it is reopened on the next request)."""
        try:
            return await asyncio.wait_for(self._exchange(method, path, token, body, sent), timeout_s)
        except asyncio.TimeoutError:
            self.close()
            raise ConnectionError(f"{method} {path}: no answer within {timeout_s:g} s") from None

    async def _exchange(self, method: str, path: str, token: str, body: dict | None,
                        sent: Callable[[], None] | None) -> tuple[int, dict | None]:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        try:
            if self._w is None:
                self._r, self._w = await asyncio.open_connection(self.host, self.port)
            self._w.write(head.encode() + data)
            await self._w.drain()
            if sent is not None:
                sent()
            status = int((await self._r.readuntil(b"\r\n")).split()[1])
            length, close = 0, False
            while (line := await self._r.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
                elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                    close = True
            raw = await self._r.readexactly(length) if length else b""
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
            self.close()
            raise ConnectionError(f"{method} {path}: the connection broke") from None
        if close:
            self.close()
        return status, json.loads(raw) if raw else None

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
        self._r = self._w = None


class Waiters:
    """N jobs submitted and long-polling for their rollout permit, on an event loop in a thread of its own."""

    def __init__(self, url: str, admin_token: str, n: int) -> None:
        host, _, port = url.removeprefix("http://").rpartition(":")
        self.host, self.port, self.admin, self.n = host, int(port), admin_token, n
        self.ids = [f"wait-{k:05d}" for k in range(n)]
        self.tokens: dict[str, str] = {}
        self.sent = 0        # first asks on the wire
        self.granted = 0     # asks answered with a permit (the group's first turn)
        self.repolls = 0     # 204s: the long poll ran out and was asked again
        self.reasks = 0      # asks sent again after a broken connection
        self.resubmits = 0   # submissions whose reply was lost, recovered
        self.errors: list[str] = []
        self.submit_s: float | None = None
        self.ramp_s: float | None = None
        self.ready = threading.Event()  # every job submitted and its first ask sent (or an error)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-waiters", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = WAIT_S) -> None:
        """Cancel every ask and close the connections."""
        if self._loop is not None and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop is over already
                pass
        self._thread.join(timeout_s)

    @property
    def outstanding(self) -> int:
        return self.sent - self.granted

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # noqa: BLE001 -- reported by the scenario
            self.errors.append(f"the waiters' event loop crashed: {type(exc).__name__}: {exc}")
        finally:
            self.ready.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        conns: list[_Conn] = []
        tasks: list[asyncio.Task] = []
        try:
            t0 = time.monotonic()
            queue = iter(self.ids)
            submitters = [_Conn(self.host, self.port) for _ in range(SUBMIT_AT_ONCE)]
            conns += submitters
            await asyncio.gather(*(self._submit_all(c, queue) for c in submitters))
            self.submit_s = round(time.monotonic() - t0, 2)
            for c in submitters:
                c.close()
            if self.errors:
                return
            t0 = time.monotonic()
            for start in range(0, self.n, RAMP_BATCH):
                for job_id in self.ids[start:start + RAMP_BATCH]:
                    conn = _Conn(self.host, self.port)
                    conns.append(conn)
                    tasks.append(asyncio.create_task(self._ask(conn, job_id)))
                last, since = self.sent, time.monotonic()
                while self.sent < len(tasks) and not self.errors:
                    if self.sent != last:
                        last, since = self.sent, time.monotonic()
                    elif time.monotonic() - since > WAIT_S:
                        self.errors.append(f"no ask sent for {WAIT_S:.0f} s at {self.sent} of {self.n}")
                    await asyncio.sleep(0.01)
                if self.errors:
                    return
            self.ramp_s = round(time.monotonic() - t0, 2)
            self.ready.set()
            await self._stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in conns:
                c.close()

    async def _submit_all(self, conn: _Conn, queue) -> None:
        for job_id in queue:  # one iterator shared by every submitter
            if self.errors:
                return
            for attempt in range(TRIES):
                try:
                    if attempt:  # the last reply was lost: was it placed? Then cancel it, to submit it again.
                        self.resubmits += 1
                        status, job = await conn.request("GET", f"/v1/jobs/{job_id}", self.admin)
                        if status == 200 and job["status"] in ("queued", "running"):
                            await conn.request("DELETE", f"/v1/jobs/{job_id}", self.admin)
                    status, out = await conn.request("POST", "/v1/jobs", self.admin, job_record(job_id, PHASE_S))
                except ConnectionError as exc:
                    if attempt + 1 < TRIES:
                        continue
                    self.errors.append(f"submit {job_id}: {exc}")
                    return
                if status not in (201, 202):  # 202: accepted, waiting in line for nodes
                    self.errors.append(f"submit {job_id}: {status} {out}")
                    return
                self.tokens[job_id] = out["token"]
                break

    async def _ask(self, conn: _Conn, job_id: str) -> None:
        first = True

        def sent() -> None:
            nonlocal first
            if first:
                first = False
                self.sent += 1
        broken = 0
        while True:
            try:
                status, out = await conn.request("POST", f"/v1/jobs/{job_id}/acquire", self.tokens[job_id],
                                                 {"phase": "rollout", "wait_s": POLL_S}, sent, POLL_S + WAIT_S)
            except ConnectionError as exc:  # an ask re-attaches to the same request: ask again
                broken += 1
                if broken < TRIES:
                    self.reasks += 1
                    continue
                self.errors.append(f"acquire {job_id}: {exc}")
                return
            if status == 204:
                self.repolls += 1
                continue
            if status == 200:
                self.granted += 1
                return
            self.errors.append(f"acquire {job_id}: {status} {out}")
            return


def _timed(fn: Callable[[], httpx.Response]) -> tuple[float, httpx.Response]:
    t = time.perf_counter()
    r = fn()
    r.read()
    return time.perf_counter() - t, r


def waiting_jobs(n: int, p99_limit_ms: float | None = P99_LIMIT_MS) -> Callable[[Run], None]:
    """`n` outstanding long-poll acquires while heartbeats and GET /v1/status stay answered (each p99
    under `p99_limit_ms`; None: measured and reported only, as the test suite runs it)."""
    def body(run: Run) -> None:
        why = _raise_fd_limit(n + FD_MARGIN)
        if not run.check(why is None, str(why)):
            return
        # Every waiter comes from loopback, where a cluster's jobs come from their own nodes: the
        # per-address connection cap (the door's) is raised to hold them, the total cap is not.
        srv = run.own_server("waiting", ["--heartbeat-timeout", "3600", "--lease-min", "3600",
                                         "--max-connections-per-client", str(n + FD_MARGIN)],
                             cluster=_tight_cluster())
        run.ctx.say(f"chaos: {n} waiting jobs: submitting, then asking ...")
        waiters = Waiters(srv.url, srv.admin_token, n)
        waiters.start()
        try:
            st = _all_asking(run, waiters, n)
            if st is None:
                return
            outstanding = n - st["grants"]
            timed = _time_beats_and_status(run, srv.url, srv.admin_token, waiters, n)
            _judge(run, waiters, n, outstanding, timed, p99_limit_ms)
        finally:
            waiters.stop()
    return body


def _all_asking(run: Run, waiters: Waiters, n: int) -> dict | None:
    """Wait until every ask has reached the server and the few permits granted have reached their jobs;
    the status then, or None if the waiters hung or failed."""
    # Every request has a deadline, and the ramp gives up when no ask goes out for WAIT_S; this
    # bound only catches a waiters thread that hangs regardless.
    if not run.check(waiters.ready.wait(10 * WAIT_S + 0.1 * n), "the waiters hung"):
        return None
    if not run.check(not waiters.errors, f"the waiting jobs were not all asking: "
                                         f"{'; '.join(waiters.errors[:3])} ({waiters.sent} of {n} asks sent, "
                                         f"{waiters.repolls} asked again after 204)"):
        return None
    run.ctx.say(f"chaos: {n} waiting jobs: submitted in {waiters.submit_s} s, all asking after "
                f"{waiters.ramp_s} s more; timing heartbeats and status ...")
    # Every ask has reached the server (it counts them as waiting, where its status says) and the
    # few permits granted (the full group's first turn) have reached their jobs.
    st, held = run.wait_status(lambda s: s.get("waiting", n - s["grants"]) + s["grants"] == n
                               and waiters.granted == s["grants"], WAIT_S)
    run.check(held, f"the server holds {st.get('waiting')} asks and granted {st['grants']} permits; "
                    f"{waiters.sent} asks were sent, {waiters.granted} permits received, of {n}")
    return st


def _time_beats_and_status(run: Run, url: str, admin_token: str, waiters: Waiters,
                           n: int) -> tuple[list[float], list[float], list[int]]:
    """Time HEARTBEATS heartbeats of jobs drawn at random and, every STATUS_EVERY beats, GET /v1/status:
    (heartbeat seconds, status seconds, status sizes in bytes)."""
    rng = run.ctx.rng
    admin = {"Authorization": f"Bearer {admin_token}"}
    beats: list[float] = []
    views: list[float] = []
    sizes: list[int] = []
    with httpx.Client(base_url=url, timeout=30.0) as c:
        for i in range(HEARTBEATS):
            job_id = waiters.ids[int(rng.integers(n))]
            dt, r = _timed(lambda: c.post(f"/v1/jobs/{job_id}/heartbeat", json={},
                                          headers={"Authorization": f"Bearer {waiters.tokens[job_id]}"}))
            beats.append(dt)
            run.check(r.status_code == 200, f"heartbeat of {job_id}: {r.status_code} {r.text[:200]}")
            if i % STATUS_EVERY == 0:
                dt, r = _timed(lambda: c.get("/v1/status", headers=admin))
                views.append(dt)
                sizes.append(len(r.content))
                if run.check(r.status_code == 200, f"GET /v1/status: {r.status_code} {r.text[:200]}") and i == 0:
                    page = r.json()["page"]  # the status comes a page at a time; the totals are all
                    run.check(page["jobs_total"] == n, f"the status counts {page['jobs_total']} jobs, wanted {n}")
    return beats, views, sizes


def _judge(run: Run, waiters: Waiters, n: int, outstanding: int, timed: tuple[list[float], list[float], list[int]],
           p99_limit_ms: float | None) -> None:
    """Of the `n` asks, every one still outstanding (nothing was released); both p99s under the limit (if
    any); the scenario's extras."""
    beats, views, sizes = timed
    hb50, hb99 = percentiles_ms(beats)
    st50, st99 = percentiles_ms(views)
    run.check(not waiters.errors, f"asks failed while waiting: {'; '.join(waiters.errors[:3])}")
    end = run.status()
    run.check(waiters.outstanding == outstanding and end.get("waiting", outstanding) == outstanding,
              f"{outstanding} asks were outstanding, then {waiters.outstanding} (the server holds "
              f"{end.get('waiting')}), while nothing was released")
    run.check(hb99 is not None and st99 is not None, "no heartbeat or status was timed")
    if p99_limit_ms is not None:
        run.check(hb99 is not None and hb99 < p99_limit_ms,
                  f"heartbeat p99 {hb99} ms with {waiters.outstanding} asks outstanding "
                  f"(limit {p99_limit_ms:g})")
        run.check(st99 is not None and st99 < p99_limit_ms,
                  f"GET /v1/status p99 {st99} ms with {waiters.outstanding} asks outstanding "
                  f"(limit {p99_limit_ms:g}; {max(sizes) if sizes else 0} bytes)")
    run.extras.update(waiting=n, outstanding=waiters.outstanding, granted=waiters.granted,
                      submit_s=waiters.submit_s, ramp_s=waiters.ramp_s, repolls=waiters.repolls,
                      reasks=waiters.reasks, resubmits=waiters.resubmits,
                      heartbeat_p50_ms=hb50, heartbeat_p99_ms=hb99, status_p50_ms=st50, status_p99_ms=st99,
                      status_bytes=max(sizes) if sizes else None)
