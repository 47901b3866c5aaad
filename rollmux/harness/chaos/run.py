"""The harness of `rollmux chaos`: the shared server (`Chaos`) and one scenario's bookkeeping (`Run`).

The shared server is `rollmux serve` as a child process (`ProcessServer`) on a loopback
port, with the chaos cluster file, a 2 s heartbeat timeout and the run's journal; a
restart kills it (`kill -9`) and starts it again on the same store and port. A `Run`
submits synthetic jobs (`rollmux.harness.chaos.job`) as driver threads or processes, each
through an `HttpPermitClient` of its own, kills processes, polls the status, sends raw
HTTP requests where a scenario needs to see the status code, and at the end turns its
phase logs and the server's final status into the scenario's entry (`Run.result`, checks
in `checks`). A scenario may start servers of its own (`Run.own_server`): they stop
when the scenario ends.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np
import yaml

from rollmux.core.spec import default_cluster
from rollmux.harness.chaos.checks import (
    double_grants,
    lost_jobs,
    miscounted,
    phase_intervals,
    read_log,
    settled_state,
    state_diff,
)
from rollmux.harness.chaos.job import PhaseLog, job_record, run_job
from rollmux.live.client import HttpPermitClient
from rollmux.live.local import ProcessServer, free_port

REPO_ROOT = str(Path(__file__).resolve().parents[3])
HEARTBEAT_TIMEOUT_S = 2.0
HEARTBEAT_S = 0.5          # a job beats four times per timeout
PHASE_S = 0.005            # the synthetic jobs' phase length (declared as their profile, too)
WAIT_S = 60.0              # bound on every wait for a job or the server
# The paper's cluster with the switch costs of the demo (warm 5 ms, cold 0.1 s), so that jobs
# with ms phases share groups of up to 5 at SLO 5.
CLUSTER = {**default_cluster().model_dump(), "warm_switch_s": 0.005, "cold_switch_s": 0.1}
SERVE_ARGS = ["--heartbeat-timeout", f"{HEARTBEAT_TIMEOUT_S:g}"]
# A restart after `kill -9` waits for the store: a killed Redis writer's lease lapses after 10 s.
RESTART_ARGS = ["--wait-store", f"{WAIT_S / 2:g}"]
ITERATIONS = 8             # iterations of a job that runs to a fixed count
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": PHASE_S, "offload_s": 0.0}


def write_cluster(path: Path, cluster: dict) -> Path:
    """The cluster as the YAML file `rollmux serve --cluster` reads."""
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    return path


def random_token(rng: np.random.Generator) -> str:
    """A token-shaped string (32 url-safe characters) drawn from `rng`."""
    return base64.urlsafe_b64encode(rng.bytes(24)).decode()


def output_tail(text: str, lines: int = 3) -> str:
    """The last non-empty lines of a process's output, on one line (runs of blanks squeezed)."""
    return " | ".join([" ".join(ln.split()) for ln in text.splitlines() if ln.strip()][-lines:])


def start_server(store: str, workdir: Path, cluster: Path | None, extra: list[str],
                 port: int | None = None) -> ProcessServer:
    """`rollmux serve` on loopback, answering; RuntimeError with the end of its output otherwise."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    try:
        return ProcessServer(store, workdir, cluster=cluster, extra=extra, port=port)
    except RuntimeError as exc:
        log = workdir / f"serve-{port}.log"
        raise RuntimeError(f"{exc}: {output_tail(log.read_text(errors='replace')) if log.exists() else ''}") from None


def cli(*args: str, timeout_s: float = WAIT_S) -> subprocess.CompletedProcess:
    """`python -m rollmux.cli ARGS`, stdout and stderr together (as `.stdout`)."""
    return subprocess.run([sys.executable, "-m", "rollmux.cli", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout_s, cwd=REPO_ROOT,
                          env={**os.environ, "COLUMNS": "200"})


def serve_until_exit(store: str, workdir: Path, cluster: Path | None, extra: list[str],
                     timeout_s: float = WAIT_S) -> tuple[int | None, str]:
    """Start `rollmux serve` that is expected to refuse to start: (exit status, its output).

    Waits until it exits or answers on its port (then it is stopped: exit status None)."""
    port = free_port()
    cmd = [sys.executable, "-m", "rollmux.cli", "serve", "--listen", f"127.0.0.1:{port}", "--store", store,
           "--admin-token-file", str(workdir / "admin.token")] + (["--cluster", str(cluster)] if cluster else [])
    out_path = workdir / f"refused-{port}.log"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd + extra, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + timeout_s
    rc: int | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            rc = proc.returncode
            break
        try:
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1.0)
            break  # it is serving
        except httpx.HTTPError:
            time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    return rc, out_path.read_text(errors="replace")


class Chaos:
    """What every scenario shares: the server process, its store and admin client, a scratch folder, the rng."""

    def __init__(self, tmp: Path, store: str, say: Callable[[str], None] = print, seed: int = 0) -> None:
        self.tmp, self.store, self.say = tmp, store, say
        self.rng = np.random.default_rng(seed)
        self.cluster_file = write_cluster(tmp / "cluster.yaml", CLUSTER)
        self.server_dir = tmp / "server"
        self.server: ProcessServer | None = None
        self.admin: HttpPermitClient | None = None

    def start(self, port: int | None = None) -> ProcessServer:
        """Start the shared server (again, on `port`, after a kill)."""
        extra = SERVE_ARGS + (RESTART_ARGS if port is not None else [])
        self.server = start_server(self.store, self.server_dir, self.cluster_file, extra, port)
        if self.admin is None:
            self.admin = HttpPermitClient(self.server.url, admin_token=self.server.admin_token, retry_for_s=WAIT_S)
        return self.server

    @property
    def url(self) -> str:
        return self.server.url

    def status(self) -> dict:
        """The server's status (the admin client waits out a restart)."""
        return self.admin.status()

    def stop(self) -> int | None:
        """SIGTERM the shared server; its exit status (None if none was running)."""
        if self.admin is not None:
            self.admin.close()
        if self.server is None or self.server.proc.poll() is not None:
            return None
        return self.server.signal(signal.SIGTERM)


@dataclass
class JobThread:
    """A synthetic job running in a driver thread: its iterations once done, or its crash."""

    job_id: str
    thread: threading.Thread | None = None
    iterations: int | None = None
    error: str | None = None


@dataclass
class Run:
    """Bookkeeping of one scenario: its server, jobs, kills, phase logs and errors."""

    ctx: Chaos
    name: str
    errors: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    kills: dict[tuple[str, int], float] = field(default_factory=dict)  # (job, pid) -> kill (or reclaim) time
    killed: dict[str, str | None] = field(default_factory=dict)        # job -> failure reason seen
    threads: list[JobThread] = field(default_factory=list)
    clients: list[HttpPermitClient] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    outputs: dict[int, Path] = field(default_factory=dict)             # pid -> its stdout and stderr
    cleanups: list[Callable[[], None]] = field(default_factory=list)   # run last, newest first
    final_status: dict | None = None  # the outcome's status when the scenario's server is gone at the end

    def __post_init__(self) -> None:
        self.log_dir = self.ctx.tmp / self.name.replace(" ", "-")
        self.log_dir.mkdir(parents=True)
        self.url, self.admin_token, self.api = self.ctx.url, self.ctx.server.admin_token, self.ctx.admin
        self._http = httpx.Client(timeout=30.0)

    # -- the server -----------------------------------------------------------------------
    def use(self, url: str, admin_token: str) -> None:
        """Talk to another server from now on (one this scenario started)."""
        self.url, self.admin_token = url, admin_token
        api = HttpPermitClient(url, admin_token=admin_token, retry_for_s=WAIT_S)
        self.cleanups.append(api.close)
        self.api = api

    def own_server(self, label: str, extra: list[str], cluster: dict | None = None,
                   store: str | None = None) -> ProcessServer:
        """Start a `rollmux serve` of this scenario's own (a fresh SQLite store by default); stopped at the end."""
        workdir = self.log_dir / f"server-{label}"
        workdir.mkdir(parents=True, exist_ok=True)
        cluster_file = write_cluster(workdir / "cluster.yaml", cluster or CLUSTER)
        srv = start_server(store or str(workdir / "journal.db"), workdir, cluster_file, extra)
        self.cleanups.append(lambda: srv.proc.poll() is None and srv.signal(signal.SIGTERM))
        self.use(srv.url, srv.admin_token)
        return srv

    def status(self) -> dict:
        """The status of the server this run talks to."""
        return self.api.status()

    def http(self, method: str, path: str, token: str | None, body: Any = None,
             timeout_s: float = 30.0) -> httpx.Response:
        """One raw request (no retries), with `token` as the bearer if given."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self._http.request(method, self.url + path, json=body, headers=headers, timeout=timeout_s)

    def refused(self, method: str, path: str, token: str | None, body: Any, status: int, text: str | None,
                what: str) -> bool:
        """Send a request that must be refused with `status` (and an error message containing `text`)."""
        try:
            r = self.http(method, path, token, body)
        except httpx.HTTPError as exc:
            return self.check(False, f"{what}: no answer ({type(exc).__name__}: {exc})")
        try:
            msg = r.json().get("error", r.text) if r.headers.get("content-type", "").startswith("application/json") \
                else r.text
        except ValueError:
            msg = r.text
        return self.check(r.status_code == status and (text is None or text in str(msg)),
                          f"{what}: {r.status_code} {str(msg)[:300]} (wanted {status}"
                          + (f" ...{text}...)" if text else ")"))

    # -- checks -----------------------------------------------------------------------------
    def check(self, ok: bool, msg: str) -> bool:
        """Record `msg` as an error unless `ok`."""
        if not ok:
            self.errors.append(msg)
        return ok

    def unchanged(self, before: dict, after: dict, what: str) -> bool:
        """Check that two statuses have one settled state; else record `what` changed it, and how."""
        a, b = settled_state(before), settled_state(after)
        return self.check(a == b, f"{what} changed the state: {state_diff(a, b)}")

    def same_group(self, ids: list[str]) -> bool:
        """Precondition of a scenario: these jobs share one group."""
        jobs = self.status()["jobs"]
        groups = {j: jobs[j]["group_id"] for j in ids}
        return self.check(len(set(groups.values())) == 1 and None not in groups.values(),
                          f"jobs were not placed in one group: {groups}")

    # -- jobs -------------------------------------------------------------------------------
    def client(self, heartbeat: bool = True) -> HttpPermitClient:
        """A permit client of this run's server (admin token for submissions), closed at the end."""
        c = HttpPermitClient(self.url, admin_token=self.admin_token, heartbeat_s=HEARTBEAT_S if heartbeat else None,
                             retry_for_s=2 * WAIT_S)
        self.clients.append(c)
        return c

    def submit(self, job_id: str, slo: float = 5.0, heartbeat: bool = True) -> tuple[HttpPermitClient, dict]:
        """Submit a synthetic job through a client of its own (with heartbeats)."""
        client = self.client(heartbeat)
        self.jobs.append(job_id)
        return client, client.submit(job_record(job_id, PHASE_S, slo))

    def thread_job(self, client: HttpPermitClient, job_id: str, keep_going: Callable[[int], bool],
                   hold: Callable[[int, str], None] | None = None, start_iter: int = 0,
                   barrier: threading.Barrier | None = None) -> JobThread:
        """Run a submitted job in a driver thread; it finishes (leaves the server) at the end."""
        job = JobThread(job_id)
        log = PhaseLog(self.log_dir, job_id)

        def body() -> None:
            try:
                if barrier is not None:
                    barrier.wait(WAIT_S)
                job.iterations = run_job(client, job_id, log, keep_going, PHASE_S, start_iter, hold=hold)
                client.finish(job_id)
            except Exception as exc:  # noqa: BLE001 -- becomes the scenario's error
                job.error = f"{job_id} crashed: {type(exc).__name__}: {exc}"
            finally:
                log.close()
        job.thread = threading.Thread(target=body, name=f"chaos-{job_id}", daemon=True)
        job.thread.start()
        self.threads.append(job)
        return job

    def join(self, jobs: list[JobThread], timeout_s: float = WAIT_S) -> bool:
        """Wait for job threads; a stuck or crashed one is an error."""
        deadline = time.monotonic() + timeout_s
        ok = True
        for job in jobs:
            job.thread.join(max(0.0, deadline - time.monotonic()))
            if job.thread.is_alive():
                ok = self.check(False, f"{job.job_id} still running after {timeout_s:.0f} s (stuck)")
            elif job.error:
                ok = self.check(False, job.error)
        return ok

    def process_job(self, job_id: str, iterations: int, hold_phase: str | None = None,
                    hold_iter: int = 0) -> subprocess.Popen | None:
        """Start a synthetic job as its own process (`python -m rollmux.harness.chaos.job`), then submit it
        as its launcher and hand it the server's answer (its token) on stdin. None if it never got ready."""
        if job_id not in self.jobs:
            self.jobs.append(job_id)
        cmd = [sys.executable, "-m", "rollmux.harness.chaos.job", "--url", self.url, "--job-id", job_id,
               "--iterations", str(iterations), "--phase-ms", str(PHASE_S * 1e3), "--log-dir", str(self.log_dir),
               "--checkpoint", str(self.checkpoint(job_id)), "--heartbeat-s", str(HEARTBEAT_S)]
        if hold_phase:
            cmd += ["--hold-phase", hold_phase, "--hold-iter", str(hold_iter)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
        path = self.log_dir / f"{job_id}-{len(self.procs)}.out"
        with open(path, "w") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=REPO_ROOT, text=True)
        self.procs.append(proc)
        self.outputs[proc.pid] = path
        if self.wait_event(proc, job_id, "ready") is None:
            return None
        placed = self.api.submit(job_record(job_id, PHASE_S))
        self.api.tokens.pop(job_id, None)  # the job's own client carries it from here
        proc.stdin.write(json.dumps(placed) + "\n")
        proc.stdin.close()
        return proc

    def checkpoint(self, job_id: str) -> Path:
        """Where a process job keeps its iteration counter."""
        return self.log_dir / f"{job_id}.ckpt"

    def wait_event(self, proc: subprocess.Popen, job_id: str, ev: str, timeout_s: float = WAIT_S) -> dict | None:
        """The process's first `ev` line, waiting for it; None (and an error) if it never comes."""
        deadline = time.monotonic() + timeout_s
        while True:
            over = proc.poll() is not None or time.monotonic() > deadline  # then one last read
            for e in read_log(self.log_dir, f"{job_id}-{proc.pid}-*.jsonl"):
                if e["ev"] == ev:
                    return e
                if e["ev"] == "error":
                    detail = " | ".join(e.get("detail", "").strip().splitlines()[-4:])
                    self.errors.append(f"{job_id} (pid {proc.pid}) failed: {e['error']} [{detail}]")
                    return None
            if over:
                self.errors.append(f"{job_id} (pid {proc.pid}) never logged {ev!r} "
                                   f"(exit status {proc.poll()}): {output_tail(self.outputs[proc.pid].read_text())}")
                return None
            time.sleep(0.05)

    def kill(self, proc: subprocess.Popen, job_id: str) -> float:
        """SIGKILL a job process; its open phase ends now."""
        t = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.kills[(job_id, proc.pid)] = t
        self.killed[job_id] = None
        return t

    def wait_status(self, pred: Callable[[dict], bool], timeout_s: float) -> tuple[dict, bool]:
        """Poll the status until `pred` holds; returns (last status, whether it held)."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status()
            if pred(st):
                return st, True
            if time.monotonic() > deadline:
                return st, False
            time.sleep(0.05)

    def quiesce(self, free: list[str], phase: str, timeout_s: float = WAIT_S) -> dict | None:
        """The status once the `free` jobs are all blocked: each holds nothing and its last log line asks for
        `phase`, which another member holds on their node. None (and an error) if that never happens."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            last: dict[str, dict] = {}
            for e in read_log(self.log_dir):
                if e["job"] in free and (e["job"] not in last or e["t"] >= last[e["job"]]["t"]):
                    last[e["job"]] = e
            if all(j in last and last[j]["ev"] == "ask" and last[j]["phase"] == phase for j in free):
                st = self.status()
                if not any(st["jobs"][j]["held"] for j in free):
                    return st
            time.sleep(0.05)
        self.errors.append(f"{', '.join(free)} never all waited for {phase} within {timeout_s:.0f} s")
        return None

    # -- the outcome ------------------------------------------------------------------------
    def result(self) -> dict:
        """The scenario's entry, from the server's final status and the phase logs."""
        lost: list[str] = []
        if self.jobs or self.threads:
            st = self.final_status if self.final_status is not None else self.status()
            lost = lost_jobs(st, self.jobs, self.killed)
            self.check(not lost, f"jobs lost: {', '.join(lost)}")
            for msg in miscounted(st, {j.job_id: j.iterations for j in self.threads if j.iterations is not None}):
                self.errors.append(msg)
        intervals, unended = phase_intervals(read_log(self.log_dir), self.kills)
        for iv in unended:
            self.errors.append(f"{iv['job']}: {iv['phase']} of iteration {iv['iter']} never ended")
        dg = double_grants(intervals)
        self.check(not dg, f"{len(dg)} double grant(s): {'; '.join(dg[:3])}")
        return {"name": self.name, "passed": not self.errors, "jobs_lost": len(lost), "double_grants": len(dg),
                "errors": self.errors, "phases": len(intervals), **self.extras}

    def close(self) -> None:
        """Stop heartbeats and any job process still running."""
        for c in self.clients:
            c.close()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

    def teardown(self) -> None:
        """Stop what the scenario started (its own servers), newest first."""
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 -- the others still stop
                self.errors.append(f"teardown: {type(exc).__name__}: {exc}")
        self._http.close()


def run_scenario(ctx: Chaos, name: str, body: Callable[[Run], None]) -> dict:
    """Run one scenario's body; returns its entry (a crash fails it, the other scenarios still run)."""
    t0 = time.monotonic()
    run = Run(ctx, name)
    try:
        try:
            body(run)
        except Exception as exc:  # noqa: BLE001 -- a scenario that crashes fails, the others still run
            run.errors.append(f"scenario crashed: {type(exc).__name__}: {exc}")
        finally:
            run.close()
        try:
            out = run.result()
        except Exception as exc:  # noqa: BLE001
            out = {"name": name, "passed": False, "jobs_lost": len(run.jobs), "double_grants": None,
                   "errors": run.errors + [f"could not check the outcome: {exc!r}"], **run.extras}
    finally:
        run.teardown()
    out["passed"] = out["passed"] and not run.errors  # a teardown error fails it too
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out
