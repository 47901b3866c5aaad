"""The `lone` and `loaded` scenarios of benchmarks/permit_latency.py (see its docstring): each
takes a fresh server and its store's name, and returns its table rows and setup facts."""

from __future__ import annotations

import asyncio
import time

from permit_latency_load import PHASES, TIMINGS, Conn, latency_stats, run_async, submit_all, table_row, tiny_job
from permit_latency_servers import Server

from rollmux.live.client import HttpPermitClient
from rollmux.shim import PhaseTimings

WARMUP_PERMITS = 20        # unrecorded permits of the lone job first
WARMUP_S = 1.0             # loaded: the first second is not counted


def lone(server: Server, store: str, permits: int) -> tuple[list[dict], dict]:
    """One job alone in its group: `permits` uncontended acquire/release round trips, through
    `HttpPermitClient` (what a job sees), then as many through the lean client (the server's share)."""
    admin = HttpPermitClient(server.url, admin_token=server.admin_token)
    client = HttpPermitClient(server.url)
    try:
        placed = admin.submit(tiny_job("lone", 1.0))  # SLO 1.0: nobody can share its nodes
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
        lean_acq, lean_rel, lean_rate = run_async(_lone_lean(server, permits))
    finally:
        client.close()
        admin.close()
    return [table_row(store, "lone", "acquire", latency_stats(acq), rate),
            table_row(store, "lone", "release", latency_stats(rel), target=False),
            table_row(store, "lone", "acquire (lean client)", latency_stats(lean_acq), lean_rate, target=False),
            table_row(store, "lone", "release (lean client)", latency_stats(lean_rel), target=False)], {}


async def _lone_lean(server: Server, permits: int) -> tuple[list[float], list[float], float]:
    """The lone loop through `Conn`: one write per request, TCP_NODELAY, no client library."""
    placed = (await submit_all(server.url, server.admin_token, [tiny_job("lone-lean", 1.0)], 1))[0]
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
    placed = await submit_all(server.url, server.admin_token, [tiny_job(j, 5.0) for j in ids])
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
    return [table_row(store, "loaded", "acquire (incl. turn wait)", latency_stats(lat), per_s,
                      target=store == "sqlite")], info


def loaded(server: Server, store: str, jobs: int, seconds: float) -> tuple[list[dict], dict]:
    """`jobs` jobs in groups of 5 loop acquire -> release for `seconds`: throughput in permits/s."""
    return run_async(_loaded(server, store, jobs, seconds))
