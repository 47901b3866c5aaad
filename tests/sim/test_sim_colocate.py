"""The simulator executing co-located jobs (core/placement/options/colocated.py, sim/colocated.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.core.colo_model import colocated_iter_s
from rollmux.sim.baselines import simulate_verl
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import Simulation, simulate
from factories import ROLLOUT_HEAVY_COLO, SHIPPED, config, make_cluster, make_job, make_policy, synthetic_trace

CLUSTER = make_cluster()
ON = SHIPPED  # (the co-located mode is on in the shipped profile)


def rollout_heavy(job_id: str, arrival: float = 0.0, **kw):
    return make_job(job_id, rollout=888.0, train=560.0, sync=10.0, sigma=0.2, rollout_max=1800.0,
                    rollout_gpus=16, train_gpus=16, arrival=arrival, duration=30_000.0,
                    colo=ROLLOUT_HEAVY_COLO, **kw)


def test_a_colocated_job_runs_exactly_as_the_verl_baseline_runs_it():
    jobs = [rollout_heavy("a"), rollout_heavy("b", arrival=5000.0)]
    res = run_policy("rollmux", jobs, CLUSTER, ON)
    verl = simulate_verl(jobs, CLUSTER, seed=0)
    assert res.placements == {"colocated": 2}
    assert res.cost_usd == pytest.approx(verl.cost_usd, rel=1e-9)
    assert res.idle_share == pytest.approx(verl.idle_share)
    assert res.peak_gpus == verl.peak_gpus == {"rollout": 0, "train": 32}
    ours = {o.job_id: o for o in res.outcomes}
    for o in verl.outcomes:
        assert ours[o.job_id].finish_s == pytest.approx(o.finish_s, rel=1e-12)
        assert ours[o.job_id].slo_met
    assert res.to_json()["placements"]["colocated"] == 1.0


def test_off_no_colocated_key_and_the_old_result():
    jobs = [rollout_heavy("a")]
    off = run_policy("rollmux", jobs, CLUSTER, config(SHIPPED, colocate=False))
    assert "colocated" not in off.placements and "colocated" not in off.to_json()["placements"]
    assert off.placements == {"isolated": 1}


def test_a_mixed_trace_meets_every_slo_and_its_counts_add_up():
    jobs = synthetic_trace(np.random.default_rng(7), 30, sigma=0.2, gpus=(8, 16))
    sim = Simulation(jobs, CLUSTER, ON, make_policy(ON.intra_for(CLUSTER), colocate=True))
    res = sim.run()
    assert res.slo_attainment == 1.0 and len(res.outcomes) == len(jobs)
    cases = res.placements
    assert cases.get("colocated", 0) > 0 and cases.get("isolated", 0) + cases.get("direct_packing", 0) > 0
    assert sum(cases.values()) == len(jobs)
    # A co-located placement is not an isolated one: the reasons add up to the isolated placements.
    assert sum(res.placements_why["placements"].values()) == cases.get("isolated", 0)
    assert sim.state.colocated == {} and sim.ledger.nodes == {"rollout": 0, "train": 0}
    assert res.cost_usd < run_policy("rollmux", jobs, CLUSTER, config(SHIPPED, colocate=False)).cost_usd


def test_a_colocated_job_that_drifts_runs_its_drifted_phases():
    job = rollout_heavy("d", drift={"after_s": 3000.0, "rollout_scale": 2.0, "train_scale": 2.0})
    plain = run_policy("rollmux", [rollout_heavy("d")], CLUSTER, ON)
    drifted = run_policy("rollmux", [job], CLUSTER, ON)
    assert drifted.placements == {"colocated": 1}
    o, p = drifted.outcomes[0], plain.outcomes[0]
    assert o.finish_s - o.start_s > 1.5 * (p.finish_s - p.start_s)
    assert o.slo_met  # judged against the same drifted iterations run solo


def test_colo_speed_slows_the_simulated_job_as_planned():
    jobs = [rollout_heavy("a", slo=3.0)]
    fast = run_policy("rollmux", jobs, CLUSTER, ON)
    # (at half speed it is dearer than an isolated group: a generous margin keeps it co-located)
    slow = run_policy("rollmux", jobs, CLUSTER, config(ON, dotted={"colocation.speed": 0.5, "colocation.margin": 5.0}))
    assert slow.placements == {"colocated": 1}
    sf, ss = (r.outcomes[0].finish_s - r.outcomes[0].start_s for r in (fast, slow))
    assert ss > 1.9 * sf  # phases twice as slow; the switches are not scaled


def test_the_policy_alone_also_runs_under_plain_simulate():
    res = simulate([rollout_heavy("a")], CLUSTER, ON, make_policy(ON.intra_for(CLUSTER), colocate=True))
    assert res.placements == {"colocated": 1}


def test_under_node_caps_colocated_jobs_queue_within_the_training_pool():
    jobs = synthetic_trace(np.random.default_rng(3), 40, sigma=0.2, gpus=(8, 16), mean_gap_s=200)
    capped = make_cluster(max_rollout_nodes=4, max_train_nodes=3)
    res = run_policy("rollmux", jobs, capped, ON)
    assert len(res.outcomes) == len(jobs) and res.placements.get("colocated", 0) > 0
    assert res.peak_gpus["train"] <= 3 * 8 and res.peak_gpus["rollout"] <= 4 * 8
    assert max(o.queued_s for o in res.outcomes) > 0  # the caps made someone wait


def _colo_then_group(colo_regroup: bool):
    """x and z co-located (train-heavy 8:8, nobody to share with), then y, a rollout-heavy 16:8
    job, founds a group whose bubbles fit x; z's departure runs the consolidation pass. (Without
    folding: with it, y's arrival would pull x in at once, core/repair/pairing.py.)"""
    x = make_job("x", rollout=50.0, train=300.0, duration=200_000.0, slo=2.0)
    z = make_job("z", rollout=50.0, train=300.0, duration=3_000.0, slo=2.0, arrival=500.0)
    y = make_job("y", rollout=300.0, train=50.0, rollout_gpus=16, duration=200_000.0, slo=2.0, arrival=1000.0)
    sim = Simulation([x, z, y], CLUSTER, config(ON, colo_regroup=colo_regroup, dotted={"colocation.fold": False}),
                     make_policy(ON.intra_for(CLUSTER), colocate=True))
    return sim, sim.run()


def test_a_colocated_job_moves_into_a_group_that_has_room_for_it_and_the_run_costs_less():
    sim, res = _colo_then_group(True)
    kept_sim, kept = _colo_then_group(False)
    assert res.placements == kept.placements == {"colocated": 2, "isolated": 1}
    assert res.migrations["count"] == 1 and kept.migrations["count"] == 0
    assert res.slo_attainment == kept.slo_attainment == 1.0
    assert res.cost_usd < kept.cost_usd
    # What the move cost is in the bill: the migration held x's destination nodes while it ran.
    assert res.migrations["cost_usd"] > 0
    assert sim.ledger.nodes == kept_sim.ledger.nodes == {"rollout": 0, "train": 0}


def test_a_narrowed_colocated_job_runs_on_one_training_node_as_planned():
    # A train-heavy 16:8 job (core/colo_model.py, narrowed): with elastic rollout it runs co-located
    # on one H800 node, each iteration as long as the model says, and pays for that node alone.
    job = make_job("w", rollout=100.0, train=300.0, rollout_gpus=16, train_gpus=8, tail_frac=0.1, slo=1.5,
                   duration=20_000.0)
    res = run_policy("rollmux", [job], CLUSTER, ON)
    assert ON.shapes.elastic_rollout and res.placements == {"colocated": 1}
    assert res.peak_gpus == {"rollout": 0, "train": 8}
    o = res.outcomes[0]
    per_iter = colocated_iter_s(job, CLUSTER, 100.0, gpus=8)
    assert o.finish_s - o.start_s == pytest.approx(job.iterations * per_iter, rel=1e-9) and o.slo_met
    assert res.cost_usd == pytest.approx(CLUSTER.pools.train.node_price_per_hour * job.iterations * per_iter / 3600)
    # Without elastic rollout it cannot narrow: an isolated group or two co-located H800 nodes.
    nominal = run_policy("rollmux", [job], CLUSTER, config(ON, elastic_rollout=False))
    assert nominal.peak_gpus != res.peak_gpus and res.cost_usd < nominal.cost_usd
