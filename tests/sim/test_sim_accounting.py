"""The two accountings of a simulated job's stay (sim/accounting.py), for every policy alike."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.sim.accounting import PAPER, WORK, accounting_named, job_outcome, nominal_iterations, throughput
from rollmux.sim.baselines import solo_d_cost
from rollmux.sim.runner import POLICY_NAMES, compare, run_policy
from factories import SHIPPED, make_cluster, make_job, synthetic_trace

CLUSTER = default_cluster()
SOLO_ITER = 100.0 + 100.0 + 5.0  # make_job's deterministic iteration: rollout + train + sync


def stay(o) -> float:
    """How long the job was present: arrival to departure."""
    return (o.finish_s if o.left_s is None else o.left_s) - o.arrival_s


def trace(n: int = 8, seed: int = 4) -> list:
    return synthetic_trace(np.random.default_rng(seed), n, mean_gap_s=900.0, duration_range=(4_000.0, 9_000.0))


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_paper_holds_every_job_exactly_its_trace_duration_under_every_policy(name):
    jobs = trace()
    result = run_policy(name, jobs, CLUSTER, SHIPPED, accounting=PAPER)
    by_id = {j.job_id: j for j in jobs}
    assert len(result.outcomes) == len(jobs)
    for o in result.outcomes:
        assert stay(o) == pytest.approx(by_id[o.job_id].duration_s, abs=1e-6)


def test_paper_solo_d_costs_the_closed_form():
    jobs = trace(12, seed=9)
    result = run_policy("solo-d", jobs, CLUSTER, SHIPPED, accounting=PAPER)
    assert result.cost_usd == pytest.approx(solo_d_cost(jobs, CLUSTER), rel=1e-9)


def test_work_solo_d_pays_for_the_iterations_not_the_trace_duration():
    # The contrast that makes the paper accounting a choice: under work, Solo-D's stays are its
    # iterations' draws, not duration_s, so its cost is not the closed form to the cent.
    jobs = trace(12, seed=9)
    result = run_policy("solo-d", jobs, CLUSTER, SHIPPED, accounting=WORK)
    assert result.cost_usd != pytest.approx(solo_d_cost(jobs, CLUSTER), rel=1e-9)
    assert all(o.left_s is None for o in result.outcomes)


def test_solo_d_over_verl_is_rollout_plus_train_price_over_train_price_on_one_node_jobs():
    cluster = make_cluster(rollout_price=1.0, train_price=3.0)
    jobs = [make_job(f"j{i}", arrival=500.0 * i, duration=3_000.0 + 700.0 * i) for i in range(5)]
    cmp = compare(jobs, cluster, ["solo-d", "verl"], SHIPPED, accounting=PAPER)
    ratio = cmp.results["solo-d"].cost_usd / cmp.results["verl"].cost_usd
    assert ratio == pytest.approx((1.0 + 3.0) / 3.0, rel=1e-9)


def rollout_heavy_pair() -> list:
    """Two rollout-heavy jobs that greedy packs onto one rollout node: each is slowed."""
    return [make_job(j, rollout=200.0, train=20.0, duration=20_000.0, slo=1.1) for j in ("a", "b")]


def test_a_slowed_job_does_fewer_iterations_under_paper_for_the_same_stay():
    jobs = rollout_heavy_pair()
    work = {o.job_id: o for o in run_policy("greedy", jobs, CLUSTER, SHIPPED, accounting=WORK).outcomes}
    paper = {o.job_id: o for o in run_policy("greedy", jobs, CLUSTER, SHIPPED, accounting=PAPER).outcomes}
    for job in jobs:
        w, p = work[job.job_id], paper[job.job_id]
        assert w.slowdown > 1.3  # they did share the node
        assert w.iterations == job.iterations and stay(w) > job.duration_s
        assert p.iterations < w.iterations and stay(p) == pytest.approx(job.duration_s)
        assert p.mean_iter_s == pytest.approx(w.mean_iter_s, rel=0.05)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_the_iteration_in_flight_at_departure_is_abandoned(name):
    job = make_job("a", duration=1_000.0)  # deterministic: every iteration of a lone job takes as long
    (w,) = run_policy(name, [job], CLUSTER, SHIPPED, accounting=WORK).outcomes
    (p,) = run_policy(name, [job], CLUSTER, SHIPPED, accounting=PAPER).outcomes
    done = int(1_000.0 // w.mean_iter_s)
    assert 0 < done < 1_000.0 / w.mean_iter_s  # (an iteration is in flight at the departure)
    assert (p.iterations, p.left_s) == (done, 1_000.0)
    assert p.finish_s == pytest.approx(done * w.mean_iter_s)
    assert p.solo_s == pytest.approx(done * SOLO_ITER)


def test_solo_d_leaves_at_its_departure_in_any_phase():
    # 4 iterations end at 820 s; the 5th is in its rollout at 900 s, its training at 1000 s, its sync at 1020 s.
    for duration in (900.0, 1_000.0, 1_022.0):
        (o,) = run_policy("solo-d", [make_job("a", duration=duration)], CLUSTER, SHIPPED, accounting=PAPER).outcomes
        assert (o.iterations, o.finish_s, o.left_s) == (4, pytest.approx(4 * SOLO_ITER), duration)


def test_a_job_faster_than_solo_does_more_than_its_nominal_iterations():
    # Co-located, this rollout-heavy job runs faster than solo: under paper it keeps iterating.
    job = make_job("a", rollout=800.0, train=100.0, duration=200_000.0, colo=(0.6, 1.0))
    (p,) = run_policy("verl", [job], CLUSTER, SHIPPED, accounting=PAPER).outcomes
    assert p.iterations > job.iterations


def test_a_job_queued_past_its_departure_leaves_without_running():
    cluster = make_cluster(max_rollout_nodes=1, max_train_nodes=1)
    jobs = [make_job("long", duration=5_000.0), make_job("short", arrival=10.0, duration=2_000.0)]
    result = run_policy("solo-d", jobs, cluster, SHIPPED, accounting=PAPER)
    short = next(o for o in result.outcomes if o.job_id == "short")
    assert (short.iterations, short.start_s, short.finish_s) == (0, 2_010.0, 2_010.0)
    assert result.slowdowns.size == 1  # only the job that completed iterations has a slowdown
    assert result.cost_usd == pytest.approx(5_000.0 / 3600 * 8 * (1.0 + 2.85))


def test_throughput_is_iterations_done_over_the_nominal_solo_iterations():
    jobs = [make_job("a", duration=10.5 * SOLO_ITER), make_job("b", arrival=50.0, duration=4.5 * SOLO_ITER)]
    assert nominal_iterations(jobs) == pytest.approx(15.0)
    result = run_policy("solo-d", jobs, CLUSTER, SHIPPED, accounting=PAPER)
    assert sorted(o.iterations for o in result.outcomes) == [4, 10]
    assert throughput(result, nominal_iterations(jobs)) == pytest.approx(14 / 15.0)


def test_paper_json_names_its_accounting_and_reports_throughput_work_json_does_not():
    jobs = trace(4)
    paper = compare(jobs, CLUSTER, ["solo-d"], SHIPPED, accounting=PAPER).to_json()
    work = compare(jobs, CLUSTER, ["solo-d"], SHIPPED).to_json()
    assert paper["accounting"] == "paper"
    assert {"iterations_done", "throughput"} <= set(paper["policies"]["solo-d"])
    assert "accounting" not in work and "throughput" not in work["policies"]["solo-d"]


def test_a_job_with_no_completed_iteration_is_judged_on_its_stay():
    job = make_job("a", duration=150.0, slo=1.5)
    empty = np.empty(0)
    within = job_outcome(job, empty, 0, 0.0, 0.0, 150.0)    # 150 s into a 205 s iteration: not late yet
    late = job_outcome(job, empty, 0, 0.0, 0.0, 400.0)      # past 1.5 x 205 s on its first iteration
    assert within.slo_met and not late.slo_met
    assert np.isnan(within.slowdown) and within.mean_iter_s == 150.0


def test_unknown_accounting_is_an_input_error_naming_the_option():
    assert accounting_named("paper") is PAPER
    with pytest.raises(InputError, match="--accounting.*'x'.*work, paper"):
        accounting_named("x")
