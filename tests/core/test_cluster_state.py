"""The scheduler state shared by the simulator and the live service."""

from __future__ import annotations

from factories import GROUPS, config, intra, make_cluster, make_job, make_policy

from rollmux.core.env import SimEnvironment
from rollmux.core.group import Member
from rollmux.core.records import Movers
from rollmux.core.repair.moves import Move, migration_seconds, plan_moves
from rollmux.core.state import ClusterState

CLUSTER = make_cluster()


def _state(cluster=CLUSTER, **cfg) -> ClusterState:
    return ClusterState(SimEnvironment(), cluster, make_policy(), config(GROUPS, **cfg))


def test_place_applies_a_validated_plan_and_provisions_nodes():
    st = _state()
    plan = st.place(make_job("a"), {})
    assert plan.case.value == "isolated"
    assert st.ledger.nodes == {"rollout": 1, "train": 1}
    assert st.controllers[plan.group.group_id].group.job_ids() == ("a",)
    assert st.cases == {"isolated": 1} and len(st.decision_ms["arrival"]) == 1


def test_leave_of_the_last_member_releases_the_group():
    st = _state()
    gid = st.place(make_job("a"), {}).group.group_id
    assert st.leave("a", gid) is None
    assert st.groups == {} and st.ledger.nodes == {"rollout": 0, "train": 0}


def test_complementary_jobs_share_and_a_re_placement_is_not_counted_as_an_arrival():
    st = _state()
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    plan = st.place(make_job("b", rollout=100, train=100, slo=2.0), {}, arrival=False)
    assert plan.case.value == "direct_packing"
    assert st.cases == {"isolated": 1}


def test_a_departure_consolidates_lone_groups_that_fit_together():
    st = _state(max_group_size=2)
    st.place(make_job("b", rollout=100, train=100, slo=2.0, train_gpus=16), {})  # 2 training nodes
    st.place(make_job("c"), {})             # joins b: the group is full
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})  # a group of its own
    gid = next(g.group_id for g in st.groups.values() if "c" in g.job_ids())
    movers = st.after_departure(st.leave("c", gid), {})
    assert movers == ["a"]  # a fits into b's group now; b needs more training nodes than a's group has
    assert len(st.dissolving) == 1


def test_a_group_that_is_gone_frees_room_only_under_node_caps():
    for caps, want in ((None, []), (100, ["a"])):
        st = _state(max_group_size=1, cluster=make_cluster(max_rollout_nodes=caps))
        st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
        st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
        gone = st.place(make_job("c"), {}).group.group_id
        st.consolidation_candidates(None, {})  # a pass took the new groups: none is new now
        st.cfg = config(st.cfg, max_group_size=5)
        assert st.after_departure(st.leave("c", gone), {}) == want


def test_no_regrouping_when_it_is_off():
    st = _state(max_group_size=1, regroup=False)
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
    st.cfg = config(st.cfg, max_group_size=5)
    assert st.after_departure(None, {}) == []


def _host_with_a_move_into_it(reserve: bool, elapsed: float = 19250.0):
    """A group of `h` (5 iterations left, `elapsed` spent of its 20,460 s budget) that `a`
    joins: by a reserved move (`reserve`, its migration still pending) or as a plain member."""
    st = _state()
    h = make_job("h", rollout=100, train=50, slo=2.0, duration=205 * 50)
    st.place(h, {})
    progress = {"h": (h.iterations - 5, elapsed)}
    a = make_job("a", rollout=60, train=50, slo=3.0)
    if reserve:
        (place,) = st.decide(a, progress, arrival=False)
        plan = place.plan
        st.apply(Movers.of(99, (Move("a", 99, plan, migration_seconds(a, CLUSTER)),), False))
    else:
        plan = st.place(a, progress, arrival=False)
    assert plan.case.value == "direct_packing"
    return st, progress


def test_a_second_move_into_a_group_is_charged_the_first_moves_pending_migration():
    # (stress seed 6: two moves into one group decided 180 s apart; the second was planned
    # without the first's pending migration, and a member waited for both.)
    b = make_job("b", rollout=60, train=50, slo=3.0)
    for reserve, planned in ((False, True), (True, False)):  # h's budget holds one migration, not two
        st, progress = _host_with_a_move_into_it(reserve)
        got = plan_moves((Member(b, (0,), (0,)),), 98, st.view(progress), st.policy,
                         {"b": migration_seconds(b, CLUSTER)}, 200.0)
        assert (got is not None) == planned


def test_an_arrived_migrants_migration_is_owed_until_its_first_iteration_there_ends():
    st, progress = _host_with_a_move_into_it(reserve=True)
    owed = migration_seconds(make_job("a", rollout=60, train=50, slo=3.0), CLUSTER)
    gid = st.arriving["a"].plan.group.group_id
    st.arrive("a")
    assert st.view(progress).progress["h"] == (progress["h"][0], progress["h"][1] + owed)
    assert st.view(progress).owed_s == {gid: owed}
    st.observe("a", gid, 60.0, 50.0, progress)
    assert st.view(progress).progress["h"] == progress["h"] and st.view(progress).owed_s == {}


def test_a_policy_that_admits_by_other_rules_than_the_config_is_refused_naming_the_fields():
    import pytest

    from rollmux.errors import InputError
    cfg = config(GROUPS, plan="mean")
    with pytest.raises(InputError, match=r"policy.*plan='worst' vs 'mean'"):
        ClusterState(SimEnvironment(), make_cluster(), make_policy(), cfg)
    # Fields outside admission (long-tail migration here) may differ.
    ClusterState(SimEnvironment(), make_cluster(), make_policy(intra(plan="mean", migration=False)), cfg)
    # A policy that admits without SLOs (the baselines) only plans with its config.
    from rollmux.sim.baseline_policies import SoloPlacement
    ClusterState(SimEnvironment(), make_cluster(), SoloPlacement(intra()), cfg)


def test_a_phase_measured_at_no_time_is_no_estimate():
    st = _state(repair=True)
    gid = st.place(make_job("a"), {}).group.group_id
    assert st.observe("a", gid, 0.0, 0.0, {}) == [] and "a" not in st.estimates  # (was a ZeroDivisionError)
    st.observe("a", gid, 100.0, 100.0, {})
    assert st.estimates["a"].count == 1


def _drifted_pair(cannot_a: list[str], cannot_b: list[str]) -> tuple[ClusterState, list[str]]:
    """Two complementary jobs sharing a group; `a` measured 3x slower than declared breaks b's
    budget: the drift repair evicts a member. The state and the evicted jobs."""
    st = _state(repair=True)
    gid = st.place(make_job("a", rollout=100, train=100, slo=2.0, cannot=cannot_a), {}).group.group_id
    assert st.place(make_job("b", rollout=100, train=100, slo=2.0, cannot=cannot_b), {}).group.group_id == gid
    return st, st.observe("a", gid, 300.0, 300.0, {})


def test_the_drift_repair_evicts_the_slower_member():
    st, evicted = _drifted_pair([], [])
    assert evicted == ["a"] and list(st.arriving) == ["a"]


def test_the_drift_repair_evicts_another_member_than_one_that_cannot_be_moved():
    st, evicted = _drifted_pair(["move"], [])
    assert evicted == ["b"] and list(st.arriving) == ["b"]


def test_the_drift_repair_moves_nobody_where_no_member_can_be_moved():
    st, evicted = _drifted_pair(["move"], ["move"])
    assert evicted == [] and st.arriving == {} and len(st.groups) == 1
