"""Why an arrival got a group of its own (core/placement/why.py): one reason per refused group.

Each reason has a situation where it, and only it, keeps a job out of a group: the same job
joins once that one obstacle is removed. Every check runs with the group index and without it
(the brute-force scan), which must give the same reasons."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.env import SimEnvironment
from rollmux.core.group import Group, Member, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, PlacementPlan, RollMuxPlacement, validate_plan
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.placement.why import REASON_NAMES, REFUSALS, PlacementWhy, Refusal, WhyTally
from rollmux.core.state import ClusterState
from factories import GROUPS, config, intra, make_cluster, make_job, make_policy, synthetic_trace

CFG = intra()
CLUSTER = make_cluster()


def founded(group_id: int, job, cluster=CLUSTER) -> Group:
    """The planned group a job founds alone."""
    return plan_group(isolated_group(group_id, job, cluster), CFG)


def views(*groups: Group, cluster=CLUSTER, free_rollout=None, max_group_size=5) -> tuple[ClusterView, ClusterView]:
    """The same view with the group index (as ClusterState hands it over) and without it."""
    d = IndexedGroups(CFG)
    for g in groups:
        d[g.group_id] = g
    snap = d.index.snapshot(d.values_tuple())
    v = ClusterView(cluster, d.values_tuple(), free_rollout, None, max_group_size,
                    1 + max((g.group_id for g in groups), default=-1), index=snap)
    return v, dataclasses.replace(v, index=None)


def place(job, *groups: Group, prune: bool = False, **kw) -> PlacementPlan:
    """The policy's validated plan, the same with and without the index (its `why` included)."""
    policy = make_policy(CFG, prune_saturated=prune)
    fast, slow = views(*groups, **kw)
    plan = policy.place(job, fast)
    assert plan == policy.place(job, slow)
    validate_plan(plan, job, fast)
    return plan


def refused_for(plan: PlacementPlan) -> Refusal:
    """The one reason a one-group view refused the job for."""
    assert plan.case is Case.ISOLATED and plan.why is not None
    assert plan.why.groups == 1
    return plan.why.reason


def balanced(job_id: str, **kw):
    return make_job(job_id, rollout=100.0, train=100.0, **kw)


# -- one reason each, and the job joins without it -------------------------------------------------

def test_no_groups():
    plan = place(balanced("b"))
    assert plan.why == PlacementWhy((0,) * len(REFUSALS)) and plan.why.reason is Refusal.NO_GROUPS


def test_group_size():
    g = founded(0, balanced("a"))
    assert refused_for(place(balanced("b"), g, max_group_size=1)) is Refusal.GROUP_SIZE
    assert place(balanced("b"), g, max_group_size=2).case is Case.DIRECT


def test_unplanned():
    planned = founded(0, balanced("a"))
    bare = dataclasses.replace(planned, shape=None)
    assert refused_for(place(balanced("b"), bare)) is Refusal.UNPLANNED
    assert place(balanced("b"), planned).case is Case.DIRECT


def test_saturated_only_with_the_papers_pruning():
    # Two members share both nodes with no sync: the nodes' load (switches included) is over
    # the natural cycle, so the group is saturated; a newcomer still fits on a new rollout node.
    a1, a2 = (make_job(f"a{i}", rollout=100.0, train=100.0, sync=0.0) for i in (1, 2))
    g = plan_group(Group(0, 1, 1, (Member(a1, (0,), (0,)), Member(a2, (0,), (0,)))), CFG)
    assert g.shape.status == "saturated"
    b = make_job("b", rollout=100.0, train=20.0, sync=0.0)
    assert refused_for(place(b, g, prune=True)) is Refusal.SATURATED
    assert place(b, g, prune=False).case is Case.SCALING


def test_train_shape():
    a = balanced("a")
    b = balanced("b", train_gpus=16)  # two training nodes; a's group has one
    assert refused_for(place(b, founded(0, a))) is Refusal.TRAIN_SHAPE
    wide = founded(0, balanced("a", train_gpus=16))
    assert place(b, wide).case is Case.DIRECT


def test_residency_on_the_training_nodes():
    g = founded(0, balanced("a", host_train=1500.0))
    assert refused_for(place(balanced("b", host_train=1000.0), g)) is Refusal.RESIDENCY
    assert place(balanced("b", host_train=500.0), g).case is Case.DIRECT


def test_rollout_dram_never_isolates_a_job():
    # The most-scaled try takes fresh rollout nodes, which an isolated group would need too:
    # full rollout nodes make the job scale, or (no node left) wait, never go alone.
    g = founded(0, balanced("a", host_rollout=1500.0))
    b = balanced("b", host_rollout=1000.0)
    assert place(b, g, free_rollout=1).case is Case.SCALING
    policy = make_policy(CFG)
    assert all(policy.place(b, v) is None for v in views(g, free_rollout=0))


def test_newcomer_slo():
    g = founded(0, balanced("a", slo=2.0))
    assert refused_for(place(balanced("b", slo=1.0), g)) is Refusal.NEWCOMER_SLO
    assert place(balanced("b", slo=2.0), g).case is Case.DIRECT


def test_member_slo():
    assert refused_for(place(balanced("b", slo=2.0), founded(0, balanced("a", slo=1.0)))) is Refusal.MEMBER_SLO
    assert place(balanced("b", slo=2.0), founded(0, balanced("a", slo=2.0))).case is Case.DIRECT


# -- attribution ---------------------------------------------------------------------------------

def test_a_group_failing_several_checks_counts_for_the_first_in_order():
    # Full, too narrow for b's training, and a member with a tight SLO: the size check is first.
    g = founded(0, balanced("a", slo=1.0))
    assert refused_for(place(balanced("b", train_gpus=16), g, max_group_size=1)) is Refusal.GROUP_SIZE
    assert refused_for(place(balanced("b", train_gpus=16), g)) is Refusal.TRAIN_SHAPE


def test_the_placement_reason_is_the_nearest_miss():
    # One group is full, the other has room but a member with a tight SLO: the SLO is what
    # kept b out (the nearest miss), while the group counts keep both refusals.
    two = plan_group(Group(0, 1, 1, (Member(balanced("a1"), (0,), (0,)), Member(balanced("a2"), (0,), (0,)))), CFG)
    tight = founded(1, balanced("c", slo=1.0))
    plan = place(balanced("b"), two, tight, max_group_size=2)
    assert plan.why.counts() == {**dict.fromkeys(REASON_NAMES, 0), "group_size": 1, "member_slo": 1}
    assert plan.why.reason is Refusal.MEMBER_SLO


def test_index_exclusions_are_counted_apart_and_give_the_same_reasons():
    groups = [founded(i, balanced(f"a{i}", slo=1.0)) for i in range(6)]
    policy = make_policy(CFG)
    fast, slow = views(*groups)
    a, b = policy.place(balanced("b"), fast), policy.place(balanced("b"), slow)
    assert a.why == b.why and a.why.counts()["member_slo"] == 6
    assert a.why.by_index == 6 and b.why.by_index == 0  # the index's bounds excluded them all


def test_why_round_trips_through_its_json_form():
    why = PlacementWhy((0, 1, 0, 0, 2, 3, 4, 5, 6, 7), by_index=7)  # (untried 7: costlier is nearer)
    back = PlacementWhy.from_dict(why.to_dict())
    assert back == why and back.by_index == 7
    t = WhyTally()
    t.add(why)
    t.add(PlacementWhy((0,) * len(REFUSALS)))
    assert t.isolated == 2 and WhyTally.from_json(t.to_json()).to_json() == t.to_json()
    assert t.to_json()["placements"] == {**dict.fromkeys(REASON_NAMES, 0), "costlier": 1, "no_groups": 1}


# -- the counts add up ---------------------------------------------------------------------------------

class _Watch(RollMuxPlacement):
    """RollMuxPlacement that checks every isolated plan's why against its view."""

    def place(self, job, view):
        plan = super().place(job, view)
        if plan is not None and plan.case is Case.ISOLATED:
            assert plan.why is not None and plan.why.groups == len(view.groups)
            assert (plan.why.reason is Refusal.NO_GROUPS) == (not view.groups)
        else:
            assert plan is None or plan.why is None
        return plan


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), size=st.integers(1, 5),
       gap=st.sampled_from([60.0, 600.0, 3000.0]), stretch=st.booleans())
def test_reasons_add_up_to_the_isolated_placements(seed, n, size, gap, stretch):
    """Every isolated arrival is counted once, under one reason, and refused every group it saw
    (with stretch pricing and elastic shapes too: a group it would have cost more in is one)."""
    from rollmux.sim.simulator import simulate
    jobs = synthetic_trace(np.random.default_rng(seed), n, mean_gap_s=gap, duration_range=(2_000.0, 20_000.0))
    cfg = config(GROUPS, max_group_size=size, stretch_pricing=stretch, elastic_rollout=stretch)
    res = simulate(jobs, CLUSTER, cfg, _Watch(CFG, cfg), seed=seed)
    j = res.to_json()
    isolated = res.placements.get("isolated", 0)
    assert j["isolated_placements"] == isolated == sum(j["placements_why"].values())
    assert list(j["placements_why"]) == list(REASON_NAMES) == list(j["refusals_why"])
    assert j["placements_why"]["no_groups"] >= 1  # the first arrival found no group


def test_cluster_state_tallies_arrivals_only():
    env = SimEnvironment()
    st_ = ClusterState(env, CLUSTER, make_policy(CFG), GROUPS)
    st_.place(balanced("a", slo=1.0), {})
    st_.place(balanced("b"), {})
    (place,) = st_.decide(balanced("c", slo=1.0), {}, arrival=False)
    assert place.plan.case is Case.ISOLATED and place.plan.why is not None
    st_.apply(place)  # a move: counted when it arrived, not again
    assert st_.why.isolated == 2
    assert st_.why.to_json()["placements"]["no_groups"] == 1
    assert st_.why.to_json()["placements"]["member_slo"] == 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1000), kt=st.integers(0, 10), train_gb=st.floats(0, 2100), own_train=st.floats(0, 400),
       slack=st.floats(10, 2000), size=st.integers(1, 5), prune=st.booleans())
def test_the_index_refuses_exactly_where_it_may_not_take_the_job(seed, kt, train_gb, own_train, slack, size, prune):
    """`refusal_codes` is `may_take`'s filter (the policy uses one for the other), with a reason."""
    from rollmux.core.placement.index import JobNeeds
    d = IndexedGroups(CFG)
    policy = make_policy(CFG)
    for job in synthetic_trace(np.random.default_rng(seed), 25):
        v, _ = views(*d.values())
        plan = policy.place(job, v)
        d[plan.group.group_id] = plan.group
    need = JobNeeds(kt, train_gb, own_train, slack, size, 2048.0 + 1e-9, prune)
    codes = d.index.refusal_codes(need)
    assert np.array_equal(codes < 0, d.index.may_take(need))
    assert set(codes[codes >= 0].tolist()) <= {1, 2, 3, 4, 5, 6}  # never member_slo: budgets are not indexed


def test_a_why_journaled_before_a_reason_was_added_reads_with_it_at_zero():
    old = PlacementWhy.from_dict({"refused": [0, 1, 0, 0, 2, 3, 4, 5], "by_index": 1})
    assert old.counts()["costlier"] == 0 and old.counts()["member_slo"] == 5 and old.reason is Refusal.MEMBER_SLO


def test_a_why_with_more_counts_than_reasons_is_refused():
    import pytest
    with pytest.raises(ValueError, match="at most"):
        PlacementWhy.from_dict({"refused": [0] * (len(REFUSALS) + 1)})
