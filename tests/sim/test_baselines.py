"""Closed-form baselines and the co-located (veRL) model (DESIGN §6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import (
    PAPER_COLOCATED_PAIRS,
    busy_time_bound,
    colocated_factors,
    simulate_verl,
    solo_d_cost,
    verl_rollout_scale,
    verl_train_scale,
)
from rollmux.workload.catalog import recipe, recipe_profile
from rollmux.workload.jobs import make_job as make_job_from_profile
from tests.factories import make_cluster, make_job, synthetic_trace

CLUSTER = default_cluster()  # H20 $1/GPU-h (4.0 TB/s), H800 $2.85/GPU-h (3.35 TB/s), warm switch 2 s
R_NODE, T_NODE = 8 * 1.0, 8 * 2.85


def test_solo_d_cost_closed_form_on_a_hand_computed_example():
    jobs = [make_job("a", duration=3600.0, rollout_gpus=16, train_gpus=8),   # 1 h x (2 R + 1 T)
            make_job("b", duration=1800.0, rollout_gpus=9, train_gpus=17)]   # 0.5 h x (2 R + 3 T)
    expected = 1.0 * (2 * R_NODE + 1 * T_NODE) + 0.5 * (2 * R_NODE + 3 * T_NODE)
    assert solo_d_cost(jobs, CLUSTER) == pytest.approx(expected)
    assert expected == pytest.approx(81.0)


def test_solo_d_cost_of_no_jobs_is_zero():
    assert solo_d_cost([], CLUSTER) == 0.0


def test_busy_time_bound_on_a_hand_computed_example():
    # 10 iterations of 100 s rollout on 12 GPUs and 50 s training on 8 GPUs.
    job = make_job("a", rollout=100.0, train=50.0, sync=10.0, duration=1600.0, rollout_gpus=12, train_gpus=8)
    assert job.iterations == 10
    assert busy_time_bound([job], CLUSTER) == pytest.approx(10 * (12 * 100 * 1.0 + 8 * 50 * 2.85) / 3600)


def test_busy_time_bound_uses_expected_phase_times():
    job = make_job("a", rollout=100.0, rollout_max=200.0, sigma=0.4, train=50.0, rollout_gpus=8, train_gpus=8)
    mean_r = job.rollout_s.mean()
    expected = job.iterations * (8 * mean_r * 1.0 + 8 * 50.0 * mean_r / 100.0 * 2.85) / 3600
    assert busy_time_bound([job], CLUSTER) == pytest.approx(expected)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_busy_time_bound_never_exceeds_solo_d(seed):
    jobs = synthetic_trace(np.random.default_rng(seed), 10, sigma=0.0)
    # Solo-D holds whole nodes for duration_s ~ iterations x solo_iter_s, busy or not.
    assert busy_time_bound(jobs, CLUSTER) <= solo_d_cost(jobs, CLUSTER) * 1.01


@pytest.mark.parametrize("name", sorted(PAPER_COLOCATED_PAIRS))
def test_calibration_reproduces_the_papers_colocated_pairs(name):
    # Within 1%: the anchors are the pairs themselves (DESIGN §7).
    (d_r, d_t), (c_r, c_t) = PAPER_COLOCATED_PAIRS[name]
    job = make_job(name, rollout=d_r, train=d_t, rollout_gpus=16, train_gpus=16)
    assert d_r * verl_rollout_scale(job, CLUSTER) == pytest.approx(c_r, rel=0.01)
    assert d_t * verl_train_scale(job) == pytest.approx(c_t, rel=0.01)


@pytest.mark.parametrize("model, cap, paper", [("qwen3-8b", 32768, (608.0, 560.0)),
                                               ("qwen2.5-32b", 8192, (277.0, 271.0))])
def test_catalog_recipes_of_the_paper_jobs_land_within_10_percent_of_its_colocated_times(model, cap, paper):
    # The catalog's performance model gives these two jobs slightly different phase balances
    # than the paper (8B-32k 790/622 s, 32B-8k 274/322 s); the interpolation absorbs it.
    job = make_job_from_profile("x", 0.0, 1e5, 1.5, recipe_profile(recipe(model, cap)))
    colo_r = job.rollout_s.median * verl_rollout_scale(job, CLUSTER)
    colo_t = job.train_s * verl_train_scale(job)
    assert colo_r == pytest.approx(paper[0], rel=0.10)
    assert colo_t == pytest.approx(paper[1], rel=0.10)


def test_factors_interpolate_log_linearly_between_the_anchors():
    # rho = 1: w = ln(1/0.7403) / ln(1.5857/0.7403) = 0.3948 toward the 8B anchor.
    w = math.log(362 / 268) / math.log((888 / 560) / (268 / 362))
    k_r, k_t = colocated_factors(make_job("b", rollout=100.0, train=100.0))
    assert k_r == pytest.approx((277 / 268) ** (1 - w) * (608 / 888) ** w, rel=1e-12)
    assert k_t == pytest.approx((271 / 362) ** (1 - w), rel=1e-12)
    assert 0.87 < k_r < 0.88 and 0.83 < k_t < 0.84


def test_factors_are_constant_beyond_the_anchors():
    assert colocated_factors(make_job("r", rollout=1000.0, train=10.0)) == pytest.approx((608 / 888, 1.0))
    assert colocated_factors(make_job("t", rollout=10.0, train=1000.0)) == pytest.approx((277 / 268, 271 / 362))


def test_verl_rollout_scale_counts_the_extra_colocated_gpus():
    wide = make_job("a", rollout=888.0, train=560.0, rollout_gpus=8, train_gpus=16)
    assert verl_rollout_scale(wide, CLUSTER) == pytest.approx(8 / 16 * 608 / 888)


def test_verl_rollout_scale_follows_other_hardware_by_bandwidth():
    job = make_job("a", rollout=888.0, train=560.0)
    a100 = default_cluster().model_copy(update={"pools": default_cluster().pools.model_copy(
        update={"train": default_cluster().pools.train.model_copy(update={"gpu": "A100"})})})
    # A100 2.0 TB/s instead of H800's 3.35: rollouts 3.35/2.0 slower than the calibration.
    assert verl_rollout_scale(job, a100) == pytest.approx(608 / 888 * 3.35 / 2.0)


@pytest.mark.parametrize("speed", [0.8, 1.2])
def test_speed_knob_divides_both_colocated_phases(speed):
    job = make_job("a", rollout=100.0, train=100.0)
    assert verl_rollout_scale(job, CLUSTER, speed) == pytest.approx(verl_rollout_scale(job, CLUSTER) / speed)
    assert verl_train_scale(job, speed) == pytest.approx(verl_train_scale(job) / speed)


def test_slower_colocation_costs_more():
    jobs = synthetic_trace(np.random.default_rng(3), 6, sigma=0.1)
    costs = [simulate_verl(jobs, CLUSTER, colo_speed=s).cost_usd for s in (1.2, 1.0, 0.8)]
    assert costs[0] < costs[1] < costs[2]


@pytest.mark.parametrize("speed", [0.0, -1.0, float("nan")])
def test_bad_speed_is_a_clear_error(speed):
    with pytest.raises(InputError, match="colo_speed"):
        simulate_verl([HAND_JOB], CLUSTER, colo_speed=speed)


HAND_JOB = make_job("v", rollout=100.0, rollout_max=120.0, sigma=0.0, train=50.0, sync=10.0,
                    duration=1600.0, arrival=500.0, rollout_gpus=16, train_gpus=8)
# 10 iterations on max(16, 8) = 16 H800s (2 nodes). rho = 100/50 = 2 lies beyond the 8B-32k
# anchor (1.586): rollout 100 s x 608/888, training 50 s x 1.0, two 2 s switches, no sync.
HAND_LIFETIME = 10 * (100.0 * 608 / 888 + 50.0 + 2 * 2.0)


def test_verl_cost_matches_the_documented_model():
    res = simulate_verl([HAND_JOB], CLUSTER)
    assert res.cost_usd == pytest.approx(HAND_LIFETIME / 3600 * 2 * T_NODE, rel=1e-12)


def test_verl_job_finishes_after_its_colocated_lifetime():
    (outcome,) = simulate_verl([HAND_JOB], CLUSTER).outcomes
    assert outcome.start_s == 500.0
    assert outcome.finish_s == pytest.approx(500.0 + HAND_LIFETIME, rel=1e-12)
    assert outcome.slowdown == pytest.approx(HAND_LIFETIME / 1600.0, rel=1e-12)


def test_verl_holds_only_training_nodes():
    res = simulate_verl([HAND_JOB], CLUSTER)
    assert res.peak_gpus == {"rollout": 0, "train": 16}
    assert res.span_s == pytest.approx(HAND_LIFETIME)


def test_verl_idle_share_counts_unused_training_gpus():
    res = simulate_verl([HAND_JOB], CLUSTER)
    busy = 16 * 10 * 100.0 * 608 / 888 + 8 * 10 * 50.0 + 16 * 10 * 4.0
    assert res.idle_share["train"] == pytest.approx(1 - busy / (16 * HAND_LIFETIME))


def test_verl_overlapping_jobs_add_up_at_peak():
    a = make_job("a", arrival=0.0, duration=10_000.0, rollout_gpus=8, train_gpus=8)
    b = make_job("b", arrival=100.0, duration=10_000.0, rollout_gpus=16, train_gpus=16)
    assert simulate_verl([a, b], CLUSTER).peak_gpus["train"] == 24


def test_verl_is_deterministic_per_seed_and_varies_across_seeds():
    jobs = synthetic_trace(np.random.default_rng(4), 5, sigma=0.3)
    assert simulate_verl(jobs, CLUSTER, seed=1).cost_usd == simulate_verl(jobs, CLUSTER, seed=1).cost_usd
    assert simulate_verl(jobs, CLUSTER, seed=1).cost_usd != simulate_verl(jobs, CLUSTER, seed=2).cost_usd


def test_verl_prices_follow_the_cluster():
    cheap = make_cluster(train_price=1.0)
    assert simulate_verl([HAND_JOB], cheap).cost_usd == pytest.approx(HAND_LIFETIME / 3600 * 2 * 8.0)
