"""The scheduler state shared by the simulator and the live service."""

from __future__ import annotations

import dataclasses

from factories import make_cluster, make_job

from rollmux.core.cluster_state import ClusterState, SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.inter_group import RollMuxPlacement

CLUSTER = make_cluster()


def _state(cluster=CLUSTER, **cfg) -> ClusterState:
    return ClusterState(SimEnvironment(), cluster, RollMuxPlacement(), SchedulerConfig(**cfg))


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
        st.cfg = dataclasses.replace(st.cfg, max_group_size=5)
        assert st.after_departure(st.leave("c", gone), {}) == want


def test_no_regrouping_when_it_is_off():
    st = _state(max_group_size=1, regroup=False)
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
    st.cfg = dataclasses.replace(st.cfg, max_group_size=5)
    assert st.after_departure(None, {}) == []
