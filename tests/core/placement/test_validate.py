"""validate_plan: every written invariant (I1–I7) is enforced on hand-built plans."""

from __future__ import annotations

import dataclasses

import pytest

from rollmux.core.group import Group, Member
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlanInvalid, validate_plan
from factories import make_cluster, make_job

CLUSTER = make_cluster(host_gb=1000.0)
ROLLOUT_NODE = 8 * 1.0
TRAIN_NODE = 8 * 2.85

A = make_job("a", host_rollout=300.0, host_train=300.0)
B = make_job("b", host_rollout=300.0, host_train=300.0)
NEW = make_job("c", host_rollout=300.0, host_train=300.0)
BIG = make_job("big", rollout_gpus=16, train_gpus=16)

EXISTING = Group(0, 2, 1, (Member(A, (0,), (0,)), Member(B, (1,), (0,))))


def view(groups=(EXISTING,), free_rollout=None, free_train=None, max_group_size=5, next_id=1) -> ClusterView:
    return ClusterView(CLUSTER, tuple(groups), free_rollout, free_train, max_group_size, next_id)


def joined(member: Member, *, n_rollout: int = 2, added: int = 0, delta: float | None = None,
           others=EXISTING.members, n_train: int = 1, job_id: str = "c", case=Case.DIRECT,
           added_train: int = 0) -> PlacementPlan:
    g = Group(0, n_rollout, n_train, tuple(others) + (member,))
    return PlacementPlan(job_id, case, g, added, added_train,
                         added * ROLLOUT_NODE if delta is None else delta)


def isolated(job, group_id: int = 1, n_rollout: int = 1, n_train: int = 1, pins=(0,), tpins=(0,),
             added_rollout: int | None = None, added_train: int | None = None,
             delta: float | None = None) -> PlacementPlan:
    g = Group(group_id, n_rollout, n_train, (Member(job, pins, tpins),))
    ar = n_rollout if added_rollout is None else added_rollout
    at = n_train if added_train is None else added_train
    return PlacementPlan(job.job_id, Case.ISOLATED, g, ar, at,
                         ar * ROLLOUT_NODE + at * TRAIN_NODE if delta is None else delta)


def broken(plan, job, v, invariant: str) -> None:
    with pytest.raises(PlanInvalid, match=f"^{invariant}:"):
        validate_plan(plan, job, v)


# -- valid plans pass ------------------------------------------------------------------------

def test_valid_direct_packing_passes():
    validate_plan(joined(Member(NEW, (0,), (0,))), NEW, view())


def test_valid_rollout_scaling_passes():
    validate_plan(joined(Member(NEW, (2,), (0,)), n_rollout=3, added=1, case=Case.SCALING), NEW, view())


def test_valid_isolated_plan_passes():
    validate_plan(isolated(BIG, n_rollout=2, n_train=2, pins=(0, 1), tpins=(0, 1)), BIG, view())


# -- I1 membership -----------------------------------------------------------------------------

def test_i1_job_missing_from_group():
    plan = dataclasses.replace(joined(Member(NEW, (0,), (0,))), group=EXISTING)
    broken(plan, NEW, view(), "I1")


def test_i1_job_added_twice():
    m = Member(NEW, (0,), (0,))
    plan = joined(m, others=EXISTING.members + (m,))
    broken(plan, NEW, view(), "I1")


def test_i1_plan_names_another_job():
    broken(joined(Member(NEW, (0,), (0,)), job_id="zz"), NEW, view(), "I1")


def test_i1_other_member_removed():
    broken(joined(Member(NEW, (0,), (0,)), others=EXISTING.members[:1]), NEW, view(), "I1")


def test_i1_other_member_repinned():
    others = (Member(A, (1,), (0,)), EXISTING.members[1])
    broken(joined(Member(NEW, (0,), (0,)), others=others), NEW, view(), "I1")


def test_i1_extra_member_smuggled_in():
    extra = Member(make_job("x"), (1,), (0,))
    broken(joined(Member(NEW, (0,), (0,)), others=EXISTING.members + (extra,)), NEW, view(), "I1")


# -- I2 node counts ------------------------------------------------------------------------------

def test_i2_existing_group_changes_training_nodes():
    plan = joined(Member(NEW, (0,), (0,)), n_train=2)
    broken(plan, NEW, view(), "I2")


def test_i2_existing_group_adds_training_nodes():
    plan = joined(Member(NEW, (0,), (0,)), added_train=1)
    broken(plan, NEW, view(), "I2")


def test_i2_rollout_growth_differs_from_added_nodes():
    plan = joined(Member(NEW, (2,), (0,)), n_rollout=3, added=0)
    broken(plan, NEW, view(), "I2")


def test_i2_existing_group_loses_rollout_nodes():
    others = (Member(A, (0,), (0,)), Member(B, (0,), (0,)))
    plan = joined(Member(NEW, (0,), (0,)), n_rollout=1, others=others)
    broken(plan, NEW, view(groups=(Group(0, 2, 1, others),)), "I2")


def test_i2_new_group_not_provisioned_by_the_plan():
    broken(isolated(NEW, added_rollout=0), NEW, view(), "I2")


# -- I3 pins ---------------------------------------------------------------------------------------

def test_i3_too_few_rollout_nodes():
    broken(isolated(BIG, n_rollout=2, n_train=2, pins=(0,), tpins=(0, 1)), BIG, view(), "I3")


def test_i3_duplicate_rollout_node():
    broken(isolated(BIG, n_rollout=2, n_train=2, pins=(0, 0), tpins=(0, 1)), BIG, view(), "I3")


def test_i3_rollout_node_outside_the_group():
    broken(joined(Member(NEW, (2,), (0,))), NEW, view(), "I3")


def test_i3_training_nodes_not_the_first_ones():
    g = Group(0, 2, 2, (Member(A, (0,), (0,)),))
    v = view(groups=(g,))
    plan = PlacementPlan("c", Case.DIRECT, Group(0, 2, 2, g.members + (Member(NEW, (1,), (1,)),)), 0, 0, 0.0)
    broken(plan, NEW, v, "I3")


def test_i3_job_needs_more_training_nodes_than_the_group_has():
    plan = PlacementPlan("big", Case.DIRECT, Group(0, 2, 1, EXISTING.members + (Member(BIG, (0, 1), (0, 1)),)),
                         0, 0, 0.0)
    broken(plan, BIG, view(), "I3")


# -- I4 residency ----------------------------------------------------------------------------------

def test_i4_rollout_node_dram_exceeded():
    heavy = make_job("c", host_rollout=701.0)
    broken(joined(Member(heavy, (0,), (0,))), heavy, view(), "I4")


def test_i4_training_node_dram_exceeded():
    heavy = make_job("c", host_train=401.0)
    broken(joined(Member(heavy, (0,), (0,))), heavy, view(), "I4")


def test_i4_isolated_job_larger_than_a_node():
    heavy = make_job("h", host_train=1001.0)
    broken(isolated(heavy), heavy, view(), "I4")


# -- I5 group size ---------------------------------------------------------------------------------

def test_i5_group_larger_than_max_size():
    broken(joined(Member(NEW, (0,), (0,))), NEW, view(max_group_size=2), "I5")


def test_i5_group_at_max_size_passes():
    validate_plan(joined(Member(NEW, (0,), (0,))), NEW, view(max_group_size=3))


# -- I6 node caps ----------------------------------------------------------------------------------

def test_i6_added_rollout_nodes_exceed_free_nodes():
    plan = joined(Member(NEW, (2,), (0,)), n_rollout=3, added=1, case=Case.SCALING)
    broken(plan, NEW, view(free_rollout=0), "I6")


def test_i6_new_group_training_nodes_exceed_free_nodes():
    broken(isolated(NEW), NEW, view(free_rollout=5, free_train=0), "I6")


def test_i6_exactly_the_free_nodes_passes():
    validate_plan(isolated(NEW), NEW, view(free_rollout=1, free_train=1))


# -- I7 price ----------------------------------------------------------------------------------------

def test_i7_delta_differs_from_price_of_added_nodes():
    plan = joined(Member(NEW, (2,), (0,)), n_rollout=3, added=1, delta=0.0, case=Case.SCALING)
    broken(plan, NEW, view(), "I7")


def test_i7_direct_packing_with_nonzero_delta():
    broken(joined(Member(NEW, (0,), (0,)), delta=1.0), NEW, view(), "I7")


def test_i7_isolated_plan_must_charge_both_pools():
    broken(isolated(NEW, delta=ROLLOUT_NODE), NEW, view(), "I7")


# -- view ------------------------------------------------------------------------------------------

def test_view_finds_groups_by_id():
    v = view()
    assert v.group(0) is EXISTING
    assert v.group(5) is None
