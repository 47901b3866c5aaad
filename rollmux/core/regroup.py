"""Beyond the paper: shrinking and dissolving groups when members leave.

The paper's groups are static: a group keeps every node until its last member
leaves. On heavy-tailed job lengths that wastes much of the gain, so two
departure-time repairs are offered (both pure functions over frozen groups):

* **shrink** — release rollout nodes no member is pinned to any more, and
  training nodes beyond what the remaining members need;
* **re-placement** — if every remaining member of a group can be placed
  elsewhere (by the same placement policy, its SLO budget charged with the
  migration stall: state moved and cold-started on the new nodes) for less
  than the group costs, the group is dissolved: each member migrates at its
  next iteration boundary and the group's nodes are released.
"""

from __future__ import annotations

from dataclasses import replace

from rollmux.core.group import Group, Member
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy


def shrink(group: Group) -> tuple[Group, dict[int, int], int, int]:
    """Drop unpinned rollout nodes and surplus training nodes.

    Returns the shrunk group (same order, no shape), the map old -> new rollout
    node index of kept nodes, and how many rollout and training nodes were freed.
    """
    used = sorted({n for m in group.members for n in m.rollout_nodes})
    remap = {old: new for new, old in enumerate(used)}
    n_train = max((len(m.train_nodes) for m in group.members), default=0)
    members = tuple(Member(m.job, tuple(remap[n] for n in m.rollout_nodes), m.train_nodes)
                    for m in group.members)
    shrunk = Group(group.group_id, len(used), n_train, members)
    return shrunk, remap, group.n_rollout - len(used), group.n_train - n_train


def _with_plan(view: ClusterView, plan: PlacementPlan) -> ClusterView:
    """The view after a plan is applied (for tentative, sequential placements)."""
    groups = {g.group_id: g for g in view.groups}
    groups[plan.group.group_id] = plan.group
    free_r = None if view.free_rollout_nodes is None else view.free_rollout_nodes - plan.added_rollout_nodes
    free_t = None if view.free_train_nodes is None else view.free_train_nodes - plan.added_train_nodes
    return replace(view, groups=tuple(groups.values()), free_rollout_nodes=free_r, free_train_nodes=free_t,
                   next_group_id=max(view.next_group_id, plan.group.group_id + 1))


def replacement_saving(group: Group, view: ClusterView, policy: PlacementPolicy,
                       stall_s: float) -> float:
    """$/h saved by dissolving `group` and re-placing its members elsewhere (<= 0: not worth it).

    `view` must not contain `group`. Each member's progress is charged with the
    stall before the policy checks its SLO; a member that would need a new
    group of its own makes the move pointless (it would cost as much).
    """
    price = group.cost_per_hour(view.cluster)
    progress = dict(view.progress)
    for m in group.members:
        done, elapsed = progress.get(m.job_id, (0, 0.0))
        progress[m.job_id] = (done, elapsed + stall_s)
    scratch = replace(view, progress=progress)
    added = 0.0
    # A policy that can say "no existing group" without planning an isolated one saves that work.
    place = getattr(policy, "place_joined", policy.place)
    for m in group.members:
        plan = place(m.job, scratch)
        if plan is None or plan.case == Case.ISOLATED:
            return 0.0
        added += plan.delta_cost_per_hour
        scratch = _with_plan(scratch, plan)
    return price - added
