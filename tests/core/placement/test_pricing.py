"""Stretch pricing (core/placement/pricing.py, `Cheapest`): a join is charged the members'
stretch, and placement takes the valid option that adds least per iteration."""

from __future__ import annotations

import dataclasses

import pytest

from rollmux.core.group import Group, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, RollMuxPlacement, validate_plan
from rollmux.core.placement.costs import added_cost, group_cost_per_period, plan_added_cost
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.placement.why import Refusal
from factories import intra, make_cluster, make_job, make_policy

CFG = intra()
CLUSTER = make_cluster()


def founded(group_id: int, job) -> Group:
    """The planned group a job founds alone."""
    return plan_group(isolated_group(group_id, job, CLUSTER), CFG)


def views(*groups: Group) -> tuple[ClusterView, ClusterView]:
    """The same view with the group index and without it."""
    d = IndexedGroups(CFG)
    for g in groups:
        d[g.group_id] = g
    v = ClusterView(CLUSTER, d.values_tuple(), None, None, 5, 1 + max(g.group_id for g in groups),
                    index=d.index.snapshot(d.values_tuple()))
    return v, dataclasses.replace(v, index=None)


def policy(stretch: bool) -> RollMuxPlacement:
    return make_policy(CFG, stretch_pricing=stretch)


def place(job, *groups: Group, stretch: bool):
    """The policy's validated plan, the same with and without the index."""
    fast, slow = views(*groups)
    plan = policy(stretch).place(job, fast)
    assert plan == policy(stretch).place(job, slow)
    validate_plan(plan, job, fast)
    return plan, fast


def wide_trainer():
    """A train-heavy job on 2 rollout and 2 training nodes: an expensive group to stretch."""
    return make_job("wide", rollout=50.0, train=200.0, rollout_gpus=16, train_gpus=16)


def test_a_new_group_adds_its_rate_times_its_period():
    g = founded(0, make_job("a"))
    assert group_cost_per_period(g, CLUSTER) == pytest.approx(g.cost_per_hour(CLUSTER) * g.shape.period_s / 3600)
    iso, view = place(make_job("b"), founded(0, make_job("a", rollout=300.0, train=300.0, slo=1.0)), stretch=True)
    assert iso.case is Case.ISOLATED
    assert plan_added_cost(iso, view) == pytest.approx(group_cost_per_period(iso.group, CLUSTER))


def test_a_join_is_charged_what_it_adds_to_the_group_per_meta_iteration():
    before = founded(0, wide_trainer())
    plan, view = place(make_job("t", rollout=50.0, train=200.0), before, stretch=False)
    assert plan.case is Case.DIRECT and plan.group.shape.period_s > before.shape.period_s
    stretch = before.cost_per_hour(CLUSTER) * (plan.group.shape.period_s - before.shape.period_s) / 3600
    assert added_cost(plan, before, CLUSTER) == pytest.approx(stretch)  # Δ = 0: only the stretch
    assert plan_added_cost(plan, view) == pytest.approx(stretch)


def test_a_join_whose_stretch_costs_more_than_new_nodes_is_refused_as_costlier():
    # Direct packing adds no nodes but serializes two long trainings on the wide group's
    # training node: Δ pricing takes it, stretch pricing gives the job a group of its own.
    job = make_job("t", rollout=50.0, train=200.0)
    group = founded(0, wide_trainer())
    assert place(job, group, stretch=False)[0].case is Case.DIRECT
    plan, _ = place(job, group, stretch=True)
    assert plan.case is Case.ISOLATED and plan.why.reason is Refusal.COSTLIER
    assert plan.why.counts()["costlier"] == 1 and plan.why.groups == 1


def test_a_join_that_fills_bubbles_is_taken_by_both():
    # A train-heavy job trains while a rollout-heavy group rolls out: no nodes, and a stretch of
    # only the switches, a small share of what a group of its own would add.
    group = founded(0, make_job("r", rollout=300.0, train=30.0))
    job = make_job("s", rollout=30.0, train=200.0)
    a, _ = place(job, group, stretch=False)
    b, view = place(job, group, stretch=True)
    assert a.case is b.case is Case.DIRECT and a.group == b.group
    assert 0 <= plan_added_cost(b, view) < 0.05 * group_cost_per_period(founded(1, job), CLUSTER)


def test_stretch_pricing_takes_the_cheaper_of_two_valid_groups_where_delta_takes_the_first():
    job = make_job("t", rollout=50.0, train=200.0)
    stretched = founded(0, wide_trainer())                    # first in view order, Δ = 0, long stretch
    filler = founded(1, make_job("r", rollout=300.0, train=30.0))  # Δ = 0, no stretch
    assert place(job, stretched, filler, stretch=False)[0].group.group_id == 0
    plan, _ = place(job, stretched, filler, stretch=True)
    assert plan.case is Case.DIRECT and plan.group.group_id == 1
