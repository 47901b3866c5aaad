"""Job profiles and cluster description (DESIGN §2): derived quantities and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rollmux.core.spec import (
    MAX_PHASE_S,
    RESERVED_JOB_IDS,
    ClusterSpec,
    HostGB,
    JobSpec,
    PoolSpec,
    RolloutDist,
    default_cluster,
)
from rollmux.core.vocabulary import Mode
from factories import make_cluster, make_job

# -- RolloutDist ---------------------------------------------------------------------------

@pytest.mark.parametrize("median,sigma,cap", [(100.0, 0.1, 130.0), (240.0, 0.5, 400.0), (50.0, 1.0, 60.0)])
def test_rollout_mean_matches_monte_carlo_of_truncated_lognormal(median, sigma, cap):
    rng = np.random.default_rng(12345)
    samples = np.minimum(median * np.exp(sigma * rng.standard_normal(400_000)), cap)
    dist = RolloutDist(median=median, sigma=sigma, max=cap)
    stderr = samples.std() / math.sqrt(len(samples))
    assert abs(dist.mean() - samples.mean()) < 5 * stderr + 1e-9


def test_rollout_mean_with_zero_sigma_is_the_median():
    assert RolloutDist(median=120.0, sigma=0.0, max=200.0).mean() == 120.0


def test_rollout_mean_without_effective_truncation_is_lognormal_mean():
    # The largest max a profile may declare is 43 sigma above this median: no truncation to see.
    dist = RolloutDist(median=100.0, sigma=0.2, max=MAX_PHASE_S)
    assert dist.mean() == pytest.approx(100.0 * math.exp(0.2 ** 2 / 2), rel=1e-12)


def test_rollout_quantile_one_is_the_cap():
    assert RolloutDist(median=100.0, sigma=0.3, max=180.0).quantile(1.0) == 180.0


def test_rollout_quantile_one_is_the_cap_even_with_zero_sigma():
    assert RolloutDist(median=100.0, sigma=0.0, max=180.0).quantile(1.0) == 180.0


def test_rollout_quantile_half_is_the_median():
    assert RolloutDist(median=100.0, sigma=0.3, max=180.0).quantile(0.5) == pytest.approx(100.0, rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(median=st.floats(1.0, 1000.0), sigma=st.floats(0.0, 3.0), cap_factor=st.floats(1.0, 10.0),
       qs=st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=8))
def test_rollout_quantile_is_monotone_and_capped(median, sigma, cap_factor, qs):
    dist = RolloutDist(median=median, sigma=sigma, max=median * cap_factor)
    values = [dist.quantile(q) for q in sorted(qs)]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(values, values[1:]))
    assert all(v <= dist.max for v in values)


def test_rollout_rejects_max_below_median():
    with pytest.raises(ValidationError, match="max"):
        RolloutDist(median=100.0, sigma=0.1, max=90.0)


@pytest.mark.parametrize("field,value", [("median", 0.0), ("median", -1.0), ("max", 0.0), ("sigma", -0.1)])
def test_rollout_rejects_non_positive_values(field, value):
    kwargs = {"median": 10.0, "sigma": 0.1, "max": 20.0, field: value}
    with pytest.raises(ValidationError):
        RolloutDist(**kwargs)


# -- JobSpec -------------------------------------------------------------------------------

def test_solo_iter_is_mean_rollout_plus_mean_train_plus_sync():
    job = make_job(rollout=100.0, train=60.0, sync=7.0, sigma=0.3, rollout_max=150.0)
    mean_r = job.rollout_s.mean()
    assert job.solo_iter_s == pytest.approx(mean_r + 60.0 * mean_r / 100.0 + 7.0, rel=1e-12)


def test_solo_iter_of_deterministic_job_is_sum_of_phases():
    assert make_job(rollout=100.0, train=60.0, sync=7.0).solo_iter_s == 167.0


def test_train_time_scales_with_rollout_time():
    job = make_job(rollout=200.0, train=80.0, rollout_max=400.0)
    assert job.train_time(200.0) == 80.0
    assert job.train_time(300.0) == pytest.approx(120.0)
    assert job.train_time(100.0) == pytest.approx(40.0)


def test_iterations_round_duration_over_solo_iteration():
    job = make_job(rollout=100.0, train=90.0, sync=10.0, duration=200.0 * 7.4)
    assert job.iterations == 7


def test_iterations_are_at_least_one_for_short_jobs():
    assert make_job(rollout=100.0, train=100.0, duration=1.0).iterations == 1


def test_the_slo_budget_is_slo_times_solo_iteration_times_iterations():
    job = make_job(rollout=100.0, train=50.0, sync=5.0, slo=1.3, duration=10_000.0)
    assert job.slo_budget_s == job.slo * job.solo_iter_s * job.iterations == 1.3 * 155.0 * 65


def test_job_rejects_slo_below_one():
    with pytest.raises(ValidationError, match="slo"):
        make_job(slo=0.99)


def test_job_accepts_slo_of_exactly_one():
    assert make_job(slo=1.0).slo == 1.0


@pytest.mark.parametrize("kwargs", [{"train": 0.0}, {"train": -5.0}, {"duration": 0.0},
                                    {"rollout": 0.0}, {"sync": -1.0}, {"arrival": -1.0}])
def test_job_rejects_non_positive_times(kwargs):
    with pytest.raises(ValidationError):
        make_job(**kwargs)


@pytest.mark.parametrize("kwargs", [{"duration": math.inf}, {"train": math.inf}, {"arrival": math.inf},
                                    {"rollout": math.inf, "rollout_max": math.inf}, {"sync": math.nan}])
def test_job_rejects_non_finite_times(kwargs):
    # An infinite duration is accepted today and only blows up later (round(inf) in `iterations`).
    with pytest.raises(ValidationError):
        make_job(**kwargs)


def test_job_rejects_max_below_median():
    with pytest.raises(ValidationError, match="max"):
        make_job(rollout=100.0, rollout_max=50.0)


@pytest.mark.parametrize("kwargs", [{"rollout_gpus": 0}, {"train_gpus": 0}, {"tail_frac": 1.0},
                                    {"tail_frac": -0.1}, {"job_id": ""}, {"host_rollout": -1.0}])
def test_job_rejects_out_of_range_fields(kwargs):
    with pytest.raises(ValidationError):
        make_job(**kwargs)


@pytest.mark.parametrize("job_id", ["j0", "p0007", "Qwen2.5-7b_run.3", "a" * 63, "9"])
def test_job_ids_of_letters_digits_dots_underscores_and_dashes_are_accepted(job_id):
    assert make_job(job_id).job_id == job_id


@pytest.mark.parametrize("job_id", ["", "<admin>", "a/b", "a b", "a" * 64, "-lead", ".hidden", "j0\n", "é", "a:b"])
def test_job_ids_outside_the_pattern_are_refused_naming_job_id(job_id):
    with pytest.raises(ValidationError, match="job_id"):
        make_job(job_id)


@pytest.mark.parametrize("job_id", [*RESERVED_JOB_IDS, "Admin", "STATUS"])
def test_reserved_job_ids_are_refused_in_any_case(job_id):
    with pytest.raises(ValidationError, match="reserved"):
        make_job(job_id)


@pytest.mark.parametrize("kwargs", [{"slo": 100.01}, {"slo": 1e308}, {"train": MAX_PHASE_S * 1.01},
                                    {"rollout": 1e308, "rollout_max": 1e308}, {"sync": 1e9},
                                    {"duration": 367 * 86400.0}, {"rollout_gpus": 4097}, {"train_gpus": 10**9},
                                    {"host_train": 1e12}, {"train": 1e-12}, {"weights_gb": 1e300}])
def test_job_numbers_outside_their_documented_ranges_are_refused(kwargs):
    with pytest.raises(ValidationError):
        make_job(**kwargs)


def test_job_numbers_at_the_edges_of_their_ranges_are_accepted():
    job = make_job(slo=100.0, train=MAX_PHASE_S, rollout=MAX_PHASE_S, sync=MAX_PHASE_S,
                   duration=366 * 86400.0, rollout_gpus=4096, train_gpus=4096)
    assert job.slo == 100.0 and job.train_s == MAX_PHASE_S and job.rollout_gpus == 4096


def test_job_keeps_unknown_fields_as_extras():
    assert make_job(colour="blue").model_extra == {"colour": "blue"}


# -- JobSpec.cannot: modes a job cannot take ------------------------------------------------

def test_a_job_without_cannot_takes_every_mode_and_is_written_as_before():
    job = make_job("a")
    assert job.cannot == () and all(job.can(m) for m in Mode)
    assert "cannot" not in job.model_dump() and "cannot" not in job.model_dump_json()


def test_cannot_is_stored_sorted_without_repeats_and_read_back_from_json():
    job = make_job("a", cannot=["move", "colocate", "move"])
    assert job.cannot == (Mode.COLOCATE, Mode.MOVE)
    assert not job.can(Mode.MOVE) and job.can(Mode.TAIL_MIGRATION)
    assert JobSpec.model_validate_json(job.model_dump_json()) == job


def test_a_copy_keeps_cannot():
    job = make_job("a", cannot=["elastic_rollout"])
    assert job.model_copy(update={"slo": 3.0}).cannot == (Mode.ELASTIC_ROLLOUT,)
    assert JobSpec(**dict(job)).cannot == (Mode.ELASTIC_ROLLOUT,)


@pytest.mark.parametrize("value, says", [(["bogus"], "unknown mode 'bogus'"), ("move", "list of mode names"),
                                         ([3], "unknown mode 3")])
def test_cannot_rejects_what_is_not_a_list_of_known_mode_names(value, says):
    with pytest.raises(ValidationError) as exc:
        make_job("a", cannot=value)
    (err,) = exc.value.errors()
    assert err["loc"] == ("cannot",) and says in err["msg"]
    assert "colocate, elastic_rollout, move, tail_migration" in err["msg"]


# -- ClusterSpec ---------------------------------------------------------------------------

def test_default_cluster_prices_train_gpu_at_2_85_rollout():
    c = default_cluster()
    assert c.pools.train.price_per_gpu_hour / c.pools.rollout.price_per_gpu_hour == pytest.approx(2.85)


def test_pool_nodes_for_rounds_up_to_whole_nodes():
    pool = PoolSpec(gpu="H20", price_per_gpu_hour=1.0)
    assert [pool.nodes_for(g) for g in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]


def test_pool_node_price_is_gpus_times_gpu_price():
    assert PoolSpec(gpu="H800", gpus_per_node=8, price_per_gpu_hour=2.5).node_price_per_hour == 20.0


def test_pool_bandwidth_known_and_overridden():
    assert PoolSpec(gpu="h20", price_per_gpu_hour=1).bandwidth_tbs() == 4.0
    assert PoolSpec(gpu="H800", price_per_gpu_hour=1).bandwidth_tbs() == 3.35
    assert PoolSpec(gpu="H800", price_per_gpu_hour=1, mem_bw_tbs=2.5).bandwidth_tbs() == 2.5


def test_job_fits_default_cluster():
    assert default_cluster().job_unplaceable_reason(make_job(rollout_gpus=64, train_gpus=64)) is None


@pytest.mark.parametrize("pool,kwargs", [("rollout", {"host_rollout": 3000.0}), ("train", {"host_train": 2049.0})])
def test_unplaceable_when_host_gb_exceeds_node_dram(pool, kwargs):
    reason = make_cluster(host_gb=2048.0).job_unplaceable_reason(make_job(**kwargs))
    assert reason is not None and f"host_gb.{pool}" in reason


def test_placeable_when_host_gb_equals_node_dram():
    assert make_cluster(host_gb=2048.0).job_unplaceable_reason(
        make_job(host_rollout=2048.0, host_train=2048.0)) is None


@pytest.mark.parametrize("pool,cluster_kwargs,job_kwargs", [
    ("rollout", {"max_rollout_nodes": 2}, {"rollout_gpus": 17}),
    ("train", {"max_train_nodes": 1}, {"train_gpus": 9}),
])
def test_unplaceable_when_job_needs_more_nodes_than_cap(pool, cluster_kwargs, job_kwargs):
    reason = make_cluster(**cluster_kwargs).job_unplaceable_reason(make_job(**job_kwargs))
    assert reason is not None and f"{pool}_gpus" in reason


def test_placeable_when_job_needs_exactly_the_cap():
    cluster = make_cluster(max_rollout_nodes=2, max_train_nodes=1)
    assert cluster.job_unplaceable_reason(make_job(rollout_gpus=16, train_gpus=8)) is None


def test_cluster_rejects_negative_switch_cost():
    with pytest.raises(ValidationError):
        ClusterSpec(pools=default_cluster().pools, warm_switch_s=-1.0)


def test_host_gb_rejects_negative():
    with pytest.raises(ValidationError):
        HostGB(rollout=-1.0, train=0.0)


def test_a_copy_with_a_new_slo_or_profile_recomputes_its_derived_times():
    job = make_job("c", rollout=100.0, train=100.0, slo=2.0, duration=4000.0)
    derived = (job.solo_iter_s, job.iterations, job.slo_iter_s, job.slo_budget_s)  # computed and cached
    assert all(name in job.__dict__ for name in ("solo_iter_s", "iterations", "slo_iter_s", "slo_budget_s"))
    assert derived == (205.0, 20, 410.0, 8200.0)
    roomy = job.model_copy(update={"slo": 3.0})
    assert roomy.slo_iter_s == 3.0 * job.solo_iter_s and roomy.slo_budget_s == roomy.slo_iter_s * job.iterations
    slower = job.model_copy(update={"train_s": 300.0})
    assert slower.solo_iter_s == make_job("d", rollout=100.0, train=300.0, slo=2.0, duration=4000.0).solo_iter_s
    assert slower.iterations < job.iterations
