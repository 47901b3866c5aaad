"""Study part A: small job sets, all arriving together, against the offline optimum.

Each cell (workload, SLO, max group size) runs `instances` job sets; on each,
every policy runs to completion in the simulator with static groups (no shrink,
no re-placement), and the randomized policy (random) once per placement seed.
RollMux runs as configured by the `paper` profile at the cell's max group size
(DESIGN §10), its columns named by their configuration (`ROLLMUX_COLUMNS`).
Per run, three numbers (DESIGN §6-7):

- paper's cost / optimum: the paper's cost rate of the policy's groups — each
  group's $/h, a group in which a member broke its SLO charged its $/h × its
  worst member slowdown (rollmux.sim.metrics.paper_cost_per_hour) — over the
  offline optimum's $/h (optimal_partition: the cheapest partition that meets
  residency and every SLO under worst-case planning). Group policies only.
- total cost / optimum: the simulator's total $ until the set's last job
  ends, over the total $ of the optimum's partition run the same way (replayed
  as static groups by FixedPartition, same draws).
- SLO attainment: share of jobs whose mean iteration time stayed within
  slo × solo iteration time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from rollmux.core.config import SchedulerConfig
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy, build_policy
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baseline_policies import FixedPartition, GreedyPlacement, RandomPlacement
from rollmux.sim.gavel import simulate_gavel
from rollmux.sim.metrics import PolicyResult, paper_cost_per_hour
from rollmux.sim.simulator import simulate
from rollmux.study.config import StudyConfig
from rollmux.study.offline_optimum import optimal_partition
from rollmux.study.sections import profile
from rollmux.workload import paper_jobs

WORKLOADS = ("balanced", "rollout-heavy", "train-heavy", "mixed")
SLOS: tuple[float | None, ...] = (1.2, 1.5, 2.0, None)  # None: U(1, 2)
# Part A's RollMux columns, each named by its configuration: the paper's static groups (the
# `paper` profile: worst-case planning, as the optimum plans), and the same placing arrivals
# in file order with the paper's pruning of saturated groups (Algorithm 1 as published).
# Every cell runs them at its own max group size (`placement.max_group_size`).
AS_PUBLISHED = {"placement.batch_order": False, "placement.prune_saturated": True}
ROLLMUX_COLUMNS: dict[str, dict[str, Any]] = {profile("paper", o).describe(): o for o in ({}, AS_PUBLISHED)}
PAPER = next(iter(ROLLMUX_COLUMNS))  # the first column: the `paper` profile itself
SMALL_POLICIES = (*ROLLMUX_COLUMNS, "random", "greedy", "gavel")
RANDOMIZED = ("random",)  # policies whose placements depend on a placement seed
PLACEMENT_SEEDS = 5       # placement seeds per instance for a randomized policy


def cell_config(size: int, overrides: Mapping[str, Any] | None = None) -> SchedulerConfig:
    """A part-A configuration: the `paper` profile at max group size `size`, with `overrides`.
    The baselines and the optimum's replay plan their groups with it too (worst case)."""
    return profile("paper", {**(overrides or {}), "placement.max_group_size": size})


# Per group that was ever placed: (its $/h in its final planned composition, its members' job ids).
GroupRecord = list[tuple[float, list[str]]]


@dataclass
class SmallCell:
    """One (workload, SLO, max group size) cell of part A: every run's numbers per policy.

    `paper_cost`, `total_cost` and `slo_attainment` hold one value per run (instances ×
    placement seeds for a randomized policy, instance by instance); `paper_cost` lacks policies
    without groups (gavel). `optimum_usd`: the optimum's total $ per instance, which the
    group-size figure compares across cells."""

    workload: str
    slo: float | None
    group_size: int
    paper_cost: dict[str, list[float]]
    total_cost: dict[str, list[float]]
    slo_attainment: dict[str, list[float]]
    exact: bool
    optimum_usd: list[float] = field(default_factory=list)


class _Recorder(PlacementPolicy):
    """Wraps a policy and keeps each group's latest plan: in a static run with every
    arrival at once, that is the group's final composition and rate."""

    def __init__(self, inner: PlacementPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.last: dict[int, PlacementPlan] = {}

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The wrapped policy's plan, recorded."""
        plan = self.inner.place(job, view)
        if plan is not None:
            self.last[plan.group.group_id] = plan
        return plan

    def groups(self, cluster: ClusterSpec) -> GroupRecord:
        """(rate, member ids) of every group placed."""
        return [(p.group.cost_per_hour(cluster), list(p.group.job_ids())) for p in self.last.values()]


def rate_at_start(result: PolicyResult) -> float:
    """Cost rate ($/h) once every job of a set arriving at t=0 is placed."""
    at_zero = [rate for t, rate in result.cost_timeline if t <= 0.0]
    return at_zero[-1] if at_zero else 0.0


def _small_policy(name: str, jobs: list[JobSpec], cluster: ClusterSpec, size: int, seed: int,
                  placement_seed: int = 0) -> tuple[PolicyResult, GroupRecord | None]:
    """Run one policy on a small set with static groups; its result and its groups (None: gavel)."""
    if name == "gavel":
        return simulate_gavel(jobs, cluster, seed=seed, max_pack=size), None
    cfg = cell_config(size, ROLLMUX_COLUMNS.get(name))
    intra = cfg.intra_for(cluster)
    if name in ROLLMUX_COLUMNS:
        policy: PlacementPolicy = build_policy(cfg, cluster)
    elif name == "greedy":
        policy = GreedyPlacement(intra)
    elif name == "random":
        # Its own stream: placement draws never shift the jobs' rollout draws.
        policy = RandomPlacement(np.random.default_rng([seed, 7, placement_seed]), intra)
    else:
        raise ValueError(f"unknown part-A policy {name!r}")
    rec = _Recorder(policy)
    res = simulate(jobs, cluster, cfg, rec, seed=seed)
    return res, rec.groups(cluster)


def paper_cost_of(res: PolicyResult, groups: GroupRecord) -> float:
    """The paper's cost ($/h) of a run's groups, from its job outcomes."""
    by_id = {o.job_id: o for o in res.outcomes}
    return paper_cost_per_hour([(rate, [by_id[j] for j in ids]) for rate, ids in groups])


def optimum_run(jobs: list[JobSpec], cluster: ClusterSpec, size: int, seed: int,
                groups: list) -> PolicyResult:
    """The optimum's partition run to completion as static groups, on the same draws."""
    cfg = cell_config(size)
    return simulate(jobs, cluster, cfg, FixedPartition(groups, cfg.intra_for(cluster)), seed=seed)


def small_cell(workload: str, slo: float | None, size: int, sc: StudyConfig,
               cluster: ClusterSpec, placement_seeds: int = PLACEMENT_SEEDS) -> SmallCell:
    """Part A for one cell: every policy's paper's cost, total cost and SLO attainment per run."""
    paper = {p: [] for p in SMALL_POLICIES if p != "gavel"}
    total = {p: [] for p in SMALL_POLICIES}
    slos = {p: [] for p in SMALL_POLICIES}
    exact = True
    optimum_usd = []
    for i in range(sc.instances):
        seed = sc.seed * 1000 + i
        jobs = paper_jobs(sc.small_jobs, profile=workload, slo=slo, seed=seed)
        opt = optimal_partition(jobs, cluster, cell_config(size))
        exact &= opt.exact
        opt_total = optimum_run(jobs, cluster, size, seed, opt.groups).cost_usd
        optimum_usd.append(opt_total)
        for p in SMALL_POLICIES:
            for k in range(placement_seeds if p in RANDOMIZED else 1):
                res, groups = _small_policy(p, jobs, cluster, size, seed, k)
                if groups is not None:
                    paper[p].append(paper_cost_of(res, groups) / opt.cost_per_hour)
                total[p].append(res.cost_usd / opt_total)
                slos[p].append(res.slo_attainment)
    return SmallCell(workload, slo, size, paper, total, slos, exact, optimum_usd)


def study_cells(sc: StudyConfig) -> list[tuple[str, float | None, int]]:
    """Part A's cells: every workload x SLO at the largest group size, and the group-size
    sweep for every workload at SLO U(1,2)."""
    big = max(sc.group_sizes)
    cells = [(w, s, big) for w in WORKLOADS for s in SLOS]
    cells += [(w, None, g) for w in WORKLOADS for g in sc.group_sizes if g != big]
    return cells
