"""Options beyond Algorithm 1 (core/placement/options/): training scaling, elastic rollout, fewer-node groups."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.elastic import rollout_factor
from rollmux.core.group import Group, Member, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import (
    Case,
    ClusterView,
    PlacementPlan,
    PlanInvalid,
    RollMuxPlacement,
    pricing,
    trial,
    validate_plan,
)
from rollmux.core.placement.admission import group_fits
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.placement.options import isolated
from rollmux.core.placement.why import Refusal
from rollmux.study.placement_bench import indexed_view
from factories import intra, make_cluster, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()
R_NODE = CLUSTER.pools.rollout.node_price_per_hour
T_NODE = CLUSTER.pools.train.node_price_per_hour


def founded(group_id: int, job) -> Group:
    return plan_group(isolated_group(group_id, job, CLUSTER), CFG)


def view(*groups: Group, cluster=CLUSTER) -> ClusterView:
    return ClusterView(cluster, tuple(groups), None, None, 5, 1 + max((g.group_id for g in groups), default=-1))


def policy(train_scaling=False, elastic=False, stretch=False, planner=CFG) -> RollMuxPlacement:
    return make_policy(planner, train_scaling=train_scaling, elastic_rollout=elastic, stretch_pricing=stretch)


def place(p: RollMuxPlacement, job, v: ClusterView) -> PlacementPlan:
    plan = p.place(job, v)
    validate_plan(plan, job, v)
    return plan


# -- training scaling ----------------------------------------------------------------------------

def test_off_by_default():
    assert not make_policy().shapes.on


def test_a_job_needing_more_training_nodes_joins_by_adding_them():
    g = founded(0, make_job("a"))
    big = make_job("b", train_gpus=16)
    off = place(policy(), big, view(g))
    assert off.case is Case.ISOLATED and off.why.reason is Refusal.TRAIN_SHAPE
    p = policy(train_scaling=True)
    plan = place(p, big, view(g))
    assert plan.case is Case.TRAIN_SCALING and plan.group.group_id == 0
    assert (plan.added_rollout_nodes, plan.added_train_nodes, plan.group.n_train) == (0, 1, 2)
    assert plan.delta_cost_per_hour == pytest.approx(T_NODE)
    assert plan.group.member("b").train_nodes == (0, 1) and plan.group.member("a") == g.member("a")
    assert p.shape_stats.train_scaled == 1
    # Departure-time re-placement sees the same option, and join_matrix does not rule it out.
    assert p.place_joined(big, view(g)) == plan
    assert p.could_join(big, g, view(g))


def test_training_scaling_still_checks_every_members_slo():
    tight = founded(0, make_job("a", rollout=100.0, train=100.0, slo=1.01))
    plan = place(policy(train_scaling=True), make_job("b", train_gpus=16), view(tight))
    assert plan.case is Case.ISOLATED and plan.why.reason is Refusal.MEMBER_SLO


def test_training_scaling_respects_training_residency_on_the_shared_nodes():
    cluster = make_cluster(host_gb=100.0)
    g = plan_group(isolated_group(0, make_job("a", host_train=60.0), cluster), CFG)
    plan = policy(train_scaling=True).place(make_job("b", train_gpus=16, host_train=60.0), view(g, cluster=cluster))
    assert plan.case is Case.ISOLATED and plan.why.reason is Refusal.RESIDENCY


# -- elastic rollout -----------------------------------------------------------------------------

def test_a_loose_job_joins_on_fewer_rollout_nodes_instead_of_adding_one():
    g = founded(0, make_job("a", rollout=50.0, train=50.0, slo=3.0))
    wide = make_job("b", rollout=100.0, train=100.0, rollout_gpus=16, slo=2.0)
    nominal = place(policy(), wide, view(g))
    assert nominal.case is Case.SCALING and nominal.added_rollout_nodes == 1
    p = policy(elastic=True)
    plan = place(p, wide, view(g))
    assert plan.case is Case.DIRECT and plan.delta_cost_per_hour == 0.0
    m = plan.group.member("b")
    assert m.rollout_nodes == (0,) and m.rollout_factor == pytest.approx(rollout_factor(wide, 2, 1))
    assert p.shape_stats.fewer_nodes == 1
    # The planned period counts the slower rollout: b's cycle alone at 1 node.
    assert plan.group.shape.t_cycle_s == pytest.approx(100.0 * m.rollout_factor + 100.0 + 5.0)


def test_a_tight_job_keeps_its_nominal_nodes():
    g = founded(0, make_job("a", rollout=50.0, train=50.0))
    plan = place(policy(elastic=True), make_job("b", rollout_gpus=16, slo=1.05), view(g))
    assert all(len(m.rollout_nodes) == 2 or m.job_id == "a" for m in plan.group.members)
    assert plan.group.member("b").rollout_factor == 1.0


def test_an_isolated_job_takes_fewer_rollout_nodes_when_its_slo_allows():
    p = policy(elastic=True)
    loose = place(p, make_job("b", rollout_gpus=16, slo=2.0), view())
    assert loose.case is Case.ISOLATED and loose.group.n_rollout == 1
    assert loose.delta_cost_per_hour == pytest.approx(R_NODE + T_NODE)
    assert p.shape_stats.isolated_fewer == 1
    tight = place(p, make_job("c", rollout_gpus=16, slo=1.05), view())
    assert tight.group.n_rollout == 2 and tight.group.member("c").rollout_factor == 1.0


def test_a_job_that_cannot_take_elastic_rollout_joins_on_its_declared_nodes():
    g = founded(0, make_job("a", rollout=50.0, train=50.0, slo=3.0))
    wide = make_job("b", rollout=100.0, train=100.0, rollout_gpus=16, slo=2.0, cannot=["elastic_rollout"])
    p = policy(elastic=True)  # (where the job without `cannot` joins on one node: the test above)
    plan = place(p, wide, view(g))
    assert plan.case is Case.SCALING and plan.added_rollout_nodes == 1
    m = plan.group.member("b")
    assert len(m.rollout_nodes) == 2 and m.rollout_factor == 1.0
    assert group_fits(plan.group, {}, CFG) and p.shape_stats.fewer_nodes == 0


def test_a_job_that_cannot_take_elastic_rollout_founds_its_group_on_its_declared_nodes():
    p = policy(elastic=True)
    plan = place(p, make_job("b", rollout_gpus=16, slo=2.0, cannot=["elastic_rollout"]), view())
    assert plan.case is Case.ISOLATED and plan.group.n_rollout == 2
    assert plan.group.member("b").rollout_factor == 1.0 and p.shape_stats.isolated_fewer == 0


def test_its_departure_time_placement_keeps_its_declared_nodes_too():
    g = founded(0, make_job("a", rollout=50.0, train=50.0, slo=3.0))
    wide = make_job("b", rollout=100.0, train=100.0, rollout_gpus=16, slo=2.0, cannot=["elastic_rollout"])
    plan = policy(elastic=True).place_joined(wide, view(g))
    assert plan is not None and len(plan.group.member("b").rollout_nodes) == 2


# -- validate_plan --------------------------------------------------------------------------------

def _iso(member: Member, n_rollout: int, n_train: int = 1) -> PlacementPlan:
    g = Group(0, n_rollout, n_train, (member,))
    return PlacementPlan(member.job_id, Case.ISOLATED, g, n_rollout, n_train, n_rollout * R_NODE + n_train * T_NODE)


def test_validate_plan_checks_the_elastic_factor_and_range():
    job = make_job("b", rollout_gpus=16)
    validate_plan(_iso(Member(job, (0,), (0,), rollout_factor(job, 2, 1)), 1), job, view())
    with pytest.raises(PlanInvalid, match="^I3:"):
        validate_plan(_iso(Member(job, (0,), (0,)), 1), job, view())  # fewer nodes at full speed
    with pytest.raises(PlanInvalid, match="^I3:"):
        validate_plan(_iso(Member(job, (0, 1), (0,), 0.9), 2), job, view())  # nominal nodes, faster
    with pytest.raises(PlanInvalid, match="^I3:"):
        validate_plan(_iso(Member(job, tuple(range(5)), (0,), rollout_factor(job, 2, 5)), 5), job, view())


def test_validate_plan_refuses_an_elastic_count_for_a_job_that_cannot_take_it():
    job = make_job("b", rollout_gpus=16, cannot=["elastic_rollout"])
    validate_plan(_iso(Member(job, (0, 1), (0,)), 2), job, view())
    with pytest.raises(PlanInvalid, match="^I3:"):
        validate_plan(_iso(Member(job, (0,), (0,), rollout_factor(job, 2, 1)), 1), job, view())


def test_validate_plan_allows_training_nodes_only_up_to_the_newcomers_need():
    g = founded(0, make_job("a"))
    job = make_job("b", train_gpus=16)
    grown = Group(0, 1, 3, g.members + (Member(job, (0,), (0, 1)),))
    plan = PlacementPlan("b", Case.TRAIN_SCALING, grown, 0, 2, 2 * T_NODE)
    with pytest.raises(PlanInvalid, match="^I2:"):
        validate_plan(plan, job, view(g))


# -- the index stays sound with shapes on ------------------------------------------------------

job_st = st.tuples(st.sampled_from([40.0, 100.0, 300.0]), st.sampled_from([30.0, 100.0, 200.0]),
                   st.sampled_from([1.05, 1.5, 2.0]), st.sampled_from([8, 16]), st.sampled_from([8, 16, 24]),
                   st.sampled_from([0.0, 0.3]))


def _job(name: str, p: tuple):
    r, t, slo, rg, tg, tail = p
    return make_job(name, rollout=r, rollout_max=1.3 * r, sigma=0.2, train=t, slo=slo, rollout_gpus=rg,
                    train_gpus=tg, tail_frac=tail, duration=50_000.0)


@settings(max_examples=20, deadline=None)
@given(specs=st.lists(job_st, min_size=1, max_size=10), probes=st.lists(job_st, min_size=1, max_size=3),
       switches=st.sampled_from([(True, False), (False, True), (True, True), (False, True, True),
                                 (False, False, True)]),
       plan=st.sampled_from(["worst", "mean"]), cap=st.sampled_from([pricing.EXACT_TRIES, 1, 3]))
def test_indexed_placement_equals_a_brute_force_scan_and_join_matrix_stays_necessary(specs, probes, switches, plan,
                                                                                    cap):
    with mock.patch.object(pricing, "EXACT_TRIES", cap):  # (the mean plan's bounded search binds too)
        _equal_with_and_without_the_index(specs, probes, switches, plan)


def _equal_with_and_without_the_index(specs, probes, switches, plan):
    p = policy(*switches, planner=intra(plan=plan))
    groups = IndexedGroups(p.cfg)
    for i, s in enumerate(specs):
        plan = p.place(_job(f"j{i}", s), indexed_view(groups, CLUSTER, 5))
        groups[plan.group.group_id] = plan.group
    v = indexed_view(groups, CLUSTER, 5)
    brute = dataclasses.replace(v, index=None)
    for i, s in enumerate(probes):
        job = _job(f"probe{i}", s)
        plan = p.place(job, v)
        assert plan == p.place(job, brute)
        validate_plan(plan, job, v)
        joined = p.place_joined(job, v)
        assert joined == p.place_joined(job, brute)
        if joined is not None:
            target = v.group(joined.group.group_id)
            assert p.could_join(job, target, v)


def test_the_live_codec_keeps_an_elastic_members_factor_and_old_records_read_nominal():
    from rollmux.core.record_forms import group_from_dict, group_to_dict

    job = make_job("b", rollout_gpus=16)
    g = plan_group(Group(0, 1, 1, (Member(job, (0,), (0,), rollout_factor(job, 2, 1)),)), CFG)
    d = group_to_dict(g)
    assert group_from_dict(d, CFG) == g
    nominal = founded(1, make_job("a"))
    assert "rollout_factor" not in group_to_dict(nominal)["members"][0]
    assert group_from_dict(group_to_dict(nominal), CFG).members[0].rollout_factor == 1.0


# -- under the "mean" plan -------------------------------------------------------------------------

MEAN = intra(plan="mean")


def mean_policy(stretch: bool = False) -> RollMuxPlacement:
    return make_policy(MEAN, elastic_rollout=True, stretch_pricing=stretch)


def test_the_mean_plan_offers_elastic_shapes_too():
    # Its sampled schedule scales each rollout by the member's factor (core/period_sample.py).
    g = plan_group(isolated_group(0, make_job("a", rollout=50.0, train=50.0, slo=3.0), CLUSTER), MEAN)
    plan = place(mean_policy(), make_job("b", rollout=100.0, train=100.0, rollout_gpus=16, slo=2.0), view(g))
    assert plan.case is Case.DIRECT and plan.group.member("b").rollout_nodes == (0,)


def test_under_the_mean_plan_an_isolated_job_on_fewer_nodes_must_pass_the_confident_mean():
    # sigma 0.3: the confidence term over 3 remaining iterations is large. The job's sample
    # mean on one node fits its budget, its confident mean does not: it keeps both nodes.
    job = make_job("c", rollout=100.0, train=100.0, rollout_gpus=16, sigma=0.3, rollout_max=400.0,
                   duration=3 * 214.0, slo=2.0)
    loose = place(mean_policy(), job, view())
    assert loose.case is Case.ISOLATED and loose.group.n_rollout == 2
    roomy = job.model_copy(update={"slo": 3.0})
    assert place(mean_policy(), roomy, view()).group.n_rollout == 1



def _tight_groups(n: int) -> list[Group]:
    """`n` lone members whose SLO leaves a newcomer's training no room under the mean plan."""
    return [plan_group(isolated_group(i, make_job(f"a{i}", rollout=200.0, train=60.0 + i, sigma=0.2,
                                                  rollout_max=400.0, slo=1.02), CLUSTER), MEAN)
            for i in range(n)]


NEWCOMER = dict(rollout=150.0, train=50.0, sigma=0.2, rollout_max=300.0, slo=3.0)


def test_the_mean_search_checks_the_options_with_most_headroom_first_and_at_most_exact_tries():
    # In Δ order the roomy group's options come after every tight group's; by headroom, first.
    n = pricing.EXACT_TRIES + 4
    roomy = plan_group(isolated_group(n, make_job("roomy", rollout=200.0, train=40.0, sigma=0.2,
                                                  rollout_max=400.0, slo=3.0), CLUSTER), MEAN)
    p = mean_policy(stretch=True)
    planned = []  # exact checks: a joined option's planned group, a fewer-node group of its own
    real, real_iso = trial.plan_group, isolated.isolated_shape
    with mock.patch.object(trial, "plan_group", side_effect=lambda *a, **k: planned.append(1) or real(*a, **k)), \
            mock.patch.object(isolated, "isolated_shape",
                              side_effect=lambda *a, **k: planned.append(1) or real_iso(*a, **k)):
        plan = place(p, make_job("b", **NEWCOMER), view(*_tight_groups(n), roomy))
    assert plan.group.group_id == n and 0 < len(planned) <= pricing.EXACT_TRIES


def test_a_group_the_bounded_search_never_checked_exactly_is_refused_as_untried():
    p = mean_policy(stretch=True)
    with mock.patch.object(pricing, "EXACT_TRIES", 1):
        plan = place(p, make_job("b", **NEWCOMER), view(*_tight_groups(3)))
    counts = plan.why.counts()
    assert plan.case is Case.ISOLATED and plan.why.groups == 3 and counts["untried"] >= 1
    assert plan.why.reason is Refusal.UNTRIED
