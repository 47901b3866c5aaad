"""Micro-benchmarks of the scheduler itself (used by `benchmarks/` and `rollmux bench`)."""

from __future__ import annotations

import time

import numpy as np

from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group
from rollmux.core.placement import Case, ClusterView, PlacementPolicy, build_policy, validate_plan
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster


def build_state(jobs: list[JobSpec], policy: PlacementPolicy, cluster: ClusterSpec,
                max_group_size: int = 5, intra: IntraConfig | None = None) -> dict[int, Group]:
    """Place `jobs` one after another (no departures) and return the resulting groups.

    The groups are kept indexed (core/placement/index.py) with `intra` (default: the policy's
    own planner view, `policy.cfg`), as the cluster state keeps them; a co-located job
    (core/placement/options/colocated.py) joins no group, as in the cluster state."""
    groups = IndexedGroups(intra if intra is not None else policy.cfg)
    for job in jobs:
        view = indexed_view(groups, cluster, max_group_size)
        plan = policy.place(job, view)
        validate_plan(plan, job, view)
        if plan.case != Case.COLOCATED:
            groups[plan.group.group_id] = plan.group
    return groups


def indexed_view(groups: dict[int, Group], cluster: ClusterSpec, max_group_size: int = 5) -> ClusterView:
    """An uncapped view of `groups`, with their index when they are kept indexed."""
    if isinstance(groups, IndexedGroups):
        snap = groups.index.snapshot(groups.values_tuple())
        return ClusterView(cluster, groups.values_tuple(), None, None, max_group_size,
                           max(groups, default=-1) + 1, index=snap)
    return ClusterView(cluster, tuple(groups.values()), None, None, max_group_size, max(groups, default=-1) + 1)


def latency_config(shipped: bool = True) -> SchedulerConfig:
    """The configuration `placement_latency` times: the `shipped` group search (its admission,
    elastic rollout shapes and stretch pricing) with the co-located mode off, since these jobs
    (8:8) would all run co-located and leave no group to search (that answer takes ~0.3 ms at
    any size); or, not `shipped`, the `paper` profile (Algorithm 1: nominal shapes, Δ pricing,
    worst-case admission)."""
    if not shipped:
        return SchedulerConfig.profile("paper")
    return SchedulerConfig.profile("shipped").with_overrides({"colocation.enabled": False})


def placement_latency(n_active: int, probes: int = 50, seed: int = 0, indexed: bool = True,
                      shipped: bool = True) -> dict:
    """p50/p99 (ms) of one RollMux placement decision with `n_active` jobs placed, the policy
    built by `build_policy` from `latency_config(shipped)`.

    `indexed`: the view carries the group index, as `ClusterState` hands it to the policy
    (False: the plain scan over every group, for comparison)."""
    from rollmux.workload import paper_jobs
    cluster = default_cluster()
    config = latency_config(shipped)
    policy = build_policy(config, cluster)
    active = paper_jobs(n_active, seed=seed)
    t0 = time.perf_counter()
    groups = build_state(active, policy, cluster)
    build_s = time.perf_counter() - t0
    view = indexed_view(groups, cluster) if indexed else indexed_view(dict(groups), cluster)
    probe_jobs = [j.model_copy(update={"job_id": f"probe{i}"})
                  for i, j in enumerate(paper_jobs(probes, seed=seed + 1))]
    times, cpu = [], []
    for job in probe_jobs:
        t0, c0 = time.perf_counter(), time.process_time()
        policy.place(job, view)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    # CPU time as well: on a shared machine wall time also counts other processes' turns.
    return {"jobs": n_active, "groups": len(groups), "shipped": shipped, "config": config.describe(),
            "plan": policy.cfg.plan,
            "p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
            "p50_cpu_ms": float(np.percentile(cpu, 50)),
            "p99_cpu_ms": float(np.percentile(cpu, 99)), "build_s": build_s}
