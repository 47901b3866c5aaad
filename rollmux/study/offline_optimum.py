"""Offline optimum (DESIGN §6): the cheapest grouping of a static job set.

All jobs are present at once. A partition of the jobs into co-execution groups,
each with its node counts and pins, costs the sum of its groups' node prices
per hour. The optimum is the cheapest partition whose every group is *valid*
(rollmux.study.offline_optimum_groups): exactly the admission rule of RollMux configured
with the paper's static groups (the `paper` profile by default: worst-case planning, nominal
shapes, no co-located jobs; DESIGN §6), so every placement that RollMux makes is a candidate
and the optimum never costs more. The RollMux configuration compared against also sets the
max group size (`placement.max_group_size`) and, through its planner view on the cluster
(`SchedulerConfig.intra_for`), the validity rule.

`cheapest_group` finds the cheapest valid configuration of one subset (fewest
rollout nodes; n_train is fixed by the subset), `optimal_partition` combines
subsets: exactly by a DP over subsets up to `exact_limit` jobs, else by a
randomized sampler seeded with RollMux's own partition (an upper bound).
Pool node caps (max_nodes) are ignored, as in placement_bench.build_state: this is a cost
study of steady provisioning, $/h, with every job present and none finishing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group
from rollmux.core.placement import build_policy
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.study.offline_optimum_groups import cheapest_group, group_budget, group_valid, pins_ok
from rollmux.study.placement_bench import build_state

__all__ = ["OptimumResult", "busy_time_bound_per_hour", "cheapest_group", "group_budget", "group_valid",
           "optimal_partition", "pins_ok", "rollmux_static_cost", "total_cost_per_hour"]


@dataclass(frozen=True)
class OptimumResult:
    """Cheapest partition found: its cost rate, its groups, and whether it is proven optimal."""

    cost_per_hour: float
    groups: list[Group]
    exact: bool


# -- partitions -----------------------------------------------------------------------------------

class _Costs:
    """Memoized cheapest_group per subset (bitmask over the job list)."""

    def __init__(self, jobs: Sequence[JobSpec], cluster: ClusterSpec, cfg: IntraConfig,
                 max_group_size: int) -> None:
        self.jobs, self.cluster, self.cfg, self.mgs = list(jobs), cluster, cfg, max_group_size
        self.memo: dict[int, tuple[float, Group | None]] = {}

    def __call__(self, mask: int) -> tuple[float, Group | None]:
        hit = self.memo.get(mask)
        if hit is None:
            sub = [self.jobs[i] for i in range(len(self.jobs)) if mask >> i & 1]
            g = cheapest_group(sub, self.cluster, self.cfg, self.mgs)
            hit = (math.inf, None) if g is None else (g.cost_per_hour(self.cluster), g)
            self.memo[mask] = hit
        return hit


def _groups_of(masks: list[int], costs: _Costs) -> list[Group]:
    out = []
    for gid, mask in enumerate(masks):
        g = costs(mask)[1]
        out.append(Group(gid, g.n_rollout, g.n_train, g.members, g.shape))
    return out


def _exact(costs: _Costs, n: int) -> tuple[float, list[int]]:
    """opt(S) = min over T ⊆ S holding S's lowest job, |T| <= max size, of cost(T) + opt(S \\ T)."""
    full = (1 << n) - 1
    opt = [0.0] + [math.inf] * full
    choice = [0] * (full + 1)
    mgs = max(1, costs.mgs)
    for s in range(1, full + 1):
        low = s & -s
        rest = s ^ low
        sub = rest
        while True:  # every subset of rest, rest itself first
            t = sub | low
            if t.bit_count() <= mgs:
                c = costs(t)[0]
                if c + opt[s ^ t] < opt[s]:
                    opt[s], choice[s] = c + opt[s ^ t], t
            if sub == 0:
                break
            sub = (sub - 1) & rest
    masks, s = [], full
    while s:
        masks.append(choice[s])
        s ^= choice[s]
    return opt[full], masks


def total_cost_per_hour(groups: Sequence[Group], cluster: ClusterSpec) -> float:
    """Cost rate of groups, from their total node counts: partitions holding the same nodes
    get bit-identical costs, so comparisons between policies are free of summation noise."""
    return (sum(g.n_rollout for g in groups) * cluster.pools.rollout.node_price_per_hour
            + sum(g.n_train for g in groups) * cluster.pools.train.node_price_per_hour)


def _partition_cost(masks: list[int], costs: _Costs) -> float:
    return sum(costs(m)[0] for m in masks)


def _greedy_insert(order: Sequence[int], costs: _Costs) -> list[int]:
    """Insert jobs in `order`, each into the group (or a new one) of least marginal cost."""
    masks: list[int] = []
    for i in order:
        bit = 1 << i
        best, where = costs(bit)[0], -1
        for gi, m in enumerate(masks):
            if m.bit_count() >= costs.mgs:
                continue
            delta = costs(m | bit)[0] - costs(m)[0]
            if delta < best - 1e-9:
                best, where = delta, gi
        if where < 0:
            masks.append(bit)
        else:
            masks[where] |= bit
    return masks


def _improve(masks: list[int], costs: _Costs, rng: np.random.Generator, tries: int) -> list[int]:
    """Random merges of two groups and moves of one job, kept when they lower the cost."""
    masks = list(masks)
    for _ in range(tries):
        if len(masks) < 2:
            break
        a, b = (int(x) for x in rng.choice(len(masks), size=2, replace=False))
        ma, mb = masks[a], masks[b]
        old = costs(ma)[0] + costs(mb)[0]
        if rng.random() < 0.5 and (ma | mb).bit_count() <= costs.mgs:
            if costs(ma | mb)[0] < old - 1e-9:
                masks = [m for i, m in enumerate(masks) if i not in (a, b)] + [ma | mb]
            continue
        bits = [1 << i for i in range(ma.bit_length()) if ma >> i & 1]
        bit = bits[int(rng.integers(len(bits)))]
        if (mb | bit).bit_count() > costs.mgs:
            continue
        new_a = ma ^ bit
        new = (costs(new_a)[0] if new_a else 0.0) + costs(mb | bit)[0]
        if new < old - 1e-9:
            masks[a], masks[b] = new_a, mb | bit
            masks = [m for m in masks if m]
    return masks


def _sample(costs: _Costs, n: int, rng: np.random.Generator, samples: int,
            seed_partitions: list[list[int]]) -> tuple[float, list[int]]:
    starts = [list(p) for p in seed_partitions] + [_greedy_insert(range(n), costs)]
    starts += [_greedy_insert([int(i) for i in rng.permutation(n)], costs) for _ in range(samples)]
    best_cost, best = math.inf, [1 << i for i in range(n)]
    for masks in starts:
        masks = _improve(masks, costs, rng, tries=4 * n)
        c = _partition_cost(masks, costs)
        if c < best_cost:
            best_cost, best = c, masks
    return best_cost, best


def optimal_partition(jobs: Sequence[JobSpec], cluster: ClusterSpec, config: SchedulerConfig | None = None,
                      exact_limit: int = 10, rng: np.random.Generator | None = None,
                      samples: int = 32) -> OptimumResult:
    """The cheapest partition of `jobs` into groups valid under `config` (default: the `paper`
    profile): its planner view on `cluster` and its max group size.

    Exact (DP over subsets, exact=True) for up to `exact_limit` jobs; above that the best
    of RollMux's own partition (each group re-optimized), greedy insertion in file order
    and `samples` random insertion orders, each improved by random merges and moves
    (an upper bound, exact=False; never above rollmux_static_cost with the same `config`).
    """
    config = config or SchedulerConfig.profile("paper")
    cfg, max_group_size = config.intra_for(cluster), config.placement.max_group_size
    jobs = list(jobs)
    if not jobs:
        return OptimumResult(0.0, [], True)
    if len({j.job_id for j in jobs}) != len(jobs):
        raise ValueError("job ids must be unique")
    costs = _Costs(jobs, cluster, cfg, max_group_size)
    if len(jobs) <= exact_limit:
        _, masks = _exact(costs, len(jobs))
        groups = _groups_of(masks, costs)
        return OptimumResult(total_cost_per_hour(groups, cluster), groups, True)
    index = {j.job_id: i for i, j in enumerate(jobs)}
    _, rm_groups = rollmux_static_cost(jobs, cluster, config)
    rm_masks = [sum(1 << index[jid] for jid in g.job_ids()) for g in rm_groups]
    rng = rng if rng is not None else np.random.default_rng(0)
    _, masks = _sample(costs, len(jobs), rng, samples, [rm_masks])
    groups = _groups_of(masks, costs)
    return OptimumResult(total_cost_per_hour(groups, cluster), groups, False)


# -- references -----------------------------------------------------------------------------------

def rollmux_static_cost(jobs: Sequence[JobSpec], cluster: ClusterSpec,
                        config: SchedulerConfig | None = None) -> tuple[float, list[Group]]:
    """RollMux as `config` sets it (default: the `paper` profile), built by `build_policy`,
    placing all jobs at once, one after another in the given order (like
    placement_bench.build_state): the groups' total cost per hour, and the groups."""
    config = config or SchedulerConfig.profile("paper")
    groups = build_state(list(jobs), build_policy(config, cluster), cluster, config.placement.max_group_size)
    out = sorted(groups.values(), key=lambda g: g.group_id)
    return total_cost_per_hour(out, cluster), out


def busy_time_bound_per_hour(jobs: Sequence[JobSpec], cluster: ClusterSpec) -> float:
    """Lower bound ($/h) on the steady cost rate of any SLO-feasible placement at nominal sizes.

    A job meeting its SLO finishes at least one iteration per slo * solo_iter_s seconds on
    average, and each iteration keeps rollout_gpus GPUs busy for E[rollout] and train_gpus
    GPUs for E[train] (nominal sizes: a rollout holds all its GPUs). A provisioned node-hour
    supplies at most one busy GPU-hour per GPU, so the provisioned cost rate is at least
    the busy GPU-hours per hour times their prices:
        sum_j (rollout_gpus * E[r] * p_rollout + train_gpus * E[t] * p_train) / (slo_j * solo_iter_j)
    ($/GPU-hour * GPU-seconds per second). Every group valid for the optimum satisfies it:
    its period is within each member's budget (<= slo * solo_iter) and its nodes run each
    member's planned phases (>= the means) once per period; a lone job's isolated group costs
    at least its own term, since E[r], E[t] <= solo_iter <= slo * solo_iter.
    """
    pr = cluster.pools.rollout.price_per_gpu_hour
    pt = cluster.pools.train.price_per_gpu_hour
    return sum((j.rollout_gpus * j.mean_rollout_s * pr + j.train_gpus * j.mean_train_s * pt)
               / j.slo_iter_s for j in jobs)
