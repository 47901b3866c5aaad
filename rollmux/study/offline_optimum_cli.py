"""Body of `rollmux optimal`: offline optimum vs RollMux vs the busy-time bound on a static job set.

All jobs of the trace are taken as present at once (arrival times are ignored);
RollMux with the paper's static groups (the `paper` profile at the given max group
size, DESIGN §10) places them one after another in file order, and the optimum is the
cheapest partition valid under that configuration (study/offline_optimum.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from rollmux.core.config import SchedulerConfig
from rollmux.core.trace_io import load_cluster, load_jobs
from rollmux.errors import InputError
from rollmux.study.offline_optimum import busy_time_bound_per_hour, optimal_partition, rollmux_static_cost

EXACT_LIMIT = 10   # exact DP up to this many jobs (about a second at 10 paper-profile jobs)
SAMPLES = 32       # random insertion orders of the sampler above it
SEED = 0


def optimal_command(jobs: Path, cluster: Path | None, json_out: Path | None,
                    max_group_size: int) -> dict:
    """Compute, print a summary, write `json_out` if given, and return the JSON document:
    {"optimal_cost_per_hour", "rollmux_cost_per_hour", "busy_time_bound_per_hour",
     "exact", "groups": [[job ids]...]}. Bad input raises InputError."""
    out = Console(width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    if jobs is None:
        raise InputError("--jobs", "a job trace is required")
    if isinstance(max_group_size, bool) or not isinstance(max_group_size, int) or max_group_size < 1:
        raise InputError("--max-group-size", f"must be an integer >= 1 (got {max_group_size!r})")
    trace = load_jobs(jobs)
    spec, warnings = load_cluster(cluster)
    for w in trace.warnings + warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)
    for job in trace.jobs:
        reason = spec.job_unplaceable_reason(job)
        if reason is not None:
            raise InputError(f"job {job.job_id}", f"can never be placed: {reason}")
    job_list = list(trace.jobs)
    cfg = SchedulerConfig.profile("paper").with_overrides({"placement.max_group_size": max_group_size})

    t0 = time.perf_counter()
    opt = optimal_partition(job_list, spec, cfg, exact_limit=EXACT_LIMIT,
                            rng=np.random.default_rng(SEED), samples=SAMPLES)
    elapsed = time.perf_counter() - t0
    rm_cost, _ = rollmux_static_cost(job_list, spec, cfg)
    bound = busy_time_bound_per_hour(job_list, spec)
    doc = {
        "optimal_cost_per_hour": opt.cost_per_hour,
        "rollmux_cost_per_hour": rm_cost,
        "busy_time_bound_per_hour": bound,
        "exact": opt.exact,
        "groups": [list(g.job_ids()) for g in opt.groups],
    }

    table = Table(title=f"Static placement of {len(job_list)} jobs ({trace.source})")
    table.add_column("")
    table.add_column("$/h", justify="right")
    table.add_column("x optimum", justify="right")
    kind = "optimum" if opt.exact else "best found (upper bound)"
    for name, cost in ((kind, opt.cost_per_hour), (f"rollmux: {cfg.describe()}", rm_cost), ("busy-time bound", bound)):
        table.add_row(name, f"{cost:,.2f}", f"{cost / opt.cost_per_hour:.3f}" if opt.cost_per_hour else "-")
    out.print(table)
    out.print(f"{len(opt.groups)} groups, {'exact search' if opt.exact else 'sampled'} in {elapsed:.2f} s: "
              + "  ".join("[" + " ".join(g.job_ids()) + "]" for g in opt.groups), markup=False, highlight=False)

    if json_out is not None:
        try:
            Path(json_out).write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise InputError(str(json_out), f"cannot write ({exc.strerror})") from None
    return doc
