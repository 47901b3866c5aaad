"""Intra-group scheduler (DESIGN §4): round-robin meta-iterations of one group.

`schedule` is the exact event-driven schedule of a group for given phase
durations: each node serves the phases pinned to it one at a time in the
group's cyclic order, a job's train waits for its rollout, its next rollout
for its own sync, and a node that changes job pays the warm-switch cost.
With long-tail migration a rollout's stragglers move to a fraction of its
workers once it is tail-bound, so the next rollout on those nodes may start
while the tail finishes (slowed by the workers the tail still holds).

The runtime controller (core/group_controller.py) implements the same rules
event by event; a test checks both give identical timings.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, GroupShape, Member
from rollmux.core.period_sample import PeriodStats, mean_rollout, period_stats
from rollmux.core.slo_order import choose_slots
from rollmux.core.spec import JobSpec
from rollmux.core.vocabulary import Mode

TAIL_MIGRATION = Mode.TAIL_MIGRATION.value  # (a plain str: vocabulary.py)


@dataclass(frozen=True)
class PhaseTimes:
    """Durations of one iteration's phases."""

    rollout: float
    train: float
    sync: float


@dataclass(frozen=True)
class PhaseRecord:
    """One phase as scheduled: who, where, and when (grant, head end, end)."""

    job_id: str
    phase: str
    iteration: int
    pool: str
    nodes: tuple[int, ...]
    start: float
    head_end: float
    end: float


def planning_times(job: JobSpec, quantile: float) -> PhaseTimes:
    """Phase durations used for planning: rollout at `quantile` (1.0 = max)."""
    r = job.rollout_s.quantile(quantile)
    return PhaseTimes(r, job.train_time(r), job.sync_s)


def job_planning_times(job: JobSpec, cfg: "IntraConfig") -> PhaseTimes:
    """Phase durations the configuration plans `job` with: its rollout at plan_quantile
    ("worst") or the mean of its seeded planning sample ("mean", core/period_sample.py)."""
    if cfg.plan == "worst":
        return planning_times(job, cfg.plan_quantile)
    r = mean_rollout(job, cfg.plan_chains, cfg.plan_length)
    return PhaseTimes(r, job.train_time(r), job.sync_s)


def group_planning_times(members: Sequence[Member], cfg: "IntraConfig") -> list[PhaseTimes]:
    """Planning durations of a group's members.

    Migration only ever lets the next rollout start earlier, except that the
    migrating job pays the straggler recompute: that overhead is added to the
    planned rollout of every member that may migrate, so the plan stays an
    upper bound of the run ("worst"; "mean": of the sampled run's mean).
    """
    shared = _shared_rollout_nodes(members)
    out = []
    for m in members:
        pt = job_planning_times(m.job, cfg)
        if m.rollout_factor != 1.0:  # elastic rollout parallelism (core/elastic.py); training keeps its time
            pt = PhaseTimes(pt.rollout * m.rollout_factor, pt.train, pt.sync)
        if tail_share(m.job, any(i in shared for i in m.rollout_nodes), cfg) > 0:
            pt = PhaseTimes(pt.rollout + cfg.migration_overhead_s, pt.train, pt.sync)
        out.append(pt)
    return out


def group_period_stats(members: Sequence[Member], n_rollout: int, n_train: int,
                       cfg: "IntraConfig") -> PeriodStats:
    """The sampled period of the members in this cyclic order (core/period_sample.py), rollouts
    scaled and lengthened as in `group_planning_times` (elastic factor, straggler overhead)."""
    shared = _shared_rollout_nodes(members)
    over = [cfg.migration_overhead_s if tail_share(m.job, any(i in shared for i in m.rollout_nodes), cfg) > 0
            else 0.0 for m in members]
    return period_stats([m.job for m in members], [m.rollout_nodes for m in members],
                        [m.train_nodes for m in members], over, n_rollout, n_train, cfg.warm_switch_s,
                        cfg.plan_chains, cfg.plan_length, [m.rollout_factor for m in members])


def _shared_rollout_nodes(members: Sequence[Member]) -> set[int]:
    seen: set[int] = set()
    shared: set[int] = set()
    for m in members:
        for i in m.rollout_nodes:
            (shared if i in seen else seen).add(i)
    return shared


class _Node:
    __slots__ = ("free", "last", "tails")

    def __init__(self) -> None:
        self.free = 0.0
        self.last: str | None = None
        self.tails: list[tuple[float, float]] = []  # (tail end, worker share held)


def earliest_start(node_tails: list[list[tuple[float, float]]], t0: float, cap: float) -> float:
    """Earliest t >= t0 at which every node's tail load (sum of shares still running) is <= cap."""
    t = t0
    for tails in node_tails:
        for end in sorted(e for e, _ in tails):
            if sum(f for e, f in tails if e > t) <= cap + 1e-12:
                break
            t = max(t, end)
    return t


def head_finish(node_tails: list[list[tuple[float, float]]], start: float, work: float) -> float:
    """Time `work` seconds of rollout finish when progress runs at 1 - (max tail load)."""
    if work <= 0:
        return start
    t = start
    for p in sorted({e for tails in node_tails for e, _ in tails if e > start}):
        rate = 1.0 - max(sum(f for e, f in tails if e > t) for tails in node_tails)
        if rate * (p - t) >= work:
            return t + work / rate
        work -= rate * (p - t)
        t = p
    return t + work


def tail_share(job: JobSpec, shared: bool, cfg: "IntraConfig") -> float:
    """Tail fraction migrated: only when migration is on, someone else shares the nodes and the
    job can take it (`JobSpec.cannot`). The planner, both executors' controllers and the sampled
    period all read it, so a job that cannot migrate its tail is planned and priced without it."""
    return job.tail_frac if cfg.migration and shared and TAIL_MIGRATION not in job.cannot else 0.0


def schedule(members: Sequence[Member], n_rollout: int, n_train: int,
             times: Sequence[Sequence[PhaseTimes]], cfg: IntraConfig,
             record: bool = False, slots: Sequence[int] = ()
             ) -> tuple[list[list[float]], list[PhaseRecord]]:
    """Run meta-iterations; times[m][j] are member j's durations in meta-iteration m.

    A meta-iteration runs the members in cyclic order, or with `slots` (the SLO order,
    core/slo_order.py) in that sequence of member indices, where member j may appear
    several times, each time with times[m][j]. Returns each meta-iteration's sync-end
    time per member (of its last iteration there) and, if asked, every phase.
    """
    slots = tuple(slots) or tuple(range(len(members)))
    rnodes = [_Node() for _ in range(n_rollout)]
    tnodes = [_Node() for _ in range(n_train)]
    ready = [0.0] * len(members)
    ends: list[list[float]] = []
    records: list[PhaseRecord] = []
    share = cfg.tail_worker_frac
    pinned = [0] * n_rollout
    for mem in members:
        for i in mem.rollout_nodes:
            pinned[i] += 1
    shared = [c > 1 for c in pinned]
    for m, row in enumerate(times):
        for j in slots:
            mem, pt = members[j], row[j]
            jid = mem.job_id
            tail = tail_share(mem.job, any(shared[i] for i in mem.rollout_nodes), cfg)
            rn = [rnodes[i] for i in mem.rollout_nodes]
            t0 = max([ready[j]] + [n.free for n in rn])
            for n in rn:
                n.tails = [x for x in n.tails if x[0] > t0]
            t0 = earliest_start([n.tails for n in rn], t0, 1.0 - cfg.start_ratio)
            sw = cfg.warm_switch_s if any(n.last not in (None, jid) for n in rn) else 0.0
            head = head_finish([n.tails for n in rn], t0 + sw, (1.0 - tail) * pt.rollout)
            r_end = head + tail * pt.rollout + (cfg.migration_overhead_s if tail > 0 else 0.0)
            for n in rn:
                n.last = jid
                n.free = head
                if tail > 0:
                    n.tails.append((r_end, share))
            tn = [tnodes[i] for i in mem.train_nodes]
            t1 = max([r_end] + [n.free for n in tn])
            sw = cfg.warm_switch_s if any(n.last not in (None, jid) for n in tn) else 0.0
            t_end = t1 + sw + pt.train
            for n in tn:
                n.last = jid
                n.free = t_end
            ready[j] = t_end + pt.sync
            if record:
                records.append(PhaseRecord(jid, "rollout", m, "rollout", mem.rollout_nodes, t0, head, r_end))
                records.append(PhaseRecord(jid, "train", m, "train", mem.train_nodes, t1, t_end, t_end))
        ends.append(list(ready))
    return ends, records


def t_cycle(members: Sequence[Member], times: Sequence[PhaseTimes]) -> float:
    """Natural cycle: the slowest member's solo iteration time."""
    return max(t.rollout + t.train + t.sync for t in times) if members else 0.0


def node_loads(members: Sequence[Member], n_rollout: int, n_train: int, times: Sequence[PhaseTimes]
               ) -> tuple[list[float], list[int], list[float], list[int]]:
    """Per node of each pool: planned seconds per meta-iteration and how many members share it
    (rollout loads, rollout counts, training loads, training counts)."""
    r_load, r_cnt = [0.0] * n_rollout, [0] * n_rollout
    t_load_, t_cnt = [0.0] * n_train, [0] * n_train
    for mem, t in zip(members, times):
        for n in mem.rollout_nodes:
            r_load[n] += t.rollout
            r_cnt[n] += 1
        for n in mem.train_nodes:
            t_load_[n] += t.train
            t_cnt[n] += 1
    return r_load, r_cnt, t_load_, t_cnt


def t_load(members: Sequence[Member], n_rollout: int, n_train: int,
           times: Sequence[PhaseTimes], warm_switch_s: float) -> float:
    """Bottleneck load: the busiest node's work per meta-iteration, switches included."""
    r_load, r_cnt, t_ld, t_cnt = node_loads(members, n_rollout, n_train, times)
    loads = [ld + (warm_switch_s * c if c > 1 else 0.0) for ld, c in zip(r_load + t_ld, r_cnt + t_cnt)]
    return max(loads, default=0.0)


def meta_matrix(members: Sequence[Member], n_rollout: int, n_train: int,
                times: Sequence[PhaseTimes], warm_switch_s: float,
                slots: Sequence[int] = ()) -> np.ndarray:
    """Max-plus matrix A of one steady-state meta-iteration without migration (in the
    order of `slots` if given: a switch on every shared node, so then an upper bound).

    State x = (ready time of each member, free time of each rollout node, of each
    training node); one meta-iteration maps x to A (x) x, with A[i, k] the longest
    path from variable k to variable i (-inf: none). Mirrors `schedule`.
    """
    n = len(members)
    d = n + n_rollout + n_train
    forms = np.full((d, d), -np.inf)
    np.fill_diagonal(forms, 0.0)
    var = [forms[i].copy() for i in range(d)]
    r0, t0 = n, n + n_rollout
    r_count = np.bincount([i for m in members for i in m.rollout_nodes], minlength=n_rollout)
    t_count = np.bincount([i for m in members for i in m.train_nodes], minlength=n_train)
    for j in tuple(slots) or range(n):
        mem, pt = members[j], times[j]
        sw = warm_switch_s if any(r_count[i] > 1 for i in mem.rollout_nodes) else 0.0
        start = var[j]
        for i in mem.rollout_nodes:
            start = np.maximum(start, var[r0 + i])
        r_end = start + sw + pt.rollout
        for i in mem.rollout_nodes:
            var[r0 + i] = r_end
        sw = warm_switch_s if any(t_count[i] > 1 for i in mem.train_nodes) else 0.0
        start = r_end
        for i in mem.train_nodes:
            start = np.maximum(start, var[t0 + i])
        t_end = start + sw + pt.train
        for i in mem.train_nodes:
            var[t0 + i] = t_end
        var[j] = t_end + pt.sync
    return np.array(var)


def max_cycle_mean(a: np.ndarray) -> float:
    """Karp's maximum cycle mean of a max-plus matrix: its asymptotic growth rate per step."""
    d = a.shape[0]
    walks = np.empty((d + 1, d))  # walks[k, v]: heaviest k-step walk ending at v (from anywhere)
    walks[0] = 0.0
    for k in range(d):
        walks[k + 1] = np.max(a + walks[k][None, :], axis=1)
    last = walks[d]
    reach = last > -np.inf
    if not reach.any():
        return float("-inf")
    # Karp: max over v of min over k of (D_d(v) - D_k(v)) / (d - k); a k with no walk (-inf)
    # gives +inf and so drops out of the min, as in the scalar form (one array op per step).
    with np.errstate(invalid="ignore"):
        means = (last[None, reach] - walks[:d, reach]) / (d - np.arange(d))[:, None]
    return float(np.max(np.min(means, axis=0)))


def period(members: Sequence[Member], n_rollout: int, n_train: int,
           times: Sequence[PhaseTimes], cfg: IntraConfig, slots: Sequence[int] = ()) -> float:
    """Exact steady-state meta-iteration time for fixed durations (no migration).

    Every member runs once per meta-iteration (as often as it appears in `slots` if
    given), so this over that count is each member's iteration time in the long run.
    """
    if not members:
        return 0.0
    return max_cycle_mean(meta_matrix(members, n_rollout, n_train, times, cfg.warm_switch_s, slots))


def _lower_bound(members: Sequence[Member], n_rollout: int, n_train: int,
                 times: Sequence[PhaseTimes], cfg: IntraConfig) -> float:
    return max(t_cycle(members, times), t_load(members, n_rollout, n_train, times, cfg.warm_switch_s))


def best_order(members: Sequence[Member], n_rollout: int, n_train: int,
               times: Sequence[PhaseTimes], cfg: IntraConfig) -> tuple[tuple[int, ...], float]:
    """The cyclic order (indices into members) with the shortest period, and that period.

    Orders are searched only when the given order misses the closed-form bound
    max(T_cycle, T_load) (then it is already optimal) and the group has at most
    cfg.best_order_max members. The paper's Theorem 1 says round-robin reaches
    T_cycle on unsaturated groups; in this exact model that holds for the best
    order of one-node-per-phase members, not for every order (tests show both).
    """
    base = tuple(range(len(members)))
    best = period(members, n_rollout, n_train, times, cfg)
    bound = _lower_bound(members, n_rollout, n_train, times, cfg)
    if best <= bound * (1 + 1e-9) or len(members) > cfg.best_order_max or len(members) < 3:
        return base, best
    for rest in itertools.permutations(base[1:]):
        order = (0,) + rest
        p = period([members[i] for i in order], n_rollout, n_train, [times[i] for i in order], cfg)
        if p < best - 1e-9:
            base, best = order, p
            if best <= bound * (1 + 1e-9):
                break
    return base, best


@functools.lru_cache(maxsize=64)
def _without_migration(cfg: IntraConfig) -> IntraConfig:
    # Built once per configuration: constructing (and validating) one per plan was a
    # third of a placement decision's time.
    return IntraConfig(**{**cfg.__dict__, "migration": False})


# plan_group's answers by composition: a pure function of (members, node counts, config,
# reorder), asked again and again for the same candidate (every departure re-tries the same
# moves into unchanged groups; docs/decisions/admission-by-mean.md counts the repeats).
_PLANS: dict[tuple, tuple[tuple[Member, ...], GroupShape]] = {}
_PLANS_MAX = 100_000  # entries (~0.7 KB each for two members); cleared whole when full


def plan_group(group: Group, cfg: IntraConfig, reorder: bool = True) -> Group:
    """Attach a group's planning shape, first moving it to its best cyclic order if asked."""
    if not group.members:
        return Group(group.group_id, group.n_rollout, group.n_train, (), None)
    key = (group.members, group.n_rollout, group.n_train, cfg, reorder)
    hit = _PLANS.get(key)
    if hit is None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        hit = _PLANS[key] = _plan(group.members, group.n_rollout, group.n_train, cfg, reorder)
    return Group(group.group_id, group.n_rollout, group.n_train, hit[0], hit[1])


def _plan(members: tuple[Member, ...], n_rollout: int, n_train: int, cfg: IntraConfig,
          reorder: bool) -> tuple[tuple[Member, ...], GroupShape]:
    """The members in their planned cyclic order and the group's planning shape."""
    times = group_planning_times(members, cfg)
    # Planning is conservative: no migration credit, worst-case durations.
    plan_cfg = _without_migration(cfg)
    if cfg.plan == "mean" and (not reorder or len(members) < 3):
        order, per = tuple(range(len(members))), 0.0  # no order to choose: the sample gives the period
    elif reorder:
        order, per = best_order(members, n_rollout, n_train, times, plan_cfg)
    else:
        order, per = tuple(range(len(members))), period(members, n_rollout, n_train, times, plan_cfg)
    members = tuple(members[i] for i in order)
    times = [times[i] for i in order]
    if cfg.plan == "mean":  # the sampled mean period in the chosen order (core/period_sample.py)
        per = group_period_stats(members, n_rollout, n_train, cfg).mean
    slots: tuple[int, ...] = ()
    if cfg.order == "slo":  # a tight member may run more often (core/slo_order.py)
        slots, per = choose_slots(members, times, plan_cfg, per,
                                  lambda seq: period(members, n_rollout, n_train, times, plan_cfg, seq))
    shape = GroupShape(
        period_s=per,
        t_cycle_s=t_cycle(members, times),
        t_load_s=t_load(members, n_rollout, n_train, times, cfg.warm_switch_s),
        slots=slots,
    )
    return members, shape
