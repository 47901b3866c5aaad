"""Study section: what migrations cost, and how the result depends on their price.

RollMux's default regroups (dissolves a group whose members fit elsewhere for
less, reserving their slots) only when the saving over the members' expected
remaining life beats twice the node-time the migrations hold. Here the whole
migration time (state moved + cold start) is scaled x0.5, x1, x2 and x4 on both
Philly-driven traces, next to the paper's static groups and Solo-D, with every
migration's count, job-hours stalled and node-time cost. A slower migration
that comes out cheaper is flagged and explained from the runs' own numbers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.simulator import SimConfig
from rollmux.study.config import StudyConfig
from rollmux.study.sections import MODES, mig_cells, pct, philly_jobs, run_config, summary
from rollmux.study.sweep import Pmap

SCALES = (0.5, 1.0, 2.0, 4.0)
ROWS = ("solo-d", "static") + tuple(f"x{s:g}" for s in SCALES)


def migration_run(mode: str, row: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """One row of the section on one trace."""
    cfg = SimConfig(seed=seed)
    if row == "static":
        cfg = replace(cfg, shrink=False, regroup=False, repair=False)
    elif row.startswith("x"):
        cfg = replace(cfg, migration_scale=float(row[1:]))
    return {"mode": mode, "row": row, **summary(run_config(jobs, cluster, cfg, solo=row == "solo-d"))}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Every row on both traces."""
    tasks = [(mode, row, jobs, cluster, sc.seed) for mode in MODES
             for jobs in [philly_jobs(sc, traces, mode)] for row in ROWS]
    return {"quick": sc.is_quick, "jobs": sc.philly_jobs, "runs": pmap(migration_run, tasks)}


def findings(data: dict) -> list[str]:
    """Sentences computed from the runs: does regrouping pay, and is cost monotone in the price?"""
    out = []
    for mode in MODES:
        rows = {r["row"]: r for r in data["runs"] if r["mode"] == mode}
        static, default = rows["static"]["cost_usd"], rows["x1"]["cost_usd"]
        out.append(f"- {mode}: regrouping at the calibrated price costs {default / static:.3f}x the static "
                   f"groups ({'no more' if default <= static else 'MORE'} than static).")
        scales = [f"x{s:g}" for s in SCALES]
        for slow, fast in zip(scales[1:], scales[:-1]):
            a, b = rows[slow], rows[fast]
            if a["cost_usd"] < b["cost_usd"]:
                out.append(
                    f"- {mode}: {slow} is cheaper than {fast} by ${b['cost_usd'] - a['cost_usd']:,.0f} "
                    f"({(1 - a['cost_usd'] / b['cost_usd']) * 100:.2f}%). The migrations themselves cost "
                    f"${a['migrations']['cost_usd']:,.0f} vs ${b['migrations']['cost_usd']:,.0f}; the runs made "
                    f"{a['migrations']['count']} vs {b['migrations']['count']} moves. The difference is path "
                    "dependence, not cheaper moves: a pricier move is refused where a cheaper one was taken, "
                    "the groups that form afterwards differ, and later arrivals pack differently.")
    return out


def render(data: dict) -> str:
    """The markdown section."""
    lines = [
        "## Priced migrations: sensitivity to the migration time",
        "",
        "A migration moves the job's host-resident training state (GB / 1.8 GB/s) and cold-starts it "
        "(cluster `cold_switch_s`, 135 s): 197 s for a 7B and 419 s for a 32B model, the paper's "
        "197-419 s. The migrant holds its destination rollout nodes for that time (they serve no other "
        "member); its slot is reserved when the move is decided. Rows scale the whole time. "
        "Stall h: job-hours from leaving the old group to the end of the migration; migration $: "
        "that time priced at a job-sized slice of both pools.",
        "",
        "| trace | run | cost $ | vs static | SLO met | mean slowdown | migrations | stall h | migration $ |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        rows = {r["row"]: r for r in data["runs"] if r["mode"] == mode}
        static = rows["static"]["cost_usd"]
        for row in ROWS:
            r = rows[row]
            lines.append(f"| {mode} | {row} | {r['cost_usd']:,.0f} | {r['cost_usd'] / static:.3f}x | {pct(r['slo'])} | "
                         f"{r['mean_slowdown']:.3f} | {mig_cells(r)} |")
    lines += ["", *findings(data), "",
              "Regenerate: `rollmux study" + (" --quick" if data["quick"] else "") +
              "` (section `rollmux/study/migration.py`); one row: `rollmux simulate --policy rollmux "
              "--migration-scale 2 --json out.json`.", ""]
    return "\n".join(lines)
