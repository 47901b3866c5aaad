"""Gavel+ baseline (DESIGN §6): job-level gangs, time-slicing under caps, phase-unaware packing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollmux.errors import InputError
from rollmux.sim.baseline_policies import SoloPlacement
from rollmux.sim.baselines import solo_d_cost
from rollmux.sim.gavel import GavelSimulation, packed_period_s, simulate_gavel
from rollmux.sim.simulator import SimConfig, simulate
from tests.factories import make_cluster, make_job, synthetic_trace

CLUSTER = make_cluster()  # uncapped, warm switch 2 s
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**32 - 1)


def short_trace(seed: int, n: int = 8, **kw):
    """A small Philly-like trace with short jobs, so property tests stay fast."""
    kw.setdefault("duration_range", (4_000.0, 15_000.0))
    return synthetic_trace(np.random.default_rng(seed), n, **kw)


def pair(slo: float = 2.5, **kw):
    """Two deterministic 1+1-node jobs of 10 iterations of 100 + 50 + 10 s, both arriving at 0."""
    return [make_job(j, rollout=100.0, train=50.0, sync=10.0, duration=1600.0, slo=slo, **kw)
            for j in ("a", "b")]


@PROPS
@given(seed=seeds, packed=st.booleans(), hetero=st.booleans(), cap=st.sampled_from([None, 2, 3]))
def test_every_job_finishes(seed, packed, hetero, cap):
    jobs = short_trace(seed, slo_range=(1.0, 3.0))
    cluster = make_cluster(max_rollout_nodes=cap, max_train_nodes=cap)
    res = simulate_gavel(jobs, cluster, seed=seed, packed=packed, hetero=hetero)
    assert sorted(o.job_id for o in res.outcomes) == sorted(j.job_id for j in jobs)
    assert all(o.finish_s > o.start_s >= next(j.arrival_s for j in jobs if j.job_id == o.job_id)
               for o in res.outcomes)


@PROPS
@given(seed=seeds)
def test_unpacked_plain_without_caps_costs_exactly_simulated_solo_d(seed):
    jobs = short_trace(seed, 10, sigma=0.1)
    gavel = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False, hetero=False)
    solo = simulate(jobs, CLUSTER, SoloPlacement(), SimConfig(seed=seed))
    assert gavel.cost_usd == solo.cost_usd
    assert gavel.span_s == solo.span_s


@PROPS
@given(seed=seeds)
def test_unpacked_plain_without_caps_is_within_half_a_percent_of_closed_form_solo_d(seed):
    # >= ~190 iterations per job: rounding duration_s to whole iterations moves each job < 0.3%.
    jobs = short_trace(seed, 10, sigma=0.0, duration_range=(100_000.0, 200_000.0))
    res = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False, hetero=False)
    assert res.cost_usd == pytest.approx(solo_d_cost(jobs, CLUSTER), rel=0.005)


@st.composite
def tight_packs(draw):
    """2-3 small jobs arriving close together whose SLOs admit their common gang with at most 5%
    to spare: runs right at the planning boundary, where planning with anything but the worst
    case and the switches would break an SLO."""
    n = draw(st.integers(2, 3))
    sigma = draw(st.sampled_from([0.0, 0.1, 0.3]))
    specs = []
    for i in range(n):
        med = draw(st.floats(20.0, 200.0))
        specs.append(dict(job_id=f"j{i}", rollout=med, sigma=sigma,
                          rollout_max=med * float(np.exp(draw(st.floats(0.0, 3.0)) * sigma)),
                          train=draw(st.floats(20.0, 200.0)), sync=draw(st.floats(0.0, 20.0)),
                          arrival=draw(st.floats(0.0, 300.0)), duration=draw(st.floats(3_000.0, 12_000.0)),
                          rollout_gpus=8 * draw(st.integers(1, 2)), train_gpus=8 * draw(st.integers(1, 2))))
    plain = [make_job(**s) for s in specs]
    period = packed_period_s(plain, CLUSTER.warm_switch_s)
    jobs = [make_job(**s, slo=period / j.solo_iter_s * draw(st.floats(1.0, 1.05)))
            for s, j in zip(specs, plain)]
    return sorted(jobs, key=lambda j: j.arrival_s)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=tight_packs(), seed=seeds)
def test_packed_never_breaks_an_slo_when_it_packs(jobs, seed):
    sim = GavelSimulation(jobs, CLUSTER, seed=seed, packed=True, max_pack=3, hetero=False)
    res = sim.run()
    assert sim.joins == len(jobs) - 1  # one shared gang
    assert all(o.slo_met for o in res.outcomes), [o for o in res.outcomes if not o.slo_met]


def test_loose_slo_traces_do_pack():
    """Guards test_packing_saves_no_node_time against vacuity: its traces form shared gangs."""
    packed = 0
    for s in range(10):
        sim = GavelSimulation(short_trace(s, 10, sigma=0.05, slo_range=(1.5, 4.0), mean_gap_s=200.0),
                              CLUSTER, seed=s, max_pack=3, hetero=False)
        sim.run()
        packed += sim.joins > 0
    assert packed >= 5


def test_packing_two_small_jobs_with_loose_slo_shares_a_gang_and_is_cheaper_per_hour():
    jobs = pair(slo=2.5)
    packed = simulate_gavel(jobs, CLUSTER, packed=True, hetero=False)
    unpacked = simulate_gavel(jobs, CLUSTER, packed=False, hetero=False)
    assert packed.peak_gpus == {"rollout": 8, "train": 8}
    assert unpacked.peak_gpus == {"rollout": 16, "train": 16}
    assert packed.cost_per_hour < unpacked.cost_per_hour
    assert all(o.slo_met for o in packed.outcomes)


def test_tight_slo_jobs_are_not_packed():
    sim = GavelSimulation(pair(slo=1.9), CLUSTER, packed=True, hetero=False)
    res = sim.run()
    assert sim.joins == 0
    assert res.peak_gpus == {"rollout": 16, "train": 16}


@PROPS
@given(seed=seeds)
def test_packing_saves_no_node_time(seed):
    # Whole iterations back to back on one gang: the gang is never idle, so it holds at
    # least the nodes x seconds the members would hold alone (a lower rate, a longer time).
    jobs = short_trace(seed, 10, sigma=0.05, slo_range=(1.5, 4.0), mean_gap_s=200.0)
    packed = simulate_gavel(jobs, CLUSTER, seed=seed, packed=True, max_pack=3, hetero=False)
    unpacked = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False, hetero=False)
    assert packed.cost_usd >= unpacked.cost_usd * (1 - 1e-12)


@pytest.mark.parametrize("warm_switch_s", [0.0, 2.0])
def test_packed_gang_period_is_the_sum_of_member_iterations(warm_switch_s):
    # a: 0..160, then b (switch + 160), then a (switch + 160), ...: phase-unaware, each member
    # waits for the other's whole iteration; period P = 160 + 160 + 2 switches.
    cluster = make_cluster(warm_switch_s=warm_switch_s)
    jobs = pair(slo=2.5)
    period = 160.0 + 160.0 + 2 * warm_switch_s
    assert packed_period_s(jobs, warm_switch_s) == period
    finish = {o.job_id: o.finish_s for o in simulate_gavel(jobs, cluster, hetero=False).outcomes}
    assert finish["a"] == pytest.approx(160.0 + 9 * period)
    assert finish["b"] == pytest.approx(160.0 + warm_switch_s + 160.0 + 9 * period)


def four_jobs_on_two_node_pools():
    jobs = [make_job(f"j{i}", rollout=100.0, train=50.0, sync=10.0, duration=16_000.0, slo=1.5)
            for i in range(4)]
    return jobs, make_cluster(max_rollout_nodes=2, max_train_nodes=2)


def test_node_cap_time_slices_jobs_and_all_finish():
    jobs, cluster = four_jobs_on_two_node_pools()
    sim = GavelSimulation(jobs, cluster, packed=False, hetero=False)
    res = sim.run()
    assert len(res.outcomes) == 4
    assert sim.preemptions > 0
    # Time-sliced, not queued: every job ran before the first one finished.
    assert max(o.start_s for o in res.outcomes) < min(o.finish_s for o in res.outcomes)


def test_node_cap_splits_time_max_min_fairly():
    # 4 equal gangs, room for 2: each gets half of the time, so each takes about twice solo.
    jobs, cluster = four_jobs_on_two_node_pools()
    res = simulate_gavel(jobs, cluster, packed=False, hetero=False)
    assert all(1.8 < o.finish_s / o.solo_s < 2.2 for o in res.outcomes)  # all arrive at 0


@PROPS
@given(seed=seeds, packed=st.booleans(), hetero=st.booleans(), r_cap=st.integers(2, 4),
       t_cap=st.integers(2, 4))
def test_peak_never_exceeds_the_node_caps(seed, packed, hetero, r_cap, t_cap):
    jobs = short_trace(seed, mean_gap_s=200.0, slo_range=(1.0, 3.0))
    cluster = make_cluster(max_rollout_nodes=r_cap, max_train_nodes=t_cap)
    res = simulate_gavel(jobs, cluster, seed=seed, packed=packed, hetero=hetero)
    assert res.peak_gpus["rollout"] <= 8 * r_cap and res.peak_gpus["train"] <= 8 * t_cap
    assert len(res.outcomes) == len(jobs)


def test_same_seed_gives_identical_result():
    jobs = short_trace(5, 12, sigma=0.2, slo_range=(1.0, 4.0), mean_gap_s=200.0)
    cluster = make_cluster(max_rollout_nodes=3, max_train_nodes=3)
    a = simulate_gavel(jobs, cluster, seed=9)
    b = simulate_gavel(jobs, cluster, seed=9)
    assert a == b
    assert simulate_gavel(jobs, cluster, seed=10).cost_usd != a.cost_usd


def test_unplaceable_job_is_a_clear_error():
    cluster = make_cluster(max_rollout_nodes=1)
    with pytest.raises(InputError, match="j0"):
        simulate_gavel([make_job("j0", rollout_gpus=16)], cluster)
