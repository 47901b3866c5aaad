"""Shared plumbing of the study sections: the Philly-driven traces and one run's summary."""

from __future__ import annotations

from pathlib import Path

from rollmux.core.config import IntraConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import SimConfig
from rollmux.study.config import StudyConfig
from rollmux.workload import synthesize_philly

MODES = ("paper", "catalog")


def philly_jobs(sc: StudyConfig, traces: Path, mode: str) -> list[JobSpec]:
    """The study's Philly-driven trace of one profile mode."""
    return synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, sc.philly_days, mode, sc.seed)


def run_config(jobs: list[JobSpec], cluster: ClusterSpec, cfg: SimConfig, solo: bool = False) -> PolicyResult:
    """RollMux (or Solo-D) with `cfg` on the trace, built as `rollmux simulate` builds it
    (shapes and the co-located mode from `cfg`, sim/runner.py)."""
    return run_policy("solo-d" if solo else "rollmux", jobs, cluster, cfg)


# Sections that measure a mechanism of the co-execution groups (migrations, drift repair,
# the shared link) run the shipped configuration with the co-located mode off: on the
# paper-profile trace the mode takes every job out of the groups, and the mechanism would
# have nothing to act on. The mechanisms section measures the mode itself.
GROUPS_NOTE = ("RollMux runs as shipped but with the per-job co-located mode off (`--no-colocate`): this "
               "section measures the co-execution groups, and on the paper-profile trace the mode takes "
               "every job out of them (see the mechanisms section).")


def before_issue_14(seed: int = 0) -> SimConfig:
    """RollMux's groups as they were before issue 14's mechanisms: worst-case admission,
    nominal shapes, no co-located jobs, Δ pricing (regrouping, priced migrations and repair
    as shipped)."""
    return SimConfig(seed=seed, intra=IntraConfig(plan="worst"), colocate=False, elastic_rollout=False,
                     stretch_pricing=False)


def groups_config(seed: int) -> SimConfig:
    """The shipped configuration with the co-located mode off (see GROUPS_NOTE)."""
    return SimConfig(seed=seed, colocate=False)


def summary(res: PolicyResult) -> dict:
    """What the sections tabulate of one run (picklable)."""
    mig = res.migrations or {"count": 0, "stall_hours": 0.0, "cost_usd": 0.0}
    return {"cost_usd": res.cost_usd, "slo": res.slo_attainment, "migrations": dict(mig),
            "mean_slowdown": float(res.slowdowns.mean()) if len(res.outcomes) else 0.0,
            "placements": res.placement_shares(), "compactions": res.compactions or 0}


def pct(x: float) -> str:
    """A share as a percentage with one decimal."""
    return f"{100 * x:.1f}%"


def mig_cells(s: dict) -> str:
    """Migrations count · stall hours · cost $ as table cells."""
    m = s["migrations"]
    return f"{m['count']} | {m['stall_hours']:.1f} | {m['cost_usd']:,.0f}"


def regenerate(data: dict, name: str, extra: str = "") -> str:
    """The section's closing line: the command that regenerates it (and `extra`, a sentence)."""
    quick = " --quick" if data["quick"] else ""
    return (f"Regenerate: `rollmux study{quick} --sections {name}` "
            f"(section `rollmux/study/{name}.py`){'; ' + extra if extra else '.'}")
