"""Study section: profile drift, with and without repair (the paper's drift experiment).

A share of the jobs drifts: after a random fraction of its lifetime its true
rollout and training times scale up (rollmux/workload/drift.py). The scheduler
never reads the drift; it sees each iteration's measured phase times, and with
repair re-plans a group with measured profiles and moves out members the group
can no longer keep (paying for the migrations; DESIGN §5a). Without repair
(`regroup.repair=False`) it plans with the declared profiles throughout. Every
row is `groups_config` (study/sections.py) with repair on or off, its label
naming it. A drifted job is judged against the same iterations, drift included,
run solo.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.study.config import StudyConfig
from rollmux.study.sections import (
    GROUPS_NOTE,
    MODES,
    groups_config,
    mig_cells,
    pct,
    philly_jobs,
    regenerate,
    run_config,
    simulate_command,
    summary,
)
from rollmux.study.sweep import Pmap
from rollmux.workload.drift import add_drift

SHARE = 0.3
# name -> (rollout scale range, training scale range)
SEVERITIES = {"moderate": ((1.2, 1.8), (1.0, 1.5)), "severe": ((1.5, 2.5), (1.5, 2.5))}


def drifted(jobs: list[JobSpec], severity: str, seed: int) -> list[JobSpec]:
    """The trace with SHARE of its jobs drifting at `severity`."""
    rs, ts = SEVERITIES[severity]
    return add_drift(jobs, SHARE, seed, rollout_scale=rs, train_scale=ts)


def drift_run(mode: str, severity: str, repair: bool, jobs: list[JobSpec], cluster: ClusterSpec,
              seed: int) -> dict:
    """RollMux on one (maybe drifted) trace, with or without repair."""
    trace = jobs if severity == "none" else drifted(jobs, severity, seed)
    cfg = groups_config({"regroup.repair": repair})
    res = run_config(trace, cluster, cfg, seed)
    drifting = {j.job_id for j in trace if j.drift is not None}
    slo_drifted = [o.slo_met for o in res.outcomes if o.job_id in drifting]
    slo_others = [o.slo_met for o in res.outcomes if o.job_id not in drifting]
    return {"mode": mode, "severity": severity, "repair": repair, "config": cfg.describe(), **summary(res),
            "drifting": len(drifting),
            "slo_drifted": sum(slo_drifted) / len(slo_drifted) if slo_drifted else 1.0,
            "slo_others": sum(slo_others) / len(slo_others) if slo_others else 1.0}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """No drift, then each severity with and without repair, on both traces."""
    tasks = []
    for mode in MODES:
        jobs = philly_jobs(sc, traces, mode)
        tasks.append((mode, "none", True, jobs, cluster, sc.seed))
        tasks += [(mode, sev, rep, jobs, cluster, sc.seed) for sev in SEVERITIES for rep in (True, False)]
    return {"quick": sc.is_quick, "runs": pmap(drift_run, tasks)}


def render(data: dict) -> str:
    """The markdown section."""
    sev = "; ".join(f"{k}: rollout x{r[0]:g}-{r[1]:g}, training x{t[0]:g}-{t[1]:g}"
                    for k, (r, t) in SEVERITIES.items())
    lines = [
        "## Profile drift: SLO attainment and cost with and without repair",
        "",
        GROUPS_NOTE,
        "",
        f"{SHARE:.0%} of the jobs drift after 20-60% of their lifetime ({sev}). The scheduler sees only "
        "measured phase times. Repair: a group whose plan, re-made with measured times, breaks a member's "
        "SLO budget moves members out (slowest first) until it fits. SLO drifted / others: attainment "
        "of the drifting jobs and of everyone else.",
        "",
        "| trace | drift | repair | configuration | cost $ | SLO met | SLO drifted | SLO others | migrations | stall h | migration $ |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        lines.append(f"| {r['mode']} | {r['severity']} | {'on' if r['repair'] else 'off'} | `{r['config']}` | "
                     f"{r['cost_usd']:,.0f} | "
                     f"{pct(r['slo'])} | {pct(r['slo_drifted'])} | {pct(r['slo_others'])} | {mig_cells(r)} |")
    lines += ["", regenerate(data, "drift", "a drifted trace is a trace whose jobs carry a `drift` "
              f"field, e.g. `{simulate_command(groups_config({'regroup.repair': False}))} --jobs drifted.jsonl`."), ""]
    return "\n".join(lines)
