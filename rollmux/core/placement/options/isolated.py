"""Isolated provisioning (DESIGN §5, Algorithm 1 case 3): a new group for the job alone.

The nominal isolated group (`isolated_plan`) is the always-valid fallback, valid whenever the
node caps allow it. With elastic rollout a new group on fewer rollout nodes than nominal is
an option of the search too (`fewer_node_options`): valid when the job's own planned cycle on
those nodes meets its budget and, under the mean plan, its confident mean does
(docs/decisions/elastic-rollout.md).
"""

from __future__ import annotations

from rollmux.core.config import IntraConfig
from rollmux.core.elastic import rollout_factor
from rollmux.core.group import Group, Member, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement.admission import admits_planned
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import ISOLATED
from rollmux.core.placement.why import PlacementWhy
from rollmux.core.spec import ClusterSpec, JobSpec


def isolated_plan(job: JobSpec, view: ClusterView, cfg: IntraConfig,
                  why: PlacementWhy | None = None) -> PlacementPlan | None:
    """A new group for the job alone on its nominal nodes, or None if the node caps forbid it;
    `why`: why no existing group took it, if the policy says."""
    g = plan_group(isolated_group(view.next_group_id, job, view.cluster), cfg)
    if ((view.free_rollout_nodes is not None and g.n_rollout > view.free_rollout_nodes)
            or (view.free_train_nodes is not None and g.n_train > view.free_train_nodes)):
        return None
    return PlacementPlan(job.job_id, Case.ISOLATED, g, g.n_rollout, g.n_train, g.cost_per_hour(view.cluster), why)


def isolated_shape(group_id: int, job: JobSpec, cluster: ClusterSpec, nodes: int) -> Group:
    """A new group for `job` alone on `nodes` rollout nodes (unplanned)."""
    k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    kt = cluster.pools.train.nodes_for(job.train_gpus)
    member = Member(job, tuple(range(nodes)), tuple(range(kt)), rollout_factor(job, k0, nodes))
    return Group(group_id, nodes, kt, (member,))


def fewer_node_options(nc: Newcomer) -> list[tuple]:
    """A group of the job's own on each allowed count k of rollout nodes below its nominal one
    whose planned cycle meets the job's own budget: Δ = the new group's rate (a complete option,
    its position ISOLATED)."""
    return [(k * nc.pr + nc.kt * nc.pt, 0, True, -k, k, ISOLATED, k)
            for k in nc.counts if k < nc.k0 and nc.own_cycle[k] <= nc.slack_new * (1 + 1e-9)]


def fewer_node_plan(job: JobSpec, view: ClusterView, cfg: IntraConfig, k: int,
                    tries: list[int] | None = None, exact: bool = True) -> PlacementPlan | None:
    """The plan of a fewer-node option on `k` rollout nodes, or None when the node caps forbid
    it or (the mean plan) its own confident mean on those nodes breaks its budget; without
    `exact` always None (the bounded search never ran its check); `tries[0]` counts the exact
    checks run."""
    kt = view.cluster.pools.train.nodes_for(job.train_gpus)
    free_r, free_t = view.free_rollout_nodes, view.free_train_nodes
    if (free_r is not None and k > free_r) or (free_t is not None and kt > free_t) or not exact:
        return None
    if tries is not None:
        tries[0] += 1
    g = plan_group(isolated_shape(view.next_group_id, job, view.cluster, k), cfg)
    if not admits_planned(g, view, cfg):
        return None
    return PlacementPlan(job.job_id, Case.ISOLATED, g, k, kt, g.cost_per_hour(view.cluster))
