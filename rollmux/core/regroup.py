"""Beyond the paper: shrinking and dissolving groups when members leave.

The paper's groups are static: a group keeps every node until its last member
leaves. On heavy-tailed job lengths that wastes much of the gain, so two
departure-time repairs are offered (both pure functions over frozen groups):

* **shrink** — release rollout nodes no member is pinned to any more, and
  training nodes beyond what the remaining members need;
* **re-placement** — if every remaining member of a group can be placed in
  another existing group (by the same placement policy, its SLO budget charged
  with the wait for its iteration boundary and its migration time) and the
  saving over the members' expected remaining lifetime exceeds `margin` times
  what the migrations cost in node-hours, the group is dissolved. The slots are
  reserved at once (a member lands where it was planned, or nothing moves);
  each member migrates at its next iteration boundary, and during its migration
  it holds its destination rollout nodes (state moved, cold start), which serve
  no other member's phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rollmux.core.colocate import is_colocated, iteration_cost
from rollmux.core.group import Group, Member
from rollmux.core.group_index import progress_rows
from rollmux.core.inter_group import isolated_plan
from rollmux.core.config import IntraConfig
from rollmux.core.marginal import group_cost_per_period, plan_added_cost
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy, ProgressView
from rollmux.core.spec import ClusterSpec, JobSpec


def shrink(group: Group) -> tuple[Group, dict[int, int], int, int]:
    """Drop unpinned rollout nodes and surplus training nodes.

    Returns the shrunk group (same order, no shape), the map old -> new rollout
    node index of kept nodes, and how many rollout and training nodes were freed.
    """
    used = sorted({n for m in group.members for n in m.rollout_nodes})
    remap = {old: new for new, old in enumerate(used)}
    n_train = max((len(m.train_nodes) for m in group.members), default=0)
    members = tuple(Member(m.job, tuple(remap[n] for n in m.rollout_nodes), m.train_nodes, m.rollout_factor)
                    for m in group.members)
    shrunk = Group(group.group_id, len(used), n_train, members)
    return shrunk, remap, group.n_rollout - len(used), group.n_train - n_train


def _position(view: ClusterView, group_id: int) -> int | None:
    """Where the group sits in `view.groups` (None: absent). A tentative view keeps the base
    view's groups at their positions (new groups go last), so the index finds it without a scan."""
    groups, snap = view.groups, view.index
    if snap is not None and snap.current and len(groups) >= len(snap.groups):
        pos = snap.position(group_id)
        if pos is not None and groups[pos].group_id == group_id:
            return pos
    return next((i for i, g in enumerate(groups) if g.group_id == group_id), None)


def _with_plan(view: ClusterView, plan: PlacementPlan) -> ClusterView:
    """The view after a plan is applied (for tentative, sequential placements)."""
    groups, gid = view.groups, plan.group.group_id
    pos = _position(view, gid)
    groups = groups + (plan.group,) if pos is None else groups[:pos] + (plan.group,) + groups[pos + 1:]
    free_r = None if view.free_rollout_nodes is None else view.free_rollout_nodes - plan.added_rollout_nodes
    free_t = None if view.free_train_nodes is None else view.free_train_nodes - plan.added_train_nodes
    return replace(view, groups=groups, free_rollout_nodes=free_r, free_train_nodes=free_t,
                   next_group_id=max(view.next_group_id, plan.group.group_id + 1))


@dataclass(frozen=True)
class Move:
    """One job's planned migration: its slot in the target group is reserved by `plan`."""

    job_id: str
    from_group: int
    plan: PlacementPlan
    migration_s: float


@dataclass(frozen=True)
class Regroup:
    """A regrouping decision: `moves` (reserved at once); `dissolve`: the source group empties."""

    group_id: int
    moves: tuple[Move, ...]
    dissolve: bool
    saving_usd: float = 0.0
    cost_usd: float = 0.0


def migration_seconds(job: JobSpec, cluster: ClusterSpec, scale: float = 1.0) -> float:
    """Time a migration takes: the job's training state crosses the network once, then the
    job cold-starts on its new nodes (cluster.cold_switch_s).

    The state is 16 bytes per parameter (bf16 policy and reference weights, fp32 master
    weights and two Adam moments), i.e. 8 x `weights_gb` (one bf16 copy) when the job gives
    it, else its host-resident training state (`host_gb.train` per training node). Calibrated
    to the paper's 197-419 s for 7B-32B models: 122 and 520 GB, so 135 s + GB / 1.8 GB/s
    gives 203 and 424 s. `scale` stretches the whole time (the study's sensitivity row)."""
    if job.weights_gb is not None:
        state_gb = 8 * job.weights_gb
    else:
        state_gb = job.host_gb.train * cluster.pools.train.nodes_for(job.train_gpus)
    return scale * (cluster.cold_switch_s + state_gb / cluster.migration_gb_per_s)


def slice_rate(job: JobSpec, cluster: ClusterSpec) -> float:
    """$/h of one job-sized slice of both pools (its nominal rollout and training nodes)."""
    r, t = cluster.pools.rollout, cluster.pools.train
    return (r.nodes_for(job.rollout_gpus) * r.node_price_per_hour
            + t.nodes_for(job.train_gpus) * t.node_price_per_hour)


class _Charged(ProgressView):
    """Progress with extra seconds charged to every job (more to `movers`), computed lazily:
    copying the progress of every job per evaluation would cost O(all jobs)."""

    def __init__(self, base: Mapping[str, tuple[int, float]], everyone_s: float,
                 movers: Mapping[str, float]) -> None:
        self.base, self.everyone_s, self.movers = base, everyone_s, movers

    def get(self, job_id: str, default=None):
        """The job's progress with its charge, or `default`."""
        if job_id in self.movers:
            done, elapsed = self.base.get(job_id, (0, 0.0))
            return done, elapsed + self.movers[job_id]
        got = self.base.get(job_id)
        return default if got is None else (got[0], got[1] + self.everyone_s)

    def uncharged(self) -> ProgressView | None:
        """The view without its charges (every charge is non-negative); None over a plain mapping."""
        base = self.base
        return base.uncharged() if isinstance(base, ProgressView) else None

    def rows(self, job_ids: Sequence[str]) -> np.ndarray:
        """(done, elapsed) with the charges, NaN rows for jobs without progress."""
        out = progress_rows(self.base, job_ids)
        out[:, 1] += self.everyone_s
        movers = self.movers
        if movers:
            for i, j in enumerate(job_ids):
                if j in movers:
                    done, elapsed = self.base.get(j, (0, 0.0))
                    out[i] = (done, elapsed + movers[j])
        return out

    def __iter__(self):
        return iter(set(self.base) | set(self.movers))

    def __len__(self) -> int:
        return len(set(self.base) | set(self.movers))


class OwedProgress(ProgressView):
    """Progress with per-job seconds added to elapsed time (a stall each job still owes, e.g.
    the pending migrations into its group), computed lazily; `uncharged()` is the base's, so
    the index's budget bounds read without these charges stay upper bounds."""

    def __init__(self, base: Mapping[str, tuple[int, float]], owed: Mapping[str, float]) -> None:
        self.base, self.owed = base, owed

    def get(self, job_id: str, default=None):
        """The job's progress with what it owes, or `default`."""
        got = self.base.get(job_id)
        if got is None:
            return default
        s = self.owed.get(job_id)
        return got if s is None else (got[0], got[1] + s)

    def uncharged(self) -> ProgressView | None:
        """The view without its charges (every charge is non-negative); None over a plain mapping."""
        base = self.base
        return base.uncharged() if isinstance(base, ProgressView) else None

    def snapshot_key(self) -> object | None:
        """None: these charges change between views of one base (nothing cached is reused)."""
        return None

    def rows(self, job_ids: Sequence[str]) -> np.ndarray:
        """(done, elapsed) with what each job owes, NaN rows for jobs without progress."""
        out = progress_rows(self.base, job_ids)
        owed = self.owed
        for i, j in enumerate(job_ids):
            s = owed.get(j)
            if s is not None:
                out[i, 1] += s
        return out

    def __iter__(self):
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


def owed_by_members(groups: Sequence[Group], owed_s: Mapping[int, float]) -> dict[str, float]:
    """Per job, the stall seconds owed by the groups it is a member of (`owed_s`: group id ->
    seconds; a job in two groups, a reserved migrant, owes both)."""
    out: dict[str, float] = {}
    for g in groups:
        s = owed_s.get(g.group_id, 0.0)
        if s > 0:
            for m in g.members:
                out[m.job_id] = out.get(m.job_id, 0.0) + s
    return out


def plan_moves(members: tuple[Member, ...], from_group: int, view: ClusterView, policy: PlacementPolicy,
               charges: Mapping[str, float], wait_s: float,
               isolated_ok: bool = False) -> tuple[list[Move], float] | None:
    """Reserve a slot in an existing group for each member (the view must not hold their group).

    Each mover's SLO budget is charged with `wait_s` (the rest of its iteration in the old
    group) plus its migration time; every other job with the longest migration (a migrant
    holds its destination nodes while it cold-starts, so the members there may wait once).
    On top, the members of every group owe the migrations still pending into it
    (`view.owed_s`, charged to the view's progress by its maker, and to a newcomer by the
    policy): a move planned here joins those pending ones, so once a mover is placed its
    target owes its migration too, and the mover, now a member there, owes what its target
    owed plus the longest migration (a later mover of this plan may join it).
    Returns the moves and the $/h they add; None when some member would need a group of its
    own (the move would then cost as much as it saves) unless `isolated_ok` (a repair evicts
    a member whatever it costs), or when no plan exists (node caps)."""
    longest = max(charges.values(), default=0.0)
    assert longest >= 0 and wait_s >= 0, "a charge only adds time (budget_bounds relies on it)"
    scratch = replace(view, progress=_Charged(view.progress, longest,
                                              {m.job_id: wait_s + charges[m.job_id] for m in members}),
                      moving=True)
    # A policy that can say "no existing group" without planning an isolated one saves that work.
    place = policy.place if isolated_ok else getattr(policy, "place_joined", policy.place)
    moves, added = [], 0.0
    for i, m in enumerate(members):
        plan = place(m.job, scratch)
        if plan is None or (plan.case == Case.ISOLATED and not isolated_ok):
            return None
        moves.append(Move(m.job_id, from_group, plan, charges[m.job_id]))
        added += plan.delta_cost_per_hour
        scratch = _with_plan(scratch, plan)
        if i + 1 < len(members):  # (what the next movers' plans must charge)
            gid, mig = plan.group.group_id, charges[m.job_id]
            before = scratch.owed_s.get(gid, 0.0)
            owed = {j.job_id: mig for j in plan.group.members if j.job_id != m.job_id}
            owed[m.job_id] = before + longest
            scratch = replace(scratch, progress=OwedProgress(scratch.progress, owed),
                              owed_s={**scratch.owed_s, gid: before + mig})
    return moves, added


def remaining_s(job: JobSpec, progress: Mapping[str, tuple[int, float]]) -> float:
    """Expected seconds the job still runs: its remaining iterations at its mean so far, and
    at least at its profile's solo pace (a few iterations measured faster than the profile
    are no forecast; sharing only slows a job down)."""
    done, elapsed = progress.get(job.job_id, (0, 0.0))
    per_iter = max(elapsed / done, job.solo_iter_s) if done > 0 else job.solo_iter_s
    return max(job.iterations - done, 0) * per_iter


def colocated_stake(group: Group, progress: Mapping[str, tuple[int, float]], cluster: ClusterSpec) -> float:
    """$ a co-located job's own nodes cost over its remaining iterations, at its planned
    co-located iteration time: what moving it into a group could save at most."""
    job = group.members[0].job
    left = max(job.iterations - progress.get(job.job_id, (0, 0.0))[0], 0)
    return left * group_cost_per_period(group, cluster)


def colocated_saving(group: Group, plan: PlacementPlan, view: ClusterView, cfg: IntraConfig) -> float:
    """$ a co-located job saves over its remaining iterations by running in `plan`'s group
    instead: what its own nodes cost per co-located iteration less what the join adds per
    iteration, the members' stretch included (core/marginal.py), while the group's other
    members still run; once the last of them has left (in as many of its iterations as they
    have left), it pays for a group of its own per iteration (its `isolated_plan`; conservative: the
    group may be filled again). Its $/h alone would not do: a co-located iteration is faster
    than a shared one, so the job lives longer in a group."""
    job = group.members[0].job
    progress = view.progress
    left = max(job.iterations - progress.get(job.job_id, (0, 0.0))[0], 0)
    life = max((max(m.job.iterations - progress.get(m.job_id, (0, 0.0))[0], 0)
                for m in plan.group.members if m.job_id != job.job_id), default=0)
    shared = min(left, life)
    saving = left * group_cost_per_period(group, view.cluster) - shared * plan_added_cost(plan, view)
    if shared < left:
        alone = isolated_plan(job, view, cfg)
        saving -= (left - shared) * (iteration_cost(alone) if alone is not None else math.inf)
    return saving


def dissolve_decision(group: Group, view: ClusterView, policy: PlacementPolicy, scale: float,
                      margin: float) -> Regroup | None:
    """Dissolve `group` (absent from `view`) when re-placing its members saves more than
    `margin` times what their migrations cost; None otherwise.

    Saving: the group's rate minus the rate the moves add, over the time until its first
    member would have left anyway, less the wait for the movers' boundaries and migrations
    (conservative: after that the old group could have shrunk). Cost: each migration holds a
    job-sized slice of both pools for its migration time. `margin` > 1 is the hysteresis
    that keeps groups from churning on small savings."""
    cluster = view.cluster
    charges = {m.job_id: migration_seconds(m.job, cluster, scale) for m in group.members}
    wait_s = group.shape.period_s if group.shape is not None else 0.0
    horizon = min(remaining_s(m.job, view.progress) for m in group.members)
    horizon -= wait_s + max(charges.values())
    cost = sum(charges[m.job_id] * slice_rate(m.job, cluster) for m in group.members) / 3600
    most = group.cost_per_hour(cluster) * max(horizon, 0.0) / 3600
    if most <= margin * cost or most <= 0:
        return None  # not worth it even if the moves added nothing: no need to plan them
    planned = plan_moves(group.members, group.group_id, view, policy, charges, wait_s)
    if planned is None:
        return None
    moves, added = planned
    saving = (group.cost_per_hour(cluster) - added) * max(horizon, 0.0) / 3600
    if is_colocated(group):  # priced per iteration, as it was placed
        saving = min(saving, colocated_saving(group, moves[0].plan, view, policy.cfg))
    if saving <= margin * cost or saving <= 0:
        return None
    return Regroup(group.group_id, tuple(moves), True, saving, cost)
