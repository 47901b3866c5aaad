"""Policy registry and side-by-side runs of several policies on one trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rollmux.core.inter_group import RollMuxPlacement
from rollmux.core.shapes import ShapeConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.errors import InputError
from rollmux.sim.baseline_policies import GreedyPlacement, RandomPlacement, SoloPlacement
from rollmux.sim.baselines import busy_time_bound, simulate_verl
from rollmux.sim.gavel import simulate_gavel
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.simulator import SimConfig, simulate

POLICY_NAMES = ("rollmux", "solo-d", "verl", "random", "greedy", "gavel")
DEFAULT_POLICIES = ("rollmux", "solo-d", "verl")

Progress = Callable[[int, int], None]


def rollmux_policy(cfg: SimConfig) -> RollMuxPlacement:
    """RollMux's placement as `rollmux simulate` runs it with `cfg`: its admission, the
    co-located mode, flexible shapes and stretch pricing as the config sets them."""
    policy = RollMuxPlacement(cfg.intra, colocate=cfg.colocate, colo_speed=cfg.colo_speed,
                              colo_margin=cfg.colocation_margin())
    policy.shapes = ShapeConfig(cfg.train_scaling, cfg.elastic_rollout)  # core/shapes.py
    policy.stretch_pricing = cfg.stretch_pricing  # core/marginal.py
    policy.colo_narrow = cfg.colo_narrow  # core/colo_model.py (with elastic rollout)
    return policy


def run_policy(name: str, jobs: list[JobSpec], cluster: ClusterSpec, cfg: SimConfig,
               progress: Progress | None = None) -> PolicyResult:
    """Run the named policy over the trace."""
    if name in ("verl", "gavel"):
        result = (simulate_verl(jobs, cluster, cfg.seed) if name == "verl"
                  else simulate_gavel(jobs, cluster, seed=cfg.seed))
        if progress is not None:
            progress(len(jobs), len(jobs))
        return result
    if name == "rollmux":
        policy = rollmux_policy(cfg)
    elif name == "solo-d":
        policy = SoloPlacement(cfg.intra)
    elif name == "random":
        # Its own stream, derived from the run seed, so placement draws never shift job draws.
        policy = RandomPlacement(np.random.default_rng([cfg.seed, 0x52414E44]), cfg.intra)
    elif name == "greedy":
        policy = GreedyPlacement(cfg.intra)
    else:
        raise InputError("--policy", f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
    return simulate(jobs, cluster, policy, cfg, progress)


@dataclass
class Comparison:
    """Results of several policies on the same trace, cluster and seed."""

    results: dict[str, PolicyResult]
    busy_time_bound_usd: float

    def gain_vs_solo(self, name: str, solo_cost: float) -> float:
        """Cost-efficiency gain of `name` over Solo-D (baseline cost / policy cost)."""
        cost = self.results[name].cost_usd
        return solo_cost / cost if cost > 0 else float("nan")

    def to_json(self) -> dict:
        """The exact JSON document of `rollmux simulate --json`."""
        return {"busy_time_bound_usd": self.busy_time_bound_usd,
                "policies": {n: r.to_json() for n, r in self.results.items()}}


def compare(jobs: list[JobSpec], cluster: ClusterSpec, names: list[str], cfg: SimConfig,
            progress_for: Callable[[str], Progress | None] | None = None) -> Comparison:
    """Run each named policy on the same inputs."""
    for name in names:
        if name not in POLICY_NAMES:
            raise InputError("--policy", f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
    results = {}
    for name in names:
        progress = progress_for(name) if progress_for else None
        results[name] = run_policy(name, jobs, cluster, cfg, progress)
    return Comparison(results, busy_time_bound(jobs, cluster))
