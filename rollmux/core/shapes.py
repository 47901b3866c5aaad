"""Flexible group shapes (issue 14, item 4): training scaling and elastic rollout parallelism.

Algorithm 1 (core/inter_group.py) lets a job join a group only on the group's existing
training nodes and on exactly its nominal number of rollout nodes. Two switches relax that:

* **Training scaling** (`train_scaling`): a job that needs more training nodes than a group
  has joins by adding the missing ones (the group's training nodes 0..n_train-1 are shared as
  before, the added ones hold only the newcomer, so residency there always holds). Priced like
  rollout scaling: Δ is the price of every added node, rollout and training (Case.TRAIN_SCALING).
* **Elastic rollout parallelism** (`elastic_rollout`): a job may roll out on fewer or more
  rollout nodes than nominal, its rollout time scaled by the model of core/elastic.py.

With either on, the policy's joined placement (`place`) enumerates every option: each candidate
group x rollout-node count x new rollout nodes (x the training nodes it must add). Options are
tried in increasing Δ, nominal shape before elastic ones at equal Δ (then more nodes before
fewer), and the first whose exact schedule keeps every member within its SLO wins. For an
arrival, a new group on fewer rollout nodes than nominal is an option too, valid when the job's
own planned cycle meets its period budget; it comes after every joined option, as an isolated
group does in Algorithm 1, and the nominal isolated group stays the always-valid fallback.
The index's exclusion stays sound: it is asked with the job's training need taken as one node
when training scaling may add the rest and with the newcomer at its fastest shape.

With stretch pricing (`_cheapest`) under the mean plan, an exact check is a sampled schedule
(core/admission.py), and at 10,000 active jobs ~80 options a decision pass every closed-form
bound and most fail only that check. So the search goes through the options by closed-form
headroom instead (a lower bound of the planned period over the budget, `_by_headroom`) and
runs at most EXACT_TRIES exact checks; a group it never checked is refused as `untried`
(core/why.py) if the job ends up alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rollmux.core.config import ShapesConfig
from rollmux.core.elastic import node_counts, rollout_factor
from rollmux.core.group import Group, Member
from rollmux.core.group_index import MARGIN
from rollmux.core.intra_group import (
    PhaseTimes,
    group_planning_times,
    plan_group,
    t_cycle,
    t_load,
)
from rollmux.core.marginal import plan_added_cost
from rollmux.core.placement import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.why import Refusal

if TYPE_CHECKING:
    from rollmux.core.inter_group import RollMuxPlacement, _Refusals

_ISOLATED = 1 << 30   # an option's position for a new group: after every joined one at equal Δ
# Stretch pricing compares at most this many valid options per placement (`_cheapest`).
STRETCH_TRIES = 8
# Under the mean plan it runs at most this many exact SLO checks (a sampled schedule each),
# the options with the most closed-form headroom first (`_by_headroom`).
EXACT_TRIES = 12


def isolated_shape(group_id: int, job: JobSpec, cluster: ClusterSpec, nodes: int) -> Group:
    """A new group for `job` alone on `nodes` rollout nodes (unplanned)."""
    k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    kt = cluster.pools.train.nodes_for(job.train_gpus)
    member = Member(job, tuple(range(nodes)), tuple(range(kt)), rollout_factor(job, k0, nodes))
    return Group(group_id, nodes, kt, (member,))


def pin_shape(group: Group, job: JobSpec, cluster: ClusterSpec, nodes: int, factor: float, new_r: int,
              new_t: int, node_order: list[int]) -> Group | None:
    """`group` with `job` appended on `nodes` rollout nodes (`new_r` of them fresh, the rest the
    first of `node_order` with room) and its training nodes (`new_t` fresh ones appended);
    None if residency rules it out."""
    kt = cluster.pools.train.nodes_for(job.train_gpus)
    t_used = group.train_gb
    t_cap = cluster.pools.train.host_gb_per_node
    if any(t_used[n] + job.host_gb.train > t_cap + 1e-9 for n in range(min(kt, group.n_train))):
        return None  # (an added training node holds only the newcomer: it always fits)
    r_used = group.rollout_host_gb()
    r_cap = cluster.pools.rollout.host_gb_per_node
    fits = [n for n in node_order if r_used[n] + job.host_gb.rollout <= r_cap + 1e-9]
    if len(fits) < nodes - new_r:
        return None
    pins = tuple(sorted(fits[:nodes - new_r])) + tuple(range(group.n_rollout, group.n_rollout + new_r))
    member = Member(job, pins, tuple(range(kt)), factor)
    return Group(group.group_id, group.n_rollout + new_r, group.n_train + new_t, group.members + (member,))


@dataclass
class ShapeStats:
    """What the flexible placement chose, per arrival it placed (for the benchmark)."""

    train_scaled: int = 0      # joined a group by adding training nodes
    fewer_nodes: int = 0       # rolled out on fewer rollout nodes than nominal (joined)
    more_nodes: int = 0        # on more (joined)
    isolated_fewer: int = 0    # an isolated group with fewer rollout nodes than nominal

    def count(self, plan: PlacementPlan, k0: int) -> None:
        """Note one arrival's plan."""
        m = plan.group.member(plan.job_id)
        k = len(m.rollout_nodes)
        if plan.case == Case.ISOLATED:
            self.isolated_fewer += k < k0
            return
        self.train_scaled += plan.added_train_nodes > 0
        self.fewer_nodes += k < k0
        self.more_nodes += k > k0


def place(policy: "RollMuxPlacement", job: JobSpec, view: ClusterView, why: "_Refusals | None",
          joined_only: bool) -> PlacementPlan | None:
    """The cheapest valid plan over every shape option (module docstring); with `joined_only`
    only plans into existing groups (None if there is none)."""
    from rollmux.core.inter_group import _first_refusal, joining_budget, period_budget

    cfg, shapes, cluster = policy.cfg, policy.shapes, view.cluster
    pools = cluster.pools
    pr, pt = pools.rollout.node_price_per_hour, pools.train.node_price_per_hour
    k0, kt = pools.rollout.nodes_for(job.rollout_gpus), pools.train.nodes_for(job.train_gpus)
    slack_new = period_budget(job, view.progress)
    own = group_planning_times((Member(job, (), ()),), cfg)[0]  # the newcomer's planning times
    # (either plan: the "mean" plan's sampled schedule scales each draw by the factor too)
    counts = list(node_counts(k0, shapes.elastic_rollout, shapes.min_share, shapes.max_scale))
    factor = {k: rollout_factor(job, k0, k) for k in counts}
    own_cycle = {k: own.rollout * f + own.train + own.sync for k, f in factor.items()}
    least = PhaseTimes(own.rollout * min(factor.values()), own.train, own.sync)
    free_r, free_t = view.free_rollout_nodes, view.free_train_nodes
    iso_delta = k0 * pr + kt * pt

    # Candidate groups: the index's sound exclusion (training need taken as one node when
    # training scaling may add the rest; the newcomer at its fastest shape), then the
    # structural checks of `_candidates` for this job's shape.
    t_cap, need = pools.train.host_gb_per_node + 1e-9, job.host_gb.train
    pool = policy._indexed(job, view, slack_new, least, 1 if shapes.train_scaling else kt, t_cap, why)
    if pool is None:
        pool = [(g, float("-inf"), float("-inf")) for g in view.groups]
    max_size, prune = view.max_group_size, policy.prune_saturated
    options = []  # (Δ, added training nodes, elastic rank, new rollout nodes, position, ...)
    cands, raw = [], []
    for g, fixed_lb, rollout_lb in pool:
        shape = g.shape
        kt_in = min(kt, g.n_train) if shapes.train_scaling else kt
        if (len(g.members) >= max_size or shape is None or shape.t_cycle_s > slack_new
                or kt_in > g.n_train or (prune and shape.status != "unsaturated")):
            if why is not None:
                why.exact[g.group_id] = (_first_refusal(g, max_size, prune, kt_in, need, t_cap), g)
            continue
        if kt_in and any(u + need > t_cap for u in g.train_gb[:kt_in]):
            if why is not None:
                why.exact[g.group_id] = (Refusal.RESIDENCY, g)
            continue
        slack = min([joining_budget(job, view, g.group_id, slack_new)]
                    + [period_budget(m.job, view.progress) for m in g.members])
        if fixed_lb > slack * (1 + 1e-9) * (1 + MARGIN):
            if why is not None:
                why.exact[g.group_id] = (None, g)
            continue
        pos = len(cands)
        cands.append((g, slack, rollout_lb - least.rollout))  # (the least-loaded node's bound)
        raw.append((fixed_lb, rollout_lb))
        new_t = max(0, kt - g.n_train)
        if new_t and free_t is not None and new_t > free_t:
            continue
        for k in counts:
            for new_r in range(max(0, k - g.n_rollout), k + 1):
                if free_r is not None and new_r > free_r:
                    break
                delta = new_r * pr + new_t * pt
                if delta < iso_delta:
                    options.append((delta, new_t, k != k0, -k, new_r, pos, k))
    options.sort()
    if not joined_only:  # fewer-node isolated groups, valid only within the job's own budget
        for k in counts:
            if k < k0 and own_cycle[k] <= slack_new * (1 + 1e-9):
                options.append((k * pr + kt * pt, 0, True, -k, k, _ISOLATED, k))
        options.sort()
    if policy.stretch_pricing:
        search = _by_headroom(options, cands, raw, cfg, least, own, factor, own_cycle, slack_new) \
            if cfg.plan == "mean" else None
        plan = _cheapest(policy, job, view, why, joined_only, options, cands, own, factor, own_cycle, search)
        return None if plan is None else _counted(policy, plan, k0, joined_only)
    for delta, new_t, _, _, new_r, pos, k in options:
        plan = _option_plan(policy, job, view, why, cands, own, factor, own_cycle, (new_t, new_r, pos, k))
        if plan is not None:
            return _counted(policy, plan, k0, joined_only)
    return None  # (the caller falls back to the nominal isolated group)


def _option_plan(policy: "RollMuxPlacement", job: JobSpec, view: ClusterView, why: "_Refusals | None",
                 cands: list, own: PhaseTimes, factor: dict, own_cycle: dict,
                 option: tuple[int, int, int, int], explain: bool = True,
                 tries: list[int] | None = None, exact: bool = True) -> PlacementPlan | None:
    """The plan of one option (added training nodes, new rollout nodes, candidate position or
    _ISOLATED, rollout nodes), or None when it is not valid (a refusal is noted in `why`); an
    isolated plan carries `why`'s result only if `explain` (`_cheapest` builds the kept one's).
    `tries[0]` counts the exact SLO checks run; without `exact`, an option that passes every
    cheaper check is noted `untried` instead of checked."""
    new_t, new_r, pos, k = option
    cluster = view.cluster
    if pos == _ISOLATED:
        kt = cluster.pools.train.nodes_for(job.train_gpus)
        free_r, free_t = view.free_rollout_nodes, view.free_train_nodes
        if (free_r is not None and k > free_r) or (free_t is not None and kt > free_t):
            return None
        if not exact:
            return None
        if tries is not None:
            tries[0] += 1
        g = plan_group(isolated_shape(view.next_group_id, job, cluster, k), policy.cfg)
        if not _admits(g, view, policy.cfg):
            return None  # ("mean": its own confident mean on fewer nodes breaks its budget)
        return PlacementPlan(job.job_id, Case.ISOLATED, g, k, kt, g.cost_per_hour(cluster),
                             why.result() if why is not None and explain else None)
    g, slack, rollout_min = cands[pos]
    if own_cycle[k] > slack:
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None  # the newcomer alone on this shape already breaks someone's SLO
    if new_r < k and rollout_min + own.rollout * factor[k] > slack * (1 + 1e-9) * (1 + MARGIN):
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None  # an existing rollout node takes it: already over budget there
    return _try(policy, g, job, k, factor[k], new_r, new_t, slack, view, why, tries, exact)


def _cheapest(policy: "RollMuxPlacement", job: JobSpec, view: ClusterView, why: "_Refusals | None",
              joined_only: bool, options: list, cands: list, own: PhaseTimes, factor: dict,
              own_cycle: dict, search: list | None = None) -> PlacementPlan | None:
    """Stretch pricing (core/marginal.py): of the valid options, the one that adds least per
    iteration; for an arrival, None when the nominal isolated group adds least.

    Options come in Δ order and an option adds at least Δ x its shortest possible period, so
    the search stops at the first whose Δ alone costs more than the best so far, or once a
    valid one adds nothing (a join into bubbles: nothing is cheaper); it also stops after
    STRETCH_TRIES valid options (a bounded search: a large cluster may have many equal-Δ
    candidates). Only valid options are counted, and the group index excludes only invalid
    ones, so the answer is the same with the index and without it. Groups that would have
    taken the job at a higher cost are refused as `costlier` if the job ends up alone.

    `search` (the mean plan, `_by_headroom`): the options in that order instead, skipping
    those whose Δ alone costs too much, and at most EXACT_TRIES exact checks. Those checks are
    the options that pass every closed-form bound, which the index only ever shortens the way
    to (each of its exclusions is such a bound), so this too gives the same answer with and
    without the index."""
    from rollmux.core.inter_group import isolated_plan

    best, best_cost, valid = None, math.inf, 0
    if not joined_only:
        iso = isolated_plan(job, view, policy.cfg)
        if iso is not None:
            best_cost = plan_added_cost(iso, view) * (1 - 1e-9)  # an option must beat it strictly
    dearer: dict[int, Group] = {}  # groups a valid option would have taken, at a higher cost
    shortest = own.train + own.sync + own.rollout * min(factor.values())
    tries = [0]
    seen: dict[tuple, object] = {}  # (search) option -> its plan, or the refusal it noted
    rest = len(options)
    for i, (delta, new_t, _, _, new_r, pos, k) in enumerate(options if search is None else search):
        if valid >= STRETCH_TRIES or best_cost <= 0 or (search is not None and tries[0] >= EXACT_TRIES):
            rest = i
            break
        if delta * shortest / 3600 >= best_cost:
            if search is None:
                rest = i
                break
            continue  # (in headroom order a later option may cost less)
        plan = _option_plan(policy, job, view, why, cands, own, factor, own_cycle, (new_t, new_r, pos, k),
                            explain=False, tries=tries)
        if search is not None and pos != _ISOLATED:
            gid = cands[pos][0].group_id
            seen[(new_t, new_r, pos, k)] = plan if plan is not None else (why.exact.get(gid) if why else None)
        if plan is None:
            continue
        valid += 1
        cost = plan_added_cost(plan, view)
        if cost < best_cost:
            best, best_cost = plan, cost
        if pos != _ISOLATED:
            dearer[plan.group.group_id] = cands[pos][0]
    if why is not None and (best is None or best.case == Case.ISOLATED):
        _explain(policy, job, view, why, options[rest:] if search is None else options, cands, own, factor,
                 own_cycle, dearer, None if search is None else seen)
        if best is not None:  # a fewer-node group of its own: its why, with these
            best = PlacementPlan(best.job_id, best.case, best.group, best.added_rollout_nodes,
                                 best.added_train_nodes, best.delta_cost_per_hour, why.result())
    return best


def _explain(policy: "RollMuxPlacement", job: JobSpec, view: ClusterView, why: "_Refusals", options: list,
             cands: list, own: PhaseTimes, factor: dict, own_cycle: dict, dearer: dict[int, Group],
             seen: dict | None) -> None:
    """Every group's reason for a job left alone. The options the search skipped are tried too
    (as Δ pricing tries every option of an isolated job); a valid one was costlier. With `seen`
    (the bounded search), every option is gone through again in Δ order, so a group keeps its
    most-scaled try's reason as in Δ order: what the search saw is replayed, and an option it
    never checked exactly gets every cheaper check and then `untried`."""
    for _, new_t, _, _, new_r, pos, k in options:
        if pos == _ISOLATED:
            continue
        g, option = cands[pos][0], (new_t, new_r, pos, k)
        if seen is not None and option in seen:
            got = seen[option]
            if isinstance(got, PlacementPlan):
                dearer[g.group_id] = g
            elif got is not None:
                why.exact[g.group_id] = got
        elif _option_plan(policy, job, view, why, cands, own, factor, own_cycle, option,
                          exact=seen is None) is not None:
            dearer[g.group_id] = g
    for gid, g in dearer.items():  # the most-scaled try of each was costlier, not refused
        why.exact[gid] = (Refusal.COSTLIER, g)


def _by_headroom(options: list, cands: list, raw: list, cfg, least: PhaseTimes, own: PhaseTimes,
                 factor: dict, own_cycle: dict, slack_new: float) -> list:
    """The options by closed-form headroom, most first: a lower bound of the period each would
    plan over the budget it must meet (the group index's bounds, or the same ones computed from
    the group where the index gave none, so the order is the same with the index and without).

    Measured on 2,000 placed paper jobs: the valid options under the mean plan come first in
    this order, and the cheapest valid one within the first six exact checks (benchmarks/
    README.md, *SLO admission by the mean*)."""
    from rollmux.core.group_index import group_bounds

    bounds = []
    for (g, _, _), (fixed, roll) in zip(cands, raw):
        if fixed == -math.inf or roll == -math.inf:  # no index, or a tentatively changed group
            b = group_bounds(g, cfg)
            fixed, roll = max(b.lb_s, b.train0_sw + least.train), b.rollout_min_sw + least.rollout
        bounds.append((fixed, roll - least.rollout))

    # One vectorized pass (a placement at 10,000 jobs weighs ~800 options): the same doubles
    # as the scalar form, in the same lexicographic order.
    col = np.array(options, float).reshape(-1, 7).T  # Δ, new_t, elastic, -k, new_r, pos, k
    iso = col[5] == _ISOLATED
    pos = np.where(iso, 0, col[5]).astype(np.intp)
    k = col[6].astype(np.intp)
    fixed, roll_min = (np.array([b[i] for b in bounds], float) for i in (0, 1))
    slack = np.array([c[1] for c in cands], float)
    own_k = np.array([own_cycle.get(int(x), np.inf) for x in range(int(k.max(initial=0)) + 1)])
    fac_k = np.array([factor.get(int(x), np.nan) for x in range(int(k.max(initial=0)) + 1)])
    if len(cands):
        lb = np.maximum(fixed[pos], own_k[k])
        # (one that takes an existing rollout node takes the least loaded at best)
        lb = np.where(col[4] < col[6], np.maximum(lb, roll_min[pos] + own.rollout * fac_k[k]), lb)
        ratio = np.where(iso, own_k[k] / slack_new, lb / slack[pos])
        gid = np.where(iso, np.inf, np.array([c[0].group_id for c in cands], float)[pos])
    else:
        ratio, gid = own_k[k] / slack_new, np.full(len(options), np.inf)
    order = np.lexsort((col[6], gid, col[4], col[3], col[2], col[1], col[0], ratio))
    return [options[i] for i in order.tolist()]


def _counted(policy: "RollMuxPlacement", plan: PlacementPlan, k0: int, joined_only: bool) -> PlacementPlan:
    if not joined_only:
        policy.shape_stats.count(plan, k0)
    return plan


def _admits(g: Group, view: ClusterView, cfg) -> bool:
    """The policy's admission beyond the planned period, as `RollMuxPlacement._try` asks it: the
    "mean" plan's and the SLO order's per-member test (`group_fits`)."""
    from rollmux.core.inter_group import group_fits

    if getattr(cfg, "plan", "worst") != "mean" and getattr(cfg, "order", "rr") != "slo":
        return True
    return group_fits(g, view.progress, cfg)


def _try(policy: "RollMuxPlacement", g: Group, job: JobSpec, k: int, factor: float, new_r: int, new_t: int,
         slack: float, view: ClusterView, why: "_Refusals | None", tries: list[int] | None = None,
         exact: bool = True) -> PlacementPlan | None:
    """`job` in `g` on this shape, if every member's SLO holds under the exact schedule
    (`tries`, `exact`: as in `_option_plan`)."""
    from rollmux.core.inter_group import joined_plan, rollout_node_loads

    cfg = policy.cfg
    loads = rollout_node_loads(g, cfg.plan_quantile)
    order = sorted(range(g.n_rollout), key=lambda n: (loads[n], n))
    cand = pin_shape(g, job, view.cluster, k, factor, new_r, new_t, order)
    if cand is None:
        if why is not None:
            why.exact[g.group_id] = (Refusal.RESIDENCY, g)
        return None
    times = group_planning_times(cand.members, cfg)
    bound = max(t_cycle(cand.members, times),
                t_load(cand.members, cand.n_rollout, cand.n_train, times, cfg.warm_switch_s))
    if bound > slack * (1 + 1e-9):
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None
    if not exact:
        if why is not None:
            why.exact[g.group_id] = (Refusal.UNTRIED, g)
        return None
    if tries is not None:
        tries[0] += 1
    cand = plan_group(cand, cfg)
    if cand.shape.period_s > slack * (1 + 1e-9) or not _admits(cand, view, cfg):
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None
    plan = joined_plan(g, cand, new_r, job, view)
    if new_t:
        pools = view.cluster.pools
        delta = new_r * pools.rollout.node_price_per_hour + new_t * pools.train.node_price_per_hour
        plan = PlacementPlan(job.job_id, Case.TRAIN_SCALING, cand, new_r, new_t, delta)
    return plan


def least_cycles(jobs, own_sum, own_train, cluster: ClusterSpec, cfg: ShapesConfig):
    """Per job, its planned rollout + train + sync (`own_sum`) at its fastest allowed shape
    (join_matrix's necessary condition stays necessary with elastic rollout)."""
    import numpy as np

    out = np.array(own_sum, float)
    if not cfg.elastic_rollout:
        return out
    for i, job in enumerate(jobs):
        k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
        f = min(rollout_factor(job, k0, k) for k in node_counts(k0, True, cfg.min_share, cfg.max_scale))
        rollout = own_sum[i] - own_train[i] - job.sync_s
        out[i] = own_sum[i] - (1.0 - f) * rollout
    return out
