"""Closed-form baselines and the co-located (veRL) model (DESIGN §6)."""

from __future__ import annotations

import json
import math
from importlib.resources import files

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.colo_fit import pairs
from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import (
    busy_time_bound,
    colocated_factors,
    simulate_verl,
    solo_d_cost,
    verl_rollout_scale,
    verl_train_scale,
)
from rollmux.workload.catalog import recipe, recipe_profile
from rollmux.workload.jobs import make_job as make_job_from_profile
from factories import make_cluster, make_job, synthetic_trace

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


@pytest.mark.parametrize("kind", [p.kind for p in pairs()])
def test_a_job_of_a_measured_type_runs_its_measured_colocated_times(kind):
    size, cap = kind.split("_")
    doc = json.loads((files("rollmux.data") / "colocated_pairs.json").read_text())
    (d_r, d_t), (c_r, c_t) = ((doc[m][kind]["generate"], doc[m][kind]["train"]) for m in ("disagg", "colo"))
    job = make_job(kind, rollout=d_r, train=d_t, model=f"qwen-{size.lower()}-{cap}")
    assert d_r * verl_rollout_scale(job, CLUSTER) == pytest.approx(c_r, rel=1e-9)
    assert d_t * verl_train_scale(job) == pytest.approx(c_t, rel=1e-9)


@pytest.mark.parametrize("model, cap, measured", [("qwen3-8b", 32768, (607.5 / 888.0, 559.5 / 559.5)),
                                                  ("qwen2.5-32b", 8192, (277.0 / 267.6, 1.0))])
def test_catalog_jobs_of_a_measured_type_carry_its_measured_ratios(model, cap, measured):
    job = make_job_from_profile("x", 0.0, 1e5, 1.5, recipe_profile(recipe(model, cap)))
    assert job.colocated is not None
    # Rounded to 0.1 s in the trace.
    assert colocated_factors(job) == pytest.approx(measured, rel=2e-3)


def test_multi_turn_catalog_jobs_carry_no_measured_pair():
    assert make_job_from_profile("x", 0.0, 1e5, 1.5, recipe_profile(recipe("qwen3-8b", 32768, True))).colocated is None


def test_verl_rollout_scale_counts_the_extra_colocated_gpus():
    wide = make_job("a", rollout=888.0, train=560.0, rollout_gpus=8, train_gpus=16, model="qwen3-8b-32k")
    assert verl_rollout_scale(wide, CLUSTER) == pytest.approx(8 / 16 * 607.5 / 888)


def test_verl_rollout_scale_follows_other_hardware_by_bandwidth():
    job = make_job("a", rollout=888.0, train=560.0, model="qwen3-8b-32k")
    a100 = default_cluster().model_copy(update={"pools": default_cluster().pools.model_copy(
        update={"train": default_cluster().pools.train.model_copy(update={"gpu": "A100"})})})
    # A100 2.0 TB/s instead of H800's 3.35: rollouts 3.35/2.0 slower than the calibration.
    assert verl_rollout_scale(job, a100) == pytest.approx(607.5 / 888 * 3.35 / 2.0)


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
                    duration=1600.0, arrival=500.0, rollout_gpus=16, train_gpus=8, model="qwen3-8b-32k")
# 10 iterations on max(16, 8) = 16 H800s (2 nodes), at the measured 8B-32k ratios: rollout
# 100 s x 607.5/888, training 50 s x 559.5/559.5, two 2 s switches, no sync.
HAND_LIFETIME = 10 * (100.0 * 607.5 / 888 + 50.0 + 2 * 2.0)


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
    busy = 16 * 10 * 100.0 * 607.5 / 888 + 8 * 10 * 50.0 + 16 * 10 * 4.0
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
