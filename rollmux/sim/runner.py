"""Policy registry and side-by-side runs of several policies on one trace."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rollmux.core.config import SchedulerConfig
from rollmux.core.placement import PlacementPolicy
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.errors import InputError
from rollmux.sim.accounting import WORK, Accounting, nominal_iterations
from rollmux.sim.baseline_policies import GreedyPlacement, RandomPlacement, SoloPlacement
from rollmux.sim.baselines import busy_time_bound, simulate_verl
from rollmux.sim.gavel import simulate_gavel
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.simulator import simulate

POLICY_NAMES = ("rollmux", "solo-d", "verl", "random", "greedy", "gavel")
DEFAULT_POLICIES = ("rollmux", "solo-d", "verl")

Progress = Callable[[int, int], None]


def baseline_policy(name: str, cfg: SchedulerConfig, cluster: ClusterSpec, seed: int) -> PlacementPolicy:
    """A group-based baseline, planning with the config's planner view on `cluster`."""
    intra = cfg.intra_for(cluster)
    if name == "solo-d":
        return SoloPlacement(intra)
    if name == "random":
        # Its own stream, derived from the run seed, so placement draws never shift job draws.
        return RandomPlacement(np.random.default_rng([seed, 0x52414E44]), intra)
    if name == "greedy":
        return GreedyPlacement(intra)
    raise InputError("--policy", f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")


def run_policy(name: str, jobs: list[JobSpec], cluster: ClusterSpec, cfg: SchedulerConfig,
               progress: Progress | None = None, *, seed: int = 0, flat_sync: bool = False,
               accounting: Accounting = WORK) -> PolicyResult:
    """Run the named policy over the trace (RollMux as `cfg` sets it; the baselines) under `accounting`."""
    if name in ("verl", "gavel"):
        result = (simulate_verl(jobs, cluster, seed, accounting=accounting) if name == "verl"
                  else simulate_gavel(jobs, cluster, seed=seed, accounting=accounting))
        if progress is not None:
            progress(len(jobs), len(jobs))
        return result
    policy = None if name == "rollmux" else baseline_policy(name, cfg, cluster, seed)
    return simulate(jobs, cluster, cfg, policy, progress, seed=seed, flat_sync=flat_sync, accounting=accounting)


@dataclass
class Comparison:
    """Results of several policies on the same trace, cluster and seed, under one accounting."""

    results: dict[str, PolicyResult]
    busy_time_bound_usd: float
    accounting: Accounting = field(default=WORK)
    nominal_iterations: float = 0.0  # Σ duration_s / solo_iter_s: the throughput's denominator

    def gain_vs_solo(self, name: str, solo_cost: float) -> float:
        """Cost-efficiency gain of `name` over Solo-D (baseline cost / policy cost)."""
        cost = self.results[name].cost_usd
        return solo_cost / cost if cost > 0 else float("nan")

    def to_json(self) -> dict:
        """The exact JSON document of `rollmux simulate --json`."""
        acc = self.accounting
        return {**acc.header_json(), "busy_time_bound_usd": self.busy_time_bound_usd,
                "policies": {n: {**r.to_json(), **acc.policy_json(r, self.nominal_iterations)}
                             for n, r in self.results.items()}}


def compare(jobs: list[JobSpec], cluster: ClusterSpec, names: list[str], cfg: SchedulerConfig,
            progress_for: Callable[[str], Progress | None] | None = None, *, seed: int = 0,
            flat_sync: bool = False, accounting: Accounting = WORK) -> Comparison:
    """Run each named policy on the same inputs, under `accounting` (default: `work`)."""
    for name in names:
        if name not in POLICY_NAMES:
            raise InputError("--policy", f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
    results = {}
    for name in names:
        progress = progress_for(name) if progress_for else None
        results[name] = run_policy(name, jobs, cluster, cfg, progress, seed=seed, flat_sync=flat_sync,
                                   accounting=accounting)
    return Comparison(results, busy_time_bound(jobs, cluster), accounting, nominal_iterations(jobs))
