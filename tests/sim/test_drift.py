"""Profile drift: the scheduler sees only measured phase times, and repair keeps the SLOs."""

from __future__ import annotations

import pytest
from factories import GROUPS, config, intra, make_cluster, make_job, make_policy

from rollmux.core.spec import Drift
from rollmux.sim.simulator import Simulation

CLUSTER = make_cluster()


def _pair(drift: Drift | None):
    a = make_job("a", rollout=100, train=20, slo=1.5, duration=125.0 * 200)
    b = make_job("b", rollout=20, train=100, slo=1.5, duration=125.0 * 200, drift=drift)
    return [a, b]


def _run(jobs, **cfg):
    sim = Simulation(jobs, CLUSTER, config(GROUPS, **cfg), make_policy())
    return sim, sim.run()


def test_without_drift_the_pair_shares_a_group_and_meets_its_slos():
    sim, res = _run(_pair(None))
    assert res.placements == {"isolated": 1, "direct_packing": 1}
    assert res.slo_attainment == 1.0 and sim.migrations == 0


def test_a_drifted_member_breaks_its_partners_slo_without_repair():
    _, res = _run(_pair(Drift(after_s=1300.0, rollout_scale=3.0, train_scale=3.0)), repair=False)
    met = {o.job_id: o.slo_met for o in res.outcomes}
    assert met == {"a": False, "b": True}


def test_repair_moves_the_drifted_member_out_and_both_meet_their_slos():
    sim, res = _run(_pair(Drift(after_s=1300.0, rollout_scale=3.0, train_scale=3.0)))
    assert res.slo_attainment == 1.0
    assert sim.migrations == 1 and res.migrations["count"] == 1
    assert res.migrations["stall_hours"] > 0 and res.migrations["cost_usd"] > 0


def test_a_drifted_job_is_judged_against_its_own_drifted_solo_time():
    sim, res = _run([_pair(Drift(after_s=0.0, rollout_scale=2.0, train_scale=2.0))[1]])
    (b,) = res.outcomes
    assert b.solo_s == pytest.approx(200 * (2 * 20 + 2 * 100 + 5))
    assert b.slowdown == pytest.approx(1.0, abs=1e-6) and b.slo_met


def test_the_scheduler_never_reads_the_drift_field():
    jobs = _pair(Drift(after_s=1e12, rollout_scale=3.0, train_scale=3.0))  # drift that never comes
    plain = _run(_pair(None))[1]
    assert _run(jobs)[1].cost_usd == plain.cost_usd


@pytest.mark.parametrize("plan", ["worst", "mean"])
def test_repair_is_the_safety_net_of_either_admission(plan):
    """Noisy rollouts (sigma 0.2, capped at 1.5x the median), admitted by the mean or the worst
    case (core/placement/admission.py): the drifted member is moved out and both meet their SLOs."""
    jobs = [j.model_copy(update={"rollout_s": j.rollout_s.model_copy(
        update={"sigma": 0.2, "max": 1.5 * j.rollout_s.median})})
        for j in _pair(Drift(after_s=1300.0, rollout_scale=3.0, train_scale=3.0))]
    jobs = [type(j)(**dict(j)) for j in jobs]  # fresh models: no cached solo time
    sim = Simulation(jobs, CLUSTER, config(GROUPS, plan=plan), make_policy(intra(plan=plan)))
    res = sim.run()
    assert res.placements.get("direct_packing", 0) + res.placements.get("rollout_scaling", 0) == 1
    assert res.slo_attainment == 1.0 and sim.migrations >= 1
