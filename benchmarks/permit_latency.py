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

The parts live beside this script: permit_latency_servers.py (the servers),
permit_latency_load.py (the lean client, statistics and table rows),
permit_latency_scenarios.py (lone, loaded) and permit_latency_waiting.py (waiting).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable

# Run as a script, this folder leads sys.path already; loaded from its path (the smoke test), it
# is appended, so the parts beside it import and shadow nothing.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from permit_latency_scenarios import loaded, lone  # noqa: E402
from permit_latency_servers import serve_memory, start_server  # noqa: E402
from permit_latency_waiting import waiting  # noqa: E402

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
