"""`rollmux study`: the paper's scheduling study, regenerated with fixed seeds.

Three parts, each a markdown table (and plots):
  A. small job sets (all jobs arrive together) — each policy's steady cost rate
     normalized to the offline optimum, and SLO attainment, for workloads
     balanced / rollout-heavy / train-heavy / mixed, SLO 1.2 / 1.5 / 2.0 / U(1,2),
     and max group size 2-5;
  B. Philly-driven traces — every policy's cost normalized to the busy-time
     bound, gain over Solo-D and SLO attainment;
  C. ablations of what goes beyond the paper, on the same traces;
plus a cost-over-time plot of a Philly-driven trace.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rollmux.core.inter_group import RollMuxPlacement
from rollmux.core.intra_group import IntraConfig
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.sim.baseline_policies import GreedyPlacement, RandomPlacement
from rollmux.sim.baselines import busy_time_bound
from rollmux.sim.gavel import simulate_gavel
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import SimConfig, simulate
from rollmux.study.config import StudyConfig  # noqa: F401  (re-exported: `rollmux study` imports it here)
from rollmux.study.offline_optimum import optimal_partition
from rollmux.study.sweep import OnDone, Pmap, serial_map
from rollmux.study.report import write_report
from rollmux.workload import find_traces_dir, paper_jobs, synthesize_philly

WORKLOADS = ("balanced", "rollout-heavy", "train-heavy", "mixed")
SLOS: tuple[float | None, ...] = (1.2, 1.5, 2.0, None)  # None: U(1, 2)
SMALL_POLICIES = ("rollmux", "rollmux-paper", "random", "greedy", "gavel")
PHILLY_POLICIES = ("rollmux", "rollmux-static", "solo-d", "verl", "random", "greedy", "gavel")
STATIC = dict(shrink=False, regroup=False)


@dataclass
class SmallCell:
    """One (workload, SLO, max group size) cell of part A, averaged over instances."""

    workload: str
    slo: float | None
    group_size: int
    cost_vs_opt: dict[str, float]
    slo_attainment: dict[str, float]
    exact: bool


def rate_at_start(result: PolicyResult) -> float:
    """Cost rate ($/h) once every job of a set arriving at t=0 is placed."""
    at_zero = [rate for t, rate in result.cost_timeline if t <= 0.0]
    return at_zero[-1] if at_zero else 0.0


def _small_policy(name: str, jobs: list[JobSpec], cluster: ClusterSpec, size: int, seed: int) -> PolicyResult:
    cfg = SimConfig(seed=seed, max_group_size=size, **STATIC)
    if name == "rollmux-paper":  # Algorithm 1 as published: file order, pruning, first fit
        return simulate(jobs, cluster, RollMuxPlacement(cfg.intra, prune_saturated=True),
                        replace(cfg, batch_order=False))
    if name == "gavel":
        return simulate_gavel(jobs, cluster, seed=seed, max_pack=size)
    policy = {"rollmux": lambda: RollMuxPlacement(cfg.intra),
              "greedy": lambda: GreedyPlacement(cfg.intra),
              "random": lambda: RandomPlacement(np.random.default_rng([seed, 7]), cfg.intra)}[name]()
    return simulate(jobs, cluster, policy, cfg)


def small_cell(workload: str, slo: float | None, size: int, sc: StudyConfig,
               cluster: ClusterSpec) -> SmallCell:
    """Part A for one cell: cost vs the exact optimum and SLO attainment per policy."""
    costs = {p: [] for p in SMALL_POLICIES}
    slos = {p: [] for p in SMALL_POLICIES}
    exact = True
    for i in range(sc.instances):
        seed = sc.seed * 1000 + i
        jobs = paper_jobs(sc.small_jobs, profile=workload, slo=slo, seed=seed)
        opt = optimal_partition(jobs, cluster, IntraConfig(), size)
        exact &= opt.exact
        for p in SMALL_POLICIES:
            res = _small_policy(p, jobs, cluster, size, seed)
            costs[p].append(rate_at_start(res) / opt.cost_per_hour)
            slos[p].append(res.slo_attainment)
    return SmallCell(workload, slo, size, {p: float(np.mean(v)) for p, v in costs.items()},
                     {p: float(np.mean(v)) for p, v in slos.items()}, exact)


def philly_variants() -> dict[str, SimConfig]:
    """Part C: rollmux variants, from the paper's static groups to the new defaults."""
    default = SimConfig()
    return {
        "static groups (paper)": SimConfig(**STATIC),
        "+ shrink": SimConfig(shrink=True, regroup=False),
        "+ re-placement of the group a job left": SimConfig(shrink=False, regroup=True, consolidate=0),
        "+ shrink + re-placement": SimConfig(consolidate=0),
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
        res = simulate(jobs, cluster, RollMuxPlacement(), SimConfig(seed=seed, **STATIC))
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


def study_cells(sc: StudyConfig) -> list[tuple[str, float | None, int]]:
    """Part A's cells: every workload x SLO at the largest group size, and the group-size
    sweep for every workload at SLO U(1,2)."""
    big = max(sc.group_sizes)
    cells = [(w, s, big) for w in WORKLOADS for s in SLOS]
    cells += [(w, None, g) for w in WORKLOADS for g in sc.group_sizes if g != big]
    return cells


PHILLY_MODES = ("paper", "catalog")


def run_study(sc: StudyConfig, out: Path, traces: Path | None = None,
              progress: Callable[[str, int, int], None] | None = None, pmap: Pmap = serial_map) -> Path:
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
    out.mkdir(parents=True, exist_ok=True)
    return write_report(out, sc, small, philly)
