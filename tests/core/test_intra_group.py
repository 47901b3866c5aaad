"""Intra-group round-robin schedule (DESIGN §4): properties of `schedule`, `period`, `best_order`."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, Member
from rollmux.core.intra_group import (
    PhaseTimes,
    best_order,
    earliest_start,
    group_planning_times,
    head_finish,
    period,
    plan_group,
    planning_times,
    schedule,
    t_cycle,
    t_load,
    tail_share,
)
from factories import any_configs, fixed_times, groups, intra, make_group, make_job, migration_configs

EPS = 1e-6
META = 6
PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def run(group: Group, cfg: IntraConfig, meta: int = META):
    times = fixed_times(group)
    return schedule(group.members, group.n_rollout, group.n_train, [times] * meta, cfg, record=True)


def by_node(records, pool: str):
    nodes = defaultdict(list)
    for r in records:
        if r.pool == pool:
            for n in r.nodes:
                nodes[n].append(r)
    return {n: sorted(rs, key=lambda r: (r.start, r.head_end)) for n, rs in nodes.items()}


def bound(group: Group, times, cfg: IntraConfig) -> float:
    return max(t_cycle(group.members, times),
               t_load(group.members, group.n_rollout, group.n_train, times, cfg.warm_switch_s))


# A saturated group whose load exceeds its cycle only slightly: the schedule needs more than
# n + 4 meta-iterations to settle, so a short warm-up reads the transient, not the steady state.
SLOW_TO_SETTLE = make_group([(make_job("a", rollout=194, train=79, sync=0), (0,)),
                             (make_job("b", rollout=98, train=38, sync=0), (1,)),
                             (make_job("c", rollout=26, train=111, sync=0), (1,)),
                             (make_job("d", rollout=155, train=14, sync=0), (1,))], 2)


# -- schedule: safety ----------------------------------------------------------------------

@PROPS
@given(group=groups(), warm=st.sampled_from([0.0, 2.0]))
def test_phases_never_overlap_on_a_node_without_migration(group, warm):
    _, records = run(group, intra(migration=False, warm_switch_s=warm))
    for pool in ("rollout", "train"):
        for node, recs in by_node(records, pool).items():
            for a, b in zip(recs, recs[1:]):
                assert b.start >= a.end - EPS, (pool, node, a, b)


@PROPS
@given(group=groups(), cfg=migration_configs())
def test_rollout_heads_never_overlap_on_a_node_with_migration(group, cfg):
    _, records = run(group, cfg)
    for node, recs in by_node(records, "rollout").items():
        for a, b in zip(recs, recs[1:]):
            assert b.start >= a.head_end - EPS, (node, a, b)


@PROPS
@given(group=groups(), cfg=migration_configs())
def test_train_phases_never_overlap_with_migration(group, cfg):
    _, records = run(group, cfg)
    for node, recs in by_node(records, "train").items():
        for a, b in zip(recs, recs[1:]):
            assert b.start >= a.end - EPS, (node, a, b)


@PROPS
@given(group=groups(), cfg=migration_configs())
def test_tail_load_under_a_rollout_head_stays_within_start_ratio(group, cfg):
    """While a rollout's head runs on a node, migrated tails hold at most 1 - start_ratio of it."""
    _, records = run(group, cfg)
    for node, recs in by_node(records, "rollout").items():
        tails = [r for r in recs if r.end > r.head_end + 1e-12]
        for h in recs:
            if h.head_end <= h.start:
                continue
            # The load only changes at tail boundaries: check at the head's start and at each
            # tail start inside the head.
            for t in [h.start] + [x.head_end for x in tails if h.start < x.head_end < h.head_end]:
                load = sum(cfg.tail_worker_frac for x in tails
                           if x.job_id != h.job_id and x.head_end <= t + 1e-9 and x.end > t + 1e-9)
                assert load <= 1.0 - cfg.start_ratio + 1e-9, (node, h, t, load)


@PROPS
@given(group=groups(), cfg=any_configs())
def test_each_job_phases_stay_in_order(group, cfg):
    _, records = run(group, cfg)
    per_job = defaultdict(dict)
    for r in records:
        per_job[r.job_id][(r.iteration, r.phase)] = r
    for m in group.members:
        recs = per_job[m.job_id]
        for it in range(META):
            ro, tr = recs[(it, "rollout")], recs[(it, "train")]
            assert ro.start <= ro.head_end <= ro.end
            assert ro.end <= tr.start + EPS
            if it + 1 < META:
                assert recs[(it + 1, "rollout")].start >= tr.end + m.job.sync_s - EPS


@PROPS
@given(group=groups(), cfg=any_configs())
def test_every_phase_lasts_at_least_its_duration(group, cfg):
    _, records = run(group, cfg)
    for r in records:
        job = group.member(r.job_id).job
        need = job.rollout_s.median if r.phase == "rollout" else job.train_s
        assert r.end - r.start >= need - EPS


@PROPS
@given(group=groups(), cfg=any_configs())
def test_sync_ends_are_train_ends_plus_sync(group, cfg):
    ends, records = run(group, cfg)
    trains = {(r.job_id, r.iteration): r for r in records if r.phase == "train"}
    for it in range(META):
        for j, m in enumerate(group.members):
            assert ends[it][j] == pytest.approx(trains[(m.job_id, it)].end + m.job.sync_s)


def test_lone_job_on_its_nodes_never_migrates():
    g = make_group([(make_job("a", tail_frac=0.5), (0,)), (make_job("b", tail_frac=0.5), (1,))], 2)
    _, records = run(g, intra(migration=True))
    assert all(r.head_end == r.end for r in records)


def test_shared_node_migrates_the_tail():
    g = make_group([(make_job("a", rollout=100, tail_frac=0.3), (0,)), (make_job("b", tail_frac=0.3), (0,))], 1)
    _, records = run(g, intra(migration=True, warm_switch_s=0.0, migration_overhead_s=1.0))
    first = records[0]
    assert (first.job_id, first.phase) == ("a", "rollout")
    assert first.head_end == pytest.approx(70.0)
    assert first.end == pytest.approx(101.0)


def test_next_rollout_starts_at_head_end_and_runs_slower_under_a_tail():
    # a: 100 s rollout, 30% tail migrated onto 25% of the node; b may start at a's head end (70 s)
    # and progresses at 75% speed while a's tail runs (until 101 s).
    a = make_job("a", rollout=100, train=10, tail_frac=0.3)
    b = make_job("b", rollout=100, train=10, tail_frac=0.0)
    g = make_group([(a, (0,)), (b, (0,))], 1)
    _, records = run(g, intra(migration=True, warm_switch_s=0.0, migration_overhead_s=1.0), meta=1)
    rb = next(r for r in records if r.job_id == "b" and r.phase == "rollout")
    assert rb.start == pytest.approx(70.0)
    # 31 s at 0.75 speed = 23.25 s of work, then 76.75 s at full speed.
    assert rb.end == pytest.approx(101.0 + 76.75)


def test_a_job_that_cannot_migrate_its_tail_holds_its_node_to_the_end_of_its_rollout():
    cfg = intra(migration=True, warm_switch_s=0.0, migration_overhead_s=1.0)
    b = make_job("b", rollout=100, train=10, tail_frac=0.0)
    for cannot, b_start in (([], 70.0), (["tail_migration"], 100.0)):  # (as the test above, then without)
        a = make_job("a", rollout=100, train=10, tail_frac=0.3, cannot=cannot)
        _, records = run(make_group([(a, (0,)), (b, (0,))], 1), cfg, meta=1)
        ra, rb = (next(r for r in records if r.job_id == j and r.phase == "rollout") for j in "ab")
        assert rb.start == pytest.approx(b_start)
        assert (ra.head_end == ra.end) == bool(cannot)


def test_a_job_that_cannot_migrate_its_tail_is_planned_without_the_straggler_recompute():
    cfg = intra(migration=True, migration_overhead_s=1.0)
    b = make_job("b", tail_frac=0.3)
    for cannot, overhead in (([], 1.0), (["tail_migration"], 0.0)):
        a = make_job("a", tail_frac=0.3, cannot=cannot)
        times = group_planning_times(make_group([(a, (0,)), (b, (0,))], 1).members, cfg)
        assert times[0].rollout == pytest.approx(planning_times(a, cfg.plan_quantile).rollout + overhead)
        assert times[1].rollout == pytest.approx(planning_times(b, cfg.plan_quantile).rollout + 1.0)


def test_warm_switch_charged_when_node_changes_job():
    g = make_group([(make_job("a", rollout=50, train=50, sync=0), (0,)),
                    (make_job("b", rollout=50, train=50, sync=0), (0,))], 1)
    _, records = run(g, intra(migration=False, warm_switch_s=3.0), meta=1)
    rb = next(r for r in records if r.job_id == "b" and r.phase == "rollout")
    assert rb.start == pytest.approx(50.0)
    assert rb.end == pytest.approx(103.0)


def test_no_switch_when_node_keeps_the_same_job():
    g = make_group([(make_job("a", rollout=50, train=50, sync=5), (0,))], 1)
    ends, _ = run(g, intra(migration=False, warm_switch_s=3.0), meta=3)
    assert [e[0] for e in ends] == pytest.approx([105.0, 210.0, 315.0])


# -- helpers -------------------------------------------------------------------------------

def test_earliest_start_waits_until_tail_load_fits():
    tails = [[(50.0, 0.25), (80.0, 0.25), (120.0, 0.25)]]
    assert earliest_start(tails, 10.0, 0.5) == 50.0
    assert earliest_start(tails, 10.0, 0.25) == 80.0
    assert earliest_start(tails, 10.0, 0.0) == 120.0
    assert earliest_start(tails, 10.0, 0.75) == 10.0


def test_earliest_start_takes_the_latest_node():
    assert earliest_start([[(30.0, 0.6)], [(70.0, 0.6)]], 0.0, 0.5) == 70.0


def test_head_finish_without_tails_is_start_plus_work():
    assert head_finish([[]], 10.0, 40.0) == 50.0


def test_head_finish_slows_by_the_busiest_nodes_tail_share():
    # Until t=20 the busiest node keeps half its workers for a tail: 10 s of work done by then.
    assert head_finish([[(20.0, 0.5)], [(20.0, 0.25)]], 0.0, 30.0) == pytest.approx(40.0)


def test_tail_share_only_when_migrating_on_a_shared_node():
    job = make_job(tail_frac=0.3)
    assert tail_share(job, True, intra(migration=True)) == 0.3
    assert tail_share(job, False, intra(migration=True)) == 0.0
    assert tail_share(job, True, intra(migration=False)) == 0.0
    assert tail_share(make_job(tail_frac=0.3, cannot=["tail_migration"]), True, intra(migration=True)) == 0.0


def test_planning_times_use_worst_case_rollout_and_scaled_train():
    job = make_job(rollout=100.0, rollout_max=150.0, sigma=0.2, train=80.0, sync=9.0)
    assert planning_times(job, 1.0) == PhaseTimes(150.0, 120.0, 9.0)


def test_t_cycle_is_slowest_member_alone():
    g = make_group([(make_job("a", rollout=100, train=50, sync=5), (0,)),
                    (make_job("b", rollout=60, train=120, sync=10), (1,))], 2)
    assert t_cycle(g.members, fixed_times(g)) == 190.0


def test_t_load_adds_switches_only_on_shared_nodes():
    g = make_group([(make_job("a", rollout=100, train=50), (0,)),
                    (make_job("b", rollout=60, train=40), (0,)),
                    (make_job("c", rollout=150, train=10), (1,))], 2)
    # rollout node 0: 160 + 2*2, node 1: 150 (alone, no switch); train node: 100 + 3*2
    assert t_load(g.members, 2, 1, fixed_times(g), 2.0) == 164.0
    assert t_load(g.members[2:], 2, 1, fixed_times(g)[2:], 2.0) == 150.0


# -- period and Theorem 1 ------------------------------------------------------------------

@PROPS
@given(group=groups(), warm=st.sampled_from([0.0, 2.0]))
@example(group=SLOW_TO_SETTLE, warm=2.0)
def test_period_is_at_least_closed_form_bound(group, warm):
    cfg = intra(migration=False, warm_switch_s=warm)
    times = fixed_times(group)
    p = period(group.members, group.n_rollout, group.n_train, times, cfg)
    assert p >= bound(group, times, cfg) * (1 - 1e-9)


@PROPS
@given(group=groups(), warm=st.sampled_from([0.0, 2.0]))
def test_period_equals_long_run_growth_of_the_schedule(group, warm):
    cfg = intra(migration=False, warm_switch_s=warm)
    times = fixed_times(group)
    ends, _ = schedule(group.members, group.n_rollout, group.n_train, [times] * 250, cfg)
    long_run = max((ends[-1][j] - ends[149][j]) / 100 for j in range(group.size))
    assert period(group.members, group.n_rollout, group.n_train, times, cfg) == pytest.approx(long_run, rel=1e-6)


def test_period_is_the_steady_state_when_load_barely_exceeds_cycle():
    cfg = intra(migration=False, warm_switch_s=2.0)
    g, times = SLOW_TO_SETTLE, fixed_times(SLOW_TO_SETTLE)
    ends, _ = schedule(g.members, 2, 1, [times] * 200, cfg)
    long_run = max((ends[-1][j] - ends[99][j]) / 100 for j in range(g.size))
    assert long_run == pytest.approx(285.0)  # = T_load: rollout node 1 serves 279 s + 3 switches
    assert period(g.members, 2, 1, times, cfg) == pytest.approx(long_run)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(group=groups(max_members=5, single_node=True))
def test_best_round_robin_order_reaches_t_cycle_when_unsaturated(group):
    """Theorem 1: with T_load < T_cycle (no switch cost, no migration) round-robin meta-iterations
    last T_cycle, in the theorem's setting where every member runs each phase on one node and
    only the training node is shared (each member rolls out on a node of its own).

    It holds for the best cyclic order, which `best_order` finds; a given order may miss T_cycle
    (next test), a member spanning several rollout nodes can keep every order above it, and so
    can two members sharing a rollout node while both pools are nearly full (the test after)."""
    assume(len({m.rollout_nodes for m in group.members}) == group.size)
    cfg = intra(migration=False, warm_switch_s=0.0)
    times = fixed_times(group)
    tc = t_cycle(group.members, times)
    assume(t_load(group.members, group.n_rollout, group.n_train, times, 0.0) < tc)
    _, best = best_order(group.members, group.n_rollout, group.n_train, times, cfg)
    assert best == pytest.approx(tc, rel=1e-9)


def test_a_shared_rollout_node_can_keep_every_order_above_t_cycle_when_both_pools_are_nearly_full():
    # Found by hypothesis: T_cycle 35 (j2), T_load 34.5 (training; rollout node 0 carries 33),
    # yet every cyclic order runs 35.25 s meta-iterations: j1 and j2 queue for node 0 and the
    # training node in turn, and neither pool has the slack to absorb it.
    members = (Member(make_job("j0", rollout=10.0, train=14.5, sync=0.0), (1,), (0,)),
               Member(make_job("j1", rollout=11.0, train=10.0, sync=3.0), (0,), (0,)),
               Member(make_job("j2", rollout=22.0, train=10.0, sync=3.0), (0,), (0,)))
    cfg = intra(migration=False, warm_switch_s=0.0)
    times = fixed_times(Group(0, 2, 1, members))
    assert t_cycle(members, times) == 35.0 and t_load(members, 2, 1, times, 0.0) == 34.5
    assert best_order(members, 2, 1, times, cfg)[1] == pytest.approx(35.25)


def test_given_round_robin_order_can_miss_t_cycle_when_unsaturated():
    # One rollout node (load 81 s) and one training node (76 s), T_cycle = 82 s (job b). In the
    # order a, b, c the group runs at 82.5 s; the order search restores T_cycle.
    g = make_group([(make_job("a", rollout=32, train=10, sync=11), (0,)),
                    (make_job("b", rollout=39, train=37, sync=6), (0,)),
                    (make_job("c", rollout=10, train=29, sync=18), (0,))], 1)
    cfg, times = intra(migration=False, warm_switch_s=0.0), fixed_times(g)
    assert t_load(g.members, 1, 1, times, 0.0) == 81.0 and t_cycle(g.members, times) == 82.0
    assert period(g.members, 1, 1, times, cfg) == pytest.approx(82.5)
    assert best_order(g.members, 1, 1, times, cfg)[1] == pytest.approx(82.0)


def test_best_order_searches_when_a_multi_node_member_breaks_t_cycle():
    # j1 spans both rollout nodes: in the order j0, j1, j2 it waits for j2's rollout each round
    # and the group runs at 30.75 s > T_cycle = 30.5 s although it is unsaturated (load 30 s).
    g = make_group([(make_job("j0", rollout=10, train=10, sync=2), (0,)),
                    (make_job("j1", rollout=10, train=10, sync=0, rollout_gpus=16), (0, 1)),
                    (make_job("j2", rollout=19.5, train=10, sync=1), (1,))], 2)
    cfg, times = intra(migration=False, warm_switch_s=0.0), fixed_times(g)
    assert t_load(g.members, 2, 1, times, 0.0) < t_cycle(g.members, times) == 30.5
    assert period(g.members, 2, 1, times, cfg) == pytest.approx(30.75)
    order, best = best_order(g.members, 2, 1, times, cfg)
    assert best == pytest.approx(30.5)
    assert order == (0, 2, 1)


def test_period_of_single_job_is_its_solo_iteration():
    g = make_group([(make_job("a", rollout=120, train=80, sync=7), (0,))], 1)
    assert period(g.members, 1, 1, fixed_times(g), intra()) == pytest.approx(207.0)


def test_period_of_empty_group_is_zero():
    assert period((), 1, 1, [], intra()) == 0.0


def test_period_of_saturated_single_node_group_is_its_load():
    # Three jobs of 100 s rollouts on one node with 10 s trains: load 300 + 6 > cycle 110.
    g = make_group([(make_job(f"j{i}", rollout=100, train=10, sync=0), (0,)) for i in range(3)], 1)
    cfg = intra(migration=False, warm_switch_s=2.0)
    assert period(g.members, 1, 1, fixed_times(g), cfg) == pytest.approx(306.0)


# -- best_order ----------------------------------------------------------------------------

@PROPS
@given(group=groups(max_members=5))
def test_best_order_is_never_worse_than_given_order(group):
    cfg = intra(migration=False)
    times = fixed_times(group)
    given_p = period(group.members, group.n_rollout, group.n_train, times, cfg)
    order, best = best_order(group.members, group.n_rollout, group.n_train, times, cfg)
    assert best <= given_p + EPS


@PROPS
@given(group=groups(max_members=5))
def test_best_order_reports_the_period_of_the_order_it_returns(group):
    cfg = intra(migration=False)
    times = fixed_times(group)
    order, best = best_order(group.members, group.n_rollout, group.n_train, times, cfg)
    assert sorted(order) == list(range(group.size))
    assert order[0] == 0
    again = period([group.members[i] for i in order], group.n_rollout, group.n_train,
                   [times[i] for i in order], cfg)
    assert again == pytest.approx(best, rel=1e-12)


def test_best_order_keeps_given_order_when_bound_is_met():
    g = make_group([(make_job("a", rollout=100, train=20), (0,)), (make_job("b", rollout=20, train=100), (0,)),
                    (make_job("c", rollout=30, train=30), (1,))], 2)
    order, _ = best_order(g.members, 2, 1, fixed_times(g), intra(migration=False))
    assert order == (0, 1, 2)


# -- plan_group ----------------------------------------------------------------------------

# Two jobs sharing a rollout node, each migrating a 20% tail: at run time every rollout pays the
# 1 s migration overhead on its job's critical path, which the no-migration plan leaves out.
MIGRATING_PAIR = make_group([(make_job("a", rollout=148, train=48, sync=3, tail_frac=0.2), (0,)),
                             (make_job("b", rollout=50, train=124, sync=10, tail_frac=0.2), (0,))], 1)


@PROPS
@given(group=groups())
@example(group=MIGRATING_PAIR)
def test_planned_period_bounds_the_runtime_period_with_migration(group):
    """Planning is conservative (DESIGN §5): at the planning durations, the run-time schedule
    (long-tail migration on, the simulator's default) is never slower than the plan."""
    cfg = intra()
    planned = plan_group(group, cfg)
    times = fixed_times(planned)  # sigma = 0: actual durations = worst case = planning durations
    # The run reaches its steady state geometrically, with migration slowly: hypothesis found a
    # group still 1.4e-6 above its (exact) plan over iterations 40-80, 1e-11 over 120-160.
    ends, _ = schedule(planned.members, planned.n_rollout, planned.n_train, [times] * 160, cfg)
    runtime = max((ends[-1][j] - ends[119][j]) / 40 for j in range(planned.size))
    assert runtime <= planned.shape.period_s * (1 + 1e-7)


def test_plan_group_attaches_shape_from_worst_case_times():
    a = make_job("a", rollout=100, rollout_max=150, sigma=0.2, train=50, sync=5, slo=1.5)
    b = make_job("b", rollout=60, train=40, sync=5, slo=1.2)
    g = plan_group(make_group([(a, (0,)), (b, (1,))], 2), intra())
    assert g.shape.t_cycle_s == pytest.approx(150 + 75 + 5)
    assert g.shape.t_load_s == pytest.approx(150.0)  # rollout node 0 alone beats train 75 + 40 + 2 * 2
    assert g.shape.period_s >= g.shape.t_cycle_s


def test_plan_group_keeps_members_and_nodes():
    g0 = make_group([(make_job("a"), (0,)), (make_job("b"), (1,)), (make_job("c"), (1,))], 2)
    g = plan_group(g0, intra())
    assert sorted(g.job_ids()) == ["a", "b", "c"]
    assert (g.n_rollout, g.n_train) == (2, 1)
    assert {m.job_id: m.rollout_nodes for m in g.members} == {m.job_id: m.rollout_nodes for m in g0.members}


def test_plan_group_of_empty_group_has_no_shape():
    g = plan_group(Group(3, 2, 1, ()), intra())
    assert g.shape is None and g.size == 0 and g.group_id == 3
