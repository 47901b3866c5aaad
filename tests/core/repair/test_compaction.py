"""Rollout compaction (core/repair/compaction.py): a group gives back an idle rollout node by narrowing."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.core.elastic import rollout_factor
from rollmux.core.env import SimEnvironment
from rollmux.core.group import Member
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, PlacementPlan
from rollmux.core.placement.admission import group_fits, period_budget
from rollmux.core.placement.costs import group_cost_per_period
from rollmux.core.records import Place
from rollmux.core.repair.compaction import _may_pay, compact, compactions, narrowed
from rollmux.core.state import ClusterState
from factories import GROUPS, config, intra, make_cluster, make_group, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()


def _job(job_id: str, train: float = 300.0, slo: float = 1.4, rollout_gpus: int = 16, **kw):
    # Rollout 200 s, a fifth of it fixed (elastic.ROLLOUT_FIXED_S): 1.8x as long on one node.
    return make_job(job_id, rollout=200.0, train=train, slo=slo, rollout_gpus=rollout_gpus, **kw)


def _group(train: float = 300.0, slo: float = 1.4, cannot: dict[str, list[str]] | None = None):
    """Two 16-GPU jobs on three rollout nodes, sharing node 1 and the training node: training-
    bound (600 s per meta-iteration against 400 s on node 1); one narrowed member's cycle
    (1.8 x 200 + 300 + 5 s) fits a 1.4 SLO, both on one node (720 s of rollouts) does not.
    `cannot`: job id -> the modes it cannot take."""
    cannot = cannot or {}
    a, b = (_job(j, train, slo, cannot=cannot.get(j, [])) for j in "ab")
    return plan_group(make_group([(a, (0, 1)), (b, (1, 2))], 3), CFG)


def test_narrowing_drops_the_node_and_slows_the_members_pinned_there_by_the_elastic_model():
    g = narrowed(_group(), 0, CLUSTER)
    assert g.n_rollout == 2
    a, b = g.members
    assert a.rollout_nodes == (0,) and a.rollout_factor == pytest.approx(rollout_factor(a.job, 2, 1))
    assert b.rollout_nodes == (0, 1) and b.rollout_factor == 1.0  # untouched, renumbered


def test_a_member_alone_on_the_node_cannot_be_narrowed():
    g = make_group([(_job("a", rollout_gpus=8), (0,)), (_job("b"), (0, 1))], 2)
    assert narrowed(g, 0, CLUSTER) is None


def test_a_training_bound_group_gives_a_node_back_within_every_slo():
    g = _group()
    got = compact(g, CLUSTER, CFG, {}, idle={0, 1, 2})
    assert got is not None
    small, drop = got
    assert small.n_rollout == 2 and drop in (0, 2)
    assert group_fits(small, {}, CFG)
    assert group_cost_per_period(small, CLUSTER) < group_cost_per_period(g, CLUSTER)


def test_a_member_that_cannot_take_elastic_rollout_is_not_narrowed():
    g = _group(cannot={"a": ["elastic_rollout"]})
    assert narrowed(g, 0, CLUSTER) is None and narrowed(g, 1, CLUSTER) is None  # a holds 0 and 1
    small, drop = compact(g, CLUSTER, CFG, {}, idle={0, 1, 2})
    assert drop == 2 and small.member("a").rollout_factor == 1.0 and len(small.member("a").rollout_nodes) == 2


def test_no_compaction_when_no_member_on_an_idle_node_can_narrow():
    fixed = {"a": ["elastic_rollout"], "b": ["elastic_rollout"]}
    assert compact(_group(), CLUSTER, CFG, {}, idle={0, 1, 2}) is not None  # (the test above: b would)
    g = _group(cannot=fixed)
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1, 2}) is None and group_fits(g, {}, CFG)


def test_only_an_idle_node_is_dropped():
    assert compact(_group(), CLUSTER, CFG, {}, idle=set()) is None
    assert compact(_group(), CLUSTER, CFG, {}, idle={2})[1] == 2


def test_no_compaction_past_a_members_slo_budget():
    assert compact(_group(slo=1.0), CLUSTER, CFG, {}, idle={0, 1, 2}) is None


def test_no_compaction_when_the_slower_period_costs_more_than_the_node_saves():
    # A lone rollout-bound job: one node fewer saves a fifth of the rate, its rollout takes 1.8x.
    g = plan_group(make_group([(_job("a", train=20.0, slo=3.0), (0, 1))], 2), CFG)
    assert group_fits(plan_group(narrowed(g, 0, CLUSTER), CFG), {}, CFG)
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1}) is None


def test_compactions_repeat_while_a_node_can_go():
    steps = list(compactions(_group(), CLUSTER, CFG, {}, idle={0, 1, 2}))
    assert [g.n_rollout for g, _ in steps] == [2]  # one node for both would break the SLO
    g = make_group([(_job("a", slo=1.5), (0, 1)), (_job("b", slo=1.5), (2, 3))], 4)
    assert [s.n_rollout for s, _ in compactions(plan_group(g, CFG), CLUSTER, CFG, {}, {0, 1, 2, 3})] == [3, 2]


def _state(**cfg) -> ClusterState:
    policy = make_policy(elastic_rollout=True)
    return ClusterState(SimEnvironment(), CLUSTER, policy, config(GROUPS, **cfg))


def _install(st: ClusterState):
    g = _group()
    st.apply(Place.of(PlacementPlan("a", Case.ISOLATED, g, 3, 1, 0.0), True))
    return g.group_id


def test_the_state_releases_the_node_and_the_controller_follows():
    st = _state()
    gid = _install(st)
    assert st.compact(gid, {}) == 1
    g = st.groups[gid]
    assert st.ledger.nodes == {"rollout": 2, "train": 1} and st.compacted == 1
    assert st.controllers[gid].group is g and len(st.controllers[gid].nodes["rollout"]) == 2
    assert st.compact(gid, {}) == 0  # (no other node can go; and not tried again before compact_every_s)


def test_a_group_is_tried_once_per_interval_and_never_where_rollouts_keep_their_shape():
    st = _state(compact_every_s=1e9)
    gid = _install(st)
    st.drift._compact_at[gid] = 1.0  # tried at t=0 with nothing to drop: the next try waits
    assert st.compact(gid, {}) == 0 and st.ledger.nodes["rollout"] == 3
    nominal = ClusterState(SimEnvironment(), CLUSTER, make_policy(), GROUPS)
    gid = _install(nominal)
    assert nominal.compact(gid, {}) == 0  # a policy without elastic rollout keeps nominal shapes


def test_a_busy_node_is_kept():
    st = _state()
    gid = _install(st)
    ctl = st.controllers[gid]
    granted = []
    ctl.request("a", "rollout", granted.append)  # a holds nodes 0 and 1
    assert granted and st.compact(gid, {}) == 1
    assert st.groups[gid].member("a").rollout_factor == 1.0  # node 2 went: b narrowed, a runs on


def test_members_keep_their_training_nodes():
    st = _state()
    gid = _install(st)
    st.compact(gid, {})
    assert all(isinstance(m, Member) and m.train_nodes == (0,) for m in st.groups[gid].members)


@pytest.mark.parametrize("plan", ["worst", "mean"])
def test_the_closed_form_check_never_refuses_a_narrowing_the_planned_check_takes(plan):
    # _may_pay only saves the planned check (a sampled schedule under the mean plan): whatever
    # it refuses must fail that check too, else compaction would differ with and without it.
    cfg = intra(plan=plan)
    rng = np.random.default_rng(7)
    refused = 0
    for _ in range(150):
        n, nr = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        pairs = []
        for i in range(n):
            job = make_job(f"j{i}", rollout=float(rng.uniform(40, 300)), train=float(rng.uniform(40, 400)),
                           sigma=float(rng.choice([0.0, 0.1])), rollout_max=None, rollout_gpus=16,
                           slo=float(rng.uniform(1.0, 2.0)), tail_frac=float(rng.uniform(0.0, 0.3)))
            first = int(rng.integers(nr - 1))
            pairs.append((job, (first, first + 1)))
        g = plan_group(make_group(pairs, nr), cfg)
        before = group_cost_per_period(g, CLUSTER)
        least = min(period_budget(m.job, {}) for m in g.members)
        for drop in range(nr):
            cand = narrowed(g, drop, CLUSTER)
            if cand is None or _may_pay(cand, CLUSTER, cfg, before, least):
                continue
            refused += 1
            planned = plan_group(cand, cfg, reorder=False)
            assert group_cost_per_period(planned, CLUSTER) >= before or not group_fits(planned, {}, cfg)
    assert refused > 50
