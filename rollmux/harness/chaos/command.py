"""`rollmux chaos`: fault injection against a live local scheduler (DESIGN §8).

The scheduler is `rollmux serve` as a child process on a loopback port (`ProcessServer`), with
a SQLite journal (or `--store`), the chaos cluster file and a 2 s heartbeat timeout; jobs reach
it only through its authenticated HTTP API (`HttpPermitClient`, or raw httpx where a scenario
checks status codes). The scenarios run one after another on that one server, each with its own
job ids; some start servers of their own. Synthetic jobs (`rollmux.harness.chaos.job`) loop
rollout -> train with a few ms of sleep per phase behind the job shim, as driver threads or,
where they are to be killed, as processes of their own (submitted by the driver, which hands
them their token on stdin).

  double release           a second release of a phase (and a release of a phase not held)
                           is refused (409) and changes nothing;
  forged token             acquire/release/heartbeat/finish for a job with a forged token or
                           none (401) or another job's token (403) are refused and counted;
  job killed mid-rollout,  a job process is SIGKILLed while it holds the permit: the
  job killed mid-training  server fails it after the heartbeat timeout, reclaims the permit,
                           its group mate keeps iterating; the launcher resubmits it, it
                           resumes from its checkpoint and finishes;
  service restart mid-phase  the `rollmux serve` process is `kill -9`ed twice, back to back,
                           while a job holds a permit, and restarted on the same store and
                           port: after each restart the state is the one before (groups, jobs,
                           held permits, turns, grants); once a silent canary job is failed
                           (past the restarted server's grace period and heartbeat timeout)
                           the holder, still beating, keeps its permit and nobody else has its
                           nodes; then three kills while jobs flow, riding through on the
                           client's retries; all finish;
  second server on one store  a second `rollmux serve` on the same store exits non-zero with
                           one line; the first keeps serving;
  auth on every route      every route of the API with no token, a forged one, another job's
                           (401 / 403), the admin routes with a job's token and the job-only
                           routes with the admin's (403), unknown jobs (404 for the admin only,
                           403 for a job); counted, nothing changes; no refusal, /metrics or
                           page shows a token or its hash;
  hung job                 on a server with --lease-min 1, a job whose phase outlives its lease
                           while it still beats is failed as hung, its permit reclaimed, its
                           group mate goes on; its late release is refused; resubmitted, it
                           finishes;
  journal append failures  an in-process SchedulerCore on a FailingStore, served over HTTP:
                           the stage of each record kind (submit, place, grant, release, tail,
                           movers, move_out, leave) fails once; each time the caller gets 503,
                           memory equals a fresh replay of the journal, and the request asked
                           again succeeds; then jobs iterate, and a silent job is still failed;
  torn journal             a server stopped by SIGTERM (exit 0), its last record's payload cut
                           in half with sqlite3: the restart exits non-zero with one line naming
                           the record, `rollmux journal check` too; `rollmux journal repair`
                           keeps a backup and truncates; the server then starts;
  N jobs for S s           N jobs acquire and release for S s: permit latency p50/p99
                           (acquire call to grant, waiting for the job's turn included) and
                           throughput (permits/s);
  W waiting jobs           W long-poll acquires outstanding at once (`waiting`) while
                           heartbeats and GET /v1/status stay answered: their p50/p99 ms;
                           passes if both p99s are under 200 ms.

The restart scenario runs after the kill scenarios, so the replay covers failed, resubmitted
and refused jobs too. Entry per scenario: name, passed, jobs_lost, double_grants, errors (+
extras). double_grants come from the phase logs: two different jobs whose phase intervals
overlap on one (group_id, pool, node), or a job holding one phase twice at once; a phase left
open counts as an error unless its process was killed (it then ends at the kill) or it was
reclaimed from a hung job (it ends at the last status that showed it held). jobs_lost:
submitted jobs the server does not show done at the end, and killed jobs never seen failed
(with a reason) before their resubmission. Every job's iterations as the server counted them
must match the job's own count. Every random draw (forged tokens, which jobs beat) comes from
one seeded numpy Generator.

Modules of `rollmux.harness.chaos`: this one runs the scenarios and prints the report; `run` is
the harness (the shared server, one scenario's bookkeeping), `scenarios` the job-level scenarios
and the plan, `faults` the server-level ones, `waiting` the many waiting jobs, `checks` the
checks (phase logs, lost jobs, state diffs), `job` the synthetic job.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rollmux.errors import InputError
from rollmux.harness.chaos.checks import double_grants, phase_intervals, read_log
from rollmux.harness.chaos.run import HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, Chaos, output_tail, run_scenario
from rollmux.harness.chaos.scenarios import plan

__all__ = ["double_grants", "phase_intervals", "print_report", "read_log", "run_chaos"]


def run_chaos(seconds: float = 60.0, jobs: int = 100, store: str | None = None, waiting: int = 10_000,
              say: Callable[[str], None] = print, keep_logs: bool = False,
              only: list[str] | None = None, seed: int = 0, p99_limit_ms: float | None = 200.0) -> dict:
    """Start `rollmux serve` on a fresh journal, run every scenario (or those whose name starts with one
    of `only`), stop it; returns the report. `p99_limit_ms`: the waiting-jobs scenario's latency limit
    (None: latencies are reported, not judged: the test suite's machine may be busy)."""
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
    ctx = Chaos(tmp, store_url, say, seed)
    results = []
    stopped = None
    try:
        try:
            ctx.start()
        except RuntimeError as exc:
            raise InputError("--store", f"rollmux serve did not start: {exc}") from None
        ctx.status()
        for name, body in plan(jobs, seconds, waiting, p99_limit_ms):
            if only and not any(name.startswith(o) for o in only):
                continue
            say(f"chaos: {name} ...")
            r = run_scenario(ctx, name, body)
            say(f"chaos: {name}: {'passed' if r['passed'] else 'FAILED'} in {r['wall_s']} s")
            results.append(r)
    finally:
        stopped = ctx.stop()
    if stopped not in (None, 0) and results:  # SIGTERM must stop it cleanly
        results[-1]["errors"].append(f"the shared server exited with {stopped} on SIGTERM: "
                                     f"{output_tail(ctx.server.output())}")
        results[-1]["passed"] = False
    passed = all(r["passed"] for r in results)
    keep = keep_logs or not passed
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"scenarios": results, "passed": passed,
            "config": {"jobs": jobs, "seconds": seconds, "waiting": waiting, "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
                       "heartbeat_s": HEARTBEAT_S, "journal": store_url if store is not None or keep else "temp sqlite",
                       "server": "rollmux serve (HTTP, loopback)", "seed": seed,
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
