"""Re-pinning compaction (core/repair/compaction.py): a member alone on the dropped rollout node moves."""

from __future__ import annotations

from rollmux.core.config import SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, PlacementPlan
from rollmux.core.placement.admission import group_fits
from rollmux.core.placement.costs import group_cost_per_period
from rollmux.core.records import Compact, Place
from rollmux.core.repair.compaction import Repin, compact, narrowed, repinned
from rollmux.core.repair.moves import repin_seconds
from rollmux.core.state import ClusterState
from factories import GROUPS, config, intra, make_cluster, make_group, make_job, make_policy

CLUSTER = make_cluster()
CFG = intra()
REPIN = Repin(SchedulerConfig().regroup.margin, SchedulerConfig().regroup.migration_scale)  # as shipped


def _pair(slo: float = 1.8, duration: float = 200_000.0, third: bool = False, fixed: str = ""):
    """Two (or three) 1+1 jobs, each alone on its rollout node of two, sharing the training node:
    rollout 100 s, training 80 s, so both fit one rollout node (a 200 s round robin). `fixed`:
    the jobs that cannot be moved."""
    jobs = [make_job(j, rollout=100.0, train=80.0, slo=slo, duration=duration, cannot=["move"] if j in fixed else [])
            for j in "abc"]
    pins = [(jobs[0], (0,)), (jobs[1], (1,))] + ([(jobs[2], (0,))] if third else [])
    return plan_group(make_group(pins, 2), CFG)


def test_with_repin_a_member_alone_on_the_node_moves_to_the_least_pinned_other():
    g = make_group([(make_job("a"), (0,)), (make_job("b"), (1,)), (make_job("c"), (2,)), (make_job("d"), (1,))], 3)
    assert narrowed(g, 0, CLUSTER) is None  # (without: a member alone on it cannot narrow)
    small = narrowed(g, 0, CLUSTER, repin=True)
    # Node 2 (then index 1) held one member, node 1 (index 0) two: a goes to node 2.
    assert small.n_rollout == 2 and small.member("a").rollout_nodes == (1,)
    assert small.member("a").rollout_factor == 1.0 and small.member("b").rollout_nodes == (0,)
    assert repinned(g, 0) == ["a"]


def test_a_pair_left_on_two_rollout_nodes_shares_one_again():
    g = _pair()
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1}) is None  # narrowing alone cannot
    small, drop = compact(g, CLUSTER, CFG, {}, idle={0, 1}, repin=REPIN)
    assert small.n_rollout == 1 and len(repinned(g, drop)) == 1
    assert group_cost_per_period(small, CLUSTER) < group_cost_per_period(g, CLUSTER)


def test_a_member_that_cannot_be_moved_is_not_re_pinned():
    g = _pair(fixed="a")
    assert narrowed(g, 0, CLUSTER, repin=True) is None  # a is alone on node 0
    small, drop = compact(g, CLUSTER, CFG, {}, idle={0, 1}, repin=REPIN)
    assert drop == 1 and repinned(g, drop) == ["b"] and small.member("a").rollout_nodes == (0,)


def test_no_re_pin_when_no_member_can_be_moved():
    g = _pair(fixed="ab")
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1}, repin=REPIN) is None and group_fits(g, {}, CFG)


def test_the_cold_start_is_charged_to_every_members_budget():
    # Ten iterations at SLO 1.25: the shared period fits their budget, not with the cold start on top.
    g = _pair(slo=1.25, duration=185.0 * 10)
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1}, repin=Repin(margin=0.0, scale=0.0)) is not None
    assert compact(g, CLUSTER, CFG, {}, idle={0, 1}, repin=Repin(margin=0.0, scale=1.0)) is None
    small, drop = compact(_pair(), CLUSTER, CFG, {}, idle={0, 1}, repin=REPIN)
    stall = repin_seconds(_pair().members[drop].job, CLUSTER)
    assert group_fits(small, {m.job_id: (0, stall) for m in small.members}, CFG)


def test_a_repin_that_would_not_repay_its_stall_is_not_made():
    g = _pair()
    done = g.members[0].job.iterations - 2  # two iterations left: the saving cannot pay the stall
    progress = {m.job_id: (done, done * m.job.solo_iter_s) for m in g.members}
    assert compact(g, CLUSTER, CFG, progress, idle={0, 1}, repin=Repin(margin=0.0, scale=1.0)) is not None
    assert compact(g, CLUSTER, CFG, progress, idle={0, 1}, repin=Repin(margin=2.0, scale=1.0)) is None


def _state(**cfg) -> tuple[ClusterState, int]:
    st = ClusterState(SimEnvironment(), CLUSTER, make_policy(elastic_rollout=True), config(GROUPS, **cfg))
    g = _pair()
    st.apply(Place.of(PlacementPlan("a", Case.ISOLATED, g, 2, 1, 0.0), True))
    return st, g.group_id


def test_the_state_repins_and_the_moved_members_next_rollout_cold_starts():
    st, gid = _state()
    records = []
    assert st.drift.compact(gid, {}, lambda r: (records.append(r), st.apply(r))) == 1
    (r,) = records
    assert isinstance(r, Compact) and r.repin
    assert Compact.model_validate_json(r.model_dump_json()) == r  # journaled as decided
    assert st.ledger.nodes == {"rollout": 1, "train": 1} and st.repinned == 1
    moved = "b" if r.node == 1 else "a"
    granted = []
    st.controllers[gid].request(moved, "rollout", granted.append)
    assert granted and granted[0].switch_s == repin_seconds(st.groups[gid].member(moved).job, CLUSTER)


def test_without_repin_the_pair_keeps_both_rollout_nodes():
    st, gid = _state(dotted={"compaction.repin": False})
    assert st.drift.compact(gid, {}, st.apply) == 0 and st.ledger.nodes["rollout"] == 2
