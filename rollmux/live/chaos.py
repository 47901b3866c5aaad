"""`rollmux chaos`: fault injection against a live local scheduler (issue 5).

A local Ray (2 CPUs, loopback only) runs the scheduler actor (`start_service`: detached,
restarted by Ray when its process dies, replaying its journal) with a SQLite journal and
a 2 s heartbeat timeout. The scenarios run one after another on that one service, each
with its own job ids; synthetic jobs (`rollmux.live.chaos_job`) loop rollout -> train
with a few ms of sleep per phase behind the job shim, as driver threads or, where they
are to be killed, as processes of their own.

  double release           a second release of a phase (and a release of a phase not
                           held) is refused with a ServiceError and changes nothing;
  forged token             acquire/release/heartbeat/finish for a job with a forged token,
                           another job's token or none are refused (AuthError) and counted;
  job killed mid-rollout,  a job process is SIGKILLed while it holds the permit: the
  job killed mid-training  service fails it after the heartbeat timeout, reclaims the
                           permit, its group mate keeps iterating; the job restarts,
                           resubmits, resumes from its checkpoint and finishes;
  service restart mid-phase  the actor's process is killed while a job holds a permit:
                           after the restart the state is the one before (groups, jobs,
                           held permits, turns, grants), nobody else gets the held nodes,
                           then a second kill while jobs are flowing; all finish;
  N jobs for S s           N jobs acquire and release for S s: permit latency p50/p99
                           (acquire call to grant, waiting for the job's turn included)
                           and throughput (permits/s).

The restart scenario runs after the kill scenarios, so the replay covers failed,
resubmitted and refused jobs too. Entry per scenario: name, passed, jobs_lost,
double_grants, errors (+ extras). double_grants come from the phase logs: two different
jobs whose phase intervals overlap on one (group_id, pool, node), or a job holding one
phase twice at once; a phase left open counts as an error unless its process was killed
(it then ends at the kill). jobs_lost: submitted jobs the service does not show done at
the end, and killed jobs never seen failed (with a reason) before their resubmission.
Every job's iterations as the service counted them must match the job's own count.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from rollmux.errors import InputError
from rollmux.live.chaos_job import PhaseLog, job_record, load_checkpoint, run_job
from rollmux.live.client import RayPermitClient
from rollmux.live.service import AuthError, ServiceError, start_service
from rollmux.shim import PHASES
from rollmux.spec import default_cluster

REPO_ROOT = str(Path(__file__).resolve().parents[2])
CHAOS_NAMESPACE = "rollmux-chaos"
ACTOR = "chaos-scheduler"
HEARTBEAT_TIMEOUT_S = 2.0
HEARTBEAT_S = 0.5          # a job beats four times per timeout
PHASE_S = 0.005            # the synthetic jobs' phase length (declared as their profile, too)
# The paper's cluster with the switch costs of the demo (warm 5 ms, cold 0.1 s), so that jobs
# with ms phases share groups of up to 5 at SLO 5.
CLUSTER = {**default_cluster().model_dump(), "warm_switch_s": 0.005, "cold_switch_s": 0.1}
WAIT_S = 60.0              # bound on every wait for a job or the service
ITERATIONS = 8             # iterations of a job that runs to a fixed count
MIDPHASE_KILLS = 2         # service kills while a job holds a permit (just after its heartbeat)
FLOW_KILLS = 3             # then service kills while the jobs flow
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": PHASE_S, "offload_s": 0.0}


# -- the checks --------------------------------------------------------------------------------

def read_log(log_dir: Path, pattern: str = "*.jsonl") -> list[dict]:
    """Every line of the phase logs under `log_dir` (a line torn by a kill is skipped)."""
    events = []
    for path in sorted(Path(log_dir).glob(pattern)):
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def phase_intervals(events: list[dict], kills: dict[tuple[str, int], float] | None = None
                    ) -> tuple[list[dict], list[dict]]:
    """Pair start and end lines into intervals; a phase left open by a killed process
    (`kills`: (job, pid) -> kill time) ends at its kill. Returns (intervals, phases never ended)."""
    kills = kills or {}
    ends = {(e["file"], e["seq"]): e["t"] for e in events if e["ev"] == "end"}
    intervals, unended = [], []
    for e in events:
        if e["ev"] != "start":
            continue
        end = ends.get((e["file"], e["seq"]), kills.get((e["job"], e["pid"])))
        iv = {k: e[k] for k in ("job", "pid", "phase", "group_id", "pool", "nodes", "epoch", "iter", "wait_s")}
        iv.update(start=e["t"], end=end if end is not None else float("inf"))
        intervals.append(iv)
        if end is None:
            unended.append(iv)
    return intervals, unended


def _overlaps(items: list[dict]) -> Iterator[tuple[dict, dict]]:
    active: list[dict] = []
    for iv in sorted(items, key=lambda iv: iv["start"]):
        active = [a for a in active if a["end"] > iv["start"]]
        for a in active:
            yield a, iv
        active.append(iv)


def double_grants(intervals: list[dict]) -> list[str]:
    """Every double grant, described: two jobs overlapping on one (group, pool, node), or a job
    running a phase while it already holds that phase."""
    by_node: dict[tuple, list[dict]] = defaultdict(list)
    by_phase: dict[tuple, list[dict]] = defaultdict(list)
    for iv in intervals:
        for n in iv["nodes"]:
            by_node[(iv["group_id"], iv["pool"], n)].append(iv)
        by_phase[(iv["job"], iv["phase"])].append(iv)
    found = []
    for (gid, pool, n), ivs in by_node.items():
        for a, b in _overlaps(ivs):
            if a["job"] != b["job"]:
                found.append(f"{a['job']} ({a['phase']} it {a['iter']}) and {b['job']} ({b['phase']} it {b['iter']}) "
                             f"on group {gid} {pool} node {n} for {(min(a['end'], b['end']) - b['start']) * 1e3:.1f} ms")
    for (job, phase), ivs in by_phase.items():
        for a, b in _overlaps(ivs):
            found.append(f"{job} granted {phase} (it {b['iter']}) while holding it (it {a['iter']})")
    return found


def _state(status: dict) -> dict:
    """What a restart or a refused request must leave unchanged (no clocks, no counters of refusals)."""
    return {"grants": status["grants"],
            "groups": [{k: g[k] for k in ("group_id", "members", "rollout_nodes", "train_nodes", "turn")}
                       for g in status["groups"]],
            "jobs": {j: {**{k: s[k] for k in ("status", "group_id", "iterations", "held", "epoch", "reason")},
                         "measured": s["profile"]["measured"]} for j, s in status["jobs"].items()}}


def _diff(a: dict, b: dict) -> str:
    if a["grants"] != b["grants"]:
        return f"grants {a['grants']} -> {b['grants']}"
    if a["groups"] != b["groups"]:
        return f"groups {a['groups']} -> {b['groups']}"
    changed = [j for j in set(a["jobs"]) | set(b["jobs"]) if a["jobs"].get(j) != b["jobs"].get(j)]
    return "; ".join(f"{j}: {a['jobs'].get(j)} -> {b['jobs'].get(j)}" for j in sorted(changed)[:3]) or "nothing"


def _cause(exc: BaseException) -> BaseException:
    """The service's own exception inside a RayTaskError."""
    return getattr(exc, "cause", None) or exc


# -- scenario plumbing --------------------------------------------------------------------------

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
class _Job:
    job_id: str
    thread: threading.Thread | None = None
    iterations: int | None = None
    error: str | None = None


@dataclass
class _Run:
    """Bookkeeping of one scenario: its jobs, kills, phase logs and errors."""

    ctx: Chaos
    name: str
    errors: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    kills: dict[tuple[str, int], float] = field(default_factory=dict)  # (job, pid) -> kill time
    killed: dict[str, str | None] = field(default_factory=dict)        # job -> failure reason seen
    threads: list[_Job] = field(default_factory=list)
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

    def submit(self, job_id: str, slo: float = 5.0) -> tuple[RayPermitClient, dict]:
        """Submit a synthetic job through a client of its own (with heartbeats)."""
        client = RayPermitClient(self.ctx.handle, heartbeat_s=HEARTBEAT_S)
        self.clients.append(client)
        self.jobs.append(job_id)
        return client, client.submit(job_record(job_id, PHASE_S, slo))

    def thread_job(self, client: RayPermitClient, job_id: str, keep_going: Callable[[int], bool],
                   hold: Callable[[int, str], None] | None = None, start_iter: int = 0,
                   barrier: threading.Barrier | None = None) -> _Job:
        """Run a submitted job in a driver thread; it finishes (leaves the service) at the end."""
        job = _Job(job_id)
        log = PhaseLog(self.log_dir, job_id)

        def body() -> None:
            try:
                if barrier is not None:
                    barrier.wait(WAIT_S)
                job.iterations = run_job(client, job_id, log, keep_going, PHASE_S, start_iter, hold=hold)
                client.finish(job_id)
            except Exception as exc:  # noqa: BLE001 -- becomes the scenario's error
                job.error = f"{job_id} crashed: {type(_cause(exc)).__name__}: {_cause(exc)}"
            finally:
                log.close()
        job.thread = threading.Thread(target=body, name=f"chaos-{job_id}", daemon=True)
        job.thread.start()
        self.threads.append(job)
        return job

    def join(self, jobs: list[_Job], timeout_s: float = WAIT_S) -> bool:
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
            cause = _cause(exc)
            return self.check(isinstance(cause, exc_type) and text in str(cause),
                              f"{what}: {type(cause).__name__}: {cause} (wanted {exc_type.__name__}: ...{text}...)")
        return self.check(False, f"{what}: accepted (wanted {exc_type.__name__})")

    def result(self) -> dict:
        """The scenario's entry, from the service's final status and the phase logs."""
        st = self.ctx.status()
        lost = []
        for j in self.jobs:
            s = st["jobs"].get(j)
            if s is None:
                lost.append(f"{j} (unknown to the service)")
            elif s["status"] != "done":
                lost.append(f"{j} ({s['status']}" + (f": {s['reason']})" if s["reason"] else ")"))
            elif j in self.killed and not self.killed[j]:
                lost.append(f"{j} (killed, never seen failed)")
        self.check(not lost, f"jobs lost: {', '.join(lost)}")
        for job in self.threads:
            if job.iterations is not None and st["jobs"].get(job.job_id, {}).get("status") == "done":
                counted = st["jobs"][job.job_id]["iterations"]
                self.check(counted == job.iterations,
                           f"{job.job_id}: the service counted {counted} iterations, the job did {job.iterations}")
        events = read_log(self.log_dir)
        intervals, unended = phase_intervals(events, self.kills)
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


def _scenario(ctx: Chaos, name: str, body: Callable[[_Run], None]) -> dict:
    run = _Run(ctx, name)
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


# -- scenarios ----------------------------------------------------------------------------------

def _double_release(run: _Run) -> None:
    ctx = run.ctx
    # A job alone in its group (SLO 1.0): the whole service is at rest around the second release.
    client, _ = run.submit("dr-lone", slo=1.0)
    tok = client.tokens["dr-lone"]
    log = PhaseLog(run.log_dir, "dr-lone")
    attempts = 0
    for phase in PHASES:
        asked = time.monotonic()
        grant = ctx.call("acquire", "dr-lone", phase, tok, timeout_s=WAIT_S)
        seq = log.start(grant, 0, time.monotonic() - asked)
        time.sleep(PHASE_S)
        if phase == "train":  # release of the phase not held, while holding another
            before = ctx.status()
            run.refused("release", ("dr-lone", "rollout", TIMINGS, tok), ServiceError, "holds no",
                        "release of rollout while holding train")
            after = ctx.status()
            attempts += 1
            run.check(_state(after) == _state(before), f"refused release changed the state: "
                                                       f"{_diff(_state(before), _state(after))}")
        log.end(seq)
        ctx.call("release", "dr-lone", phase, TIMINGS, tok)
        before = ctx.status()
        run.refused("release", ("dr-lone", phase, TIMINGS, tok), ServiceError, "double release",
                    f"second release of {phase}")
        after = ctx.status()
        attempts += 1
        run.check(_state(after) == _state(before),
                  f"second release of {phase} changed the state: {_diff(_state(before), _state(after))}")
        run.check(after["refused"] == before["refused"] + 1, "the refusal was not counted")
    log.close()
    lone = run.thread_job(client, "dr-lone", lambda it: it < ITERATIONS, start_iter=1)
    # Two jobs in one group: A releases twice while B keeps iterating.
    ca, _ = run.submit("dr-a")
    cb, _ = run.submit("dr-b")
    run.same_group(["dr-a", "dr-b"])
    stop = threading.Event()
    b = run.thread_job(cb, "dr-b", lambda it: it < 3 or not stop.is_set())
    tok = ca.tokens["dr-a"]
    log = PhaseLog(run.log_dir, "dr-a")
    for it in range(2):
        for phase in PHASES:
            asked = time.monotonic()
            grant = ctx.call("acquire", "dr-a", phase, tok, timeout_s=WAIT_S)
            seq = log.start(grant, it, time.monotonic() - asked)
            time.sleep(PHASE_S)
            log.end(seq)
            ctx.call("release", "dr-a", phase, TIMINGS, tok)
            before = ctx.status()
            run.refused("release", ("dr-a", phase, TIMINGS, tok), ServiceError, "double release",
                        f"dr-a: second release of {phase}")
            after = ctx.status()
            attempts += 1
            run.check(_state(after)["jobs"]["dr-a"] == _state(before)["jobs"]["dr-a"],
                      f"dr-a: second release of {phase} changed it: "
                      f"{_state(before)['jobs']['dr-a']} -> {_state(after)['jobs']['dr-a']}")
    log.close()
    a = run.thread_job(ca, "dr-a", lambda it: it < ITERATIONS, start_iter=2)
    run.join([lone, a])
    stop.set()
    run.join([b])
    run.extras["refused_releases"] = attempts


def _forged_token(run: _Run) -> None:
    ctx = run.ctx
    cv, _ = run.submit("forge-victim")
    co, _ = run.submit("forge-other")
    run.same_group(["forge-victim", "forge-other"])
    holding, resume = threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 1 and phase == "rollout":
            holding.set()
            resume.wait(WAIT_S)
    jobs = [run.thread_job(cv, "forge-victim", lambda it: it < ITERATIONS, hold),
            run.thread_job(co, "forge-other", lambda it: it < ITERATIONS)]
    try:
        if not run.check(holding.wait(WAIT_S), "the victim never got its rollout permit"):
            return
        before = run.quiesce(["forge-other"])
        if before is None:
            return
        forged, other = "forged-" + secrets.token_urlsafe(24), co.tokens["forge-other"]
        attempts = 0
        for label, tok in (("a forged token", forged), ("another job's token", other), ("no token", None)):
            for method, args in (("acquire", ("forge-victim", "train", tok)),
                                 ("release", ("forge-victim", "rollout", TIMINGS, tok)),
                                 ("heartbeat", ("forge-victim", tok)),
                                 ("finish", ("forge-victim", tok))):
                run.refused(method, args, AuthError, "wrong token", f"{method} with {label}")
                attempts += 1
        after = ctx.status()
        run.check(_state(after) == _state(before),
                  f"refused calls changed the state: {_diff(_state(before), _state(after))}")
        run.check(after["refused"] - before["refused"] == attempts,
                  f"status counts {after['refused'] - before['refused']} refusals, wanted {attempts}")
        run.check(after["jobs"]["forge-victim"]["held"] == ["rollout"], "the victim lost its permit")
        run.extras["refused_calls"] = attempts
    finally:
        resume.set()
        run.join(jobs)


def _killed(phase: str) -> Callable[[_Run], None]:
    hold_iter = 3

    def body(run: _Run) -> None:
        ctx = run.ctx
        victim, other = f"kill-{phase}-victim", f"kill-{phase}-other"
        co, _ = run.submit(other)
        stop = threading.Event()
        mate = run.thread_job(co, other, lambda it: it < 3 or not stop.is_set())
        try:
            proc = run.process_job(victim, ITERATIONS, hold_phase=phase, hold_iter=hold_iter)
            if run.wait_event(proc, victim, "holding") is None:
                return
            run.same_group([victim, other])
            time.sleep(0.2)  # mid-phase
            held = ctx.status()["jobs"][victim]["held"]
            run.check(held == [phase], f"the victim holds {held} at the kill, wanted [{phase!r}]")
            t_kill = run.kill(proc, victim)
            st, ok = run.wait_status(lambda s: s["jobs"][victim]["status"] != "running",
                                     HEARTBEAT_TIMEOUT_S + 15)
            detected = time.monotonic() - t_kill
            v = st["jobs"][victim]
            if not run.check(ok and v["status"] == "failed" and "heartbeat" in (v["reason"] or ""),
                             f"the killed job is {v['status']} ({v['reason']}) {detected:.1f} s after the kill"):
                return
            run.killed[victim] = v["reason"]
            run.extras["detected_after_s"] = round(detected, 2)
            run.check(v["held"] == [] and not any(victim in g["members"] for g in st["groups"]),
                      f"the failed job still holds {v['held']} or is still a group member")
            it0 = st["jobs"][other]["iterations"]
            _, ok = run.wait_status(lambda s: s["jobs"][other]["iterations"] >= it0 + 2, 15)
            run.check(ok, f"{other} stopped iterating after the kill (at {it0})")
            # The job's launcher restarts it: it submits again and resumes from its checkpoint.
            ckpt = load_checkpoint(run.checkpoint(victim))
            run.check(ckpt == hold_iter, f"checkpoint at the kill: {ckpt}, wanted {hold_iter}")
            again = run.process_job(victim, ITERATIONS)
            sub = run.wait_event(again, victim, "submitted")
            fin = run.wait_event(again, victim, "finished")
            if sub is None or fin is None:
                return
            run.check(sub["resumed_from"] == ckpt, f"resumed from {sub['resumed_from']}, checkpoint {ckpt}")
            run.check(again.wait(WAIT_S) == 0, f"the restarted job exited with {again.returncode}")
            run.check(fin["iterations"] == ITERATIONS, f"the restarted job ended at {fin['iterations']}")
            counted = ctx.status()["jobs"][victim]["iterations"]
            run.check(counted == ITERATIONS - ckpt,
                      f"the service counted {counted} iterations of the resubmitted job, it did {ITERATIONS - ckpt}")
            run.extras.update(resumed_from=sub["resumed_from"], replaced_case=sub["case"])
        finally:
            stop.set()
            run.join([mate])
    return body


def _restarted(run: _Run, old_pid: int) -> dict | None:
    """The status of the new instance once Ray has restarted the killed actor (another process)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if run.ctx.pid() != old_pid:
                return run.ctx.status()
        except (RayActorError, ActorUnavailableError, GetTimeoutError):
            pass
        time.sleep(0.05)
    run.errors.append(f"the service did not come back within {WAIT_S:.0f} s")
    return None


class _WatchedHandle:
    """The scheduler actor's handle, noting when heartbeats are sent (to time a kill just before one)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.beats: list[float] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._handle, name)
        return _Beat(method, self.beats) if name == "heartbeat" else method


class _Beat:
    def __init__(self, method: Any, beats: list[float]) -> None:
        self._method, self._beats = method, beats

    def remote(self, *args: Any) -> Any:
        self._beats.append(time.monotonic())
        return self._method.remote(*args)


def _kill_after_beat(run: _Run, watched: _WatchedHandle) -> tuple[float, int]:
    """Kill the actor's process (Ray restarts it) just after the watched job's heartbeat was answered:
    the job's next one is then as late as it gets. Returns (when, the killed process's pid)."""
    pid = run.ctx.pid()
    n = len(watched.beats)
    deadline = time.monotonic() + WAIT_S
    while len(watched.beats) == n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(max(0.0, watched.beats[-1] + 0.03 - time.monotonic()))
    t = time.monotonic()
    ray.kill(run.ctx.handle, no_restart=False)
    return t, pid


def _service_restart(run: _Run) -> None:
    ctx = run.ctx
    ids = [f"restart-{k}" for k in range(3)]
    clients = [run.submit(j)[0] for j in ids]
    run.same_group(ids)
    holder = ids[0]
    watched = clients[0].handle = _WatchedHandle(ctx.handle)
    holding, resume, stop = threading.Event(), threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 2 and phase == "rollout" and not holding.is_set():
            holding.set()
            resume.wait(WAIT_S)
    jobs = [run.thread_job(c, j, lambda it: it < 5 or not stop.is_set(), hold if j == holder else None)
            for c, j in zip(clients, ids)]
    try:
        if not run.check(holding.wait(WAIT_S), f"{holder} never got its rollout permit"):
            return
        before = run.quiesce(ids[1:])
        if before is None:
            return
        run.check(before["jobs"][holder]["held"] == ["rollout"], f"{holder} holds {before['jobs'][holder]['held']}")
        # Mid-phase: the holder runs its rollout and only sends heartbeats; the others wait for its node.
        # Ray restarts the actor; its constructor replays the journal.
        for k in range(MIDPHASE_KILLS):
            t0, pid = _kill_after_beat(run, watched)
            after = _restarted(run, pid)
            if after is None:
                return
            run.extras.setdefault("restart_s", round(time.monotonic() - t0, 2))
            run.extras["recovered_records"] = after["recovered_records"]
            if not run.check(_state(after) == _state(before), f"after restart {k + 1} the service's state differs: "
                                                              f"{_diff(_state(before), _state(after))}"):
                return
            # Past the restarted service's grace period: the waiting jobs have retried on the new instance,
            # the holder (alive, beating) must still hold its permit and nobody else may have got its node.
            time.sleep(HEARTBEAT_TIMEOUT_S + 0.5)
            later = ctx.status()
            if not run.check(_state(later) == _state(after),
                             f"after restart {k + 1}, while {holder} still ran its rollout, the service changed: "
                             f"{_diff(_state(after), _state(later))}"):
                return
            before = later
        resume.set()
        # More kills while every job is flowing (releases and acquires in flight).
        prev = before
        for k in range(FLOW_KILLS + 1):
            _, ok = run.wait_status(lambda s: s["grants"] >= prev["grants"] + 12, 20)
            if not run.check(ok, "the jobs did not resume after the last restart") or k == FLOW_KILLS:
                break
            pid = ctx.pid()
            ray.kill(ctx.handle, no_restart=False)
            prev = _restarted(run, pid)
            if prev is None:
                return
        run.extras.update(restarts=MIDPHASE_KILLS + FLOW_KILLS, client_retries=sum(c.retries for c in clients))
    finally:
        resume.set()
        stop.set()
        run.join(jobs)


def _load(jobs: int, seconds: float) -> Callable[[_Run], None]:
    def body(run: _Run) -> None:
        ids = [f"load-{k:03d}" for k in range(jobs)]
        clients = [run.submit(j)[0] for j in ids]
        barrier = threading.Barrier(jobs + 1)
        window: dict[str, float] = {}
        threads = [run.thread_job(c, j, lambda it: time.monotonic() < window["end"], barrier=barrier)
                   for c, j in zip(clients, ids)]
        window["start"] = time.monotonic() + 0.1
        window["end"] = window["start"] + seconds
        barrier.wait(WAIT_S)
        time.sleep(seconds / 2)
        st = run.ctx.status()
        groups = [g for g in st["groups"] if any(m in ids for m in g["members"])]
        run.extras["groups"] = len(groups)
        run.join(threads, seconds + WAIT_S)
        starts = [e for e in read_log(run.log_dir) if e["ev"] == "start"
                  and window["start"] <= e["t"] <= window["end"]]
        import numpy as np
        lat = np.array([e["wait_s"] * 1e3 for e in starts])
        run.extras.update(jobs=jobs, seconds=seconds, permits=len(starts),
                          permits_per_s=round(len(starts) / seconds, 1),
                          permit_p50_ms=round(float(np.percentile(lat, 50)), 3) if lat.size else None,
                          permit_p99_ms=round(float(np.percentile(lat, 99)), 3) if lat.size else None)
    return body


# -- the run ----------------------------------------------------------------------------------

def run_chaos(seconds: float = 60.0, jobs: int = 100, store: str | None = None,
              say: Callable[[str], None] = print, keep_logs: bool = False,
              only: list[str] | None = None) -> dict:
    """Start a local Ray and the scheduler, run every scenario (or those whose name starts
    with one of `only`), shut down; returns the report."""
    tmp = Path(tempfile.mkdtemp(prefix="rollmux-chaos-"))
    store_url = str(tmp / "journal.db") if store is None else store if "://" in store else str(Path(store).resolve())
    if store is not None:
        from rollmux.live.journal import JournalError, open_store
        try:
            journal = open_store(store_url)
            fresh = not journal.records()
            journal.close()
        except JournalError as exc:
            raise InputError("--store", str(exc)) from None
        if not fresh:
            raise InputError("--store", f"{store} already holds a journal; chaos needs a fresh store")
    t0 = time.monotonic()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             namespace=CHAOS_NAMESPACE, _node_ip_address="127.0.0.1")
    handle = None
    results = []
    try:
        handle = start_service(CLUSTER, store=store_url,
                               heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, name=ACTOR)
        ctx = Chaos(handle, ray.get_runtime_context().gcs_address, tmp, say)
        ctx.status()
        plan = [("double release", _double_release), ("forged token", _forged_token),
                ("job killed mid-rollout", _killed("rollout")), ("job killed mid-training", _killed("train")),
                ("service restart mid-phase", _service_restart),
                (f"{jobs} jobs for {seconds:g} s", _load(jobs, seconds))]
        for name, body in plan:
            if only and not any(name.startswith(o) for o in only):
                continue
            say(f"chaos: {name} ...")
            r = _scenario(ctx, name, body)
            say(f"chaos: {name}: {'passed' if r['passed'] else 'FAILED'} in {r['wall_s']} s")
            results.append(r)
    finally:
        if handle is not None:
            try:
                ray.kill(handle)
            except Exception:  # noqa: BLE001 -- shutting down anyway
                pass
        ray.shutdown()
    passed = all(r["passed"] for r in results)
    keep = keep_logs or not passed
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"scenarios": results, "passed": passed,
            "config": {"jobs": jobs, "seconds": seconds, "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
                       "heartbeat_s": HEARTBEAT_S, "journal": store_url if store is not None or keep else "temp sqlite",
                       "logs": str(tmp) if keep else None, "cpus": os.cpu_count(),
                       "wall_s": round(time.monotonic() - t0, 1)}}


def print_report(report: dict, console: Any) -> None:
    """The report as a rich table (plus each scenario's errors) on `console`."""
    from rich.table import Table
    table = Table(title="rollmux chaos")
    for col in ("scenario", "passed", "jobs lost", "double grants", "errors", "details"):
        table.add_column(col, justify="left" if col in ("scenario", "details") else "right")
    base = {"name", "passed", "jobs_lost", "double_grants", "errors"}
    for r in report["scenarios"]:
        details = ", ".join(f"{k}={v}" for k, v in r.items() if k not in base)
        table.add_row(r["name"], "[green]yes[/]" if r["passed"] else "[bold red]NO[/]", str(r["jobs_lost"]),
                      str(r["double_grants"]), str(len(r["errors"])), details)
    console.print(table)
    for r in report["scenarios"]:
        for e in r["errors"]:
            console.print(f"[red]{r['name']}:[/] {e}", highlight=False, soft_wrap=True)
    c = report["config"]
    console.print(f"heartbeat timeout {c['heartbeat_timeout_s']} s, {c['cpus']} CPUs, wall {c['wall_s']} s"
                  + (f"; logs kept in {c['logs']}" if c["logs"] else ""))
