"""`rollmux study`: the paper's scheduling study, regenerated with fixed seeds.

Three parts, each a markdown table (and plots):
  A. small job sets (all jobs arrive together; study/part_a.py) — each policy's
     paper's cost and total cost to finish, normalized to the offline optimum,
     and SLO attainment, for workloads balanced / rollout-heavy / train-heavy /
     mixed, SLO 1.2 / 1.5 / 2.0 / U(1,2), and max group size 2-5;
  B. Philly-driven traces — every policy's cost normalized to the busy-time
     bound, gain over Solo-D and SLO attainment;
  C. ablations of what goes beyond the paper, on the same traces;
plus a cost-over-time plot of a Philly-driven trace, and the sections in
SECTIONS: priced-migration sensitivity, profile drift with and without repair,
a finite inter-pool link, how often residency decides, why arrivals get a group
of their own, issue 14's mechanisms each on its own, fixed capacity (41 + 41 nodes) and the baselines' calibration.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rollmux.core.placement import RollMuxPlacement
from rollmux.core.config import IntraConfig
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import busy_time_bound
from rollmux.sim.gavel import simulate_gavel
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import SimConfig, simulate
from rollmux.study import (
    baseline_sensitivity,
    capacity,
    drift,
    link,
    mechanisms,
    migration,
    placements_why,
    residency,
)
from rollmux.study.config import StudyConfig  # noqa: F401  (re-exported: `rollmux study` imports it here)

# Part A lives in study/part_a.py; its names are re-exported here.
from rollmux.study.part_a import (  # noqa: F401
    SLOS,
    SMALL_POLICIES,
    STATIC,
    WORKLOADS,
    SmallCell,
    rate_at_start,
    small_cell,
    study_cells,
)
from rollmux.study.report import write_report
from rollmux.study.sections import before_issue_14
from rollmux.study.sweep import OnDone, Pmap, serial_map
from rollmux.workload import find_traces_dir, synthesize_philly

PHILLY_POLICIES = ("rollmux", "rollmux-static", "solo-d", "verl", "random", "greedy", "gavel")


def philly_variants() -> dict[str, SimConfig]:
    """Part C: rollmux variants, from the paper's static groups to regrouping, nominal shapes and
    no co-located jobs (issue 14's mechanisms, on top of this, are the mechanisms section's rows)."""
    default = before_issue_14()  # (variant_policy sets none of issue 14's switches either)
    return {
        "static groups (paper)": replace(default, **STATIC),
        "+ shrink": replace(default, shrink=True, regroup=False),
        "+ re-placement of the group a job left": replace(default, shrink=False, regroup=True, consolidate=0),
        "+ shrink + re-placement": replace(default, consolidate=0),
        "+ shrink + re-placement + consolidation of small groups (default)": default,
        "default, fixed cyclic order": replace(default, intra=IntraConfig(best_order_max=0)),
        "default, paper's pruning of saturated groups": default,
        "default, best-fit tie-break": default,
        "default, arrivals placed in file order": replace(default, batch_order=False),
        "default, p95 planning": replace(default, intra=IntraConfig(plan_quantile=0.95)),
        "default, no long-tail migration": replace(default, intra=IntraConfig(migration=False)),
    }


def variant_policy(label: str, cfg: SimConfig) -> RollMuxPlacement:
    """The placement policy of a part-C variant."""
    return RollMuxPlacement(cfg.intra, prune_saturated="pruning" in label,
                            best_fit="util" if "best-fit" in label else "")


def philly_policy_run(name: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> PolicyResult:
    """Part B: one policy on a Philly-driven trace (one sweep task)."""
    if name == "rollmux-static":
        cfg = replace(before_issue_14(seed), **STATIC)  # the paper's groups
        res = simulate(jobs, cluster, RollMuxPlacement(), cfg)
        res.policy = name
        return res
    if name == "gavel":
        return simulate_gavel(jobs, cluster, seed=seed)
    return run_policy(name, jobs, cluster, SimConfig(seed=seed))


def philly_variant_run(label: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> PolicyResult:
    """Part C: one rollmux variant on a Philly-driven trace (one sweep task)."""
    cfg = replace(philly_variants()[label], seed=seed)
    return simulate(jobs, cluster, variant_policy(label, cfg), cfg)


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
    return {"mode": mode, "jobs": len(jobs), "bound": busy_time_bound(jobs, cluster), "policies": policies,
            "variants": variants}


def philly_runs(mode: str, sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap = serial_map,
                on_done: OnDone | None = None) -> dict:
    """Parts B and C on one Philly-driven trace, every run mapped through `pmap`."""
    jobs, runs = philly_tasks(mode, sc, cluster, traces)
    return philly_result(mode, jobs, cluster, pmap(study_task, runs, on_done))


PHILLY_MODES = ("paper", "catalog")
# Further sections, each `run(sc, cluster, traces, pmap) -> data` and `render(data) -> markdown`.
SECTIONS = (migration, drift, link, residency, placements_why, mechanisms, capacity, baseline_sensitivity)


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
