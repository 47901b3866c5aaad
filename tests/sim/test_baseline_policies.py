"""Baseline placement policies (DESIGN §6): Solo-D, Random, Greedy (most-idle)."""

from __future__ import annotations

import numpy as np

from rollmux.core.group import Group, isolated_group
from rollmux.core.inter_group import RollMuxPlacement
from rollmux.core.intra_group import IntraConfig, plan_group
from rollmux.core.placement import Case, ClusterView, validate_plan
from rollmux.sim.baseline_policies import GreedyPlacement, RandomPlacement, SoloPlacement
from tests.factories import make_cluster, make_group, make_job

CLUSTER = make_cluster()
CFG = IntraConfig()


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
    assert RollMuxPlacement(CFG).place(balanced("b"), v).case is Case.DIRECT
    plan = SoloPlacement(CFG).place(balanced("b"), v)
    validate_plan(plan, balanced("b"), v)
    assert plan.case is Case.ISOLATED
    assert plan.group.group_id == 1


def test_solo_waits_at_the_node_cap():
    assert SoloPlacement(CFG).place(balanced("b"), view(free_rollout=0, free_train=0)) is None


# -- Random ----------------------------------------------------------------------------------------

def many_groups(n: int = 6) -> tuple[Group, ...]:
    return tuple(founded(i, balanced(f"g{i}")) for i in range(n))


def random_choices(seed: int, n_jobs: int = 12) -> list[int]:
    policy = RandomPlacement(np.random.default_rng(seed), CFG)
    v = view(*many_groups())
    return [policy.place(balanced(f"new{k}"), v).group.group_id for k in range(n_jobs)]


def test_random_is_deterministic_for_a_seed():
    assert random_choices(7) == random_choices(7)


def test_random_depends_on_the_seed():
    assert random_choices(7) != random_choices(8)


def test_random_spreads_over_groups_with_room():
    assert len(set(random_choices(3, n_jobs=40))) > 1


def test_random_ignores_the_slo():
    # slo = 1.0 cannot share anything: RollMux isolates it, Random still packs it.
    v = view(founded(0, balanced("a")))
    job = balanced("b", slo=1.0)
    assert RollMuxPlacement(CFG).place(job, v).case is Case.ISOLATED
    plan = RandomPlacement(np.random.default_rng(0), CFG).place(job, v)
    validate_plan(plan, job, v)
    assert plan.case is Case.DIRECT
    assert plan.group.shape.period_s > job.slo * job.solo_iter_s


def test_random_respects_residency_by_scaling():
    v = view(founded(0, balanced("a", host_rollout=1500.0)))
    job = balanced("b", host_rollout=1000.0)
    plan = RandomPlacement(np.random.default_rng(0), CFG).place(job, v)
    validate_plan(plan, job, v)
    assert plan.case is Case.SCALING


def test_random_isolates_when_no_group_has_room():
    v = view(founded(0, balanced("a")), max_group_size=1)
    assert RandomPlacement(np.random.default_rng(0), CFG).place(balanced("b"), v).case is Case.ISOLATED


def test_random_isolates_when_training_dram_is_full():
    v = view(founded(0, balanced("a", host_train=1500.0)))
    job = balanced("b", host_train=1000.0)
    assert RandomPlacement(np.random.default_rng(0), CFG).place(job, v).case is Case.ISOLATED


# -- Greedy ----------------------------------------------------------------------------------------

def test_greedy_picks_the_most_idle_group():
    busy = founded(0, make_job("a", rollout=150.0, train=50.0))    # idle share 1 - 150/205
    idle = founded(1, make_job("c", rollout=40.0, train=40.0))     # idle share 1 - 40/85
    busier = founded(2, make_job("d", rollout=100.0, train=100.0))  # 1 - 100/205
    v = view(busy, idle, busier)
    plan = GreedyPlacement(CFG).place(balanced("b"), v)
    validate_plan(plan, balanced("b"), v)
    assert plan.group.group_id == 1


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
    assert most_idle.shape.t_load_s / most_idle.shape.t_cycle_s < other.shape.t_load_s / other.shape.t_cycle_s
    v = view(most_idle, other, max_group_size=2)
    assert GreedyPlacement(CFG).place(balanced("b"), v).group.group_id == 1


def test_greedy_isolates_when_every_group_is_at_max_size():
    v = view(founded(0, balanced("a")), founded(1, make_job("c", rollout=150.0, train=50.0)), max_group_size=1)
    assert GreedyPlacement(CFG).place(balanced("b"), v).case is Case.ISOLATED
