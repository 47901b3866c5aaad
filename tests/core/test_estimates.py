"""What the scheduler believes about a job's phase times, from measurements."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_job

from rollmux.core.estimates import PhaseEstimate, measured_spec


def _observe(est: PhaseEstimate, rng: np.random.Generator, n: int, a: float = 1.0, b: float = 1.0) -> None:
    job = est.job
    for _ in range(n):
        base = min(job.rollout_s.median * float(np.exp(job.rollout_s.sigma * rng.standard_normal())),
                   job.rollout_s.max)
        est.observe(a * base, b * job.train_time(base))


def test_noise_alone_leaves_the_declared_profile():
    job = make_job("j", rollout=100, sigma=0.3, rollout_max=300)
    est = PhaseEstimate(job)
    _observe(est, np.random.default_rng(1), 40)
    assert est.scales() == (1.0, pytest.approx(1.0))


def test_drift_is_measured_in_both_phases():
    job = make_job("j", rollout=100, sigma=0.1, rollout_max=140)
    est = PhaseEstimate(job)
    _observe(est, np.random.default_rng(2), 10, a=1.6, b=2.0)
    a, b = est.scales()
    assert a == pytest.approx(1.6, rel=0.1) and b == pytest.approx(2.0, rel=0.1)


def test_training_drift_alone_is_exact_after_one_iteration():
    job = make_job("j", rollout=100, sigma=0.1, rollout_max=140)
    est = PhaseEstimate(job)
    _observe(est, np.random.default_rng(3), 1, b=1.5)
    assert est.scales() == (1.0, pytest.approx(1.5))


def test_measured_spec_keeps_the_work_and_scales_the_times():
    job = make_job("j", rollout=100, train=50, sigma=0.1, rollout_max=140, duration=200 * 30)
    spec = measured_spec(job, 1.5, 2.0)
    assert spec.iterations == job.iterations
    assert (spec.rollout_s.median, spec.rollout_s.max, spec.train_s) == (150.0, 210.0, 100.0)
    assert spec.train_time(150.0) == pytest.approx(2.0 * job.train_time(100.0))
    assert measured_spec(job, 1.0, 1.0) is job


def test_a_drifted_spec_keeps_its_measured_colocated_ratios():
    from rollmux.core.colo_model import colocated_factors
    from rollmux.core.spec import ColocatedProfile
    job = make_job("a", rollout=150.0, train=100.0, sigma=0.2, rollout_max=400.0)
    job = job.model_copy(update={"colocated": ColocatedProfile(rollout_s=180.0, train_s=70.0)})
    drifted = measured_spec(job, 1.5, 2.0)
    assert drifted.colocated.rollout_s == pytest.approx(270.0) and drifted.colocated.train_s == pytest.approx(140.0)
    assert colocated_factors(drifted) == pytest.approx(colocated_factors(job))
