"""Folding (core/repair/fold.py): a group's last member moves to co-location; trios (core/repair/pairing.py)."""

from __future__ import annotations

import pytest

from rollmux.core.colo_controller import ColocatedController
from rollmux.core.env import SimEnvironment
from rollmux.core.grant import Grant
from rollmux.core.group_controller import ROLLOUT, TRAIN
from rollmux.core.placement import Case, build_policy
from rollmux.core.placement.costs import FoldTerms, after_partners, fold_terms_for, group_cost_per_period
from rollmux.core.placement.options.colocated import colocated_option
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.records import Leave, MoveOut, Movers, Place
from rollmux.core.repair.fold import fold_decision
from rollmux.core.repair.moves import migration_seconds, migration_usd
from rollmux.core.repair.pairing import founding_saving
from rollmux.core.state import ClusterState
from rollmux.sim.simulator import Simulation
from factories import ROLLOUT_HEAVY_COLO, SHIPPED, make_cluster, make_job

CLUSTER = make_cluster()
NO_FOLD = SHIPPED.with_overrides({"colocation.fold": False})
FOLD_ANY = SHIPPED.with_overrides({"colocation.fold_below": 1.0})  # a fold whenever co-location saves
TERMS = FoldTerms(margin=2.0)


def _state(cfg=SHIPPED) -> ClusterState:
    return ClusterState(SimEnvironment(), CLUSTER, build_policy(cfg, CLUSTER), cfg)


def slow_colo(job_id: str, slo: float = 2.0, arrival: float = 0.0, **kw):
    """An 8:8 job 1.3x slower co-located (as the authors' 7B-4k) yet cheaper there: H800s
    alone cost less than an H20 and an H800 node for 1.3x the time."""
    return make_job(job_id, rollout=150.0, train=150.0, slo=slo, arrival=arrival, colo=(1.3, 1.3), **kw)


def heavy(job_id: str, arrival: float = 0.0, duration: float = 200_000.0, **kw):
    """A rollout-heavy 8:8 job (the authors' 8B-32k): cheaper co-located than paired, cheaper
    three to a 2-rollout-node group than co-located."""
    return make_job(job_id, rollout=888.0, train=559.5, sync=10.0, arrival=arrival, duration=duration, slo=1.5,
                    colo=ROLLOUT_HEAVY_COLO, **kw)


def _alone(st: ClusterState, job) -> int:
    """Install `job` alone in a group of its own (its isolated plan); its group id."""
    plan = isolated_plan(job, st.view({}), st.intra)
    st.apply(Place.of(plan, True))
    return plan.group.group_id


def _decide(st: ClusterState, gid: int, progress):
    return fold_decision(st.groups[gid], st.view(progress), st.intra, 1.0, False, TERMS)


def test_a_lone_member_cheaper_colocated_folds_at_a_priced_migration():
    st = _state()
    job = slow_colo("a")
    gid = _alone(st, job)
    d = _decide(st, gid, {"a": (10, 3_000.0)})
    assert d is not None and d.dissolve and d.group_id == gid
    (move,) = d.moves
    assert move.plan.case == Case.COLOCATED and move.migration_s == migration_seconds(job, CLUSTER)
    left = job.iterations - 10
    colo = move.plan.delta_cost_per_hour * move.plan.group.shape.period_s / 3600
    assert d.saving_usd == pytest.approx(left * (group_cost_per_period(st.groups[gid], CLUSTER) - colo))
    assert d.cost_usd == pytest.approx(migration_usd(job, CLUSTER)) and d.saving_usd > 2.0 * d.cost_usd


def test_a_member_near_its_end_does_not_fold():
    st = _state()
    job = slow_colo("a")
    gid = _alone(st, job)
    assert _decide(st, gid, {"a": (job.iterations - 1, 100_000.0)}) is None


def test_a_member_whose_budget_cannot_take_the_slower_colocated_iteration_stays():
    st = _state()
    tight, loose = slow_colo("t", slo=1.2), slow_colo("l", slo=2.0)
    gt, gl = _alone(st, tight), _alone(st, loose)
    progress = {"t": (10, 3_000.0), "l": (10, 3_000.0)}
    assert _decide(st, gt, progress) is None  # co-located it runs 1.3x its solo time: past its SLO
    assert _decide(st, gl, progress) is not None


@pytest.mark.parametrize("mode", ["move", "colocate"])
def test_a_lone_member_that_cannot_be_moved_or_run_colocated_does_not_fold(mode):
    st = _state()
    gf, gs = _alone(st, slow_colo("f")), _alone(st, slow_colo("s", cannot=[mode]))
    progress = {"f": (10, 3_000.0), "s": (10, 3_000.0)}
    assert _decide(st, gf, progress) is not None  # the same job without `cannot` folds
    assert _decide(st, gs, progress) is None


@pytest.mark.parametrize("mode", ["move", "colocate"])
def test_pricing_never_assumes_a_fold_of_a_job_that_cannot_take_one(mode):
    assert fold_terms_for(slow_colo("a"), TERMS) is TERMS and fold_terms_for(slow_colo("a"), None) is None
    assert fold_terms_for(slow_colo("a", cannot=[mode]), TERMS) is None


def test_only_a_lone_disaggregated_member_folds():
    st = _state()
    a, b, c = slow_colo("a"), slow_colo("b"), slow_colo("c")
    gid = _alone(st, a)
    st.apply(Place.of(st.policy.place_joined(b, st.view({})), True))
    assert len(st.groups[gid].members) == 2 and _decide(st, gid, {}) is None
    colo = colocated_option(c, st.view({}), st.intra)
    st.apply(Place.of(colo, True))
    assert fold_decision(st.colocated[colo.group.group_id], st.view({}), st.intra, 1.0, False, TERMS) is None


def test_after_partners_folds_only_when_the_saving_beats_the_margin():
    assert after_partners(10, alone=5.0, colo=3.0, move_usd=4.0, fold=TERMS) == 10 * 3.0 + 4.0
    assert after_partners(3, alone=5.0, colo=3.0, move_usd=4.0, fold=TERMS) == 3 * 5.0  # 6 <= 8
    assert after_partners(10, alone=5.0, colo=None, move_usd=4.0, fold=TERMS) == 50.0
    assert after_partners(10, alone=5.0, colo=3.0, move_usd=4.0, fold=None) == 50.0
    assert not FoldTerms(margin=0.0).folds(10, 3.0, 5.0, 0.0)  # dearer co-located: never


def test_a_fold_needs_co_location_below_its_share_of_the_group():
    assert FoldTerms(margin=2.0, below=0.7).folds(100, alone=5.0, colo=3.0, move_usd=4.0)  # 0.6 of it
    assert not FoldTerms(margin=2.0, below=0.5).folds(100, alone=5.0, colo=3.0, move_usd=4.0)


def _pair_then_leave(st: ClusterState) -> list[str]:
    """a alone in a group, b joins it, b leaves: the departure's movers."""
    a, b = slow_colo("a"), slow_colo("b")
    gid = _alone(st, a)
    st.apply(Place.of(st.policy.place_joined(b, st.view({})), True))
    progress = {"a": (10, 3_000.0), "b": (10, 3_000.0)}
    return st.after_departure(st.apply(Leave.of("b", "done")), progress)


def test_by_default_a_lone_member_folds_only_where_co_location_costs_much_less():
    # Co-located a costs 0.96 of its group per iteration: below 1, not below the default 0.85.
    assert SHIPPED.colocation.fold_below == 0.85 and _pair_then_leave(_state()) == []
    assert _pair_then_leave(_state(FOLD_ANY)) == ["a"]


def test_the_last_member_folds_when_its_partner_leaves_and_arrives_colocated():
    st = _state(FOLD_ANY)
    a, b = slow_colo("a"), slow_colo("b")
    gid = _alone(st, a)
    plan = st.policy.place_joined(b, st.view({}))
    assert plan is not None and plan.group.group_id == gid
    st.apply(Place.of(plan, True))
    progress = {"a": (10, 3_000.0), "b": (10, 3_000.0)}
    rest = st.apply(Leave.of("b", "done"))
    assert st.after_departure(rest, progress) == ["a"] and st.folded == 1
    target = st.arriving["a"].plan.group.group_id
    assert target in st.colocated and isinstance(st.controllers[target], ColocatedController)
    st.apply(MoveOut.of("a"))
    assert st.group_of["a"] == target and gid not in st.groups


def test_a_folded_jobs_first_rollout_carries_its_migration_then_warm_switches():
    st = _state()
    a = slow_colo("a")
    gid = _alone(st, a)
    d = _decide(st, gid, {"a": (10, 3_000.0)})
    st.apply(Movers.of_regroup(d))
    st.apply(MoveOut.of("a"))
    ctl = st.controllers[st.group_of["a"]]
    got: list[Grant] = []
    for phase in (ROLLOUT, TRAIN, ROLLOUT):
        ctl.request("a", phase, got.append)
        ctl.release("a", phase)
    assert [g.switch_s for g in got] == [d.moves[0].migration_s, st.intra.warm_switch_s, st.intra.warm_switch_s]
    assert all(g.pool == "train" for g in got)  # co-located: every phase on its training nodes


def test_a_snapshot_keeps_a_migration_not_yet_carried():
    st = _state()
    gid = _alone(st, slow_colo("a"))
    d = _decide(st, gid, {"a": (10, 3_000.0)})
    st.apply(Movers.of_regroup(d))
    st.apply(MoveOut.of("a"))
    ctl = st.controllers[st.group_of["a"]]
    other = ColocatedController(SimEnvironment(), ctl.group, st.intra)
    other.import_state(ctl.export_state())
    assert other.take_cold() == d.moves[0].migration_s and other.take_cold() == 0.0


def test_an_arrival_founds_a_trio_where_no_pair_pays():
    st = _state()
    for j in ("a", "b"):  # each co-located: a pair of them costs more than two co-located
        (place,) = st.decide(heavy(j), {})
        st.apply(place)
        assert place.plan.case == Case.COLOCATED
    place, *movers = st.decide(heavy("c"), {})
    assert place.plan.case == Case.PAIRED and [m.moves[0].job_id for m in movers] == ["a", "b"]
    trio = movers[-1].moves[0].plan.group
    assert sorted(trio.job_ids()) == ["a", "b", "c"] and (trio.n_rollout, trio.n_train) == (2, 1)


def test_a_colocated_job_that_cannot_be_moved_joins_no_trio():
    st = _state()  # (the test above: c founds a trio with a and b)
    for j in ("a", "b"):
        st.place(heavy(j, cannot=["move"] if j == "a" else []), {})
    got = st.decide(heavy("c"), {})
    assert all(m.moves[0].job_id != "a" for m in got[1:]) and st.group_of["a"] in st.colocated


def test_without_folding_no_trio_is_priced():
    st = _state(NO_FOLD)
    for j in ("a", "b"):
        st.place(heavy(j), {})
    (place,) = st.decide(heavy("c"), {})
    assert place.plan.case == Case.COLOCATED


def test_founding_saving_prices_the_group_member_by_member():
    st = _state()
    for j in ("a", "b"):
        st.place(heavy(j), {})
    place, *movers = st.decide(heavy("c"), {})
    trio = movers[-1].moves[0].plan.group
    jobs = {j.job_id: j for j in (heavy("a"), heavy("b"), heavy("c"))}
    # Every member as long as the others: all iterations at the trio's period, then the last one alone.
    members = [(jobs[j], 100, 7.0, 12.0) for j in ("a", "b", "c")]
    full = founding_saving(trio, members, CLUSTER, st.intra, TERMS)
    assert full == pytest.approx(300 * 7.0 - 100 * group_cost_per_period(trio, CLUSTER))
    assert place.plan.case == Case.PAIRED


def test_the_simulated_trio_costs_less_than_three_colocated_and_meets_every_slo():
    jobs = [heavy("a"), heavy("b", 500.0), heavy("c", 1_000.0, 150_000.0)]
    sim = Simulation(jobs, CLUSTER, SHIPPED)
    res = sim.run()
    alone = Simulation(jobs, CLUSTER, NO_FOLD).run()
    assert res.placements == {"colocated": 2, "paired": 1} and alone.placements == {"colocated": 3}
    assert res.slo_attainment == alone.slo_attainment == 1.0 and res.migrations["count"] >= 2
    assert res.cost_usd < 0.95 * alone.cost_usd
    assert sim.ledger.nodes == {"rollout": 0, "train": 0} and sim.state.colocated == {}


def test_with_folding_an_arrival_placed_alone_founds_its_group_with_a_colocated_job():
    # x co-located (train-heavy, nobody to share with); y, a rollout-heavy 16:8 job whose state
    # fits no single training node (so never co-located), founds a group of its own whose bubbles
    # fit x: with folding it pulls x in at once.
    x = make_job("x", rollout=50.0, train=300.0, duration=200_000.0, slo=2.0)
    y = make_job("y", rollout=300.0, train=50.0, rollout_gpus=16, duration=200_000.0, slo=2.0,
                 host_rollout=1500.0, host_train=1000.0)
    for cfg, cases in ((SHIPPED, ["paired"]), (NO_FOLD, ["isolated"])):
        st = _state(cfg)
        st.place(x, {})
        assert st.group_of["x"] in st.colocated
        got = st.decide(y, {})
        assert [r.plan.case for r in got[:1]] == cases and len(got) == (2 if cases == ["paired"] else 1)
