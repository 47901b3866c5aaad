"""The harness of `rollmux chaos`: the shared service (`Chaos`) and one scenario's bookkeeping (`Run`).

A `Run` submits synthetic jobs (`rollmux.live.chaos_job`) as driver threads or processes,
kills processes, polls the service's status, and at the end turns its phase logs and the
service's final status into the scenario's entry (`Run.result`, checks in `chaos_checks`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from rollmux.core.spec import default_cluster
from rollmux.live.chaos_checks import (
    double_grants,
    lost_jobs,
    miscounted,
    phase_intervals,
    read_log,
    settled_state,
    state_diff,
)
from rollmux.live.chaos_job import PhaseLog, job_record, run_job
from rollmux.live.client import RayPermitClient
from rollmux.live.service import ServiceError

REPO_ROOT = str(Path(__file__).resolve().parents[2])
CHAOS_NAMESPACE = "rollmux-chaos"
ACTOR = "chaos-scheduler"
HEARTBEAT_TIMEOUT_S = 2.0
RESTART_GRACE_S = 2 * HEARTBEAT_TIMEOUT_S  # a restarted service waits this long for each job's first beat
HEARTBEAT_S = 0.5          # a job beats four times per timeout
PHASE_S = 0.005            # the synthetic jobs' phase length (declared as their profile, too)
# The paper's cluster with the switch costs of the demo (warm 5 ms, cold 0.1 s), so that jobs
# with ms phases share groups of up to 5 at SLO 5.
CLUSTER = {**default_cluster().model_dump(), "warm_switch_s": 0.005, "cold_switch_s": 0.1}
WAIT_S = 60.0              # bound on every wait for a job or the service
ITERATIONS = 8             # iterations of a job that runs to a fixed count
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": PHASE_S, "offload_s": 0.0}


def cause(exc: BaseException) -> BaseException:
    """The service's own exception inside a RayTaskError."""
    return getattr(exc, "cause", None) or exc


@dataclass
class Chaos:
    """What every scenario shares: the service actor, the Ray address, a scratch folder."""

    handle: Any
    address: str
    tmp: Path
    say: Callable[[str], None] = print

    def call(self, method: str, *args: Any, timeout_s: float = 10.0) -> Any:
        """One call to the service, waited for at most `timeout_s` (its errors are raised)."""
        return ray.get(getattr(self.handle, method).remote(*args), timeout=timeout_s)

    def pid(self) -> int:
        """The process id of the service's current instance."""
        return ray.get(self.handle.__ray_call__.remote(lambda core: os.getpid()), timeout=10)

    def status(self, timeout_s: float = WAIT_S) -> dict:
        """The service's status, waiting out an actor restart."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.call("status")
            except (RayActorError, ActorUnavailableError, GetTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@dataclass
class JobThread:
    """A synthetic job running in a driver thread: its iterations once done, or its crash."""

    job_id: str
    thread: threading.Thread | None = None
    iterations: int | None = None
    error: str | None = None


@dataclass
class Run:
    """Bookkeeping of one scenario: its jobs, kills, phase logs and errors."""

    ctx: Chaos
    name: str
    errors: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    kills: dict[tuple[str, int], float] = field(default_factory=dict)  # (job, pid) -> kill time
    killed: dict[str, str | None] = field(default_factory=dict)        # job -> failure reason seen
    threads: list[JobThread] = field(default_factory=list)
    clients: list[RayPermitClient] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    outputs: dict[int, Path] = field(default_factory=dict)             # pid -> its stdout and stderr

    def __post_init__(self) -> None:
        self.log_dir = self.ctx.tmp / self.name.replace(" ", "-")
        self.log_dir.mkdir(parents=True)

    def check(self, ok: bool, msg: str) -> bool:
        """Record `msg` as an error unless `ok`."""
        if not ok:
            self.errors.append(msg)
        return ok

    def unchanged(self, before: dict, after: dict, what: str) -> bool:
        """Check that two statuses have one settled state; else record `what` changed it, and how."""
        a, b = settled_state(before), settled_state(after)
        return self.check(a == b, f"{what} changed the state: {state_diff(a, b)}")

    def submit(self, job_id: str, slo: float = 5.0) -> tuple[RayPermitClient, dict]:
        """Submit a synthetic job through a client of its own (with heartbeats)."""
        client = RayPermitClient(self.ctx.handle, heartbeat_s=HEARTBEAT_S)
        self.clients.append(client)
        self.jobs.append(job_id)
        return client, client.submit(job_record(job_id, PHASE_S, slo))

    def thread_job(self, client: RayPermitClient, job_id: str, keep_going: Callable[[int], bool],
                   hold: Callable[[int, str], None] | None = None, start_iter: int = 0,
                   barrier: threading.Barrier | None = None) -> JobThread:
        """Run a submitted job in a driver thread; it finishes (leaves the service) at the end."""
        job = JobThread(job_id)
        log = PhaseLog(self.log_dir, job_id)

        def body() -> None:
            try:
                if barrier is not None:
                    barrier.wait(WAIT_S)
                job.iterations = run_job(client, job_id, log, keep_going, PHASE_S, start_iter, hold=hold)
                client.finish(job_id)
            except Exception as exc:  # noqa: BLE001 -- becomes the scenario's error
                job.error = f"{job_id} crashed: {type(cause(exc)).__name__}: {cause(exc)}"
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
                    hold_iter: int = 0) -> subprocess.Popen:
        """Start a synthetic job as its own process (`python -m rollmux.live.chaos_job`)."""
        if job_id not in self.jobs:
            self.jobs.append(job_id)
        cmd = [sys.executable, "-m", "rollmux.live.chaos_job", "--address", self.ctx.address,
               "--namespace", CHAOS_NAMESPACE, "--actor", ACTOR, "--job-id", job_id,
               "--iterations", str(iterations), "--phase-ms", str(PHASE_S * 1e3), "--log-dir", str(self.log_dir),
               "--checkpoint", str(self.checkpoint(job_id)), "--heartbeat-s", str(HEARTBEAT_S)]
        if hold_phase:
            cmd += ["--hold-phase", hold_phase, "--hold-iter", str(hold_iter)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
        path = self.log_dir / f"{job_id}-{len(self.procs)}.out"
        with open(path, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        self.procs.append(proc)
        self.outputs[proc.pid] = path
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
                tail = " | ".join(self.outputs[proc.pid].read_text().splitlines()[-3:])
                self.errors.append(f"{job_id} (pid {proc.pid}) never logged {ev!r} "
                                   f"(exit status {proc.poll()}): {tail}")
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
            st = self.ctx.status()
            if pred(st):
                return st, True
            if time.monotonic() > deadline:
                return st, False
            time.sleep(0.05)

    def quiesce(self, free: list[str], timeout_s: float = 15.0) -> dict | None:
        """Status once nothing moves: no grants for 0.3 s and the `free` jobs hold nothing."""
        deadline, last, stable = time.monotonic() + timeout_s, None, 0
        while time.monotonic() < deadline:
            st = self.ctx.status()
            if last is not None and st["grants"] == last["grants"] and not any(st["jobs"][j]["held"] for j in free):
                stable += 1
                if stable >= 3:
                    return st
            else:
                stable = 0
            last = st
            time.sleep(0.1)
        self.errors.append(f"the group never came to rest within {timeout_s:.0f} s")
        return None

    def same_group(self, ids: list[str]) -> bool:
        """Precondition of a scenario: these jobs share one group."""
        groups = {j: self.ctx.status()["jobs"][j]["group_id"] for j in ids}
        return self.check(len(set(groups.values())) == 1 and None not in groups.values(),
                          f"jobs were not placed in one group: {groups}")

    def refused(self, method: str, args: tuple, exc_type: type[ServiceError], text: str, what: str) -> bool:
        """Call the service; it must refuse with `exc_type` and a message containing `text`."""
        try:
            self.ctx.call(method, *args)
        except GetTimeoutError:
            return self.check(False, f"{what}: no answer in 10 s (not refused)")
        except Exception as exc:  # noqa: BLE001 -- the refusal we want, or not
            c = cause(exc)
            return self.check(isinstance(c, exc_type) and text in str(c),
                              f"{what}: {type(c).__name__}: {c} (wanted {exc_type.__name__}: ...{text}...)")
        return self.check(False, f"{what}: accepted (wanted {exc_type.__name__})")

    def result(self) -> dict:
        """The scenario's entry, from the service's final status and the phase logs."""
        st = self.ctx.status()
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


def run_scenario(ctx: Chaos, name: str, body: Callable[[Run], None]) -> dict:
    """Run one scenario's body; returns its entry (a crash fails it, the other scenarios still run)."""
    run = Run(ctx, name)
    t0 = time.monotonic()
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
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out
