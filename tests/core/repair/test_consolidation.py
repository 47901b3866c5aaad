"""The departure-time consolidation pass revisits only the small groups a departure can affect."""

from __future__ import annotations

import pytest
from factories import GROUPS, config, make_cluster, make_job, make_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.colo_model import colocated_group, colocated_phases
from rollmux.core.env import SimEnvironment
from rollmux.core.placement import ClusterView
from rollmux.core.repair.regroup import dissolve_decision
from rollmux.core.state import ClusterState

CLUSTER = make_cluster()
CAPPED = make_cluster(max_rollout_nodes=1000, max_train_nodes=1000)

jobs_st = st.lists(st.tuples(st.sampled_from([50.0, 100.0, 200.0]), st.sampled_from([50.0, 100.0, 200.0]),
                             st.sampled_from([1.2, 1.5, 2.0, 3.0]), st.sampled_from([8, 16])),
                   min_size=2, max_size=12)


def _build(jobs: list[tuple[float, float, float, int]], cap: int, cluster=CLUSTER) -> ClusterState:
    """Jobs placed one by one with groups capped at `cap` members, then the cap lifted."""
    state = ClusterState(SimEnvironment(), cluster, make_policy(), config(GROUPS, max_group_size=cap))
    for i, (r, t, slo, tg) in enumerate(jobs):
        state.place(make_job(f"j{i}", rollout=r, train=t, slo=slo, train_gpus=tg), {})
    state.cfg = config(state.cfg, max_group_size=5)
    return state


def _small(state: ClusterState, rest) -> list:
    """Every small group not dissolving, smallest first, `rest` left out (the pass before the index)."""
    k = state.cfg.regroup.consolidate
    return [g for g in sorted(state.groups.values(), key=lambda g: g.size)
            if k and g.size <= k and g.group_id not in state.dissolving
            and (rest is None or g.group_id != rest.group_id)]


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_st, cap=st.integers(1, 3), leaver=st.integers(0, 11), k=st.integers(0, 3),
       settled=st.booleans())
def test_revisited_groups_are_the_small_ones_a_member_of_which_could_join_a_group_with_new_room(
        jobs, cap, leaver, k, settled):
    state = _build(jobs, cap)
    state.cfg = config(state.cfg, consolidate=k)
    if settled:
        state.consolidation_candidates(None, {})  # a pass took every new group: none is new now
        assert state.groups.roomier == set()
    job_id = f"j{leaver % len(jobs)}"
    gid = next(g.group_id for g in state.groups.values() if job_id in g.job_ids())
    rest = state.leave(job_id, gid)
    roomier = set(state.groups.roomier)
    assert roomier == ({gid} if settled and rest is not None else roomier)
    got = [g.group_id for g in state.consolidation_candidates(rest, {})]
    assert state.groups.roomier == set()
    view = state.view({})
    targets = [state.groups[i] for i in roomier if i in state.groups]
    want = [g.group_id for g in _small(state, rest)
            if any(state.policy.could_join(m.job, t, view) for t in targets if t.group_id != g.group_id
                   for m in g.members)]
    assert got == want
    assert set(got) <= {g.group_id for g in _small(state, rest)}


@settings(max_examples=30, deadline=None)
@given(jobs=jobs_st, cap=st.integers(1, 3), leaver=st.integers(0, 11))
def test_under_node_caps_every_small_group_is_revisited(jobs, cap, leaver):
    """Freed nodes may let any small group's members scale another group: no filter applies."""
    state = _build(jobs, cap, CAPPED)
    job_id = f"j{leaver % len(jobs)}"
    gid = next(g.group_id for g in state.groups.values() if job_id in g.job_ids())
    rest = state.leave(job_id, gid)
    assert [g.group_id for g in state.consolidation_candidates(rest, {})] == [
        g.group_id for g in _small(state, rest)]


@settings(max_examples=60, deadline=None)
@given(jobs=jobs_st, cap=st.integers(1, 4), probe=st.tuples(st.sampled_from([50.0, 100.0, 200.0]),
                                                            st.sampled_from([50.0, 100.0, 200.0]),
                                                            st.sampled_from([1.2, 1.5, 2.0, 3.0]),
                                                            st.sampled_from([8, 16])),
       done=st.integers(0, 30), late=st.floats(0.0, 3.0))
def test_could_join_is_necessary_for_a_joined_plan(jobs, cap, probe, done, late):
    """Whenever the policy can put a job into a group, `could_join` says it may."""
    state = _build(jobs, cap)
    r, t, slo, tg = probe
    job = make_job("probe", rollout=r, train=t, slo=slo, train_gpus=tg)
    progress = {m.job_id: (done, late * done * m.job.solo_iter_s) for g in state.groups.values()
                for m in g.members}
    progress["probe"] = (done // 2, late * done * job.solo_iter_s / 2)
    for g in state.groups.values():
        view = ClusterView(CLUSTER, (g,), None, None, 5, g.group_id + 1, progress)
        if state.policy.place_joined(job, view) is not None:
            assert state.policy.could_join(job, g, view)


def test_a_departure_that_frees_no_room_for_a_small_group_revisits_none():
    state = ClusterState(SimEnvironment(), CLUSTER, make_policy(), config(GROUPS, max_group_size=1))
    state.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    state.place(make_job("b", rollout=100, train=100, slo=2.0), {})  # could share a's group
    state.cfg = config(state.cfg, max_group_size=2, regroup_margin=0.0)
    # c and d fill a group neither a nor b can ever join (SLO 1.0: nobody may share with them).
    state.place(make_job("c", rollout=50, train=50, slo=1.0, train_gpus=16), {})
    state.place(make_job("d", rollout=50, train=50, slo=1.0, train_gpus=16), {})
    state.consolidation_candidates(None, {})  # an earlier pass took the new groups
    gid = next(g.group_id for g in state.groups.values() if "d" in g.job_ids())
    rest = state.leave("d", gid)
    assert state.consolidation_candidates(rest, {}) == []
    assert state.after_departure(rest, {}) == []
    assert len(state.decision_ms["departure"]) == 1


def test_a_new_group_is_room_for_small_groups_at_the_next_departure():
    state = ClusterState(SimEnvironment(), CLUSTER, make_policy(), config(GROUPS, max_group_size=1))
    state.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    state.consolidation_candidates(None, {})  # a's group is not new any more
    state.place(make_job("b", rollout=100, train=100, slo=2.0), {})  # new: a could join it
    gone = state.place(make_job("c"), {}).group.group_id
    state.cfg = config(state.cfg, max_group_size=5)
    assert [g.job_ids() for g in state.consolidation_candidates(state.leave("c", gone), {})] == [("a",)]


def test_a_departure_with_room_but_no_small_group_revisits_none():
    state = _build([(100.0, 100.0, 3.0, 8)] * 4, cap=4)
    state.cfg = config(state.cfg, consolidate=1)
    assert [g.size for g in state.groups.values()] == [4]
    rest = state.leave("j0", next(iter(state.groups)))
    assert rest is not None and rest.size == 3
    assert state.consolidation_candidates(rest, {}) == []


def _with_colocated(colo_regroup: bool, cannot: list[str] | None = None) -> tuple[ClusterState, int]:
    """A co-located train-heavy job (that cannot take `cannot`), then a rollout-heavy 16:8 job in
    a group of its own."""
    cfg = config(GROUPS, colocate=True, colo_regroup=colo_regroup)
    state = ClusterState(SimEnvironment(), CLUSTER, make_policy(colocate=True), cfg)
    x = state.place(make_job("x", rollout=50.0, train=300.0, cannot=cannot or []), {})
    state.place(make_job("y", rollout=300.0, train=50.0, rollout_gpus=16), {})
    return state, x.group.group_id


def test_a_colocated_job_is_a_consolidation_candidate_unless_colo_regroup_is_off():
    state, x = _with_colocated(True)
    assert x in state.colocated
    assert [g.group_id for g in state.consolidation_candidates(None, {})] == [x]
    off, x = _with_colocated(False)
    assert x in off.colocated and off.consolidation_candidates(None, {}) == []


def test_a_colocated_job_moves_when_the_pass_finds_it_a_group():
    state, x = _with_colocated(True)
    assert state.after_departure(None, {"x": (0, 0.0), "y": (0, 0.0)}) == ["x"]
    assert x in state.dissolving and "x" in state.arriving


def test_a_colocated_job_that_cannot_be_moved_is_no_candidate_and_stays():
    state, x = _with_colocated(True, cannot=["move"])  # (the tests above: it is one, and moves)
    assert x in state.colocated and state.consolidation_candidates(None, {}) == []
    assert state.after_departure(None, {"x": (0, 0.0), "y": (0, 0.0)}) == [] and state.arriving == {}


def test_a_colocated_job_is_priced_per_iteration_not_per_hour():
    """Same nodes, same $/h: only what one co-located iteration costs differs. A job whose own
    iterations are nearly free saves nothing by joining, however long it still runs."""
    state, x = _with_colocated(True)
    own = state.colocated[x]
    view = state.view({"x": (0, 0.0), "y": (0, 0.0)})
    assert dissolve_decision(own, view, state.policy, 1.0, 2.0) is not None
    cheap = colocated_group(x, own.members[0].job, CLUSTER, planned_s=1.0)
    assert cheap.cost_per_hour(CLUSTER) == own.cost_per_hour(CLUSTER)
    assert dissolve_decision(cheap, view, state.policy, 1.0, 2.0) is None


def test_a_drifting_colocated_job_is_planned_with_what_it_measures():
    """Its co-located phase times, taken back to disaggregated ones, replace its profile (so a
    move into a group plans what it runs); its own placement's planned iteration follows."""
    state, x = _with_colocated(True)
    own = state.colocated[x]
    job = own.members[0].job
    r_scale, t_scale, _ = colocated_phases(job, CLUSTER, 1.0, 1.0)
    for _ in range(8):  # rollout and training both twice as long as declared, measured co-located
        state.observe("x", x, 2 * job.rollout_s.median * r_scale, 2 * job.train_s * t_scale, {})
    planned = state.planned["x"]
    assert planned.rollout_s.median == pytest.approx(2 * job.rollout_s.median)
    assert planned.train_s == pytest.approx(2 * job.train_s)
    assert state.colocated[x].members[0].job is planned
    assert state.colocated[x].shape.period_s > 1.9 * own.shape.period_s
    assert state.controllers[x].group is state.colocated[x]


def test_a_colocated_job_on_profile_keeps_its_declared_one():
    state, x = _with_colocated(True)
    job = state.colocated[x].members[0].job
    r_scale, t_scale, _ = colocated_phases(job, CLUSTER, 1.0, 1.0)
    for _ in range(8):
        state.observe("x", x, job.rollout_s.median * r_scale, job.train_s * t_scale, {})
    assert "x" not in state.planned and state.colocated[x].members[0].job is job
