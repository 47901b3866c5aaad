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
  service restart mid-phase  the actor's process is killed twice, back to back, while a
                           job holds a permit, wherever the jobs are in their heartbeat
                           cycle: after each restart the state is the one before (groups,
                           jobs, held permits, turns, grants); past the restarted service's
                           grace period and heartbeat timeout the holder (still beating)
                           keeps its permit and nobody else has its nodes; then three kills
                           while jobs are flowing; all finish;
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

Modules: this one runs the scenarios and prints the report; `chaos_run` is the harness
(the shared service, one scenario's bookkeeping), `chaos_scenarios` the scenario bodies,
`chaos_checks` the checks (phase logs, lost jobs, state diffs), `chaos_job` the synthetic job.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import ray

from rollmux.errors import InputError
from rollmux.live.chaos_checks import double_grants, phase_intervals, read_log
from rollmux.live.chaos_run import (
    ACTOR,
    CHAOS_NAMESPACE,
    CLUSTER,
    HEARTBEAT_S,
    HEARTBEAT_TIMEOUT_S,
    Chaos,
    run_scenario,
)
from rollmux.live.chaos_scenarios import plan
from rollmux.live.service import start_service

__all__ = ["double_grants", "phase_intervals", "print_report", "read_log", "run_chaos"]


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
        for name, body in plan(jobs, seconds):
            if only and not any(name.startswith(o) for o in only):
                continue
            say(f"chaos: {name} ...")
            r = run_scenario(ctx, name, body)
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
