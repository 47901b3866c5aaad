"""The JSON forms of the scheduler's frozen values that journal records and snapshots hold (DESIGN §8).

A job spec, a group (members in cyclic order, their pins), a placement plan and a reserved move,
each as JSON-native data and back. These forms never change, so a journal or snapshot written by
an older service still reads (core/records.py, live/codec.py). A placement is journaled as its outcome
(the group after the plan), never re-decided: the policy reads wall-clock progress, which a replay
cannot reproduce.
"""

from __future__ import annotations

from dataclasses import replace

from rollmux.core.colo_model import is_colocated
from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, GroupShape, Member
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import PlacementPlan
from rollmux.core.placement.why import PlacementWhy
from rollmux.core.repair.moves import Move
from rollmux.core.spec import JobSpec
from rollmux.core.vocabulary import Case


def job_to_dict(job: JobSpec) -> dict:
    """A job spec as JSON-native data."""
    return job.model_dump(exclude_none=True)


def group_to_dict(group: Group) -> dict:
    """A group (members in cyclic order, their pins) as JSON-native data."""
    return {"group_id": group.group_id, "n_rollout": group.n_rollout, "n_train": group.n_train,
            "members": [{"job": job_to_dict(m.job), "rollout_nodes": list(m.rollout_nodes),
                         "train_nodes": list(m.train_nodes),
                         # elastic rollout (core/elastic.py) only: records without it read 1.0
                         **({"rollout_factor": m.rollout_factor} if m.rollout_factor != 1.0 else {})}
                        for m in group.members],
            # A co-located job's own placement (core/placement/options/colocated.py): its shape is its planned
            # co-located iteration, which no group schedule recomputes.
            **({"colocated_period_s": group.shape.period_s} if is_colocated(group) and group.shape else {})}


def group_from_dict(d: dict, cfg: IntraConfig) -> Group:
    """Rebuild a group in its recorded order and recompute its planning shape (a co-located
    job's: the one it was recorded with)."""
    members = tuple(Member(JobSpec.model_validate(m["job"]), tuple(m["rollout_nodes"]), tuple(m["train_nodes"]),
                           float(m.get("rollout_factor", 1.0)))
                    for m in d["members"])
    group = Group(d["group_id"], d["n_rollout"], d["n_train"], members)
    if "colocated_period_s" in d:
        p = float(d["colocated_period_s"])
        return replace(group, shape=GroupShape(period_s=p, t_cycle_s=p, t_load_s=p))
    return plan_group(group, cfg, reorder=False)


def plan_to_dict(plan: PlacementPlan) -> dict:
    """A placement plan as JSON-native data (`why` only when the plan says why it is isolated)."""
    d = {"job_id": plan.job_id, "case": plan.case.value, "group": group_to_dict(plan.group),
         "added_rollout_nodes": plan.added_rollout_nodes, "added_train_nodes": plan.added_train_nodes,
         "delta_cost_per_hour": plan.delta_cost_per_hour}
    if plan.why is not None:
        d["why"] = plan.why.to_dict()
    return d


def plan_from_dict(d: dict, cfg: IntraConfig) -> PlacementPlan:
    """Rebuild a journaled placement plan."""
    why = d.get("why")  # older journals: none
    return PlacementPlan(d["job_id"], Case(d["case"]), group_from_dict(d["group"], cfg),
                         d["added_rollout_nodes"], d["added_train_nodes"], d["delta_cost_per_hour"],
                         None if why is None else PlacementWhy.from_dict(why))


def move_to_dict(m: Move) -> dict:
    """One reserved move as JSON-native data."""
    return {"job_id": m.job_id, "from_group": m.from_group, "plan": plan_to_dict(m.plan),
            "migration_s": m.migration_s}


def move_from_dict(d: dict, cfg: IntraConfig) -> Move:
    """Rebuild one journaled move."""
    return Move(d["job_id"], d["from_group"], plan_from_dict(d["plan"], cfg), d["migration_s"])
