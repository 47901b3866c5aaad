"""Shared plumbing of the study sections: configurations, the Philly-driven traces and one run's summary.

Every RollMux row of the study is a named profile plus overrides (DESIGN §10,
core/config.py), built by `build_policy` through the simulator, and its table label
prints that configuration (`SchedulerConfig.describe`), so each published number is a
configuration `rollmux simulate --profile P --set SETTING=VALUE` runs (`simulate_command`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import run_policy
from rollmux.study.config import StudyConfig
from rollmux.workload import synthesize_philly

MODES = ("paper", "catalog")


def profile(name: str, overrides: Mapping[str, Any] | None = None) -> SchedulerConfig:
    """The named profile with `overrides` by dotted setting name (core/config.py)."""
    base = SchedulerConfig.profile(name)
    return base.with_overrides(overrides) if overrides else base


def label(what: str, cfg: SchedulerConfig) -> str:
    """A table row's label: what the row stands for and the configuration that runs it."""
    return f"{what}: `{cfg.describe()}`" if what else f"`{cfg.describe()}`"


def _cli_value(value: Any) -> str:
    """A setting's value as `--set SETTING=VALUE` reads it (YAML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def simulate_command(cfg: SchedulerConfig) -> str:
    """The `rollmux simulate` options that run `cfg`: its nearest profile and the overrides."""
    name = cfg.describe().split(" ", 1)[0]
    sets = "".join(f" --set {k}={_cli_value(v)}" for k, v in cfg.changes(SchedulerConfig.profile(name)).items())
    return f"rollmux simulate --profile {name}{sets}"


def philly_jobs(sc: StudyConfig, traces: Path, mode: str) -> list[JobSpec]:
    """The study's Philly-driven trace of one profile mode."""
    return synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, sc.philly_days, mode, sc.seed)


def policy_run(name: str, jobs: list[JobSpec], cluster: ClusterSpec, cfg: SchedulerConfig, seed: int,
               flat_sync: bool = False) -> PolicyResult:
    """`run_policy` with every argument positional (a sweep task): the named policy on the trace,
    RollMux as `cfg` sets it, the group-based baselines planning with `cfg`'s planner view."""
    return run_policy(name, jobs, cluster, cfg, seed=seed, flat_sync=flat_sync)


def run_config(jobs: list[JobSpec], cluster: ClusterSpec, cfg: SchedulerConfig, seed: int,
               solo: bool = False, flat_sync: bool = False) -> PolicyResult:
    """RollMux as `cfg` sets it (or Solo-D, planning with `cfg`'s planner view) on the trace,
    exactly as `rollmux simulate` runs it (sim/runner.py)."""
    return policy_run("solo-d" if solo else "rollmux", jobs, cluster, cfg, seed, flat_sync)


# Sections that measure a mechanism of the co-execution groups (migrations, drift repair,
# the shared link) run the shipped configuration with the co-located mode off: on the
# paper-profile trace the mode takes every job out of the groups, and the mechanism would
# have nothing to act on. The mechanisms section measures the mode itself.
GROUPS_ONLY = {"colocation.enabled": False}


# The paper's static groups: fixed once formed (no shrink, re-placement, repair or compaction).
STATIC = {"regroup.shrink": False, "regroup.enabled": False, "regroup.repair": False, "compaction.enabled": False}


def groups_config(overrides: Mapping[str, Any] | None = None) -> SchedulerConfig:
    """The shipped configuration with the co-located mode off (see GROUPS_NOTE), and `overrides`."""
    return profile("shipped", {**GROUPS_ONLY, **(overrides or {})})


GROUPS_NOTE = (f"RollMux runs `{groups_config().describe()}`: the shipped configuration with the per-job "
               "co-located mode off, since this section measures the co-execution groups and on the "
               "paper-profile trace the mode takes every job out of them (see the mechanisms section).")


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
