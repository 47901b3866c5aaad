"""Catalog mode: the performance model reproduces the paper's production profiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rollmux.core.spec import default_cluster
from rollmux.workload import perf
from rollmux.workload.catalog import CAPS, GPUS, draw_catalog_profile, recipe, recipe_profile
from rollmux.workload.jobs import make_job

TOLERANCE = 0.25


@pytest.mark.parametrize("model, cap", list(perf.PAPER_PROFILES))
def test_model_reproduces_paper_production_profile(model, cap):
    paper_rollout, paper_train = perf.PAPER_PROFILES[(model, cap)]
    ph = perf.phases(recipe(model, cap))
    assert ph.rollout_median == pytest.approx(paper_rollout, rel=TOLERANCE)
    assert ph.train == pytest.approx(paper_train, rel=TOLERANCE)


def test_gpu_counts_are_whole_nodes():
    assert all(r % 8 == 0 and t % 8 == 0 for r, t in GPUS.values())


@pytest.mark.parametrize("model", list(CAPS))
def test_worst_case_and_phase_times_grow_with_cap(model):
    rollouts = []
    for cap in CAPS[model]:
        ph = perf.phases(recipe(model, cap))
        assert ph.rollout_max >= ph.rollout_median
        rollouts.append(ph.rollout_median)
    assert rollouts == sorted(rollouts)


def test_multi_turn_is_slower_and_more_variable():
    single, multi = recipe_profile(recipe("qwen2.5-7b", 8192)), recipe_profile(
        recipe("qwen2.5-7b", 8192, multi_turn=True))
    assert multi.rollout_median > single.rollout_median
    assert multi.rollout_sigma > single.rollout_sigma
    assert multi.tail_frac >= single.tail_frac


def test_sync_is_one_bf16_copy_over_the_slow_link():
    r = recipe("qwen2.5-7b", 8192)
    expected = 2 * 7.62e9 / (20e9 / 8) + perf.SYNC_FIXED_S
    assert perf.sync_time(r) == pytest.approx(expected)


def test_host_memory_of_32b_counts_weights_reference_optimizer_and_runtime():
    r = recipe("qwen2.5-32b", 8192)  # 16 H800 = 2 nodes, MP 8; rollout TP 2 on 16 H20
    assert perf.train_model_parallel(r.arch, 16) == 8 and perf.tensor_parallel(r.arch) == 2
    rollout_gb, train_gb = perf.host_gb(r)
    p = 32.5  # billions of parameters
    # One bf16 policy and one bf16 reference replica per node, the 12 B/param optimizer
    # sharded over the 2 nodes, 4 GB of runtime per rank; grads are freed on offload.
    assert train_gb == pytest.approx(2 * p + 2 * p + 12 * p / 2 + 8 * 4)  # 357 GB
    # Four TP-2 engines per rollout node, each keeping its own bf16 weights.
    assert rollout_gb == pytest.approx(4 * 2 * p + 8 * 4)  # 292 GB


def test_two_to_five_32b_jobs_stay_resident_on_a_2tb_node():
    per_node = perf.jobs_per_node(recipe("qwen2.5-32b", 8192))[1]
    assert 2 <= per_node <= 5
    assert per_node * perf.host_gb(recipe("qwen2.5-32b", 8192))[1] <= 2048 < (per_node + 1) * 357


def test_more_replicas_per_node_cost_more_host_memory():
    # 7B trains with MP 2: four bf16 policy + reference replicas per node, the optimizer halved.
    r = recipe("qwen2.5-7b", 8192)
    assert perf.train_model_parallel(r.arch, 16) == 2
    _, train_gb = perf.host_gb(r)
    assert train_gb == pytest.approx(4 * (2 + 2) * 7.62 + 12 * 7.62 / 2 + 8 * 4)
    # Keeping the fp32 grad buffer would add 4 B/param per replica.
    kept = replace_constant("GRAD_BYTES_PER_PARAM", 4, lambda: perf.host_gb(r)[1])
    assert kept == pytest.approx(train_gb + 4 * 4 * 7.62)


def replace_constant(name, value, fn):
    """fn() evaluated with perf.<name> = value."""
    old = getattr(perf, name)
    setattr(perf, name, value)
    try:
        return fn()
    finally:
        setattr(perf, name, old)


@pytest.mark.parametrize("model", list(CAPS))
def test_every_model_fits_a_node_and_state_grows_with_size(model):
    r = recipe(model, CAPS[model][0])
    rollout_per_node, train_per_node = perf.jobs_per_node(r)
    assert rollout_per_node >= 5 and 5 <= train_per_node <= 12
    # On 1 TiB nodes (the paper's 1-2 TB) 2-6 jobs stay resident per training node.
    assert 2 <= perf.jobs_per_node(r, 1024)[1] <= 6


def test_drawn_profiles_stay_in_documented_ranges():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = draw_catalog_profile(rng)
        assert 0.1 <= p.rollout_sigma <= 0.4
        assert 0.2 <= p.tail_frac <= 0.5
        assert p.rollout_max >= p.rollout_median
        assert p.model.split("-")[0] in ("qwen2.5", "qwen3")


def test_model_mix_favours_small_models():
    rng = np.random.default_rng(1)
    models = [draw_catalog_profile(rng).model for _ in range(2000)]
    small = sum(m.startswith(("qwen2.5-3b", "qwen3-4b", "qwen2.5-7b")) for m in models)
    large = sum(m.startswith(("qwen2.5-14b", "qwen2.5-32b")) for m in models)
    assert small > 2 * large


def test_every_catalog_recipe_is_a_valid_placeable_job():
    cluster = default_cluster()
    for model, caps in CAPS.items():
        for cap in caps:
            for mt in (False, True):
                job = make_job("x", 0.0, 3600.0, 1.5, recipe_profile(recipe(model, cap, mt)))
                assert cluster.job_unplaceable_reason(job) is None
                assert math.isfinite(job.solo_iter_s)
