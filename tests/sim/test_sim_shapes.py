"""The simulator runs flexible group shapes (core/placement/options/) as planned: elastic draws, added nodes."""

from __future__ import annotations

import pytest

from rollmux.core.elastic import rollout_factor
from rollmux.sim.simulator import Simulation
from factories import SHIPPED, config, intra, make_cluster, make_job, make_policy

CLUSTER = make_cluster()


def _run(jobs, train_scaling=False, elastic=False) -> Simulation:
    cfg = config(SHIPPED, train_scaling=train_scaling, elastic_rollout=elastic)
    policy = make_policy(cfg.intra_for(CLUSTER), train_scaling=train_scaling, elastic_rollout=elastic)
    sim = Simulation(jobs, CLUSTER, cfg, policy)
    sim.result = sim.run()
    return sim


def test_an_elastic_isolated_job_rolls_out_slower_on_fewer_nodes_and_is_judged_against_its_nominal_solo():
    job = make_job("b", rollout=100.0, train=100.0, sync=5.0, rollout_gpus=16, slo=2.0, duration=2050.0)
    f = rollout_factor(job, 2, 1)
    sim = _run([job], elastic=True)
    (out,) = sim.outcomes
    assert out.iterations == 10
    assert (out.finish_s - out.start_s) / out.iterations == pytest.approx(100.0 * f + 105.0)
    assert out.solo_s == pytest.approx(10 * 205.0)  # nominal nodes, same draws
    # One rollout node's 8 GPUs were busy for the slower rollouts.
    assert sim.ledger.busy_gpu_seconds["rollout"] == pytest.approx(8 * 10 * 100.0 * f)
    assert sim.result.slo_attainment == 1.0
    assert not sim.state.planned  # drift repair measured it against its nominal nodes: no drift seen


def test_a_job_joining_by_added_training_nodes_runs_and_its_nodes_are_paid_for():
    a = make_job("a", duration=20_000.0)
    b = make_job("b", train_gpus=16, arrival=10.0, duration=10_000.0)
    sim = _run([a, b], train_scaling=True)
    assert sim.result.placements["train_scaling"] == 1
    assert sim.result.slo_attainment == 1.0
    assert {o.job_id for o in sim.outcomes} == {"a", "b"}


def test_with_both_switches_off_the_run_is_unchanged():
    jobs = [make_job(f"j{i}", rollout=60.0 + 20 * i, rollout_gpus=8 * (1 + i % 2), train_gpus=8 * (1 + (i // 2) % 2),
                     arrival=30.0 * i, duration=5_000.0, sigma=0.2, rollout_max=200.0, tail_frac=0.3)
             for i in range(6)]
    plain = Simulation(jobs, CLUSTER, SHIPPED, make_policy(SHIPPED.intra_for(CLUSTER))).run()
    off = _run(jobs).result
    assert off.cost_usd == plain.cost_usd and off.placements == plain.placements


def test_the_shape_enumeration_with_only_nominal_options_places_as_algorithm_1():
    # One training node each: training scaling has nothing to add, so core/placement/options/ tries
    # exactly Algorithm 1's candidates, in its order (groups, new rollout nodes, regrouping).
    jobs = [make_job(f"j{i}", rollout=50.0 + 25 * (i % 5), train=40.0 + 30 * (i % 3), rollout_gpus=8 * (1 + i % 2),
                     arrival=40.0 * i, duration=4_000.0 + 900 * (i % 4), sigma=0.1,
                     rollout_max=1.3 * (50.0 + 25 * (i % 5)),
                     tail_frac=0.3, slo=1.6 + 0.1 * (i % 5))
            for i in range(14)]
    plain = Simulation(jobs, CLUSTER, SHIPPED, make_policy(SHIPPED.intra_for(CLUSTER))).run()
    flexible = _run(jobs, train_scaling=True).result
    assert flexible.cost_usd == plain.cost_usd and flexible.placements == plain.placements
    assert plain.placements.get("direct_packing", 0) + plain.placements.get("rollout_scaling", 0) > 0  # shared


def test_stress_seed_6_meets_every_slo_with_elastic_rollout():
    # benchmarks/slo_stress.py's trace 6: two moves into one group decided 180 s apart; the
    # second was planned without the first's pending migration and j003 missed its SLO.
    import numpy as np

    from rollmux.core.spec import default_cluster
    from rollmux.sim.simulator import simulate
    from factories import synthetic_trace

    jobs = synthetic_trace(np.random.default_rng(6), 30, sigma=0.0, mean_gap_s=60.0, slo_range=(1.0, 1.5),
                           duration_range=(3000.0, 20000.0))
    policy = make_policy(intra(migration=False), elastic_rollout=True)
    res = simulate(jobs, default_cluster(), config(SHIPPED, plan="worst"), policy, seed=6)  # worst case
    assert res.migrations["count"] > 0 and len(res.outcomes) == 30
    assert [o.job_id for o in res.outcomes if not o.slo_met] == []


def test_compaction_gives_back_a_rollout_node_the_members_can_spare_and_every_slo_holds():
    # Two training-heavy 16-GPU jobs and a third: once they run, a group narrows a member
    # onto fewer rollout nodes (core/repair/compaction.py) and pays for one node fewer. (Without the
    # co-located mode, which would run each of them alone on one training node.)
    def job(job_id, rollout, train, duration, arrival):
        return make_job(job_id, rollout=rollout, train=train, slo=1.4, rollout_gpus=16, sigma=0.1,
                        rollout_max=rollout * 1.3, duration=duration, arrival=arrival)
    jobs = [job("a", 200.0, 300.0, 50_000.0, 0.0), job("b", 200.0, 300.0, 50_000.0, 10.0),
            job("c", 150.0, 100.0, 30_000.0, 20.0)]
    runs = {}
    for on in (False, True):
        sim = Simulation(jobs, CLUSTER, config(SHIPPED, compact=on, colocate=False))
        runs[on] = (sim.run(), sim.state.compacted)
    (off, n_off), (on, n_on) = runs[False], runs[True]
    assert n_off == 0 and n_on >= 1
    assert on.cost_usd < off.cost_usd
    assert on.slo_attainment == off.slo_attainment == 1.0 and len(on.outcomes) == 3
