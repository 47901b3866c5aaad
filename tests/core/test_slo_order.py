"""SLO-aware order inside a group (core/slo_order.py): weighted round robin, schedule = controller."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollmux.core.group import Group, GroupShape
from rollmux.core.intra_group import period, plan_group, schedule
from rollmux.core.slo_order import choose_slots, fresh_budget, spread
from test_group_controller import Driver
from factories import any_configs, fixed_times, groups, intra, make_group, make_job, make_policy


def with_slots(g: Group, slots: tuple[int, ...]) -> Group:
    """`g` with a planning shape that carries `slots` (the controller reads only those)."""
    return dataclasses.replace(g, shape=GroupShape(1.0, 1.0, 1.0, slots=slots))


@st.composite
def rated_groups(draw):
    g = draw(groups(max_members=4))
    rates = [draw(st.integers(1, 3)) for _ in g.members]
    rates[draw(st.integers(0, len(rates) - 1))] = 1  # some member runs once per meta-iteration
    return g, tuple(rates)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gr=rated_groups(), cfg=any_configs())
def test_controller_matches_schedule_under_slo_order(gr, cfg):
    """Every iteration's sync end is the same in `schedule` and the event-driven controller."""
    g, rates = gr
    slots = spread(rates)
    meta = 4
    _, recs = schedule(g.members, g.n_rollout, g.n_train, [fixed_times(g)] * meta, cfg, record=True,
                       slots=slots)
    d = Driver(with_slots(g, slots), cfg, {m.job_id: meta * r for m, r in zip(g.members, rates)}, leave=False)
    for m in g.members:
        d.start(m.job_id)
    d.env.run()
    for m in g.members:
        expect = [r.end + m.job.sync_s for r in recs if r.job_id == m.job_id and r.phase == "train"]
        assert len(expect) == len(d.sync_ends[m.job_id])
        assert d.sync_ends[m.job_id] == pytest.approx(expect, rel=1e-9, abs=1e-9)


def test_spread_places_each_member_its_rate_and_is_round_robin_at_ones():
    assert spread((1, 1, 1)) == (0, 1, 2)
    assert spread((2, 1, 1)) == (0, 1, 0, 2)
    for rates in [(3, 1, 1), (3, 2, 1), (1, 4), (2, 2, 1)]:
        s = spread(rates)
        assert [s.count(j) for j in range(len(rates))] == list(rates)


def tight_and_loose() -> Group:
    """A fast job with a tight SLO and two loose ones on one rollout and one training node:
    round robin runs the fast job at the group's load, beyond its budget."""
    a = make_job("a", rollout=150, train=60, sync=10, slo=1.3)
    b = make_job("b", rollout=80, train=60, sync=10, slo=4.0)
    c = make_job("c", rollout=80, train=60, sync=10, slo=4.0)
    return make_group([(a, (0,)), (b, (0,)), (c, (0,))], 1)


def test_slo_order_gives_the_tight_member_a_shorter_period_within_every_budget():
    g = tight_and_loose()
    rr = plan_group(g, intra(migration=False))
    slo = plan_group(g, intra(migration=False, order="slo"))
    budgets = [fresh_budget(m.job) for m in rr.members]
    assert rr.shape.period_s > budgets[0]  # round robin breaks the tight member's budget
    assert slo.shape.slots and slo.shape.slots.count(0) == 2
    per = [slo.shape.member_period(i) for i in range(3)]
    assert all(p <= b for p, b in zip(per, budgets))
    assert per[0] == pytest.approx(slo.shape.period_s / 2)
    # The planned period is the schedule's long-run meta-iteration time.
    ends, _ = schedule(slo.members, 1, 1, [fixed_times(slo)] * 200, intra(migration=False),
                       slots=slo.shape.slots)
    assert (ends[-1][1] - ends[99][1]) / 100 <= slo.shape.period_s + 1e-6


def test_slo_order_is_round_robin_where_round_robin_fits():
    """Theorem 1's case: an unsaturated group whose period is T_cycle within every budget."""
    g = make_group([(make_job(f"j{i}", rollout=60, train=60, sync=5, slo=2.0), (i,)) for i in range(2)], 2)
    rr = plan_group(g, intra())
    slo = plan_group(g, intra(order="slo"))
    assert slo.shape.slots == () and slo.shape == rr.shape and slo.members == rr.members


def test_choose_slots_never_worsens_the_worst_pressure():
    g = tight_and_loose()
    cfg = intra(migration=False)
    times = fixed_times(g)
    rr = period(g.members, 1, 1, times, cfg)
    slots, per = choose_slots(g.members, times, cfg, rr, lambda seq: period(g.members, 1, 1, times, cfg, seq))
    budgets = [fresh_budget(m.job) for m in g.members]
    worst = max(per / slots.count(j) / b for j, b in enumerate(budgets))
    assert worst < max(rr / b for b in budgets)
    assert min(slots.count(j) for j in range(3)) == 1


def test_rate_change_mid_run_completes_every_iteration():
    """A newcomer joins and the rates change: no deadlock, every job runs all its iterations."""
    g = tight_and_loose()
    first = Group(0, 1, 1, g.members[:2])
    cfg = intra(migration=False, order="slo")
    d = Driver(plan_group(first, cfg, reorder=False), cfg, {"a": 9, "b": 4}, leave=True)
    d.start("a")
    d.start("b")
    d.env.call_at(500.0, d.join, plan_group(g, cfg, reorder=False), "c", 3)
    d.env.run()
    assert {j: len(v) for j, v in d.sync_ends.items()} == {"a": 9, "b": 4, "c": 3}


def test_config_rejects_unknown_order_and_slo_with_mean_planning():
    with pytest.raises(ValueError, match="order"):
        intra(order="edf")
    with pytest.raises(ValueError, match="plans with admission.plan 'worst' only"):
        intra(order="slo", plan="mean")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gr=rated_groups(), new=st.lists(st.integers(1, 3), min_size=4, max_size=4), at=st.floats(0.0, 900.0),
       cfg=any_configs())
def test_rates_changing_at_any_moment_never_deadlock(gr, new, at, cfg):
    """The rates change mid-run (a replan), whatever each job is doing then: every job still
    runs all its iterations (a finished job leaves, as in the simulator) (a recount that let a job's next training key precede the rollout
    it must run first deadlocked the group)."""
    g, rates = gr
    new = new[:len(rates)]
    new[0] = 1
    d = Driver(with_slots(g, spread(rates)), cfg, {m.job_id: 6 for m in g.members}, leave=True)
    for m in g.members:
        d.start(m.job_id)

    def replan() -> None:
        if len(d.group.members) == len(g.members):  # (nobody left yet)
            d.ctl.update_group(with_slots(g, spread(new)))
    d.env.call_at(at, replan)
    d.env.run()
    assert all(len(d.sync_ends[m.job_id]) == 6 for m in g.members)


def test_admission_packs_a_tight_newcomer_directly_only_under_the_slo_order():
    """Round robin needs a new rollout node for the tight job (a shared one would run it at
    the loose members' pace); the SLO order packs it onto the shared node at rate 2, and the
    plan passes the written invariants and every member's own budget."""
    from rollmux.core.placement import Case, ClusterView, validate_plan
    from rollmux.core.placement.admission import group_fits
    from factories import make_cluster

    full = tight_and_loose()
    cluster = make_cluster()
    cases = {}
    for order in ("rr", "slo"):
        cfg = intra(migration=False, order=order)
        g = plan_group(Group(0, 1, 1, full.members[1:]), cfg)
        v = ClusterView(cluster, (g,), None, None, 5, 1)
        plan = make_policy(cfg).place(full.members[0].job, v)
        validate_plan(plan, full.members[0].job, v)
        assert group_fits(plan.group, {}, cfg)
        cases[order] = (plan.case, plan.group.shape.slots)
    assert cases["rr"] == (Case.SCALING, ())
    assert cases["slo"][0] == Case.DIRECT and sorted(cases["slo"][1]).count(2) == 2  # the newcomer, twice
