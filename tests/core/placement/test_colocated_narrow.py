"""Narrowed co-location (core/colo_model.py): with elastic rollout, a job with more rollout than
training GPUs may run co-located on its training GPUs' nodes, its rollout slower by the elastic
model's factor."""

from __future__ import annotations

import dataclasses

import pytest

from rollmux.core.colo_model import colocated_factors, colocated_iter_s, group_gpus, narrowed_gpus, verl_rollout_scale
from rollmux.core.elastic import nonscaling_share
from rollmux.core.placement import Case, ClusterView, PlanInvalid, validate_plan
from rollmux.core.placement.costs import iteration_cost
from rollmux.core.placement.options.colocated import colocated_option, colocated_slo_ok
from factories import ROLLOUT_HEAVY_COLO, TRAIN_HEAVY_COLO, intra, make_cluster, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()
H800_NODE = CLUSTER.pools.train.node_price_per_hour


def view() -> ClusterView:
    return ClusterView(CLUSTER, (), None, None, 5, 0, {})


def wide(job_id: str = "a", slo: float = 1.5, **kw):
    """A train-heavy 16:8 job: co-located on one H800 node its rollout is slower, its iteration
    still within its SLO, and it holds half the nodes."""
    return make_job(job_id, rollout=100.0, train=300.0, rollout_gpus=16, train_gpus=8, tail_frac=0.1, slo=slo,
                    colo=TRAIN_HEAVY_COLO, **kw)


@pytest.mark.parametrize("rollout_gpus, train_gpus, narrowed", [
    (16, 8, 8), (8, 8, None), (16, 16, None), (32, 8, None), (24, 16, 16), (8, 4, None), (16, 4, 8)])
def test_narrowed_gpus_are_the_training_nodes_within_the_elastic_range(rollout_gpus, train_gpus, narrowed):
    job = make_job(rollout_gpus=rollout_gpus, train_gpus=train_gpus)
    assert narrowed_gpus(job, CLUSTER) == narrowed


def test_a_narrowed_rollout_takes_the_elastic_factor_on_top_of_the_verl_one():
    job = wide()
    c = nonscaling_share(job)
    assert verl_rollout_scale(job, CLUSTER, gpus=8) == pytest.approx(colocated_factors(job)[0] * (c + (1 - c) * 2))
    assert verl_rollout_scale(job, CLUSTER) == pytest.approx(colocated_factors(job)[0])  # on its 16 GPUs
    assert verl_rollout_scale(job, CLUSTER, gpus=8) > verl_rollout_scale(job, CLUSTER)


def test_with_narrowing_the_option_holds_one_node_and_is_cheaper_per_iteration():
    job = wide()
    nominal = colocated_option(job, view(), CFG)
    narrow = colocated_option(job, view(), CFG, narrow=True)
    assert (nominal.group.n_train, narrow.group.n_train) == (2, 1)
    assert narrow.delta_cost_per_hour == pytest.approx(H800_NODE)
    assert narrow.group.shape.period_s == pytest.approx(colocated_iter_s(job, CLUSTER, job.rollout_s.max, gpus=8))
    assert iteration_cost(narrow) < iteration_cost(nominal)
    assert group_gpus(narrow.group, CLUSTER) == 8 and group_gpus(nominal.group, CLUSTER) == 16
    for plan in (nominal, narrow):
        validate_plan(plan, job, view())


def test_a_narrowing_that_breaks_the_slo_is_not_taken():
    # rollout-heavy and tight: on its 16 H800 GPUs it runs faster than solo, on 8 its rollout is 1.2x
    job = make_job("r", rollout=300.0, train=100.0, rollout_gpus=16, train_gpus=8, tail_frac=0.1, slo=1.05,
                   colo=ROLLOUT_HEAVY_COLO)
    assert colocated_slo_ok(job, CLUSTER) and not colocated_slo_ok(job, CLUSTER, gpus=8)
    assert colocated_option(job, view(), CFG, narrow=True).group.n_train == 2


@pytest.mark.parametrize("elastic, narrow, case", [
    (False, True, Case.ISOLATED), (True, False, Case.ISOLATED), (True, True, Case.COLOCATED)])
def test_the_policy_narrows_only_with_elastic_rollout_and_its_switch(elastic, narrow, case):
    # On its 16 H800 GPUs the job costs about what its own group does, so it gets the group;
    # on one H800 node it costs well under the margin.
    job = wide()
    policy = make_policy(CFG, colocate=True, elastic_rollout=elastic, colo_narrow=narrow)
    plan = policy.place(job, view())
    validate_plan(plan, job, view())
    assert plan.case is case and plan.group.n_train == 1


def test_validate_plan_refuses_a_co_located_plan_on_other_training_nodes():
    job = wide()
    plan = colocated_option(job, view(), CFG, narrow=True)
    three = dataclasses.replace(plan, group=dataclasses.replace(plan.group, n_train=3), added_train_nodes=3,
                                delta_cost_per_hour=3 * H800_NODE)
    with pytest.raises(PlanInvalid, match="C2"):
        validate_plan(three, job, view())
    lone = make_job("b", rollout_gpus=8, train_gpus=8)  # no narrowed shape: one node only
    assert narrowed_gpus(lone, CLUSTER) is None


def test_a_job_that_cannot_take_elastic_rollout_is_never_narrowed():
    job = wide(cannot=["elastic_rollout"])
    assert colocated_option(job, view(), CFG, narrow=True).group.n_train == 2  # its G alone
    plan = make_policy(CFG, colocate=True, elastic_rollout=True, colo_narrow=True).place(job, view())
    validate_plan(plan, job, view())  # (where `wide()` runs co-located on one node: the test above)
    assert plan.case is Case.ISOLATED and plan.group.member("a").rollout_nodes == (0, 1)
    assert plan.group.member("a").rollout_factor == 1.0


def test_validate_plan_refuses_a_narrowed_plan_for_a_job_that_cannot_take_elastic_rollout():
    plan = colocated_option(wide(), view(), CFG, narrow=True)
    with pytest.raises(PlanInvalid, match="C2"):
        validate_plan(plan, wide(cannot=["elastic_rollout"]), view())
