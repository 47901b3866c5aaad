"""The co-located model (core/colo_model.py): measured co-located profiles beside the calibrated model."""

from __future__ import annotations

import pytest
from factories import make_cluster, make_job

from rollmux.core.colo_model import colocated_factors, colocated_iter_s, colocated_phases
from rollmux.core.spec import ColocatedProfile

CLUSTER = make_cluster()


def _measured(job, rollout_s: float, train_s: float):
    return job.model_copy(update={"colocated": ColocatedProfile(rollout_s=rollout_s, train_s=train_s)})


def test_a_measured_profile_replaces_the_model_factors():
    job = make_job("a", rollout=150.0, train=100.0, sigma=0.2, rollout_max=400.0, rollout_gpus=8, train_gpus=8)
    measured = _measured(job, 1.3 * job.mean_rollout_s, 0.9 * job.mean_train_s)
    assert colocated_factors(measured) == pytest.approx((1.3, 0.9))
    assert colocated_factors(job) != pytest.approx((1.3, 0.9))  # (the model's, at this phase balance)


def test_the_mean_colocated_iteration_is_the_measured_one():
    job = make_job("a", rollout=150.0, train=100.0, sigma=0.2, rollout_max=400.0, rollout_gpus=8, train_gpus=8)
    measured = _measured(job, 210.0, 80.0)
    mean = job.mean_rollout_s
    assert colocated_iter_s(measured, CLUSTER, mean) == pytest.approx(210.0 + 80.0 + 2 * CLUSTER.warm_switch_s)
    # A draw keeps the disaggregated profile's shape, scaled: twice the rollout, twice both phases.
    r, t, _ = colocated_phases(measured, CLUSTER, 2 * mean, measured.train_time(2 * mean))
    assert (r, t) == pytest.approx((420.0, 160.0))


def test_colocated_speed_applies_on_top_of_a_measurement():
    job = _measured(make_job("a", rollout=150.0, train=100.0, rollout_gpus=8, train_gpus=8), 200.0, 90.0)
    fast = colocated_iter_s(job, CLUSTER, job.mean_rollout_s, speed=2.0)
    assert fast == pytest.approx((200.0 + 90.0) / 2 + 2 * CLUSTER.warm_switch_s)
