"""Permit (admission) round-trip latency of the scheduler service, in-process and as a Ray actor.

Usage: .venv/bin/python benchmarks/permit_latency.py [--permits 1000] [--jobs 100] [--seconds 20]
                                                      [--phase-ms 0] [--no-ray] [--json OUT]

Two variants side by side, same scenarios, same profiles:
  in-process  `SchedulerCore` called directly from driver threads (no Ray);
  ray         the service as the named Ray actor (`start_service`) on a local Ray
              (num_cpus=2), acquire = `ray.get(handle.acquire.remote(...))`, release
              through `RayPermitClient.release` (fire-and-forget, one client per job).

Scenarios:
  lone         one job alone in its group asks for --permits permits in a row
               (rollout, train, rollout, ...; each released before the next): it is
               granted at once, so its latency is pure service overhead.
  loaded       --jobs synthetic jobs (tiny profile, SLO 5: groups of 5, the
               max_group_size) plus one probe job alone in its own group (SLO 1.0,
               nothing can join it), each in a driver thread looping acquire ->
               --phase-ms of "work" -> release for --seconds. Rows:
    loaded       every acquire of the K jobs: the round trip *includes* waiting for the
                 job's turn (legitimate), so it is not overhead;
    loaded-probe the probe's acquires: never contended, so it is the service's
                 overhead under that load.
The "reply" columns are the grant -> return leg of every acquire (the controller's
grant timestamp `granted_at`, put on the caller's monotonic clock via the service
environment's start time; the same machine, so CLOCK_MONOTONIC is shared with the
actor's process): pure delivery overhead even for contended acquires. Throughput
= permits returned inside the window / window length (the lone row: sequential).
Acquires still outstanding at the deadline (they complete as the other jobs leave)
are not counted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rollmux.core.spec import default_cluster
from rollmux.live.client import RayPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.service import SchedulerCore, start_service
from rollmux.shim import PhaseTimings

PHASES = ("rollout", "train")
WARMUP = 20  # unrecorded permits of the lone job first


def _profile(job_id: str, rollout: float, train: float, slo: float) -> dict:
    """A live job record with a 1 s sync: one rollout node, one training node."""
    return live_job_record(job_id, rollout, train, slo, sync_s=1.0)


# -- the service, behind one adapter -------------------------------------------------------------

def _job_kwargs(method: str, tokens: dict[str, Any], job_id: str) -> dict:
    """The one place that knows the service's per-job credentials: if `SchedulerCore.<method>`
    takes a `token`, pass the one `submit` returned for the job."""
    wants = "token" in inspect.signature(getattr(SchedulerCore, method)).parameters
    return {"token": tokens[job_id]} if wants and job_id in tokens else {}


class _Service:
    """The scheduler service as the benchmark calls it; `clock_offset` maps the controller's
    `granted_at` onto this process's time.monotonic()."""

    remote = False

    def __init__(self) -> None:
        self.tokens: dict[str, Any] = {}
        self.last_grant: dict[str, int] = {}
        self.clock_offset: float | None = None

    def _invoke(self, method: str, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError

    def submit(self, record: dict) -> dict:
        placed = self._invoke("submit", record)
        if isinstance(placed, dict) and "token" in placed:
            self.tokens[record["job_id"]] = placed["token"]
        return placed

    def acquire(self, job_id: str, phase: str) -> dict:
        # last_grant, as RayPermitClient sends it: an acquire that overtakes this job's
        # in-flight release (calls to a threaded actor may reorder) waits for that release.
        grant = self._invoke("acquire", job_id, phase, last_grant=self.last_grant.get(job_id),
                             **_job_kwargs("acquire", self.tokens, job_id))
        self.last_grant[job_id] = grant["grant_no"]
        return grant

    def client(self) -> Any:
        """What one job thread releases through (a fresh one per job: its own drain)."""
        return None

    def release(self, client: Any, timings: PhaseTimings) -> None:
        self._invoke("release", timings.job_id, timings.phase, asdict(timings),
                     **_job_kwargs("release", self.tokens, timings.job_id))

    def drain(self, client: Any) -> None:
        """Every release this job sent has been applied."""

    def finish(self, job_id: str) -> None:
        self._invoke("finish", job_id, **_job_kwargs("finish", self.tokens, job_id))

    def status(self) -> dict:
        return self._invoke("status")

    def close(self) -> None:
        raise NotImplementedError


class _InProcess(_Service):
    name = "in-process"

    def __init__(self, cluster: dict, store: str | None = None) -> None:
        super().__init__()
        self.core = SchedulerCore(cluster, store=store)
        self.clock_offset = self.core.env._t0  # granted_at = monotonic() - _t0 (time_scale 1)

    def _invoke(self, method: str, *args: Any, **kw: Any) -> Any:
        return getattr(self.core, method)(*args, **kw)

    def close(self) -> None:
        self.core.shutdown()


class _Ray(_Service):
    name = "ray"
    remote = True

    def __init__(self, cluster: dict, store: str | None = None) -> None:
        super().__init__()
        import ray
        self.ray = ray
        self.handle = start_service(cluster, store=store)
        try:  # the actor's environment start, to place its grant timestamps on our clock
            self.clock_offset = ray.get(self.handle.__ray_call__.remote(lambda core: core.env._t0))
        except Exception:  # noqa: BLE001 -- an optional extra; the reply columns stay empty
            self.clock_offset = None

    def _invoke(self, method: str, *args: Any, **kw: Any) -> Any:
        return self.ray.get(getattr(self.handle, method).remote(*args, **kw))

    def client(self) -> RayPermitClient:
        c = RayPermitClient(self.handle)
        for job_id, token in self.tokens.items():
            c.register(job_id, token)
        return c

    def release(self, client: RayPermitClient, timings: PhaseTimings) -> None:
        client.release(timings)  # not awaited: the next acquire may overtake it

    def drain(self, client: RayPermitClient) -> None:
        client.drain()

    def close(self) -> None:
        self.ray.kill(self.handle)


# -- measurement -----------------------------------------------------------------------------------

class _Log:
    """Acquires of one scenario: (job, sent, returned, granted) on the monotonic clock."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float | None]] = []
        self.lock = threading.Lock()

    def add(self, job_id: str, sent: float, returned: float, grant: dict, offset: float | None) -> None:
        granted = None if offset is None else offset + grant["granted_at"]
        with self.lock:
            self.rows.append((job_id, sent, returned, granted))


def _stats(rows: list, window_s: float) -> dict:
    lat = np.array([(r - s) * 1e3 for _, s, r, _ in rows]) if rows else np.array([])
    reply = np.array([(r - g) * 1e3 for _, _, r, g in rows if g is not None])
    pct = lambda a, q: round(float(np.percentile(a, q)), 4) if a.size else None  # noqa: E731
    return {"permits": len(rows), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "mean_ms": round(float(lat.mean()), 4) if lat.size else None,
            "reply_p50_ms": pct(reply, 50), "reply_p99_ms": pct(reply, 99),
            "permits_per_s": round(len(rows) / window_s, 1) if window_s > 0 else None}


def _loop(svc: _Service, job_id: str, log: _Log | None, keep_going: Callable[[int], bool],
          phase_s: float) -> None:
    """acquire -> phase -> release until told to stop, then drain and leave."""
    client = svc.client()
    n = 0
    while keep_going(n):
        phase = PHASES[n % 2]
        sent = time.monotonic()
        grant = svc.acquire(job_id, phase)
        got = time.monotonic()
        if log is not None:
            log.add(job_id, sent, got, grant, svc.clock_offset)
        if phase_s > 0:
            time.sleep(phase_s)
        svc.release(client, PhaseTimings(job_id, phase, got - sent, 0.0, phase_s, 0.0))
        n += 1
    svc.drain(client)
    svc.finish(job_id)


def lone(svc: _Service, permits: int) -> dict:
    """One job alone in its group: `permits` uncontended round trips."""
    svc.submit(_profile("lone-warmup", 20.0, 20.0, 5.0))
    _loop(svc, "lone-warmup", None, lambda n: n < WARMUP, 0.0)
    placed = svc.submit(_profile("lone", 20.0, 20.0, 1.0))  # SLO 1.0: nobody can share its nodes
    members = next(g["members"] for g in svc.status()["groups"] if g["group_id"] == placed["group_id"])
    if members != ["lone"]:
        raise RuntimeError(f"the lone job shares its group: {members}")
    log = _Log()
    t0 = time.monotonic()
    _loop(svc, "lone", log, lambda n: n < permits, 0.0)
    return {"variant": svc.name, "scenario": "lone", **_stats(log.rows, time.monotonic() - t0)}


def loaded(svc: _Service, jobs: int, seconds: float, phase_s: float) -> tuple[list[dict], dict]:
    """`jobs` contending jobs plus one lone probe, all looping for `seconds`."""
    svc.submit(_profile("probe", 20.0, 20.0, 1.0))  # SLO 1.0: nobody can share its nodes
    ids = [f"j{i:03d}" for i in range(jobs)]
    for j in ids:
        svc.submit(_profile(j, 20.0, 20.0, 5.0))
    groups = svc.status()["groups"]
    probe_group = next(g for g in groups if "probe" in g["members"])
    sizes = sorted(len(g["members"]) for g in groups if g is not probe_group)
    info = {"groups": len(groups) - 1, "group_sizes": {str(s): sizes.count(s) for s in sorted(set(sizes))},
            "probe_alone": probe_group["members"] == ["probe"]}
    log = _Log()
    start = threading.Barrier(jobs + 2)
    window: dict[str, float] = {}

    def run(job_id: str) -> None:
        start.wait()
        _loop(svc, job_id, log, lambda n: time.monotonic() < window["end"], phase_s)

    threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in ["probe", *ids]]
    for t in threads:
        t.start()
    window["start"] = time.monotonic()
    window["end"] = window["start"] + seconds
    start.wait()
    for t in threads:
        t.join()
    inside = [r for r in log.rows if r[2] <= window["end"]]
    rows = [{"variant": svc.name, "scenario": "loaded", **_stats([r for r in inside if r[0] != "probe"], seconds)},
            {"variant": svc.name, "scenario": "loaded-probe", **_stats([r for r in inside if r[0] == "probe"], seconds)}]
    return rows, info


def run_variant(svc: _Service, permits: int, jobs: int, seconds: float, phase_ms: float) -> tuple[list[dict], dict]:
    """Both scenarios on one service; the service is closed afterwards."""
    try:
        t0 = time.monotonic()
        rows = [lone(svc, permits)]
        t1 = time.monotonic()
        more, info = loaded(svc, jobs, seconds, phase_ms / 1e3)
        info.update(lone_wall_s=round(t1 - t0, 1), loaded_wall_s=round(time.monotonic() - t1, 1))
        return rows + more, info
    finally:
        svc.close()


def _store(kind: str) -> str | None:
    """None: no journal; "sqlite": a fresh journal file (WAL, synchronous=FULL) per variant."""
    return None if kind == "memory" else os.path.join(tempfile.mkdtemp(prefix="rollmux-bench-"), "journal.db")


def run_inprocess(permits: int = 1000, jobs: int = 100, seconds: float = 20.0, phase_ms: float = 0.0,
                  store: str = "memory") -> dict:
    """The in-process variant alone (no Ray): {"rows": [...], "loaded_groups": {...}}."""
    rows, info = run_variant(_InProcess(default_cluster().model_dump(), _store(store)), permits, jobs, seconds,
                             phase_ms)
    return {"rows": rows, "loaded_groups": {"in-process": info}}


def run_ray(permits: int = 1000, jobs: int = 100, seconds: float = 20.0, phase_ms: float = 0.0,
            store: str = "memory") -> dict:
    """The Ray variant on a fresh local Ray (started and shut down here)."""
    import ray
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             namespace=f"rollmux-permit-bench-{os.getpid()}", _node_ip_address="127.0.0.1")
    try:
        rows, info = run_variant(_Ray(default_cluster().model_dump(), _store(store)), permits, jobs, seconds,
                                 phase_ms)
    finally:
        ray.shutdown()
    return {"rows": rows, "loaded_groups": {"ray": info}}


def run(permits: int = 1000, jobs: int = 100, seconds: float = 20.0, phase_ms: float = 0.0,
        with_ray: bool = True, store: str = "memory") -> dict:
    """Both variants, in-process first; returns the report written by --json."""
    t0 = time.monotonic()
    out = run_inprocess(permits, jobs, seconds, phase_ms, store)
    if with_ray:
        r = run_ray(permits, jobs, seconds, phase_ms, store)
        out["rows"] += r["rows"]
        out["loaded_groups"].update(r["loaded_groups"])
    out["config"] = {"permits": permits, "jobs": jobs, "seconds": seconds, "phase_ms": phase_ms, "store": store,
                     "cpus": os.cpu_count(), "python": sys.version.split()[0], "wall_s": round(time.monotonic() - t0, 1)}
    return out


def _print(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    table = Table(title="Permit round trip (ms): acquire call -> grant returned")
    for col in ("variant", "scenario", "permits", "p50", "p99", "mean", "reply p50", "reply p99", "permits/s"):
        table.add_column(col, justify="left" if col in ("variant", "scenario") else "right")
    for r in report["rows"]:
        table.add_row(r["variant"], r["scenario"], str(r["permits"]), fmt(r["p50_ms"], ".3f"), fmt(r["p99_ms"], ".3f"),
                      fmt(r["mean_ms"], ".3f"), fmt(r["reply_p50_ms"], ".3f"), fmt(r["reply_p99_ms"], ".3f"),
                      fmt(r["permits_per_s"], ".0f"))
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(table)
    for variant, info in report["loaded_groups"].items():
        console.print(f"loaded ({variant}): {info['groups']} groups, sizes {info['group_sizes']}, "
                      f"probe alone: {info['probe_alone']}; wall: lone {info['lone_wall_s']} s, loaded {info['loaded_wall_s']} s")
    by = {(r["variant"], r["scenario"]): r for r in report["rows"]}
    if ("ray", "lone") in by and by[("ray", "lone")]["p50_ms"] is not None:
        console.print(f"Ray overhead, lone p50: {by[('ray', 'lone')]['p50_ms'] - by[('in-process', 'lone')]['p50_ms']:.3f} ms")
    c = report["config"]
    console.print(f"jobs {c['jobs']}, {c['seconds']} s loaded, phase {c['phase_ms']} ms, journal {c['store']}, "
                  f"{c['cpus']} CPUs; "
                  f"wall {c['wall_s']} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--permits", type=int, default=1000, help="permits of the lone job (default 1000)")
    ap.add_argument("--jobs", type=int, default=100, help="contending jobs in the loaded scenario (default 100)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the loaded scenario (default 20)")
    ap.add_argument("--phase-ms", type=float, default=0.0, help="simulated phase length (default 0: back to back)")
    ap.add_argument("--no-ray", action="store_true", help="the in-process variant only")
    ap.add_argument("--store", choices=("memory", "sqlite"), default="memory",
                    help="journal of the service: none (memory) or a SQLite file (default memory)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args()
    report = run(args.permits, args.jobs, args.seconds, args.phase_ms, with_ray=not args.no_ray, store=args.store)
    _print(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
