"""`rollmux study`: the paper's scheduling study, regenerated with fixed seeds.

Three parts, each a markdown table (and plots):
  A. small job sets (all jobs arrive together; study/part_a.py) — each policy's
     paper's cost and total cost to finish, normalized to the offline optimum,
     and SLO attainment, for workloads balanced / rollout-heavy / train-heavy /
     mixed, SLO 1.2 / 1.5 / 2.0 / U(1,2), and max group size 1-5;
  B. Philly-driven traces — every policy's cost normalized to the busy-time
     bound, gain over Solo-D and SLO attainment;
  C. what goes beyond the paper's static groups, on the same traces;
plus a cost-over-time plot of a Philly-driven trace, and the sections in
SECTIONS: priced-migration sensitivity, profile drift with and without repair,
a finite inter-pool link, how often residency decides, why arrivals get a group
of their own, the mechanisms beyond the paper each on its own, fixed capacity
(41 + 41 nodes) and the baselines' calibration.

Every RollMux row is a named profile plus overrides (DESIGN §10), built by the one
policy builder, and labelled with that configuration (study/sections.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import busy_time_bound
from rollmux.sim.metrics import PolicyResult
from rollmux.study import (
    baseline_sensitivity,
    capacity,
    drift,
    link,
    mechanisms,
    migration,
    paper_trace,
    placements_why,
    residency,
)
from rollmux.study.config import StudyConfig  # noqa: F401  (re-exported: `rollmux study` imports it here)

# Part A lives in study/part_a.py; its names are re-exported here.
from rollmux.study.part_a import SLOS, SMALL_POLICIES, WORKLOADS, SmallCell, rate_at_start, small_cell, study_cells  # noqa: F401
from rollmux.study.report import write_report
from rollmux.study.sections import label, policy_run, profile
from rollmux.study.sweep import OnDone, Pmap, serial_map
from rollmux.workload import find_traces_dir, synthesize_philly

PHILLY_POLICIES = ("rollmux", "rollmux-static", "solo-d", "verl", "random", "greedy", "gavel")
# Part B's RollMux rows: what `rollmux simulate` runs, and the paper's static groups.
PHILLY_PROFILES = {"rollmux": "shipped", "rollmux-static": "paper"}
# The configuration every other part-B policy plans its groups with (`rollmux simulate`'s).
BASELINE_PROFILE = "shipped"


def philly_variants() -> dict[str, SchedulerConfig]:
    """Part C: from the paper's static groups (`paper`) to the co-execution groups with their
    repair side (`groups`: shrinking, re-placement, consolidation, drift repair), then the
    `groups` profile with one setting changed per row. The mechanisms beyond `groups` are the
    mechanisms section's rows."""
    return {
        "static groups": profile("paper"),
        "+ shrink": profile("groups", {"regroup.enabled": False}),
        "+ re-placement of the group a job left": profile("groups", {"regroup.shrink": False,
                                                                      "regroup.consolidate": 0}),
        "+ shrink + re-placement": profile("groups", {"regroup.consolidate": 0}),
        "+ shrink + re-placement + consolidation of small groups": profile("groups"),
        "fixed cyclic order": profile("groups", {"intra_group.best_order_max": 0}),
        "paper's pruning of saturated groups": profile("groups", {"placement.prune_saturated": True}),
        "best-fit tie-break": profile("groups", {"placement.best_fit": "util"}),
        "arrivals placed in file order": profile("groups", {"placement.batch_order": False}),
        "p95 planning": profile("groups", {"admission.quantile": 0.95}),
        "no long-tail migration": profile("groups", {"intra_group.migration": False}),
    }


def philly_policy_run(name: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> PolicyResult:
    """Part B: one policy on a Philly-driven trace (one sweep task)."""
    if name in PHILLY_PROFILES:
        res = policy_run("rollmux", jobs, cluster, profile(PHILLY_PROFILES[name]), seed)
        res.policy = name
        return res
    return policy_run(name, jobs, cluster, profile(BASELINE_PROFILE), seed)


def philly_variant_run(row: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> PolicyResult:
    """Part C: one RollMux variant (a `philly_variants` row) on a Philly-driven trace (one sweep task)."""
    return policy_run("rollmux", jobs, cluster, philly_variants()[row], seed)


_TASKS: dict[str, Callable[..., Any]] = {"small": small_cell, "policy": philly_policy_run,
                                         "variant": philly_variant_run}


def study_task(kind: str, *args: Any) -> Any:
    """One independent simulation of the study: a part-A cell ("small"), a part-B policy ("policy")
    or a part-C variant ("variant") run; the sweeps map this function."""
    return _TASKS[kind](*args)


def philly_tasks(mode: str, sc: StudyConfig, cluster: ClusterSpec,
                 traces: Path) -> tuple[list[JobSpec], list[tuple]]:
    """One mode's Philly-driven trace and its part-B and part-C runs, as `study_task` argument tuples."""
    jobs = synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, sc.philly_days, mode, sc.seed)
    runs = [("policy", name, jobs, cluster, sc.seed) for name in PHILLY_POLICIES]
    runs += [("variant", label, jobs, cluster, sc.seed) for label in philly_variants()]
    return jobs, runs


def philly_result(mode: str, jobs: list[JobSpec], cluster: ClusterSpec, results: list[PolicyResult]) -> dict:
    """Parts B and C of one mode, from the results of its `philly_tasks` runs (in their order)."""
    policies = dict(zip(PHILLY_POLICIES, results[:len(PHILLY_POLICIES)]))
    variants = dict(zip(philly_variants(), results[len(PHILLY_POLICIES):]))
    # Each RollMux row's label names its configuration (study/sections.py `label`).
    labels = {name: label(name, profile(p)) for name, p in PHILLY_PROFILES.items()}
    labels |= {what: label(what, cfg) for what, cfg in philly_variants().items()}
    return {"mode": mode, "jobs": len(jobs), "bound": busy_time_bound(jobs, cluster), "policies": policies,
            "variants": variants, "labels": labels}


def philly_runs(mode: str, sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap = serial_map,
                on_done: OnDone | None = None) -> dict:
    """Parts B and C on one Philly-driven trace, every run mapped through `pmap`."""
    jobs, runs = philly_tasks(mode, sc, cluster, traces)
    return philly_result(mode, jobs, cluster, pmap(study_task, runs, on_done))


PHILLY_MODES = ("paper", "catalog")
# Further sections, each `run(sc, cluster, traces, pmap) -> data` and `render(data) -> markdown`.
SECTIONS = (paper_trace, migration, drift, link, residency, placements_why, mechanisms, capacity, baseline_sensitivity)


def pick_sections(spec: str) -> tuple:
    """The SECTIONS named in `spec` ("all", "none" or comma-separated module names), in study order."""
    names = {m.__name__.rsplit(".", 1)[-1]: m for m in SECTIONS}
    if spec.strip() == "all":
        return SECTIONS
    if spec.strip() == "none":
        return ()
    wanted = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in names]
    if unknown or not wanted:
        raise InputError("--sections", f"unknown section {(unknown or [spec])[0]!r}; choose all, none or "
                                       f"{', '.join(names)}")
    return tuple(m for n, m in names.items() if n in wanted)


def run_study(sc: StudyConfig, out: Path, traces: Path | None = None,
              progress: Callable[[str, int, int], None] | None = None, pmap: Pmap = serial_map,
              sections: tuple = SECTIONS) -> Path:
    """Run every part and write the markdown report and plots under `out`."""
    cluster = default_cluster()
    traces = find_traces_dir(traces)
    # Every independent simulation of the study goes through one `pmap` call, so a distributed map
    # balances all of them at once; the long Philly runs go first.
    tasks: list[tuple] = []
    labels: list[str] = []
    modes = []
    for mode in PHILLY_MODES:
        jobs, runs = philly_tasks(mode, sc, cluster, traces)
        modes.append((mode, jobs, len(tasks), len(runs)))
        tasks += runs
        labels += [f"philly {mode} {run[1]}" for run in runs]
    first_cell = len(tasks)
    for w, s, g in study_cells(sc):
        tasks.append(("small", w, s, g, sc, cluster))
        labels.append(f"small {w} slo={s or 'U(1,2)'} size={g}")
    done = [0]

    def tick(i: int, _result: Any) -> None:
        done[0] += 1
        if progress is not None:
            progress(labels[i], done[0], len(tasks))

    results = pmap(study_task, tasks, tick)
    philly = [philly_result(mode, jobs, cluster, results[start:start + n]) for mode, jobs, start, n in modes]
    small = results[first_cell:]
    rendered = []
    for i, section in enumerate(sections):
        name = section.__name__.rsplit(".", 1)[-1]
        rendered.append(section.render(section.run(sc, cluster, traces, pmap)))
        if progress is not None:
            progress(f"section {name}", i + 1, len(sections))
    out.mkdir(parents=True, exist_ok=True)
    return write_report(out, sc, small, philly, rendered)
