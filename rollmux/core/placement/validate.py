"""The invariants every plan must keep (DESIGN §3, §5), checked before an executor applies it.

`validate_plan` is policy-independent: the simulator and the live service call it on every
plan, RollMux's or a baseline's, and refuse one that breaks an invariant.
"""

from __future__ import annotations

from rollmux.core.colo_model import colocated_gpus, gpu_options
from rollmux.core.elastic import allowed_factor
from rollmux.core.group import Group, residency_ok
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode


class PlanInvalid(ValueError):
    """A plan broke one of the written invariants."""


def validate_plan(plan: PlacementPlan, job: JobSpec, view: ClusterView) -> None:
    """Check a plan's invariants; raise PlanInvalid naming the one broken.

    Invariants:
      I1 the job is a member exactly once; no other member was added, removed or re-pinned;
      I2 an existing group keeps its nodes and gains only those the plan adds: rollout nodes,
         and training nodes only up to what the job needs (training scaling);
      I3 the job is pinned to as many distinct rollout nodes as it needs (or an elastic count
         with the rollout factor core/elastic.py gives it, unless it cannot take elastic
         rollout), to the group's first training nodes, and all pins name real nodes;
      I4 residency: every node's pinned members fit in its host DRAM;
      I5 the group has at most max_group_size members;
      I6 added nodes fit in the pools' node caps;
      I7 the recorded Δ equals the price of the added nodes.
    """
    if plan.case == Case.COLOCATED:
        _check_colocated(plan, job, view)
        return
    g, cluster = plan.group, view.cluster
    old = view.group(g.group_id)
    ids = [m.job_id for m in g.members]
    if ids.count(job.job_id) != 1 or plan.job_id != job.job_id:
        raise PlanInvalid(f"I1: job {job.job_id} must appear exactly once in group {g.group_id}")
    others = {m.job_id: m for m in g.members if m.job_id != job.job_id}
    before = {m.job_id: m for m in old.members} if old else {}
    if others != before:
        raise PlanInvalid(f"I1: plan changes other members of group {g.group_id}")
    if old is not None and (g.n_train != old.n_train + plan.added_train_nodes
                            or g.n_rollout != old.n_rollout + plan.added_rollout_nodes
                            or (plan.added_train_nodes and g.n_train != cluster.pools.train.nodes_for(job.train_gpus))):
        raise PlanInvalid(f"I2: group {g.group_id} node counts changed inconsistently")
    if old is None and (g.n_rollout != plan.added_rollout_nodes or g.n_train != plan.added_train_nodes):
        raise PlanInvalid(f"I2: new group {g.group_id} must be provisioned by the plan")
    _check_pins(g, job, cluster)
    if not residency_ok(g, cluster):
        raise PlanInvalid(f"I4: residency exceeded in group {g.group_id}")
    if g.size > view.max_group_size:
        raise PlanInvalid(f"I5: group {g.group_id} has {g.size} > {view.max_group_size} members")
    for free, added, pool in ((view.free_rollout_nodes, plan.added_rollout_nodes, "rollout"),
                              (view.free_train_nodes, plan.added_train_nodes, "train")):
        if free is not None and added > free:
            raise PlanInvalid(f"I6: {added} new {pool} nodes exceed the {free} left")
    delta = (plan.added_rollout_nodes * cluster.pools.rollout.node_price_per_hour
             + plan.added_train_nodes * cluster.pools.train.node_price_per_hour)
    if abs(delta - plan.delta_cost_per_hour) > 1e-6 * max(1.0, delta):
        raise PlanInvalid(f"I7: Δ {plan.delta_cost_per_hour} != price of added nodes {delta}")


def _check_colocated(plan: PlacementPlan, job: JobSpec, view: ClusterView) -> None:
    """A co-located plan's invariants (placement/options/colocated.py): C0 the job can take the
    co-located mode (`JobSpec.cannot`); C1 the job alone, in a new group; C2 no rollout nodes,
    the job's G (or narrowed G') GPUs' worth of new training nodes, all pinned; C3 its rollout
    and training host state fit one training node; C4 node cap; C5 Δ = their price."""
    g, pool = plan.group, view.cluster.pools.train
    if not job.can(Mode.COLOCATE):
        raise PlanInvalid(f"C0: job {job.job_id} cannot run co-located")
    if plan.job_id != job.job_id or g.job_ids() != (job.job_id,) or view.group(g.group_id) is not None:
        raise PlanInvalid(f"C1: co-located job {job.job_id} must be alone in a new group")
    allowed = {pool.nodes_for(n) for n in gpu_options(job, view.cluster)}  # (G, or a narrowed G')
    nt = g.n_train if g.n_train in allowed else pool.nodes_for(colocated_gpus(job))
    m = g.members[0]
    if (g.n_rollout or plan.added_rollout_nodes or g.n_train != nt or plan.added_train_nodes != nt
            or m.rollout_nodes or m.train_nodes != tuple(range(nt))):
        raise PlanInvalid(f"C2: co-located job {job.job_id} must hold exactly its {nt} training nodes")
    if job.host_gb.rollout + job.host_gb.train > pool.host_gb_per_node + 1e-9:
        raise PlanInvalid(f"C3: co-located job {job.job_id}'s host state exceeds a training node")
    if view.free_train_nodes is not None and nt > view.free_train_nodes:
        raise PlanInvalid(f"C4: {nt} new train nodes exceed the {view.free_train_nodes} left")
    if abs(nt * pool.node_price_per_hour - plan.delta_cost_per_hour) > 1e-6 * max(1.0, plan.delta_cost_per_hour):
        raise PlanInvalid(f"C5: Δ {plan.delta_cost_per_hour} != price of {nt} training nodes")


def _check_pins(g: Group, job: JobSpec, cluster: ClusterSpec) -> None:
    m = g.member(job.job_id)
    need_r = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    need_t = cluster.pools.train.nodes_for(job.train_gpus)
    k = len(m.rollout_nodes)  # elastic rollout (core/elastic.py): another count, at its model's factor
    want = 1.0 if k == need_r else allowed_factor(job, cluster, k)
    if len(set(m.rollout_nodes)) != k or want is None or abs(m.rollout_factor - want) > 1e-9:
        raise PlanInvalid(f"I3: {job.job_id} needs {need_r} distinct rollout nodes (or an elastic count at "
                          f"its rollout factor), got {m.rollout_nodes} at factor {m.rollout_factor:g}")
    if not all(0 <= n < g.n_rollout for n in m.rollout_nodes):
        raise PlanInvalid(f"I3: {job.job_id} pinned to a rollout node the group lacks")
    if m.train_nodes != tuple(range(need_t)) or need_t > g.n_train:
        raise PlanInvalid(f"I3: {job.job_id} must use the group's first {need_t} training nodes")
