"""Gavel+ baseline (DESIGN §6): job-level gangs, time-slicing under caps, phase-unaware packing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollmux.errors import InputError
from rollmux.sim.baseline_policies import SoloPlacement
from rollmux.sim.baselines import simulate_verl, solo_d_cost
from rollmux.sim.gavel import GavelSimulation, packed_period_s, simulate_gavel
from rollmux.sim.simulator import simulate
from factories import BALANCED_COLO, GROUPS, ROLLOUT_HEAVY_COLO, WORST, make_cluster, make_job, synthetic_trace

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
    solo = simulate(jobs, CLUSTER, GROUPS, SoloPlacement(WORST), seed=seed)
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


# -- heterogeneity-aware Gavel+ (hetero=True, the default) --------------------------------------

def rollout_heavy(job_id: str = "h", **kw):
    """A 1+1-node job, rollout 100 s / train 50 s: co-located at 608/888 of its rollout
    (122.5 s on one $22.8/h H800 node) beats 160 s on a $30.8/h H20 + H800 pair."""
    kw.setdefault("duration", 1600.0)
    return make_job(job_id, rollout=100.0, train=50.0, sync=10.0, colo=ROLLOUT_HEAVY_COLO, **kw)


def wide_rollout(job_id: str = "w", **kw):
    """24 H20 + 8 H800, balanced: co-located needs 3 H800 nodes ($68.4/h x 175.8 s) against
    3 H20 + 1 H800 ($46.8/h x 205 s): disaggregated is cheaper."""
    return make_job(job_id, rollout=100.0, train=100.0, sync=5.0, rollout_gpus=24, train_gpus=8,
                    colo=BALANCED_COLO, **kw)


def test_a_job_cheaper_co_located_holds_no_rollout_node():
    sim = GavelSimulation([rollout_heavy()], CLUSTER, packed=False)
    res = sim.run()
    assert sim.kind_counts == {"disagg": 0, "colo": 1}
    assert res.peak_gpus == {"rollout": 0, "train": 8}


def test_a_co_located_job_costs_what_verl_costs():
    job = rollout_heavy(sigma=0.2, rollout_max=150.0)
    gavel = simulate_gavel([job], CLUSTER, seed=3, packed=False)
    verl = simulate_verl([job], CLUSTER, seed=3)
    assert gavel.cost_usd == pytest.approx(verl.cost_usd, rel=1e-9)


def test_a_job_cheaper_disaggregated_stays_on_h20():
    sim = GavelSimulation([wide_rollout()], CLUSTER, packed=False)
    res = sim.run()
    assert sim.kind_counts == {"disagg": 1, "colo": 0}
    assert res.peak_gpus == {"rollout": 24, "train": 8}


@pytest.mark.parametrize("slo, kind", [(1.0, "disagg"), (1.1, "colo")])
def test_the_slo_decides_whether_a_slower_co_location_is_allowed(slo, kind):
    # At colo_speed 0.8 the balanced 1+1 job co-located takes (87.85 + 83.93) / 0.8 + 4 = 218.7 s
    # against 205 s solo (6.7% slower) but costs 22.8 x 218.7 < 30.8 x 205.
    job = make_job("b", rollout=100.0, train=100.0, sync=5.0, slo=slo, colo=BALANCED_COLO)
    sim = GavelSimulation([job], CLUSTER, packed=False, colo_speed=0.8)
    sim.run()
    assert sim.kind_counts[kind] == 1


def test_co_location_needs_both_states_in_one_nodes_host_memory():
    job = rollout_heavy(host_rollout=1000.0, host_train=1100.0)  # 2,100 GB > 2,048 GB per node
    sim = GavelSimulation([job], CLUSTER, packed=False)
    sim.run()
    assert sim.kind_counts == {"disagg": 1, "colo": 0}


def test_two_co_located_jobs_with_loose_slo_share_one_h800_node():
    # Period 2 x (122.5 + 2) = 249 s <= 2.5 x 160 s.
    sim = GavelSimulation([rollout_heavy("a", slo=2.5), rollout_heavy("b", slo=2.5)], CLUSTER, packed=True)
    res = sim.run()
    assert sim.joins == 1
    assert res.peak_gpus == {"rollout": 0, "train": 8}


def test_co_located_and_disaggregated_jobs_never_share_a_gang():
    sim = GavelSimulation([rollout_heavy("a", slo=4.0), wide_rollout("b", slo=4.0)], CLUSTER, packed=True,
                          max_pack=3)
    sim.run()
    assert sim.kind_counts == {"disagg": 1, "colo": 1}
    assert sim.joins == 0


def test_under_caps_a_job_avoids_the_kind_that_oversubscribes_a_pool():
    # a holds all 3 H20 nodes; b's cheaper disaggregated kind would ask 6 of 3 H20 nodes,
    # its co-located one 4 of 4 H800 nodes.
    cluster = make_cluster(max_rollout_nodes=3, max_train_nodes=4)
    jobs = [wide_rollout("a", duration=20_000.0), wide_rollout("b", arrival=10.0, duration=20_000.0)]
    sim = GavelSimulation(jobs, cluster, packed=False)
    res = sim.run()
    assert sim.kind_counts == {"disagg": 1, "colo": 1}
    assert {o.job_id: o.start_s for o in res.outcomes}["b"] == 10.0
    assert sim.preemptions == 0


def test_with_the_training_pool_oversubscribed_a_wide_job_stays_disaggregated():
    # 16 H20 + 8 H800, rollout-heavy: co-located (2 H800 nodes, $45.6/h x 122.5 s) is cheaper than
    # disaggregated (2 H20 + 1 H800, $38.8/h x 160 s). a takes both capped H800 nodes co-located;
    # for b co-location would ask 4 of 2 H800 nodes, disaggregation 3 of 2 (and 2 of 4 H20).
    cluster = make_cluster(max_rollout_nodes=4, max_train_nodes=2)
    jobs = [rollout_heavy("a", rollout_gpus=16, duration=20_000.0),
            rollout_heavy("b", rollout_gpus=16, arrival=10.0, duration=20_000.0)]
    sim = GavelSimulation(jobs, cluster, packed=False)
    sim.run()
    assert sim.kind_counts == {"disagg": 1, "colo": 1}
    uncapped = GavelSimulation(jobs, CLUSTER, packed=False)
    uncapped.run()
    assert uncapped.kind_counts == {"disagg": 0, "colo": 2}


@PROPS
@given(seed=seeds)
def test_hetero_never_costs_more_than_plain_without_caps(seed):
    # sigma 0: each job's choice compares its exact realized cost per iteration.
    jobs = short_trace(seed, 10, sigma=0.0)
    hetero = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False)
    plain = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False, hetero=False)
    assert hetero.cost_usd <= plain.cost_usd * (1 + 1e-9)


@PROPS
@given(seed=seeds)
def test_hetero_without_caps_meets_every_slo(seed):
    jobs = short_trace(seed, 10, sigma=0.3, slo_range=(1.0, 2.0))
    res = simulate_gavel(jobs, CLUSTER, seed=seed, packed=False)
    assert res.slo_attainment == 1.0, [o for o in res.outcomes if not o.slo_met]


def test_hetero_picks_co_location_on_some_short_traces():
    """Guards the two properties above against vacuity: the traces do co-locate jobs."""
    colo = 0
    for s in range(5):
        sim = GavelSimulation(short_trace(s, 10, sigma=0.0), CLUSTER, seed=s, packed=False)
        sim.run()
        colo += sim.kind_counts["colo"]
    assert colo > 0


def test_bad_colo_speed_is_a_clear_error():
    with pytest.raises(InputError, match="colo_speed"):
        simulate_gavel([rollout_heavy()], CLUSTER, colo_speed=0.0)
