"""Valid co-execution groups of the offline optimum, and the cheapest one for a job subset.

The validity rule is exactly RollMux's admission rule for jobs placed at t=0,
so every group RollMux builds is valid here (see rollmux.study.offline_optimum):

- size <= max_group_size;
- residency on every node (group.residency_ok);
- each member pinned to nodes_for(rollout_gpus) distinct rollout nodes and to
  the group's first nodes_for(train_gpus) training nodes, with n_train the
  largest of those (a RollMux group's founder fixes n_train, joiners need no more);
- the planned period (intra_group.plan_group: worst-case planning durations,
  best cyclic order) <= min over members of period_budget(job, {}) -- the budget
  of a job with no progress, with the same relative tolerance as placement admission;
- a single job is always valid: isolated provisioning is RollMux's fallback
  (it checks neither SLO nor residency there; unplaceable jobs are the caller's
  business, the CLI rejects them).
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, Member, isolated_group, residency_ok
from rollmux.core.intra_group import group_planning_times, plan_group, planning_times, t_cycle, t_load
from rollmux.core.placement.admission import period_budget
from rollmux.core.spec import ClusterSpec, JobSpec

TOL = 1e-9  # relative tolerance of SLO comparisons, as in placement admission

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


def group_valid(group: Group, cluster: ClusterSpec, cfg: IntraConfig, max_group_size: int = 5) -> bool:
    """RollMux's admission rule for a whole group placed at t=0 (module docstring).

    The planned period is taken from plan_group, which searches the best cyclic
    order up to cfg.best_order_max members; above that the members' order counts.
    """
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
    return _PinSearch(ks, hosts, loads, n, host_cap, load_cap, switch_s).assignments(0)


class _PinSearch:
    """The depth-first search behind `_pin_assignments`: the nodes used so far (their signature,
    host memory and load) and the pins of members 0..j-1, extended and undone member by member."""

    def __init__(self, ks: list[int], hosts: list[float], loads: list[float], n: int,
                 host_cap: float, load_cap: float, switch_s: float) -> None:
        self.ks, self.hosts, self.loads, self.n = ks, hosts, loads, n
        self.host_cap, self.load_cap, self.switch_s = host_cap, load_cap, switch_s
        # suffix[j]: the nodes members j.. need together, the most fresh nodes they can still add
        self.suffix = [0] * (len(ks) + 1)
        for i in range(len(ks) - 1, -1, -1):
            self.suffix[i] = self.suffix[i + 1] + ks[i]
        self.sigs: list[tuple[int, ...]] = []
        self.host: list[float] = []
        self.load: list[float] = []
        self.pins: list[tuple[int, ...]] = []

    def _node_load(self, i: int) -> float:
        c = len(self.sigs[i])
        return self.load[i] + (self.switch_s * c if c > 1 else 0.0)

    def _classes(self) -> list[list[int]]:
        """The used nodes grouped by signature, each class in index order, classes by first node."""
        classes: dict[tuple[int, ...], list[int]] = {}
        for i, sig in enumerate(self.sigs):
            classes.setdefault(sig, []).append(i)
        return list(classes.values())

    def _pin(self, j: int, chosen: list[int], new: int) -> bool:
        """Pin member j on `chosen` used nodes and `new` fresh ones; whether every chosen node's
        load still fits."""
        u = len(self.sigs)
        for i in chosen:
            self.sigs[i] += (j,)
            self.host[i] += self.hosts[j]
            self.load[i] += self.loads[j]
        ok = all(_fits(self._node_load(i), self.load_cap) for i in chosen)
        for _ in range(new):
            self.sigs.append((j,))
            self.host.append(self.hosts[j])
            self.load.append(self.loads[j])
        self.pins.append(tuple(chosen) + tuple(range(u, u + new)))
        return ok

    def _unpin(self, j: int, chosen: list[int], u: int) -> None:
        """Undo `_pin(j, chosen, ...)` made with u nodes in use."""
        self.pins.pop()
        del self.sigs[u:], self.host[u:], self.load[u:]
        for i in chosen:
            self.sigs[i] = self.sigs[i][:-1]
            self.host[i] -= self.hosts[j]
            self.load[i] -= self.loads[j]

    def assignments(self, j: int):
        """Every canonical completion of the pins of members 0..j-1 (a fresh list each)."""
        u = len(self.sigs)
        if j == len(self.ks):
            if u == self.n:
                yield list(self.pins)
            return
        k = self.ks[j]
        cls = self._classes()
        for counts in _count_vectors([len(c) for c in cls], k):
            new = k - sum(counts)
            if u + new > self.n or self.n - u - new > self.suffix[j + 1]:
                continue
            chosen = [i for c, cnt in zip(cls, counts) for i in c[:cnt]]
            if any(not _fits(self.host[i] + self.hosts[j], self.host_cap) for i in chosen):
                continue
            if new and not _fits(self.hosts[j], self.host_cap):
                continue
            if self._pin(j, chosen, new):
                yield from self.assignments(j + 1)
            self._unpin(j, chosen, u)


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


def cheapest_group(jobs: Sequence[JobSpec], cluster: ClusterSpec, cfg: IntraConfig,
                   max_group_size: int = 5) -> Group | None:
    """The cheapest valid configuration (planned, group_id 0) of exactly these jobs, or None.

    n_train is fixed by the jobs; the rollout node count is searched upward from a lower
    bound (largest member, residency, rollout load vs the budget) to the sum of the
    members' needs, over canonical pin assignments; the first valid one at the smallest
    count wins. The closed-form bound max(T_cycle, T_load) prunes before plan_group.
    """
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
