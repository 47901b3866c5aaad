"""The rollout-time-vs-nodes model of elastic rollout parallelism (core/elastic.py)."""

from __future__ import annotations

import pytest

from rollmux.core.elastic import (
    MAX_NONSCALING,
    allowed_factor,
    member_rollout_gpus,
    node_counts,
    nonscaling_share,
    rollout_factor,
)
from rollmux.core.group import Member
from rollmux.workload.perf import ROLLOUT_FIXED_S
from factories import make_cluster, make_job

CLUSTER = make_cluster()


def test_the_non_scaling_share_is_the_tail_plus_the_fixed_part():
    job = make_job("a", rollout=200.0, tail_frac=0.3)
    assert nonscaling_share(job) == pytest.approx(0.3 + ROLLOUT_FIXED_S / 200.0)
    multi = make_job("m", rollout=200.0, tail_frac=0.3, model="qwen2.5-7b-8k-mt")
    assert nonscaling_share(multi) > nonscaling_share(job)  # its turns' environment latency
    assert nonscaling_share(make_job("s", rollout=41.0, tail_frac=0.5)) == MAX_NONSCALING


def test_the_factor_is_one_on_nominal_nodes_and_follows_the_model_elsewhere():
    job = make_job("a", rollout=200.0, tail_frac=0.3, rollout_gpus=16)
    c = nonscaling_share(job)
    assert rollout_factor(job, 2, 2) == 1.0
    assert rollout_factor(job, 2, 4) == pytest.approx(c + (1 - c) / 2)
    assert rollout_factor(job, 2, 1) == pytest.approx(c + 2 * (1 - c))


def test_more_nodes_are_faster_with_diminishing_returns_and_never_below_the_tail():
    job = make_job("a", rollout=300.0, tail_frac=0.4, rollout_gpus=16)
    f = [rollout_factor(job, 2, k) for k in range(1, 9)]
    assert all(a > b for a, b in zip(f, f[1:]))                       # more nodes, less time
    gains = [a - b for a, b in zip(f, f[1:])]
    assert all(a > b for a, b in zip(gains, gains[1:]))               # each node buys less
    assert min(f) > nonscaling_share(job) > job.tail_frac             # the tail never shrinks


def test_the_elastic_range_is_half_to_twice_nominal():
    assert list(node_counts(2, False)) == [2]
    assert list(node_counts(2, True)) == [1, 2, 3, 4]
    assert list(node_counts(1, True)) == [1, 2]
    assert list(node_counts(3, True)) == [2, 3, 4, 5, 6]


def test_allowed_factor_refuses_counts_outside_the_range():
    job = make_job("a", rollout_gpus=16)
    assert allowed_factor(job, CLUSTER, 2) == 1.0
    assert allowed_factor(job, CLUSTER, 4) == rollout_factor(job, 2, 4)
    assert allowed_factor(job, CLUSTER, 5) is None


def test_a_member_holds_gpus_in_proportion_to_its_nodes():
    job = make_job("a", rollout_gpus=16)
    assert member_rollout_gpus(Member(job, (0, 1), (0,)), CLUSTER) == 16
    assert member_rollout_gpus(Member(job, (0,), (0,), rollout_factor(job, 2, 1)), CLUSTER) == 8
    assert member_rollout_gpus(Member(job, (0, 1, 2), (0,), rollout_factor(job, 2, 3)), CLUSTER) == 24


def test_the_elastic_bound_is_below_the_nominal_one_by_the_rollout_share_it_saves():
    from rollmux.core.elastic import busy_time_bound_elastic
    from rollmux.sim.baselines import busy_time_bound

    job = make_job("a", rollout=200.0, tail_frac=0.3, rollout_gpus=16)
    c = nonscaling_share(job)
    nominal, elastic = busy_time_bound([job], CLUSTER), busy_time_bound_elastic([job], CLUSTER)
    rollout_part = job.iterations * 16 * job.mean_rollout_s * 1.0 / 3600
    assert nominal - elastic == pytest.approx(rollout_part * (1 - (c / 2 + (1 - c))))
