"""Paper mode: the simulation profile classes of DESIGN §7 and the paper_jobs generator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.workload import find_traces_dir, paper_jobs, synthesize_philly
from rollmux.workload.paper import CLASSES, TRAIN_HOST_GB, draw_paper_profile

TRACES = find_traces_dir()


def _class_of(model: str) -> tuple[str, str]:
    _, rest = model.split("-", 1)
    profile, size = rest.rsplit("-", 1)
    return profile, size


def test_paper_mode_draws_inside_class_ranges():
    jobs = synthesize_philly(TRACES, "0e4a51", 200, 14, "paper", seed=5)
    for j in jobs:
        profile, size = _class_of(j.model)
        (r_lo, r_hi), (t_lo, t_hi) = CLASSES[(profile, size)]
        assert r_lo <= j.rollout_s.median <= r_hi and t_lo <= j.train_s <= t_hi
        assert 0.05 <= j.rollout_s.sigma <= 0.15
        # sigma is rounded to 3 decimals in the trace, so allow that much.
        expected_max = j.rollout_s.median * math.exp(2 * j.rollout_s.sigma)
        assert j.rollout_s.max == pytest.approx(expected_max, rel=3e-3, abs=0.15)
        assert 0.1 <= j.tail_frac <= 0.3 and 5 <= j.sync_s <= 15 and 1 <= j.slo <= 2
        assert 20 <= j.host_gb.rollout <= 60 and j.host_gb.train == TRAIN_HOST_GB[size]
        assert j.train_gpus == 8 and j.rollout_gpus in (8, 16)


def test_mixed_workload_covers_all_nine_classes():
    jobs = synthesize_philly(TRACES, "0e4a51", 200, 14, "paper", seed=5)
    assert {_class_of(j.model) for j in jobs} == set(CLASSES)


def test_full_node_philly_jobs_get_two_rollout_nodes():
    rng = np.random.default_rng(0)
    assert draw_paper_profile(rng, philly_gpus=8).rollout_gpus == 16
    assert draw_paper_profile(rng, philly_gpus=4).rollout_gpus == 8


def test_profile_size_and_slo_options_fix_the_class_and_slo():
    jobs = synthesize_philly(TRACES, "0e4a51", 30, 14, "paper", seed=1,
                             profile="train-heavy", size="large", slo=1.5)
    assert {j.model for j in jobs} == {"paper-train-heavy-large"}
    assert {j.slo for j in jobs} == {1.5}


def test_paper_jobs_arrive_at_zero_with_requested_iterations():
    jobs = paper_jobs(6, profile="balanced", size="small", slo=None, seed=3, iterations=40)
    assert [j.job_id for j in jobs] == [f"s{i:04d}" for i in range(6)]
    assert all(j.arrival_s == 0 and j.iterations == 40 for j in jobs)
    assert all(default_cluster().job_unplaceable_reason(j) is None for j in jobs)


def test_paper_jobs_are_deterministic_and_accept_arrivals():
    a = paper_jobs(5, seed=9, arrivals=[30, 0, 10, 20, 40])
    b = paper_jobs(5, seed=9, arrivals=[30, 0, 10, 20, 40])
    assert [j.model_dump() for j in a] == [j.model_dump() for j in b]
    assert [j.arrival_s for j in a] == [0, 10, 20, 30, 40]


@pytest.mark.parametrize("kwargs, place", [
    (dict(n=0), "n"),
    (dict(profile="x"), "profile"),
    (dict(size="x"), "size"),
    (dict(slo=0.9), "slo"),
    (dict(arrivals=[0.0]), "arrivals"),
])
def test_paper_jobs_bad_arguments_name_the_argument(kwargs, place):
    with pytest.raises(InputError) as err:
        paper_jobs(**{"n": 3, **kwargs})
    assert err.value.place == place
