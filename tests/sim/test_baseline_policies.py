"""Baseline placement policies (DESIGN §6): Solo-D, Random, Greedy (most-idle), FixedPartition; the paper's cost."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.core.group import Group, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, validate_plan
from rollmux.sim.baseline_policies import FixedPartition, GreedyPlacement, RandomPlacement, SoloPlacement, idle_s
from rollmux.sim.metrics import JobOutcome, group_charge_per_hour, paper_cost_per_hour
from factories import intra, make_cluster, make_group, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()


def founded(group_id: int, job) -> Group:
    return plan_group(isolated_group(group_id, job, CLUSTER), CFG)


def view(*groups: Group, max_group_size: int = 5, free_rollout=None, free_train=None) -> ClusterView:
    next_id = 1 + max((g.group_id for g in groups), default=-1)
    return ClusterView(CLUSTER, tuple(groups), free_rollout, free_train, max_group_size, next_id)


def balanced(job_id: str, **kw):
    return make_job(job_id, rollout=100.0, train=100.0, **kw)


# -- Solo-D --------------------------------------------------------------------------------------

def test_solo_always_isolates_even_when_packing_fits():
    g = founded(0, balanced("a"))
    v = view(g)
    assert make_policy(CFG).place(balanced("b"), v).case is Case.DIRECT
    plan = SoloPlacement(CFG).place(balanced("b"), v)
    validate_plan(plan, balanced("b"), v)
    assert plan.case is Case.ISOLATED
    assert plan.group.group_id == 1


def test_solo_waits_at_the_node_cap():
    assert SoloPlacement(CFG).place(balanced("b"), view(free_rollout=0, free_train=0)) is None


# -- Random ----------------------------------------------------------------------------------------

def many_groups(n: int = 6) -> tuple[Group, ...]:
    return tuple(founded(i, balanced(f"g{i}")) for i in range(n))


def random_choices(seed: int, n_jobs: int = 12, groups: tuple[Group, ...] | None = None) -> list[int]:
    """Group ids Random picks for n_jobs independent arrivals on the same view (id 6 = new group)."""
    policy = RandomPlacement(np.random.default_rng(seed), CFG)
    v = view(*(many_groups() if groups is None else groups))
    return [policy.place(balanced(f"new{k}"), v).group.group_id for k in range(n_jobs)]


def test_random_is_deterministic_for_a_seed():
    assert random_choices(7) == random_choices(7)


def test_random_depends_on_the_seed():
    assert random_choices(7) != random_choices(8)


def test_random_draws_uniformly_over_groups_with_room_and_a_new_group():
    picks = random_choices(3, n_jobs=700)
    counts = np.bincount(picks, minlength=7)
    assert len(counts) == 7              # six groups with room + the new group (id 6), nothing else
    assert counts.min() >= 70            # each option about 100 times out of 700
    assert 0.1 < counts[6] / 700 < 0.2   # the new group is one option of seven (1/7 = 0.14)


def test_random_new_group_is_an_isolated_plan():
    policy, v = RandomPlacement(np.random.default_rng(3), CFG), view(*many_groups())
    plans = [policy.place(balanced(f"n{k}"), v) for k in range(50)]
    new = [p for p in plans if p.group.group_id == 6]
    assert new and all(p.case is Case.ISOLATED for p in new)
    assert all(p.case is Case.DIRECT for p in plans if p.group.group_id != 6)


def test_random_never_picks_a_group_without_room():
    # Group 0 is at the max size of 2: only group 1 and a new group (id 2) are options.
    full = plan_group(make_group([(balanced("a"), (0,)), (balanced("c"), (0,))], 1, group_id=0), CFG)
    policy = RandomPlacement(np.random.default_rng(5), CFG)
    v = view(full, founded(1, balanced("d")), max_group_size=2)
    assert {policy.place(balanced(f"n{k}"), v).group.group_id for k in range(60)} == {1, 2}


def test_random_ignores_the_slo():
    # slo = 1.0 cannot share anything: RollMux isolates it, Random still packs it half the time.
    v = view(founded(0, balanced("a")))
    job = balanced("b", slo=1.0)
    assert make_policy(CFG).place(job, v).case is Case.ISOLATED
    policy = RandomPlacement(np.random.default_rng(0), CFG)
    joined = [p for p in (policy.place(job, v) for _ in range(20)) if p.case is Case.DIRECT]
    assert joined
    for plan in joined:
        validate_plan(plan, job, v)
        assert plan.group.shape.period_s > job.slo * job.solo_iter_s


def test_random_respects_residency_by_scaling():
    v = view(founded(0, balanced("a", host_rollout=1500.0)))
    job = balanced("b", host_rollout=1000.0)
    policy = RandomPlacement(np.random.default_rng(0), CFG)
    cases = set()
    for _ in range(20):
        plan = policy.place(job, v)
        validate_plan(plan, job, v)
        cases.add(plan.case)
    assert cases == {Case.SCALING, Case.ISOLATED}


def test_random_isolates_when_no_group_has_room():
    v = view(founded(0, balanced("a")), max_group_size=1)
    policy = RandomPlacement(np.random.default_rng(0), CFG)
    assert all(policy.place(balanced("b"), v).case is Case.ISOLATED for _ in range(10))


def test_random_isolates_when_training_dram_is_full():
    v = view(founded(0, balanced("a", host_train=1500.0)))
    job = balanced("b", host_train=1000.0)
    policy = RandomPlacement(np.random.default_rng(0), CFG)
    assert all(policy.place(job, v).case is Case.ISOLATED for _ in range(10))


def test_random_joins_when_the_caps_forbid_a_new_group():
    v = view(founded(0, balanced("a")), free_rollout=0, free_train=0)
    policy = RandomPlacement(np.random.default_rng(0), CFG)
    assert all(policy.place(balanced("b"), v).case is Case.DIRECT for _ in range(10))


def test_random_waits_when_nothing_is_possible():
    v = view(founded(0, balanced("a")), max_group_size=1, free_rollout=0, free_train=0)
    assert RandomPlacement(np.random.default_rng(0), CFG).place(balanced("b"), v) is None


# -- Greedy (Most-Idle) ----------------------------------------------------------------------------

def test_idle_time_is_the_bottleneck_nodes_idle_seconds_per_cycle():
    g = founded(0, make_job("a", rollout=150.0, train=50.0))  # period 205 (150 + 50 + sync 5), busiest node 150
    assert idle_s(g) == 55.0


def test_greedy_picks_the_most_idle_group():
    busy = founded(0, make_job("a", rollout=150.0, train=50.0))     # idle 205 - 150 = 55 s
    idle = founded(1, make_job("c", rollout=40.0, train=40.0))      # idle 85 - 40 = 45 s (largest idle share)
    most = founded(2, make_job("d", rollout=100.0, train=100.0))    # idle 205 - 100 = 105 s
    assert [idle_s(g) for g in (busy, idle, most)] == [55.0, 45.0, 105.0]
    v = view(busy, idle, most)
    plan = GreedyPlacement(CFG).place(balanced("b"), v)
    validate_plan(plan, balanced("b"), v)
    assert plan.group.group_id == 2


def test_greedy_breaks_ties_by_first_group():
    v = view(founded(0, balanced("a")), founded(1, balanced("c")))
    assert GreedyPlacement(CFG).place(balanced("b"), v).group.group_id == 0


def test_greedy_ignores_the_slo():
    v = view(founded(0, balanced("a")))
    assert GreedyPlacement(CFG).place(balanced("b", slo=1.0), v).case is Case.DIRECT


def test_greedy_skips_groups_at_max_size():
    # The most idle group already has two members (max 2): the next most idle one is chosen.
    most_idle = plan_group(make_group([(make_job("c", rollout=20.0, train=20.0), (0,)),
                                       (make_job("e", rollout=20.0, train=20.0, sync=400.0), (1,))], 2), CFG)
    other = founded(1, make_job("d", rollout=100.0, train=100.0))
    assert idle_s(most_idle) > idle_s(other)
    v = view(most_idle, other, max_group_size=2)
    assert GreedyPlacement(CFG).place(balanced("b"), v).group.group_id == 1


def test_greedy_isolates_when_every_group_is_at_max_size():
    v = view(founded(0, balanced("a")), founded(1, make_job("c", rollout=150.0, train=50.0)), max_group_size=1)
    assert GreedyPlacement(CFG).place(balanced("b"), v).case is Case.ISOLATED


# -- FixedPartition --------------------------------------------------------------------------------

def test_fixed_partition_provisions_the_whole_group_then_fills_it():
    a, b, c = balanced("a"), balanced("b"), balanced("c")
    target = plan_group(make_group([(a, (0,)), (b, (1,))], 2, group_id=0), CFG)
    policy = FixedPartition([target], CFG)
    first = policy.place(a, view())
    validate_plan(first, a, view())
    assert (first.case, first.added_rollout_nodes, first.added_train_nodes) == (Case.ISOLATED, 2, 1)
    v = view(first.group)
    second = policy.place(b, v)
    validate_plan(second, b, v)
    assert second.case is Case.DIRECT and second.group.member("b").rollout_nodes == (1,)
    v = view(second.group)
    stray = policy.place(c, v)  # not in the partition: a group of its own, with a fresh id
    validate_plan(stray, c, v)
    assert stray.case is Case.ISOLATED and stray.group.group_id == 1


# -- the paper's cost (rollmux.sim.metrics) --------------------------------------------------------

def outcome(job_id: str, slowdown: float, slo: float) -> JobOutcome:
    """Ten iterations of a job with solo iteration time 100 s, run at `slowdown`."""
    return JobOutcome(job_id, 10, 0.0, 1000.0 * slowdown, 1000.0, slo, 100.0)


def test_group_within_slo_is_charged_its_rate():
    members = [outcome("a", 1.4, slo=1.5), outcome("b", 1.9, slo=2.0)]
    assert all(o.slo_met for o in members)
    assert group_charge_per_hour(10.0, members) == 10.0


def test_breaking_group_is_charged_rate_times_its_worst_slowdown():
    members = [outcome("a", 1.3, slo=1.5), outcome("b", 2.5, slo=2.0)]
    assert not members[1].slo_met
    assert group_charge_per_hour(10.0, members) == pytest.approx(25.0)
    # The worst slowdown of the group, even when it is not the breaker's.
    members = [outcome("a", 2.8, slo=3.0), outcome("b", 1.5, slo=1.2)]
    assert group_charge_per_hour(10.0, members) == pytest.approx(28.0)


def test_paper_cost_sums_the_groups_charges():
    ok = (10.0, [outcome("a", 1.2, slo=1.5)])
    broken = (20.0, [outcome("b", 1.6, slo=1.5), outcome("c", 1.1, slo=2.0)])
    assert paper_cost_per_hour([ok, broken]) == pytest.approx(10.0 + 20.0 * 1.6)
    assert paper_cost_per_hour([]) == 0.0
