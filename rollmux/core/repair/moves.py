"""Moving jobs between groups (DESIGN §5a): reserved slots, priced migrations, owed stalls.

A move re-places a running job with the placement policy into an existing group, its SLO
budget charged with the wait for its iteration boundary and its migration time
(`migration_seconds`: its state crosses the network, then it cold-starts). The slot is
reserved at once (`plan_moves`); the job migrates at its next iteration boundary, and during
its migration it holds its destination nodes, which serve no other member's phase, so the
members there may wait once: every plan charges the migrations still pending into a group to
its members (`OwedProgress`). Regrouping (core/repair/regroup.py), drift repair's evictions
(core/state/) and co-located pairing (core/repair/pairing.py) move jobs this way.
Evidence: docs/decisions/regroup.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rollmux.core.group import Group, Member
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy, ProgressView, Regrouping
from rollmux.core.placement.index import progress_rows
from rollmux.core.placement.model import with_plan
from rollmux.core.spec import ClusterSpec, JobSpec


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


def repin_seconds(job: JobSpec, cluster: ClusterSpec, scale: float = 1.0) -> float:
    """Time a member re-pinned to another rollout node of its group stalls: its rollout state
    (`host_gb.rollout`, per rollout node it holds) crosses the network, then it cold-starts."""
    state_gb = job.host_gb.rollout * cluster.pools.rollout.nodes_for(job.rollout_gpus)
    return scale * (cluster.cold_switch_s + state_gb / cluster.migration_gb_per_s)


def slice_rate(job: JobSpec, cluster: ClusterSpec) -> float:
    """$/h of one job-sized slice of both pools (its nominal rollout and training nodes)."""
    r, t = cluster.pools.rollout, cluster.pools.train
    return (r.nodes_for(job.rollout_gpus) * r.node_price_per_hour
            + t.nodes_for(job.train_gpus) * t.node_price_per_hour)


def migration_usd(job: JobSpec, cluster: ClusterSpec, scale: float = 1.0) -> float:
    """$ one migration of the job costs: its slice of both pools held for its migration time."""
    return migration_seconds(job, cluster, scale) * slice_rate(job, cluster) / 3600


class ChargedProgress(ProgressView):
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
    scratch = replace(view, progress=ChargedProgress(view.progress, longest,
                                              {m.job_id: wait_s + charges[m.job_id] for m in members}),
                      moving=True)
    # A policy that can say "no existing group" without planning an isolated one saves that work.
    place = policy.place if isolated_ok or not isinstance(policy, Regrouping) else policy.place_joined
    moves, added = [], 0.0
    for i, m in enumerate(members):
        plan = place(m.job, scratch)
        if plan is None or (plan.case == Case.ISOLATED and not isolated_ok):
            return None
        moves.append(Move(m.job_id, from_group, plan, charges[m.job_id]))
        added += plan.delta_cost_per_hour
        scratch = with_plan(scratch, plan)
        if i + 1 < len(members):  # (what the next movers' plans must charge)
            gid, mig = plan.group.group_id, charges[m.job_id]
            before = scratch.owed_s.get(gid, 0.0)
            owed = {j.job_id: mig for j in plan.group.members if j.job_id != m.job_id}
            owed[m.job_id] = before + longest
            scratch = replace(scratch, progress=OwedProgress(scratch.progress, owed),
                              owed_s={**scratch.owed_s, gid: before + mig})
    return moves, added
