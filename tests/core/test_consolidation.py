"""The departure-time consolidation pass visits exactly the small groups a full scan would."""

from __future__ import annotations

import dataclasses

from factories import make_cluster, make_job
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.cluster_state import ClusterState, SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.inter_group import RollMuxPlacement

CLUSTER = make_cluster()

jobs_st = st.lists(st.tuples(st.sampled_from([50.0, 100.0, 200.0]), st.sampled_from([50.0, 100.0, 200.0]),
                             st.sampled_from([1.2, 1.5, 2.0, 3.0])), min_size=2, max_size=12)


def _build(jobs: list[tuple[float, float, float]], cap: int) -> ClusterState:
    """Jobs placed one by one with groups capped at `cap` members, then the cap lifted."""
    state = ClusterState(SimEnvironment(), CLUSTER, RollMuxPlacement(), SchedulerConfig(max_group_size=cap))
    for i, (r, t, slo) in enumerate(jobs):
        state.place(make_job(f"j{i}", rollout=r, train=t, slo=slo), {})
    state.cfg = dataclasses.replace(state.cfg, max_group_size=5)
    return state


def _full_scan(state: ClusterState, rest, progress) -> list[str]:
    """The pass as it was: every group, smallest first, each tried if still small."""
    movers = state._dissolve(rest, progress) if rest is not None else []
    for g in sorted(state.groups.values(), key=lambda g: g.size):
        if g.size <= state.cfg.consolidate and g.group_id in state.groups:
            movers += state._dissolve(state.groups[g.group_id], progress)
    return movers


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_st, cap=st.integers(1, 3), leaver=st.integers(0, 11))
def test_consolidation_matches_a_full_scan(jobs, cap, leaver):
    job_id = f"j{leaver % len(jobs)}"
    a, b = _build(jobs, cap), _build(jobs, cap)
    gid = next(g.group_id for g in a.groups.values() if job_id in g.job_ids())
    rest_a, rest_b = a.leave(job_id, gid), b.leave(job_id, gid)
    expected = _full_scan(b, rest_b, {})
    assert a.after_departure(rest_a, {}) == expected
    assert a.dissolving == b.dissolving
    assert len(a.decision_ms["departure"]) == 1


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_st, cap=st.integers(1, 3), k=st.integers(0, 3))
def test_candidates_are_exactly_the_small_groups_not_dissolving(jobs, cap, k):
    state = _build(jobs, cap)
    state.cfg = dataclasses.replace(state.cfg, consolidate=k)
    state.dissolving.update(list(state.groups)[::2])
    got = [g.group_id for g in state.consolidation_candidates()]
    want = [g.group_id for g in sorted(state.groups.values(), key=lambda g: g.size)
            if k and g.size <= k and g.group_id not in state.dissolving]
    assert got == want
