"""The group index (core/placement/index.py) never changes a placement, only how many groups are tried."""

from __future__ import annotations

import dataclasses
import pickle

from factories import intra, make_cluster, make_job, make_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.intra_group import planning_times
from rollmux.core.placement import ClusterView, RollMuxPlacement
from rollmux.core.placement.candidates import candidates, index_pass
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.placement.model import with_plan
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.trial import try_join
from rollmux.study.placement_bench import indexed_view

CLUSTER = make_cluster(host_gb=400.0)  # small enough that training DRAM sometimes refuses

job_st = st.builds(
    lambda r, t, slo, rg, tg, hr, ht, tail: (r, t, slo, rg, tg, hr, ht, tail),
    st.sampled_from([40.0, 60.0, 100.0, 150.0, 300.0]), st.sampled_from([30.0, 60.0, 100.0, 200.0]),
    st.sampled_from([1.05, 1.2, 1.5, 2.0, 3.0]), st.sampled_from([8, 16]), st.sampled_from([8, 8, 16, 24]),
    st.sampled_from([10.0, 150.0]), st.sampled_from([10.0, 120.0, 250.0]), st.sampled_from([0.0, 0.3]))


def _job(i: int, p: tuple, prefix: str = "j"):
    r, t, slo, rg, tg, hr, ht, tail = p
    return make_job(f"{prefix}{i}", rollout=r, rollout_max=r * 1.3, sigma=0.2, train=t, slo=slo,
                    rollout_gpus=rg, train_gpus=tg, host_rollout=hr, host_train=ht, tail_frac=tail,
                    duration=50_000.0)


def _groups(specs: list[tuple], policy: RollMuxPlacement, cap: int) -> IndexedGroups:
    """Jobs placed one by one with an indexed view (groups capped at `cap` members)."""
    groups = IndexedGroups(policy.cfg)
    for i, p in enumerate(specs):
        plan = policy.place(_job(i, p), indexed_view(groups, CLUSTER, cap))
        groups[plan.group.group_id] = plan.group
    return groups


def _progress(groups, draws: list[tuple[int, float]]) -> dict[str, tuple[int, float]]:
    jobs = [m.job for g in groups.values() for m in g.members]
    return {j.job_id: (d % (j.iterations + 2), e * j.solo_iter_s * (d % (j.iterations + 2)))
            for j, (d, e) in zip(jobs, draws)}


def _brute(view: ClusterView) -> ClusterView:
    return dataclasses.replace(view, index=None)


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(job_st, min_size=1, max_size=25), probes=st.lists(job_st, min_size=1, max_size=4),
       cap=st.integers(2, 5), size=st.integers(2, 5), prune=st.booleans(), best_fit=st.sampled_from(["", "util"]),
       draws=st.lists(st.tuples(st.integers(0, 40), st.floats(0.5, 2.5)), max_size=25),
       plan=st.sampled_from(["worst", "mean"]))
def test_indexed_placement_equals_a_brute_force_scan(specs, probes, cap, size, prune, best_fit, draws, plan):
    """Both SLO admissions (core/placement/admission.py): the index's bounds hold for each."""
    policy = make_policy(intra(plan=plan), prune_saturated=prune, best_fit=best_fit)
    groups = _groups(specs, policy, cap)
    base = indexed_view(groups, CLUSTER, size)
    view = dataclasses.replace(base, progress=_progress(groups, draws))
    assert view.index is not None and view.index.current
    for i, p in enumerate(probes):
        job = _job(i, p, "probe")
        rules = policy.rules
        fast = candidates(rules, Newcomer(job, view, policy.cfg, rules.shapes, rules.cut_at_isolated), view, None)[0]
        slow = candidates(rules, Newcomer(job, view, policy.cfg, rules.shapes, rules.cut_at_isolated), _brute(view),
                          None)[0]
        # The index keeps the brute-force candidates in order, with the same budgets ...
        kept = [(g.group_id, s) for g, s, _ in fast]
        assert kept == [(g.group_id, s) for g, s, _ in slow if (g.group_id, s) in kept]
        # ... and every candidate it drops is one no plan can use, with any number of new nodes.
        k = CLUSTER.pools.rollout.nodes_for(job.rollout_gpus)
        for g, s, _ in slow:
            if (g.group_id, s) not in kept:
                assert all(try_join(policy.cfg, g, job, view, k, 1.0, n, 0, s) is None for n in range(k + 1))
        assert policy.place(job, view) == policy.place(job, _brute(view))
        assert policy.place_joined(job, view) == policy.place_joined(job, _brute(view))


@settings(max_examples=40, deadline=None)
@given(specs=st.lists(job_st, min_size=2, max_size=20), movers=st.lists(job_st, min_size=2, max_size=3),
       plan=st.sampled_from(["worst", "mean"]))
def test_a_view_derived_by_tentative_plans_places_as_a_brute_force_scan(specs, movers, plan):
    """The repair side applies plans to a copy of the view's groups: changed groups are checked one by one."""
    policy = make_policy(intra(plan=plan))
    groups = _groups(specs, policy, 5)
    fast = slow = indexed_view(groups, CLUSTER, 5)
    slow = _brute(slow)
    for i, p in enumerate(movers):
        job = _job(i, p, "mover")
        a, b = policy.place(job, fast), policy.place(job, slow)
        assert a == b
        fast, slow = with_plan(fast, a), with_plan(slow, b)
        assert fast.index is not None


def test_the_index_follows_every_write_and_keeps_the_dict_order():
    policy = make_policy()
    groups = _groups([(100.0, 100.0, 2.0, 8, 8, 10.0, 10.0, 0.0)] * 12, policy, 1)
    idx = groups.index
    assert len(idx) == len(groups) == 12
    del groups[3]
    groups.pop(5)
    g0 = groups[0]
    groups[0] = dataclasses.replace(g0)  # an update keeps its place
    snap = idx.snapshot(tuple(groups.values()), hidden={7})
    assert snap is None  # the hidden group is still in the tuple: it does not match
    view_groups = tuple(g for g in groups.values() if g.group_id != 7)
    snap = idx.snapshot(view_groups, hidden={7})
    assert [idx.group_at(s).group_id for s in snap.slots] == [g.group_id for g in view_groups]
    assert [g.group_id for g in idx.small(1)] == list(groups)
    clone = pickle.loads(pickle.dumps(groups))
    assert list(clone) == list(groups) and len(clone.index) == len(groups)
    groups.clear()
    assert len(idx) == 0 and groups.index.snapshot(()) is not None


def test_many_removals_compact_the_slots_in_order():
    policy = make_policy()
    groups = IndexedGroups(policy.cfg)
    job = make_job("x")
    base = policy.place(job, indexed_view(groups, CLUSTER)).group
    for gid in range(3000):
        groups[gid] = dataclasses.replace(base, group_id=gid)
    for gid in range(0, 3000, 3):
        del groups[gid]
    for gid in range(1, 3000, 3):
        del groups[gid]
    snap = groups.index.snapshot(groups.values_tuple())
    assert groups.index._n < 3000  # compacted
    assert [groups.index.group_at(s).group_id for s in snap.slots] == list(groups)


def test_an_index_built_for_another_planning_config_is_not_used():
    policy = make_policy(intra(plan_quantile=0.9))
    groups = IndexedGroups(intra())
    plan = policy.place(make_job("a"), indexed_view(groups, CLUSTER))
    groups[plan.group.group_id] = plan.group
    view = indexed_view(groups, CLUSTER)
    assert index_pass(policy.rules, make_job("b"), view, 1e9, planning_times(make_job("b"), 0.9), 1, 1e9, None) is None


def _numbered_groups(n: int, dropped: set[int]) -> IndexedGroups:
    """Groups 0..n-1 (copies of one planned group), then those in `dropped` removed."""
    policy = make_policy()
    base = policy.place(make_job("x"), indexed_view(IndexedGroups(policy.cfg), CLUSTER)).group
    groups = IndexedGroups(policy.cfg)
    for gid in range(n):
        groups[gid] = dataclasses.replace(base, group_id=gid)
    for gid in dropped:
        groups.pop(gid, None)
    return groups


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 40), hidden=st.sets(st.integers(0, 45), max_size=12), dropped=st.sets(st.integers(0, 40)))
def test_values_without_hides_exactly_the_given_ids_in_order(n, hidden, dropped):
    groups = _numbered_groups(n, dropped)
    assert groups.values_without(hidden) == tuple(g for g in groups.values() if g.group_id not in hidden)


@settings(max_examples=30, deadline=None)
@given(specs=st.lists(job_st, min_size=1, max_size=15), hidden=st.sets(st.integers(0, 16), max_size=4))
def test_view_group_finds_what_a_scan_finds(specs, hidden):
    policy = make_policy()
    groups = _groups(specs, policy, 2)
    shown = groups.values_without(hidden)
    view = ClusterView(CLUSTER, shown, None, None, 5, 99, index=groups.index.snapshot(shown, hidden))
    assert view.index is not None
    for gid in range(18):
        assert view.group(gid) is next((g for g in shown if g.group_id == gid), None)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 40), hidden=st.sets(st.integers(0, 45), max_size=12), dropped=st.sets(st.integers(0, 40)))
def test_a_snapshot_gives_each_group_its_position_in_the_view(n, hidden, dropped):
    groups = _numbered_groups(n, dropped)
    shown = groups.values_without(hidden)
    snap = groups.index.snapshot(shown, hidden)
    ids = [g.group_id for g in shown]
    for gid in range(46):
        assert snap.position(gid) == (ids.index(gid) if gid in ids else None)
