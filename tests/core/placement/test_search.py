"""The placement search (DESIGN §5, Algorithm 1; core/placement/search.py): cheapest valid candidate, SLO-safe."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollmux.core.config import ShapesConfig
from rollmux.core.elastic import node_counts
from rollmux.core.group import Group, isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, validate_plan
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import ISOLATED
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.search import ordered, search, tiers
from rollmux.study.placement_bench import indexed_view
from factories import intra, make_cluster, make_job, make_policy, synthetic_trace

CLUSTER = make_cluster()
CFG = intra()
ROLLOUT_NODE = CLUSTER.pools.rollout.node_price_per_hour


def founded(group_id: int, job, cluster=CLUSTER) -> Group:
    """The planned group a job founds by isolated provisioning."""
    return plan_group(isolated_group(group_id, job, cluster), CFG)


def view(*groups: Group, free_rollout=None, free_train=None, max_group_size=5, cluster=CLUSTER) -> ClusterView:
    next_id = 1 + max((g.group_id for g in groups), default=-1)
    return ClusterView(cluster, tuple(groups), free_rollout, free_train, max_group_size, next_id)


def place(job, v: ClusterView):
    plan = make_policy(CFG).place(job, v)
    if plan is not None:
        validate_plan(plan, job, v)
    return plan


def balanced(job_id: str, **kw):
    return make_job(job_id, rollout=100.0, train=100.0, **kw)


# -- the three cases ---------------------------------------------------------------------------

def test_direct_packing_when_a_complementary_job_fits():
    g = founded(0, balanced("a"))
    plan = place(balanced("b"), view(g))
    assert plan.case is Case.DIRECT
    assert plan.delta_cost_per_hour == 0.0
    assert (plan.added_rollout_nodes, plan.added_train_nodes) == (0, 0)
    assert plan.group.group_id == 0 and sorted(plan.group.job_ids()) == ["a", "b"]
    assert plan.group.member("b").rollout_nodes == (0,)


def test_rollout_scaling_when_rollout_nodes_are_busy_but_training_has_room():
    # a's rollout fills its node; b's rollout cannot share it within b's SLO, its training can.
    g = founded(0, make_job("a", rollout=180.0, train=20.0))
    plan = place(make_job("b", rollout=180.0, train=20.0, slo=1.2), view(g))
    assert plan.case is Case.SCALING
    assert plan.added_rollout_nodes == 1
    assert plan.delta_cost_per_hour == pytest.approx(ROLLOUT_NODE)
    assert plan.group.n_rollout == 2
    assert plan.group.member("b").rollout_nodes == (1,)
    assert plan.group.member("b").train_nodes == (0,)


def test_isolated_when_sharing_would_break_the_newcomers_slo():
    # slo = 1.0 leaves no room even for a warm switch.
    g = founded(0, balanced("a"))
    plan = place(balanced("b", slo=1.0), view(g))
    assert plan.case is Case.ISOLATED
    assert plan.group.group_id == 1
    assert plan.group.job_ids() == ("b",)


def test_isolated_when_sharing_would_break_a_members_slo():
    g = founded(0, balanced("a", slo=1.0))
    assert place(balanced("b", slo=2.0), view(g)).case is Case.ISOLATED


def test_isolated_plan_prices_both_pools():
    job = make_job("x", rollout_gpus=17, train_gpus=16)
    plan = place(job, view())
    assert (plan.added_rollout_nodes, plan.added_train_nodes) == (3, 2)
    assert plan.delta_cost_per_hour == pytest.approx(3 * ROLLOUT_NODE + 2 * CLUSTER.pools.train.node_price_per_hour)


def test_direct_packing_preferred_over_scaling_in_an_earlier_group():
    busy = founded(0, make_job("a", rollout=180.0, train=20.0))
    roomy = founded(1, balanced("c"))
    plan = place(make_job("b", rollout=100.0, train=100.0, slo=1.2), view(busy, roomy))
    assert plan.case is Case.DIRECT
    assert plan.group.group_id == 1


# -- constraints -------------------------------------------------------------------------------

def test_rollout_residency_prevents_sharing_a_rollout_node():
    g = founded(0, balanced("a", host_rollout=1200.0))
    plan = place(balanced("b", host_rollout=1000.0), view(g))
    assert plan.case is Case.SCALING
    assert plan.group.member("b").rollout_nodes == (1,)


def test_training_residency_prevents_joining_the_group():
    g = founded(0, balanced("a", host_train=1200.0))
    plan = place(balanced("b", host_train=1000.0), view(g))
    assert plan.case is Case.ISOLATED


@pytest.mark.parametrize("status", ["full", "saturated"])
def test_full_and_saturated_groups_are_pruned_in_paper_mode(status):
    paper = make_policy(prune_saturated=True, best_fit="")
    g = founded(0, balanced("a"))
    assert paper.place(balanced("b"), view(g)).case is Case.DIRECT  # the real shape admits b
    t_load = g.shape.t_cycle_s if status == "full" else g.shape.t_cycle_s * 1.01
    forced = dataclasses.replace(g, shape=dataclasses.replace(g.shape, t_load_s=t_load))
    assert forced.shape.status == status
    assert paper.place(balanced("b"), view(forced)).case is Case.ISOLATED
    # by default the SLO check alone decides: the group's recorded status is not a veto
    assert place(balanced("b"), view(forced)).case is Case.DIRECT


def test_best_fit_picks_the_tighter_of_two_valid_groups():
    loose = founded(0, make_job("a", rollout=100, train=100, slo=2.0))
    tight = founded(1, make_job("c", rollout=150, train=150, slo=2.0))
    newcomer = make_job("b", rollout=140, train=140, slo=2.0)
    v = view(loose, tight)
    first = make_policy().place(newcomer, v)
    best = make_policy(best_fit="util").place(newcomer, v)
    assert first.group.group_id == 0  # the paper: the first candidate found
    assert best.group.group_id == 1
    assert best.group.shape.t_load_s / best.group.shape.period_s >= \
        first.group.shape.t_load_s / first.group.shape.period_s


def test_group_without_a_shape_is_not_a_candidate():
    g = dataclasses.replace(founded(0, balanced("a")), shape=None)
    assert place(balanced("b"), view(g)).case is Case.ISOLATED


@pytest.mark.parametrize("max_size,expected", [(1, Case.ISOLATED), (2, Case.DIRECT)])
def test_max_group_size_respected(max_size, expected):
    g = founded(0, balanced("a"))
    assert place(balanced("b"), view(g, max_group_size=max_size)).case is expected


def test_job_needing_more_training_nodes_than_the_group_cannot_join():
    g = founded(0, balanced("a"))
    assert place(balanced("b", train_gpus=16), view(g)).case is Case.ISOLATED


def test_ties_go_to_the_first_group():
    g0, g1 = founded(0, balanced("a")), founded(1, balanced("c"))
    assert place(balanced("b"), view(g0, g1)).group.group_id == 0
    assert place(balanced("b"), view(g1, g0)).group.group_id == 1


def test_none_when_even_isolated_exceeds_the_node_caps():
    assert place(balanced("b"), view(free_rollout=0, free_train=5)) is None
    assert place(balanced("b"), view(free_rollout=5, free_train=0)) is None


def test_direct_packing_still_possible_at_the_node_cap():
    g = founded(0, balanced("a"))
    assert place(balanced("b"), view(g, free_rollout=0, free_train=0)).case is Case.DIRECT


def test_scaling_not_offered_beyond_the_rollout_cap():
    g = founded(0, make_job("a", rollout=180.0, train=20.0))
    job = make_job("b", rollout=180.0, train=20.0, slo=1.2)
    assert place(job, view(g, free_rollout=0, free_train=5)) is None


def test_newcomer_slack_reserves_one_meta_iteration_of_waiting():
    # With two iterations the newcomer's budget is 2/3 of slo x solo: 1.5 x 205 x 2/3 = 205 s,
    # below any shared period (>= 205 s + a warm switch); with many iterations it is packed.
    g = founded(0, balanced("a"))
    short = balanced("b", slo=1.5, duration=2 * 205.0)
    assert short.iterations == 2
    assert place(short, view(g)).case is Case.ISOLATED
    assert place(balanced("b", slo=1.5), view(g)).case is Case.DIRECT


def test_isolated_plan_uses_the_next_group_id():
    plan = isolated_plan(balanced("x"), view(founded(4, balanced("a"))), CFG)
    assert plan.group.group_id == 5
    assert plan.group.shape is not None


# -- property: accepted groups meet every member's SLO -------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), sigma=st.sampled_from([0.0, 0.1, 0.3]),
       max_size=st.integers(2, 5))
def test_every_member_of_an_accepted_group_meets_its_slo_under_planning(seed, sigma, max_size):
    jobs = synthetic_trace(np.random.default_rng(seed), 12, sigma=sigma)
    groups: dict[int, Group] = {}
    for job in jobs:
        v = view(*groups.values(), max_group_size=max_size)
        plan = place(job, v)  # also validates I1–I7
        groups[plan.group.group_id] = plan.group
        if plan.case is Case.ISOLATED:
            continue
        shape = plan.group.shape
        for m in plan.group.members:
            assert shape.period_s <= m.job.slo * m.job.solo_iter_s * (1 + 1e-9)
        assert shape.period_s <= job.slo * job.solo_iter_s * job.iterations / (job.iterations + 1) * (1 + 1e-9)
        assert plan.group.size <= max_size


@pytest.mark.parametrize("elastic", [False, True])
def test_a_newcomer_is_charged_the_migration_its_group_still_owes(elastic):
    host = plan_group(isolated_group(0, make_job("h", rollout=100, train=50, slo=3.0), CLUSTER), intra())
    job = make_job("n", rollout=60, train=50, slo=1.6, duration=115 * 20)  # 20 iterations
    view = ClusterView(CLUSTER, (host,), None, None, 5, 1, {})
    policy = make_policy(elastic_rollout=elastic)
    assert policy.place(job, view).group.group_id == 0
    # 1,000 s still owed there (a reserved move): 1000 / 21 s off each of its periods.
    plan = policy.place(job, dataclasses.replace(view, owed_s={0: 1000.0}))
    assert plan.group.group_id != 0 and plan.case == Case.ISOLATED


# -- the one order -----------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(groups=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 3)), max_size=6),
       rollout_gpus=st.sampled_from([8, 16, 24, 32]), train_gpus=st.sampled_from([8, 16, 24]),
       elastic=st.booleans(), scaling=st.booleans(), cut=st.booleans(), joined_only=st.booleans(),
       free_r=st.sampled_from([None, 0, 1, 2, 3]), free_t=st.sampled_from([None, 0, 1, 2]),
       prices=st.sampled_from([(1.0, 2.85), (0.0, 2.85), (1.0, 0.0), (0.0, 0.0)]), slo=st.sampled_from([1.05, 2.0]))
def test_the_lazy_order_is_every_option_sorted(groups, rollout_gpus, train_gpus, elastic, scaling, cut, joined_only,
                                              free_r, free_t, prices, slo):
    """`ordered(tiers(...))` gives exactly the options the case generators define, each once, in
    tuple order: a candidate offers every shape on k nodes with at least k - fresh of its own
    (and exactly the training nodes it lacks), within the caps and, with `cut`, below the
    nominal isolated group's Δ; a group of the job's own follows at equal Δ and shape."""
    cluster = make_cluster(rollout_price=prices[0], train_price=prices[1])
    job = make_job("x", rollout_gpus=rollout_gpus, train_gpus=train_gpus, slo=slo, tail_frac=0.3)
    v = ClusterView(cluster, (), free_r, free_t, 5, 0)
    shapes = ShapesConfig(elastic_rollout=elastic, train_scaling=scaling)
    nc = Newcomer(job, v, CFG, shapes, cut)
    kt = nc.kt
    offers = [(nr, max(0, kt - nt)) for nr, nt in groups if scaling or nt >= kt]  # (candidates: placement/candidates.py)
    want = []
    for pos, (n_rollout, new_t) in enumerate(offers):
        if new_t and free_t is not None and new_t > free_t:
            continue
        for k in node_counts(nc.k0, elastic):
            for new_r in range(max(0, k - n_rollout), k + 1):
                if free_r is not None and new_r > free_r:
                    break
                delta = new_r * nc.pr + new_t * nc.pt
                if not cut or delta < nc.iso_delta:
                    want.append((delta, new_t, k != nc.k0, -k, new_r, pos, k))
    if not joined_only:
        want += [(k * nc.pr + kt * nc.pt, 0, True, -k, k, ISOLATED, k) for k in node_counts(nc.k0, elastic)
                 if k < nc.k0 and nc.own_cycle[k] <= nc.slack_new * (1 + 1e-9)]
    assert list(ordered(tiers(nc, offers, joined_only), offers)) == sorted(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), cap=st.integers(2, 5), prune=st.booleans(),
       best_fit=st.sampled_from(["", "util", "slo"]), plan=st.sampled_from(["worst", "mean"]),
       free_rollout=st.sampled_from([None, 0, 1, 3]), indexed=st.booleans())
def test_algorithm1s_fast_path_equals_the_general_loop(seed, n, cap, prune, best_fit, plan, free_rollout, indexed):
    """Under Algorithm 1's rules the search takes its fast path (core/placement/search.py
    `algorithm1`); the general loop must give the same plans and the same reasons."""
    policy = make_policy(intra(plan=plan), prune_saturated=prune, best_fit=best_fit)
    fast = policy.rules
    assert fast.algorithm1
    general = dataclasses.replace(fast, algorithm1=False)
    jobs = synthetic_trace(np.random.default_rng(seed), n + 4)
    groups = IndexedGroups(policy.cfg)
    for job in jobs[:n]:
        placed = policy.place(job, indexed_view(groups, CLUSTER, cap))
        groups[placed.group.group_id] = placed.group
    v = dataclasses.replace(indexed_view(groups, CLUSTER, cap), free_rollout_nodes=free_rollout)
    if not indexed:
        v = dataclasses.replace(v, index=None)
    for job in jobs[n:]:
        for joined_only in (False, True):
            whys = [None if joined_only else Refusals(period_budget(job, v.progress), v.progress) for _ in "ab"]
            a = search(fast, job, v, whys[0], joined_only)
            b = search(general, job, v, whys[1], joined_only)
            assert a == b
            if not joined_only:
                assert whys[0].result() == whys[1].result()
