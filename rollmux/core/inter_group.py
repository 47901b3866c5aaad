"""Inter-group scheduler (DESIGN §5, the paper's Algorithm 1): cost-minimizing placement.

For each arrival, every group that is neither saturated/full nor at the max
size is tried with direct packing (Δ = 0), then rollout scaling (Δ = price of
the added rollout nodes); isolated provisioning is the always-valid fallback.
A candidate is valid when residency holds and, under the planning estimate
(worst-case rollout by default), every member's co-execution iteration time
stays within its SLO: planned period <= min_j slo_j * solo_iter_j ("worst"),
or every member's sampled mean period plus a confidence term over its remaining
iterations within its budget ("mean", core/admission.py: `group_fits`).
Candidates are tried in order of increasing Δ, so the first valid one is the
cheapest and ties go to the first found. An isolated plan says why no group took the
job (`PlacementPlan.why`, core/why.py): the checks below note each refusal as they make it.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from rollmux.core.admission import admits
from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group, Member, isolated_group
from rollmux.core.group_index import MARGIN, JobNeeds, group_bounds, progress_rows
from rollmux.core.intra_group import (
    PhaseTimes,
    group_period_stats,
    group_planning_times,
    job_planning_times,
    plan_group,
    t_cycle,
    t_load,
)

NO_BOUND = float("-inf")  # a candidate without index bounds: only the exact checks decide
from rollmux.core.colocate import choose, iteration_cost
from rollmux.core.marginal import plan_added_cost
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.shapes import ShapeStats, least_cycles
from rollmux.core.shapes import place as place_shapes
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.why import CODE, REFUSALS, PlacementWhy, Refusal


def rollout_node_loads(group: Group, quantile: float) -> list[float]:
    """Planned rollout seconds per meta-iteration on each of the group's rollout nodes."""
    loads = [0.0] * group.n_rollout
    for m in group.members:
        r = m.job.rollout_s.quantile(quantile) * m.rollout_factor
        for n in m.rollout_nodes:
            loads[n] += r
    return loads


def pin_into(group: Group, job: JobSpec, cluster: ClusterSpec, new_nodes: int,
             node_order: list[int]) -> Group | None:
    """`group` with `job` appended, pinned to existing nodes taken in `node_order` plus
    `new_nodes` fresh rollout nodes; None if residency or training nodes rule it out."""
    k = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    kt = cluster.pools.train.nodes_for(job.train_gpus)
    if new_nodes > k or kt > group.n_train:
        return None
    t_used = group.train_host_gb()
    t_cap = cluster.pools.train.host_gb_per_node
    if any(t_used[n] + job.host_gb.train > t_cap + 1e-9 for n in range(kt)):
        return None
    r_used = group.rollout_host_gb()
    r_cap = cluster.pools.rollout.host_gb_per_node
    fits = [n for n in node_order if r_used[n] + job.host_gb.rollout <= r_cap + 1e-9]
    if len(fits) < k - new_nodes:
        return None
    pins = tuple(sorted(fits[:k - new_nodes])) + tuple(range(group.n_rollout, group.n_rollout + new_nodes))
    member = Member(job, pins, tuple(range(kt)))
    return Group(group.group_id, group.n_rollout + new_nodes, group.n_train, group.members + (member,))


def period_budget(job: JobSpec, progress: Mapping[str, tuple[int, float]], transient: int = 1) -> float:
    """Longest meta-iteration a job can accept from now on and still meet its SLO.

    Its mean iteration time must stay within slo * solo_iter_s over its whole
    life: what it already spent counts, and a membership change may cost up to
    one extra meta-iteration of transient, so the remaining iterations plus one
    must fit in what is left of its time budget. Under the SLO order a member that
    runs `transient` times per meta-iteration counts that many iterations for it.
    """
    done, elapsed = progress.get(job.job_id, (0, 0.0))
    budget = job.slo * job.solo_iter_s * job.iterations - elapsed
    # A live job may run past its declared iterations: it then has one to go, whatever its count.
    return budget / (max(job.iterations - done, 0) + transient)


def joining_budget(job: JobSpec, view: ClusterView, group_id: int, slack_new: float) -> float:
    """The newcomer's period budget (`slack_new`, uncharged) in the group: charged with the
    migration stall the group's members still owe (`view.owed_s`), which it waits for too."""
    owed = view.owed_s.get(group_id, 0.0) if view.owed_s else 0.0
    if owed <= 0:
        return slack_new
    done = view.progress.get(job.job_id, (0, 0.0))[0]
    return slack_new - owed / (max(job.iterations - done, 0) + 1)


def group_fits(g: Group, progress: Mapping[str, tuple[int, float]], cfg: IntraConfig) -> bool:
    """The SLO admission test of a planned group: its planned period within every member's
    period budget ("worst"), or every member's confident mean period within its budget over
    its remaining iterations ("mean", core/admission.py)."""
    if cfg.plan == "worst":  # each member's own planned period (they differ under the SLO order)
        slots = g.shape.slots  # (SLO order: a meta-iteration's transient is `rate` of its iterations)
        return all(g.shape.member_period(i) <= period_budget(m.job, progress, slots.count(i) or 1) * (1 + 1e-9)
                   for i, m in enumerate(g.members))
    budgets, remaining = [], []
    for m in g.members:
        budgets.append(period_budget(m.job, progress))
        remaining.append(max(m.job.iterations - progress.get(m.job_id, (0, 0.0))[0], 0) + 1)
    stats = group_period_stats(g.members, g.n_rollout, g.n_train, cfg)
    return admits(stats, budgets, remaining, cfg.plan_z)


def isolated_plan(job: JobSpec, view: ClusterView, cfg: IntraConfig,
                  why: PlacementWhy | None = None) -> PlacementPlan | None:
    """A new group for the job alone, or None if the node caps forbid it; `why`: why no
    existing group took it, if the policy says."""
    g = plan_group(isolated_group(view.next_group_id, job, view.cluster), cfg)
    if ((view.free_rollout_nodes is not None and g.n_rollout > view.free_rollout_nodes)
            or (view.free_train_nodes is not None and g.n_train > view.free_train_nodes)):
        return None
    return PlacementPlan(job.job_id, Case.ISOLATED, g, g.n_rollout, g.n_train, g.cost_per_hour(view.cluster), why)


_SLO = CODE[Refusal.NEWCOMER_SLO]  # an SLO refusal before it is told whose budget binds


class _Refusals:
    """The refusals one `place` call makes, for the isolated plan's `why` (core/why.py).

    The exact checks note each refused group by id with its reason (None: an SLO, whose is
    settled at the end); a later, more scaled try of the same group overwrites it. The index's
    bulk exclusion leaves its arrays here. Both become reasons only if the job ends up isolated."""

    __slots__ = ("slack_new", "progress", "exact", "pruned")

    def __init__(self, slack_new: float, progress: Mapping[str, tuple[int, float]]) -> None:
        self.slack_new, self.progress = slack_new, progress
        self.exact: dict[int, tuple[Refusal | None, Group]] = {}
        # (index, the index's refusal codes per view position, view slots, positions failing
        # the budget pass and whether a member's budget bound is under the newcomer's there,
        # view positions checked exactly instead); None: no index was used.
        self.pruned: tuple | None = None

    def result(self) -> PlacementWhy:
        """Groups refused per reason, the index's exclusions included. An SLO refusal is a
        member's when some member's period budget is tighter than the newcomer's, else the
        newcomer's (the same budgets, so the same answer, with or without the index)."""
        counts = [0] * len(REFUSALS)
        slack_new, progress = self.slack_new, self.progress
        for reason, g in self.exact.values():
            if reason is None:
                tight = any(period_budget(m.job, progress) < slack_new for m in g.members)
                reason = Refusal.MEMBER_SLO if tight else Refusal.NEWCOMER_SLO
            counts[CODE[reason]] += 1
        by_index = 0
        if self.pruned is not None:
            idx, codes, slots, fail_pos, fail_tight, exact_pos = self.pruned  # codes: per view position
            codes = codes.copy()  # (result() may be asked twice)
            slo = np.flatnonzero(codes == _SLO)  # the index's own period bounds broke a budget
            if len(slo):
                tight = idx.budget_bounds(slots[slo], progress) < slack_new
                codes[slo[tight]] = CODE[Refusal.MEMBER_SLO]
            # Passed the index's bounds, not the members' budgets (their bounds, in hand).
            codes[fail_pos] = np.where(fail_tight, CODE[Refusal.MEMBER_SLO], _SLO)
            if exact_pos:
                codes[exact_pos] = -1  # tentatively changed groups: the exact checks noted them
            pruned = np.bincount(codes.astype(np.intp) + 1, minlength=len(REFUSALS) + 1)[1:]
            by_index = int(pruned.sum())
            counts = [c + p for c, p in zip(counts, pruned.tolist())]
        return PlacementWhy(tuple(counts), by_index)


def _first_refusal(g: Group, max_size: int, prune: bool, kt: int, need: float, t_cap: float) -> Refusal | None:
    """The first check of the attribution order (core/why.py) that `g` fails before any
    SLO check; None (an SLO) when it fails only the natural-cycle check."""
    shape = g.shape
    if len(g.members) >= max_size:
        return Refusal.GROUP_SIZE
    if shape is None:
        return Refusal.UNPLANNED
    if prune and shape.status != "unsaturated":
        return Refusal.SATURATED
    if kt > g.n_train:
        return Refusal.TRAIN_SHAPE
    if kt and any(u + need > t_cap for u in g.train_gb[:kt]):
        return Refusal.RESIDENCY
    return None


def joined_plan(group: Group, cand: Group, new_nodes: int, job: JobSpec,
                view: ClusterView) -> PlacementPlan:
    """The plan that turns `group` into `cand` (already planned)."""
    case = Case.DIRECT if new_nodes == 0 else Case.SCALING
    delta = new_nodes * view.cluster.pools.rollout.node_price_per_hour
    return PlacementPlan(job.job_id, case, cand, new_nodes, 0, delta)


def _fit_score(g: Group, slack: float, how: str) -> float:
    """How tightly a candidate group is packed (higher = tighter)."""
    if how == "slo":
        return g.shape.period_s / slack
    return g.shape.t_load_s / g.shape.period_s


class RollMuxPlacement(PlacementPolicy):
    """Algorithm 1 with SLO admission at the worst case (or a quantile), or by the mean with
    confidence (`IntraConfig.plan`, core/admission.py); the search, shapes and co-located mode
    as the configuration sets them. Built by `build_policy` (core/policy.py)."""

    name = "rollmux"
    explains = True  # its isolated plans say why no group took the job (PlacementPlan.why)

    def __init__(self, intra: IntraConfig, config: SchedulerConfig) -> None:
        """`intra`: the group planner's view (`config.intra_for(cluster)`); `config`: the
        search (`placement`), the shapes (`shapes`) and the co-located mode (`colocation`)."""
        self.cfg = intra
        search, colo = config.placement, config.colocation
        # The paper's pruning of saturated/full groups (off: the exact SLO check decides, which
        # also lets rollout scaling relieve a saturated group); `best_fit` ("util" or "slo"):
        # among equal-Δ candidates the tightest instead of the first found (the paper).
        self.prune_saturated, self.best_fit = search.prune_saturated, search.best_fit
        # Stretch pricing (core/marginal.py): the valid option that adds least per iteration,
        # the members' stretch included, instead of the first in Δ order (the paper).
        self.stretch_pricing = search.pricing == "stretch"
        self.shapes = config.shapes  # flexible shapes (core/shapes.py); both off: Algorithm 1
        # The co-located mode (core/colocate.py): chosen when cheaper at the SLO by `colo_margin`.
        self.colocate, self.colo_speed, self.colo_margin = colo.enabled, colo.speed, colo.effective_margin
        # Narrowed co-location (core/colo_model.py `narrowed_gpus`): with elastic rollout, a
        # co-located job may run on fewer training GPUs than its rollout declares.
        self.colo_narrow = colo.narrow and config.shapes.elastic_rollout
        self._features: dict[str, tuple[JobSpec, tuple]] = {}  # join_matrix's per-job constants
        self.shape_stats = ShapeStats()  # what the flexible shapes chose, per placed arrival

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The cheapest valid placement for `job`; isolated if nothing else fits (the plan
        then says why each group refused it)."""
        why = _Refusals(period_budget(job, view.progress), view.progress)
        plan = self._place_joined(job, view, why)
        if self.colocate:  # the co-located mode against the disaggregated answer (core/colocate.py)
            cost = (lambda p: plan_added_cost(p, view)) if self.stretch_pricing else iteration_cost
            return choose(job, view, plan, lambda: isolated_plan(job, view, self.cfg, why.result()),
                          self.cfg, self.colo_speed, self.colo_margin, cost, narrow=self.colo_narrow)
        return plan if plan is not None else isolated_plan(job, view, self.cfg, why.result())

    def place_joined(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The cheapest valid placement of `job` into an existing group; None if there is none.

        Departure-time re-placement only wants these (an isolated plan makes a move
        pointless), so it skips planning the isolated group. A subclass that overrides
        `place` should override this too."""
        if self.shapes.on or self.stretch_pricing:
            return place_shapes(self, job, view, None, joined_only=True)
        return self._place_joined(job, view, None)

    def _place_joined(self, job: JobSpec, view: ClusterView, why: _Refusals | None) -> PlacementPlan | None:
        """`place_joined`, noting every refusal in `why` when given."""
        if self.shapes.on or self.stretch_pricing:  # (only `place` gets here: a fewer-node new group is an option too)
            return place_shapes(self, job, view, why, joined_only=False)
        q = self.cfg.plan_quantile
        k = view.cluster.pools.rollout.nodes_for(job.rollout_gpus)
        slack_new = period_budget(job, view.progress)  # a migrating job brings its past
        own = job_planning_times(job, self.cfg)
        own_cycle = own.rollout + own.train + own.sync
        candidates = self._candidates(job, view, slack_new, own, why)
        for new_nodes in range(0, k + 1):
            if view.free_rollout_nodes is not None and new_nodes > view.free_rollout_nodes:
                break
            best, best_fit = None, -1.0
            for g, slack, rollout_lb in candidates:
                if own_cycle > slack:
                    if why is not None:
                        why.exact[g.group_id] = (None, g)
                    continue  # the newcomer alone already breaks someone's SLO
                if new_nodes < k and rollout_lb > slack * (1 + 1e-9) * (1 + MARGIN):
                    if why is not None:
                        why.exact[g.group_id] = (None, g)
                    continue  # an existing rollout node takes it: already over budget there
                plan = self._try(g, job, new_nodes, slack, view, q, why)
                if plan is None:
                    continue
                if not self.best_fit:
                    return plan  # the paper: ties go to the first candidate found
                fit = _fit_score(plan.group, slack, self.best_fit)
                if fit > best_fit + 1e-12:
                    best, best_fit = plan, fit
            if best is not None:
                return best
        return None

    def could_join(self, job: JobSpec, g: Group, view: ClusterView) -> bool:
        """Cheap necessary condition for `place_joined` to put `job` into `g`: False means no
        plan of this policy puts it there, with `view`'s progress or any later charge to it
        (`join_matrix` for one pair)."""
        return bool(self.join_matrix((g,), (job,), view)[0, 0])

    def join_matrix(self, targets: Sequence[Group], jobs: Sequence[JobSpec], view: ClusterView) -> np.ndarray:
        """`could_join(jobs[i], targets[k], view)` for every pair, as a boolean matrix.

        The departure pass asks it about every member of every small group at once, to find
        the small groups a departure can affect. The SLO budgets are taken uncharged (a
        migration charge only lowers them) and the period only through closed-form lower
        bounds, so it may say True where the exact check refuses. What depends on a target is
        computed once, what depends on a job is vectorized (the budgets read through one
        `progress_rows` call)."""
        out = np.zeros((len(jobs), len(targets)), bool)
        if not jobs:
            return out
        train = view.cluster.pools.train
        t_cap = train.host_gb_per_node + 1e-9
        kt, host, own_sum, own_train, S, iters = self._join_features(jobs, train)
        if self.shapes.elastic_rollout:
            own_sum = least_cycles(jobs, own_sum, own_train, view.cluster, self.shapes)
        done, elapsed = np.nan_to_num(progress_rows(view.progress, [j.job_id for j in jobs]), nan=0.0).T
        slack = (S - elapsed) / (np.maximum(iters - done, 0.0) + 1.0)
        slo = self.cfg.order == "slo"  # bounds as in `_candidates`
        for k, g in enumerate(targets):
            shape = g.shape
            if len(g.members) >= view.max_group_size or shape is None or (
                    self.prune_saturated and shape.status != "unsaturated"):
                continue
            members_slack = (max if slo else min)((period_budget(m.job, view.progress) for m in g.members),
                                                  default=-math.inf if slo else math.inf)
            b = group_bounds(g, self.cfg)
            prefix = np.maximum.accumulate(np.array((0.0,) + tuple(g.train_gb[:g.n_train]), float))
            fits = (kt <= g.n_train) | self.shapes.train_scaling
            k_of = np.minimum(kt, g.n_train).astype(int)
            least = (np.maximum if slo else np.minimum)(slack, members_slack)  # (slo: the loosest)
            out[:, k] = (fits & (shape.t_cycle_s <= (least if slo else slack))
                         & ((kt == 0) | (prefix[k_of] + host <= t_cap)) & (own_sum <= (slack if slo else least))
                         & (np.maximum(b.lb_s, b.train0_sw + own_train) <= least * (1 + 1e-9) * (1 + MARGIN)))
        return out

    def _join_features(self, jobs: Sequence[JobSpec], train) -> tuple[np.ndarray, ...]:
        """Per job: training nodes, training host GB, planned rollout + train + sync, planned
        training, SLO time budget and iterations (cached per job spec)."""
        cache = self._features
        rows = []
        for job in jobs:
            hit = cache.get(job.job_id)
            if hit is None or hit[0] is not job:
                own = job_planning_times(job, self.cfg)
                hit = cache[job.job_id] = (job, (train.nodes_for(job.train_gpus), job.host_gb.train,
                                                 own.rollout + own.train + own.sync, own.train,
                                                 job.slo * job.solo_iter_s * job.iterations, job.iterations))
            rows.append(hit[1])
        return tuple(np.array(rows, float).T)

    def _candidates(self, job: JobSpec, view: ClusterView, slack_new: float, own: PhaseTimes,
                    why: _Refusals | None = None) -> list[tuple[Group, float, float]]:
        """Groups `job` may join, in view order, each with its period budget with `job` and a
        lower bound of the closed-form period if the job takes an existing rollout node.

        Pruned: full-size, saturated or full groups (Algorithm 1), groups whose slowest
        member alone breaks the newcomer's SLO, and groups whose training nodes are too
        few or too full for it. With the view's group index, one vectorized pass first
        drops every group whose closed-form bounds already exceed the newcomer's budget
        (`_try` would refuse them), so only the survivors reach this loop.
        """
        max_size, prune = view.max_group_size, self.prune_saturated
        kt = view.cluster.pools.train.nodes_for(job.train_gpus)
        t_cap, need = view.cluster.pools.train.host_gb_per_node + 1e-9, job.host_gb.train
        progress = view.progress
        # Under the SLO order (core/slo_order.py) a tight member may run more often than the
        # group's slowest one, but some member runs once per meta-iteration: the loosest
        # budget (`slack`) bounds the meta-iteration period, each member's own cycle its own.
        slo = self.cfg.order == "slo"
        pool = self._indexed(job, view, slack_new, own, kt, t_cap, why)
        if pool is None:
            pool = [(g, NO_BOUND, NO_BOUND) for g in view.groups]  # no usable index: every group
        out = []
        for g, fixed_lb, rollout_lb in pool:
            shape = g.shape
            if (len(g.members) >= max_size or shape is None or (shape.t_cycle_s > slack_new and not slo)
                    or kt > g.n_train or (prune and shape.status != "unsaturated")):
                if why is not None:
                    why.exact[g.group_id] = (_first_refusal(g, max_size, prune, kt, need, t_cap), g)
                continue
            if kt and any(u + need > t_cap for u in g.train_gb[:kt]):
                if why is not None:
                    why.exact[g.group_id] = (Refusal.RESIDENCY, g)
                continue
            slack = slack_new if slo else joining_budget(job, view, g.group_id, slack_new)
            for m in g.members:
                b = period_budget(m.job, progress)
                if (b > slack) if slo else (b < slack):
                    slack = b
            if max(fixed_lb, shape.t_cycle_s if slo else NO_BOUND) > slack * (1 + 1e-9) * (1 + MARGIN):
                if why is not None:
                    why.exact[g.group_id] = (None, g)
                continue  # over budget whatever the plan: `_try` would refuse it
            out.append((g, slack, rollout_lb))
        return out

    def _indexed(self, job: JobSpec, view: ClusterView, slack_new: float, own: PhaseTimes,
                 kt: int, t_cap: float, why: _Refusals | None = None) -> list[tuple[Group, float, float]] | None:
        """The groups the view's index cannot exclude, in view order, each with its bounds
        (fixed part, rollout part); None when the view has no index this policy can use.

        A view derived from the indexed one by tentative plans (regroup.py) differs in a few
        groups: those are found by identity and passed on unbounded."""
        snap = view.index
        if snap is None or not snap.current or snap.index.intra != self.cfg:
            return None
        idx, base = snap.index, snap.groups
        slo = self.cfg.order == "slo"  # its period bounds compare with the newcomer's budget: not then
        needs = JobNeeds(kt, job.host_gb.train, own.train, math.inf if slo else slack_new, view.max_group_size,
                         t_cap, self.prune_saturated)
        slots = snap.slots
        if why is None:
            may = idx.may_take(needs)
        else:  # one pass gives the filter and, should the job end up alone, the reasons
            codes = idx.refusal_codes(needs)
            may = codes < 0
        pos = np.flatnonzero(may[slots])
        sel = slots[pos]
        fixed = np.maximum(idx.lb[sel], idx.train0_sw[sel] + own.train)
        # The members' budgets (bounded from above), vectorized: the exact loop recomputes
        # them for the few left.
        bb = idx.budget_bounds(sel, view.progress)
        slack = np.minimum(bb, slack_new) * (1 + MARGIN)
        own_cycle = own.rollout + own.train + own.sync
        ok = (own_cycle <= slack) & (fixed <= slack * (1 + 1e-9))
        if slo:  # (`_candidates` checks `fixed` against the loosest budget)
            ok = np.full(len(sel), own_cycle <= slack_new * (1 + MARGIN))
        if why is not None:
            bad = ~ok
            why.pruned = (idx, codes[slots], slots, pos[bad], bb[bad] < slack_new, [])
        pos, sel, fixed = pos[ok], sel[ok], fixed[ok].tolist()
        roll = (idx.rollout_min_sw[sel] + own.rollout).tolist()
        groups = view.groups
        if groups is base:
            return [(base[p], f, r) for p, f, r in zip(pos.tolist(), fixed, roll)]
        if len(groups) < len(base):
            if why is not None:
                why.pruned = None  # every group goes through the exact checks
            return None
        changed = [i for i, (a, b) in enumerate(zip(groups, base)) if a is not b]
        if any(groups[i].group_id != base[i].group_id for i in changed):
            if why is not None:
                why.pruned = None
            return None
        if why is not None:
            why.pruned = why.pruned[:-1] + (changed,)
        bounded = {p: (f, r) for p, f, r in zip(pos.tolist(), fixed, roll)}
        for i in changed:
            bounded[i] = (NO_BOUND, NO_BOUND)  # a tentatively changed group: the exact checks decide
        out = [(groups[p], *bounded[p]) for p in sorted(bounded)]
        return out + [(g, NO_BOUND, NO_BOUND) for g in groups[len(base):]]

    def _try(self, g: Group, job: JobSpec, new_nodes: int, slack: float,
             view: ClusterView, q: float, why: _Refusals | None = None) -> PlacementPlan | None:
        """`job` in `g` with `new_nodes` fresh rollout nodes, if valid; a refusal is noted in `why`."""
        loads = rollout_node_loads(g, q)
        order = sorted(range(g.n_rollout), key=lambda n: (loads[n], n))
        cand = pin_into(g, job, view.cluster, new_nodes, order)
        if cand is None:
            if why is not None:  # (the training-node count was checked before: residency)
                kt = view.cluster.pools.train.nodes_for(job.train_gpus)
                why.exact[g.group_id] = (Refusal.TRAIN_SHAPE if kt > g.n_train else Refusal.RESIDENCY, g)
            return None
        times = group_planning_times(cand.members, self.cfg)
        # Closed-form lower bound first: the exact schedule can only be slower.
        bound = max(t_cycle(cand.members, times),
                    t_load(cand.members, cand.n_rollout, cand.n_train, times, self.cfg.warm_switch_s))
        if bound > slack * (1 + 1e-9):
            if why is not None:
                why.exact[g.group_id] = (None, g)
            return None
        cand = plan_group(cand, self.cfg)
        if cand.shape.period_s > slack * (1 + 1e-9) or (
                (self.cfg.plan == "mean" or self.cfg.order == "slo")
                and not group_fits(cand, view.progress, self.cfg)):
            if why is not None:
                why.exact[g.group_id] = (None, g)
            return None
        return joined_plan(g, cand, new_nodes, job, view)
