"""Study section: why arrivals get a group of their own.

RollMux runs on the study's Philly-driven traces (paper and catalog profiles; at the study's
default sizes the catalog one is the embedded default trace that `rollmux simulate` runs).
For every arrival it isolates, the policy says why each existing group refused it
(core/placement/why.py); the section tabulates one reason per isolated placement (its nearest miss) and
the groups each reason refused. Rows, each a configuration (DESIGN §10) its label names: the
`groups` profile (nominal shapes, no co-located jobs) planning at the worst case and at the
median rollout (`admission.quantile=0.5`), then the `shipped` profile (admission by the mean,
elastic rollout, the per-job co-located mode, stretch pricing): what the mechanisms beyond
the paper change in who gets a group of their own.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.core.config import SchedulerConfig
from rollmux.core.placement.why import REASON_NAMES
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.study.config import StudyConfig
from rollmux.study.sections import MODES, pct, philly_jobs, profile, regenerate, run_config, simulate_command
from rollmux.study.sweep import Pmap

# (label, profile, overrides)
ROWS = (("worst case", "groups", {}), ("median rollout", "groups", {"admission.quantile": 0.5}),
        ("shipped (admission by the mean, elastic rollout, compaction, co-located mode, stretch pricing)",
         "shipped", {}))


def row_config(label: str) -> SchedulerConfig:
    """The configuration of the row labelled `label`."""
    return next(profile(name, overrides) for row, name, overrides in ROWS if row == label)


def why_run(trace: str, label: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """RollMux with one row's configuration on the trace: its isolated placements and why."""
    cfg = row_config(label)
    res = run_config(jobs, cluster, cfg, seed)
    why = res.placements_why or {"placements": {}, "groups": {}}
    return {"trace": trace, "row": label, "config": cfg.describe(), "jobs": len(jobs), "cost_usd": res.cost_usd,
            "slo": res.slo_attainment, "isolated": sum(why["placements"].values()),
            "colocated": res.placements.get("colocated", 0),
            "placements": why["placements"], "groups": why["groups"]}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Every row on both Philly-driven traces."""
    sets = [(f"philly {mode}", philly_jobs(sc, traces, mode)) for mode in MODES]
    tasks = [(name, label, jobs, cluster, sc.seed) for name, jobs in sets for label, _, _ in ROWS]
    return {"quick": sc.is_quick, "vc": sc.philly_vc, "runs": pmap(why_run, tasks)}


def render(data: dict) -> str:
    """The markdown section: placements per reason, then groups refused per reason."""
    runs = data["runs"]
    shown = [r for r in REASON_NAMES if any(run["placements"].get(r) or run["groups"].get(r) for run in runs)]
    head = " | ".join(shown)
    lines = [
        "## Why arrivals get a group of their own",
        "",
        "For every arrival RollMux places in a new group, each existing group was refused for one "
        "reason (`rollmux/core/placement/why.py`): the group is full (`group_size`), has too few training nodes "
        "(`train_shape`), a shared training node's host DRAM cannot hold the job (`residency`), or the "
        "period with the job would break the tightest period budget, the newcomer's own "
        "(`newcomer_slo`) or a member's (`member_slo`), or, with stretch pricing, it would take the job "
        "but joining it costs more than a group of the job's own (`costlier`); a group failing several "
        "checks counts for the first. Each isolated placement counts once, for its nearest miss (the reason of the refused "
        "group that got furthest through that order; `no_groups`: none existed). Reasons never seen "
        f"are left out. Philly VC {data['vc']}; at the default sizes the catalog trace is "
        "`rollmux simulate`'s embedded default trace.",
        "",
        f"| trace | configuration | jobs | co-located | isolated | {head} | cost $ | SLO met |",
        "|---|---|---|---|---|" + "---|" * len(shown) + "---|---|",
    ]
    for r in runs:
        cells = " | ".join(f"{r['placements'].get(k, 0)}" for k in shown)
        lines.append(f"| {r['trace']} | {r['row']}: `{r['config']}` | {r['jobs']} | {r.get('colocated', 0)} | {r['isolated']} "
                     f"({pct(r['isolated'] / r['jobs'] if r['jobs'] else 0.0)}) | {cells} | "
                     f"{r['cost_usd']:,.0f} | {pct(r['slo'])} |")
    lines += ["", "Groups refused, summed over the isolated placements:", "",
              f"| trace | configuration | {head} |", "|---|---|" + "---|" * len(shown)]
    for r in runs:
        lines.append(f"| {r['trace']} | {r['row']}: `{r['config']}` | " + " | ".join(f"{r['groups'].get(k, 0):,}" for k in shown) + " |")
    lines += ["", regenerate(data, "placements_why", f"one row: `{simulate_command(row_config(ROWS[1][0]))} "
              "--json OUT` (`policies.rollmux.placements_why`)."), ""]
    return "\n".join(lines)

