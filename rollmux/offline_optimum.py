"""Offline optimum (DESIGN §6): the cheapest grouping of a static job set.

All jobs are present at once. A partition of the jobs into co-execution groups,
each with its node counts and pins, costs the sum of its groups' node prices
per hour. The optimum is the cheapest partition whose every group is *valid*,
with exactly RollMux's admission rule (so every placement RollMux makes is a
candidate and the optimum can never cost more than RollMux):

- size <= max_group_size;
- residency on every node (group.residency_ok);
- each member pinned to nodes_for(rollout_gpus) distinct rollout nodes and to
  the group's first nodes_for(train_gpus) training nodes, with n_train the
  largest of those (a RollMux group's founder fixes n_train, joiners need no more);
- the planned period (intra_group.plan_group: worst-case planning durations,
  best cyclic order) <= min over members of period_budget(job, {}) -- the budget
  of a job with no progress, as when RollMux places the whole set at t=0;
- a single job is always valid: isolated provisioning is RollMux's fallback
  (it checks neither SLO nor residency there; unplaceable jobs are the caller's
  business, the CLI rejects them).

`cheapest_group` finds the cheapest valid configuration of one subset (fewest
rollout nodes; n_train is fixed by the subset), `optimal_partition` combines
subsets: exactly by a DP over subsets up to `exact_limit` jobs, else by a
randomized sampler seeded with RollMux's own partition (an upper bound).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from rollmux.bench import build_state
from rollmux.group import Group, Member, isolated_group, residency_ok
from rollmux.inter_group import RollMuxPlacement, period_budget
from rollmux.intra_group import IntraConfig, group_planning_times, planning_times, plan_group, t_cycle, t_load
from rollmux.spec import ClusterSpec, JobSpec

TOL = 1e-9  # relative tolerance of SLO comparisons, as in inter_group


@dataclass(frozen=True)
class OptimumResult:
    """Cheapest partition found: its cost rate, its groups, and whether it is proven optimal."""

    cost_per_hour: float
    groups: list[Group]
    exact: bool


# -- validity -------------------------------------------------------------------------------------

def group_budget(jobs: Sequence[JobSpec]) -> float:
    """Longest period every member accepts at t=0: min of period_budget(job, {})."""
    return min(period_budget(j, {}) for j in jobs)


def pins_ok(group: Group, cluster: ClusterSpec) -> bool:
    """Each member on as many distinct existing rollout nodes as it needs and on the group's
    first training nodes; n_train is the largest member's need."""
    r, t = cluster.pools.rollout, cluster.pools.train
    if not group.members:
        return False
    if group.n_train != max(t.nodes_for(m.job.train_gpus) for m in group.members):
        return False
    for m in group.members:
        k = r.nodes_for(m.job.rollout_gpus)
        if len(m.rollout_nodes) != k or len(set(m.rollout_nodes)) != k:
            return False
        if not all(0 <= n < group.n_rollout for n in m.rollout_nodes):
            return False
        if m.train_nodes != tuple(range(t.nodes_for(m.job.train_gpus))):
            return False
    return True


def group_valid(group: Group, cluster: ClusterSpec, cfg: IntraConfig | None = None,
                max_group_size: int = 5) -> bool:
    """RollMux's admission rule for a whole group placed at t=0 (module docstring).

    The planned period is taken from plan_group, which searches the best cyclic
    order up to cfg.best_order_max members; above that the members' order counts.
    """
    cfg = cfg or IntraConfig()
    if not 1 <= group.size <= max(1, max_group_size) or not pins_ok(group, cluster):
        return False
    if group.size == 1:
        return True
    if not residency_ok(group, cluster):
        return False
    budget = group_budget([m.job for m in group.members])
    return plan_group(group, cfg).shape.period_s <= budget * (1 + TOL)


# -- one subset -----------------------------------------------------------------------------------

def _fits(x: float, cap: float) -> bool:
    return x <= cap * (1 + TOL)


def _pin_assignments(ks: list[int], hosts: list[float], loads: list[float], n: int,
                     host_cap: float, load_cap: float, switch_s: float):
    """Canonical pin assignments of members (needing ks[i] nodes) onto exactly n nodes.

    Nodes are interchangeable, so one assignment is produced per orbit under node
    relabeling: used nodes are grouped by their signature (the members pinned there so
    far); a member takes the lowest-indexed c nodes of each class (only the counts
    matter) and fresh nodes in order. Every node ends up used (an unused node can be
    dropped without changing residency or the period, so a cheaper config would exist).
    Partial residency and partial node load (a lower bound of T_load) prune early.
    """
    m = len(ks)
    suffix = [0] * (m + 1)
    for i in range(m - 1, -1, -1):
        suffix[i] = suffix[i + 1] + ks[i]
    sigs: list[tuple[int, ...]] = []
    host: list[float] = []
    load: list[float] = []
    pins: list[tuple[int, ...]] = []

    def node_load(i: int) -> float:
        c = len(sigs[i])
        return load[i] + (switch_s * c if c > 1 else 0.0)

    def rec(j: int):
        u = len(sigs)
        if j == m:
            if u == n:
                yield list(pins)
            return
        k = ks[j]
        classes: dict[tuple[int, ...], list[int]] = {}
        for i in range(u):
            classes.setdefault(sigs[i], []).append(i)
        cls = list(classes.values())
        for counts in _count_vectors([len(c) for c in cls], k):
            new = k - sum(counts)
            if u + new > n or n - u - new > suffix[j + 1]:
                continue
            chosen = [i for c, cnt in zip(cls, counts) for i in c[:cnt]]
            if any(not _fits(host[i] + hosts[j], host_cap) for i in chosen):
                continue
            if new and not _fits(hosts[j], host_cap):
                continue
            for i in chosen:
                sigs[i] += (j,)
                host[i] += hosts[j]
                load[i] += loads[j]
            ok = all(_fits(node_load(i), load_cap) for i in chosen)
            for _ in range(new):
                sigs.append((j,))
                host.append(hosts[j])
                load.append(loads[j])
            pins.append(tuple(chosen) + tuple(range(u, u + new)))
            if ok:
                yield from rec(j + 1)
            pins.pop()
            del sigs[u:], host[u:], load[u:]
            for i in chosen:
                sigs[i] = sigs[i][:-1]
                host[i] -= hosts[j]
                load[i] -= loads[j]

    yield from rec(0)


def _count_vectors(sizes: list[int], k: int, i: int = 0):
    """Vectors c with 0 <= c[i] <= sizes[i] and sum(c) <= k."""
    if i == len(sizes):
        yield ()
        return
    for c in range(min(sizes[i], k) + 1):
        for rest in _count_vectors(sizes, k - c, i + 1):
            yield (c,) + rest


def _orders(size: int, cfg: IntraConfig):
    """Member orders to try: plan_group searches cyclic orders itself up to best_order_max."""
    if size <= cfg.best_order_max:
        yield tuple(range(size))
        return
    for rest in itertools.permutations(range(1, size)):
        yield (0,) + rest


def cheapest_group(jobs: Sequence[JobSpec], cluster: ClusterSpec, cfg: IntraConfig | None = None,
                   max_group_size: int = 5) -> Group | None:
    """The cheapest valid configuration (planned, group_id 0) of exactly these jobs, or None.

    n_train is fixed by the jobs; the rollout node count is searched upward from a lower
    bound (largest member, residency, rollout load vs the budget) to the sum of the
    members' needs, over canonical pin assignments; the first valid one at the smallest
    count wins. The closed-form bound max(T_cycle, T_load) prunes before plan_group.
    """
    cfg = cfg or IntraConfig()
    jobs = list(jobs)
    if not jobs or len(jobs) > max(1, max_group_size):
        return None
    if len(jobs) == 1:
        return plan_group(isolated_group(0, jobs[0], cluster), cfg)
    rp, tp = cluster.pools.rollout, cluster.pools.train
    # Members needing more rollout nodes first: fewer branches early.
    jobs.sort(key=lambda j: -rp.nodes_for(j.rollout_gpus))
    ks = [rp.nodes_for(j.rollout_gpus) for j in jobs]
    kts = [tp.nodes_for(j.train_gpus) for j in jobs]
    n_train = max(kts)
    budget = group_budget(jobs)
    base = [planning_times(j, cfg.plan_quantile) for j in jobs]
    sw = cfg.warm_switch_s
    # Pin-independent necessary conditions: training residency and load, natural cycle.
    train_host = [sum(j.host_gb.train for j, kt in zip(jobs, kts) if kt > i) for i in range(n_train)]
    if any(not _fits(h, tp.host_gb_per_node) for h in train_host):
        return None
    if not _fits(sum(p.train for p in base) + sw * len(jobs), budget):
        return None
    if not _fits(max(p.rollout + p.train + p.sync for p in base), budget):
        return None
    hosts = [j.host_gb.rollout for j in jobs]
    loads = [p.rollout for p in base]
    lo = max(max(ks),
             math.ceil(sum(k * h for k, h in zip(ks, hosts)) / rp.host_gb_per_node - TOL),
             math.ceil(sum(k * r for k, r in zip(ks, loads)) / (budget * (1 + TOL)) - TOL))
    for n in range(lo, sum(ks) + 1):
        cands = []
        for pins in _pin_assignments(ks, hosts, loads, n, rp.host_gb_per_node, budget, sw):
            members = tuple(Member(j, p, tuple(range(kt))) for j, p, kt in zip(jobs, pins, kts))
            times = group_planning_times(members, cfg)
            bound = max(t_cycle(members, times), t_load(members, n, n_train, times, sw))
            if _fits(bound, budget):
                cands.append((bound, members))
        cands.sort(key=lambda c: c[0])  # likeliest to pass first
        for _, members in cands:
            for order in _orders(len(members), cfg):
                g = plan_group(Group(0, n, n_train, tuple(members[i] for i in order)), cfg)
                if _fits(g.shape.period_s, budget):
                    return g
    return None


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


def optimal_partition(jobs: Sequence[JobSpec], cluster: ClusterSpec, cfg: IntraConfig | None = None,
                      max_group_size: int = 5, exact_limit: int = 10,
                      rng: np.random.Generator | None = None, samples: int = 32) -> OptimumResult:
    """The cheapest partition of `jobs` into valid groups.

    Exact (DP over subsets, exact=True) for up to `exact_limit` jobs; above that the best
    of RollMux's own partition (each group re-optimized), greedy insertion in file order
    and `samples` random insertion orders, each improved by random merges and moves
    (an upper bound, exact=False; never above rollmux_static_cost).
    """
    cfg = cfg or IntraConfig()
    jobs = list(jobs)
    if not jobs:
        return OptimumResult(0.0, [], True)
    if len({j.job_id for j in jobs}) != len(jobs):
        raise ValueError("job ids must be unique")
    costs = _Costs(jobs, cluster, cfg, max_group_size)
    if len(jobs) <= exact_limit:
        cost, masks = _exact(costs, len(jobs))
        return OptimumResult(cost, _groups_of(masks, costs), True)
    index = {j.job_id: i for i, j in enumerate(jobs)}
    _, rm_groups = rollmux_static_cost(jobs, cluster, cfg, max_group_size)
    rm_masks = [sum(1 << index[jid] for jid in g.job_ids()) for g in rm_groups]
    rng = rng if rng is not None else np.random.default_rng(0)
    cost, masks = _sample(costs, len(jobs), rng, samples, [rm_masks])
    return OptimumResult(cost, _groups_of(masks, costs), False)


# -- references -----------------------------------------------------------------------------------

def rollmux_static_cost(jobs: Sequence[JobSpec], cluster: ClusterSpec, cfg: IntraConfig | None = None,
                        max_group_size: int = 5) -> tuple[float, list[Group]]:
    """RollMux placing all jobs at once, one after another in the given order (like
    bench.build_state): the groups' total cost per hour, and the groups."""
    groups = build_state(list(jobs), RollMuxPlacement(cfg or IntraConfig()), cluster, max_group_size)
    out = sorted(groups.values(), key=lambda g: g.group_id)
    return sum(g.cost_per_hour(cluster) for g in out), out


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
               / (j.slo * j.solo_iter_s) for j in jobs)
