"""The per-job co-located mode (core/placement/options/colocated.py): option, SLO check, cost rule, validation."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.colo_model import colocated_iter_s
from rollmux.core.group import Group, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, PlanInvalid, validate_plan
from rollmux.core.placement.admission import group_fits
from rollmux.core.placement.costs import iteration_cost
from rollmux.core.placement.options.colocated import choose, colocated_option, colocated_slo_ok
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.sim.draws import rollout_draws, solo_seconds
from factories import ROLLOUT_HEAVY_COLO, intra, make_cluster, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()
H800_NODE = CLUSTER.pools.train.node_price_per_hour


def view(*groups: Group, free_train=None, progress=None) -> ClusterView:
    next_id = 1 + max((g.group_id for g in groups), default=-1)
    return ClusterView(CLUSTER, tuple(groups), None, free_train, 5, next_id, progress or {})


def rollout_heavy(job_id: str = "a", **kw):
    """The paper's 8B-32k shape: co-located it rolls out a third faster on the same 16 GPUs."""
    return make_job(job_id, rollout=888.0, train=560.0, sync=10.0, rollout_gpus=16, train_gpus=16,
                    colo=ROLLOUT_HEAVY_COLO, **kw)


def place(job, v: ClusterView, **kw):
    plan = make_policy(CFG, colocate=True, **kw).place(job, v)
    if plan is not None:
        validate_plan(plan, job, v)
    return plan


def test_a_cheaper_colocated_job_runs_on_its_training_nodes_alone():
    job = rollout_heavy()
    plan = place(job, view())
    assert plan.case is Case.COLOCATED
    g = plan.group
    assert (g.n_rollout, g.n_train, plan.added_rollout_nodes, plan.added_train_nodes) == (0, 2, 0, 2)
    assert g.members[0].rollout_nodes == () and g.members[0].train_nodes == (0, 1)
    assert plan.delta_cost_per_hour == pytest.approx(2 * H800_NODE)
    assert g.shape.period_s == pytest.approx(colocated_iter_s(job, CLUSTER, job.rollout_s.max))
    assert plan.why is None  # not an isolated placement: no reasons to count


def test_off_the_same_job_gets_an_isolated_group():
    plan = make_policy(CFG).place(rollout_heavy(), view())
    assert plan.case is Case.ISOLATED


def test_direct_packing_beats_colocation():
    a, b = (make_job(j, rollout=100.0, train=100.0) for j in "ab")
    g = plan_group(isolated_group(0, a, CLUSTER), CFG)
    plan = place(b, view(g))
    assert plan.case is Case.DIRECT


def test_cost_rule_compares_cost_per_iteration_with_the_margin():
    job = rollout_heavy()
    v = view()
    colo = colocated_option(job, v, CFG)
    iso = isolated_plan(job, v, CFG)
    ratio = iteration_cost(colo) / iteration_cost(iso)
    # rate x planned iteration time, per iteration, in dollars
    assert iteration_cost(iso) == pytest.approx(iso.delta_cost_per_hour * iso.group.shape.period_s / 3600)
    assert 0.5 < ratio < 0.7
    assert choose(job, v, None, lambda: iso, CFG, 1.0, margin=ratio + 0.01).case is Case.COLOCATED
    assert choose(job, v, None, lambda: iso, CFG, 1.0, margin=ratio - 0.01).case is Case.ISOLATED


def test_a_dearer_colocated_job_stays_disaggregated():
    # 32 rollout GPUs, 8 training GPUs: co-located it needs 4 H800 nodes instead of 4 H20 + 1 H800.
    job = make_job("w", rollout=300.0, train=100.0, rollout_gpus=32, train_gpus=8)
    assert place(job, view()).case is Case.ISOLATED


def test_colocated_slo_check_follows_speed_and_slo():
    slow = 0.4  # co-located phases 2.5x slower than calibrated
    assert colocated_slo_ok(rollout_heavy(slo=1.2), CLUSTER)
    assert not colocated_slo_ok(rollout_heavy(slo=1.2), CLUSTER, slow)
    assert colocated_slo_ok(rollout_heavy(slo=3.0), CLUSTER, slow)
    assert place(rollout_heavy(slo=1.2), view(), colo_speed=slow).case is Case.ISOLATED


@settings(max_examples=25, deadline=None)
@given(median=st.floats(20, 2000), train=st.floats(20, 2000), sync=st.floats(0, 60),
       sigma=st.floats(0, 1.2), cap=st.floats(1.0, 6.0), slo=st.floats(1.0, 1.6),
       speed=st.floats(0.6, 1.4), seed=st.integers(0, 50))
def test_colocated_slo_ok_means_the_run_meets_its_slo(median, train, sync, sigma, cap, slo, speed, seed):
    """The check's claim: whatever the draws, the co-located mean meets the SLO as judged."""
    job = make_job("p", rollout=median, rollout_max=median * cap, sigma=sigma, train=train, sync=sync,
                   slo=slo, duration=40 * (median + train))
    if not colocated_slo_ok(job, CLUSTER, speed):
        return
    draws = rollout_draws(job, seed)
    mean_colo = float(np.mean([colocated_iter_s(job, CLUSTER, float(r), speed) for r in draws]))
    solo = max(job.solo_iter_s, solo_seconds(job, draws) / job.iterations)
    assert mean_colo <= slo * solo * (1 + 1e-9)


def test_no_option_for_a_migrant_a_full_pool_or_too_much_host_state():
    job = rollout_heavy()
    assert colocated_option(job, view(progress={"a": (3, 4000.0)}), CFG) is None
    # A migrant with no iteration done yet still moves between groups only; a queued arrival
    # whose wait the live plane lists as its progress (no iteration done) may go co-located.
    assert colocated_option(job, replace(view(progress={"a": (0, 40.0)}), moving=True), CFG) is None
    assert colocated_option(job, view(progress={"a": (0, 40.0)}), CFG) is not None
    assert colocated_option(job, view(free_train=1), CFG) is None
    assert place(job, view(free_train=1)) is None  # the isolated group needs 2 training nodes too
    heavy = rollout_heavy(host_rollout=1100.0, host_train=1000.0)  # each fits a node, both do not
    assert colocated_option(heavy, view(), CFG) is None
    assert place(heavy, view()).case is Case.ISOLATED


@pytest.mark.parametrize("broken, code", [
    (lambda p, g: dataclasses.replace(p, delta_cost_per_hour=1.0), "C5"),
    (lambda p, g: dataclasses.replace(p, group=Group(g.group_id, 0, 3, g.members, g.shape), added_train_nodes=3,
                                      delta_cost_per_hour=3 * H800_NODE), "C2"),
    (lambda p, g: dataclasses.replace(p, group=Group(g.group_id, 1, 2, g.members, g.shape),
                                      added_rollout_nodes=1), "C2"),
])
def test_validate_plan_refuses_a_broken_colocated_plan(broken, code):
    job = rollout_heavy()
    v = view()
    plan = colocated_option(job, v, CFG)
    validate_plan(plan, job, v)
    with pytest.raises(PlanInvalid, match=code):
        validate_plan(broken(plan, plan.group), job, v)


def test_validate_plan_refuses_a_colocated_plan_into_an_existing_group():
    job = rollout_heavy()
    other = plan_group(isolated_group(0, make_job("x"), CLUSTER), CFG)
    v = view(other)
    plan = colocated_option(job, v, CFG)
    moved = dataclasses.replace(plan, group=dataclasses.replace(plan.group, group_id=0))
    with pytest.raises(PlanInvalid, match="C1"):
        validate_plan(moved, job, v)


def test_the_co_located_option_is_planned_at_the_estimate_the_groups_are_planned_with():
    from rollmux.core.colo_model import colocated_iter_s
    from rollmux.core.period_sample import mean_rollout
    job = make_job("a", rollout=100.0, train=100.0, sigma=0.1, rollout_max=150.0, slo=2.0)
    v = view()
    worst = colocated_option(job, v, CFG).group.shape.period_s
    mean_cfg = intra(plan="mean")
    mean = colocated_option(job, v, mean_cfg).group.shape.period_s
    assert worst == pytest.approx(colocated_iter_s(job, CLUSTER, 150.0))
    assert mean == pytest.approx(colocated_iter_s(job, CLUSTER, mean_rollout(job, mean_cfg.plan_chains,
                                                                             mean_cfg.plan_length)))
    assert mean < worst


# -- a job that cannot run co-located (`JobSpec.cannot`) ----------------------------------------

def test_a_job_that_cannot_run_colocated_is_placed_disaggregated_within_its_slo():
    assert place(rollout_heavy(), view()).case is Case.COLOCATED  # (as the first test: it would be)
    job = rollout_heavy(cannot=["colocate"])
    plan = place(job, view())
    assert plan.case is Case.ISOLATED and plan.group.member("a").rollout_nodes == (0, 1)
    assert group_fits(plan.group, {}, CFG)


def test_no_colocated_option_for_a_job_that_cannot_take_it():
    assert colocated_option(rollout_heavy(), view(), CFG) is not None
    assert colocated_option(rollout_heavy(cannot=["colocate"]), view(), CFG) is None


def test_validate_plan_refuses_a_colocated_plan_for_a_job_that_cannot_take_it():
    plan = colocated_option(rollout_heavy(), view(), CFG)
    with pytest.raises(PlanInvalid, match="C0"):
        validate_plan(plan, rollout_heavy(cannot=["colocate"]), view())
