"""The scheduler state shared by the simulator and the live service."""

from __future__ import annotations

import dataclasses

from factories import make_cluster, make_job

from rollmux.core.cluster_state import ClusterState, SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.inter_group import RollMuxPlacement

CLUSTER = make_cluster()


def _state(**cfg) -> ClusterState:
    return ClusterState(SimEnvironment(), CLUSTER, RollMuxPlacement(), SchedulerConfig(**cfg))


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
    st = _state(max_group_size=1)  # forces a and b into groups of their own
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
    gone = st.place(make_job("c"), {}).group.group_id
    st.cfg = dataclasses.replace(st.cfg, max_group_size=5)
    movers = st.after_departure(st.leave("c", gone), {})
    assert movers == ["a"]  # a fits into b's group; b cannot move into a dissolving group
    assert len(st.dissolving) == 1


def test_no_regrouping_when_it_is_off():
    st = _state(max_group_size=1, regroup=False)
    st.place(make_job("a", rollout=100, train=100, slo=2.0), {})
    st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
    st.cfg = dataclasses.replace(st.cfg, max_group_size=5)
    assert st.after_departure(None, {}) == []
