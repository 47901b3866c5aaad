"""Micro-benchmarks of the scheduler itself (used by `benchmarks/` and `rollmux bench`)."""

from __future__ import annotations

import time

import numpy as np

from rollmux.core.group import Group
from rollmux.core.inter_group import RollMuxPlacement
from rollmux.core.placement import ClusterView, PlacementPolicy, validate_plan
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster


def build_state(jobs: list[JobSpec], policy: PlacementPolicy, cluster: ClusterSpec,
                max_group_size: int = 5) -> dict[int, Group]:
    """Place `jobs` one after another (no departures) and return the resulting groups."""
    groups: dict[int, Group] = {}
    for job in jobs:
        view = ClusterView(cluster, tuple(groups.values()), None, None, max_group_size,
                           max(groups, default=-1) + 1)
        plan = policy.place(job, view)
        validate_plan(plan, job, view)
        groups[plan.group.group_id] = plan.group
    return groups


def placement_latency(n_active: int, probes: int = 50, seed: int = 0) -> dict:
    """p50/p99 (ms) of one RollMux placement decision with `n_active` jobs placed."""
    from rollmux.workload import paper_jobs
    cluster = default_cluster()
    policy = RollMuxPlacement()
    active = paper_jobs(n_active, seed=seed)
    groups = build_state(active, policy, cluster)
    view = ClusterView(cluster, tuple(groups.values()), None, None, 5, max(groups) + 1)
    probe_jobs = [j.model_copy(update={"job_id": f"probe{i}"})
                  for i, j in enumerate(paper_jobs(probes, seed=seed + 1))]
    times = []
    for job in probe_jobs:
        t0 = time.perf_counter()
        policy.place(job, view)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"jobs": n_active, "groups": len(groups), "p50_ms": float(np.percentile(times, 50)),
            "p99_ms": float(np.percentile(times, 99))}
