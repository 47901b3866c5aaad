"""Co-located pairing (core/placement/options/paired.py, core/repair/pairing.py): an arrival founds a group
with a co-located job."""

from __future__ import annotations

import pytest

from rollmux.core.env import SimEnvironment
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement import Case, build_policy, validate_plan
from rollmux.core.placement.costs import FoldTerms, group_cost_per_period, iteration_cost, plan_added_cost
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.options.paired import least_busy, least_cycle, pair_saving
from rollmux.core.records import Place
from rollmux.core.repair.moves import plan_moves
from rollmux.core.repair.pairing import pair_decision, saving_bound
from rollmux.core.repair.regroup import colocated_saving
from rollmux.core.state import ClusterState
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import Simulation
from factories import BALANCED_COLO, GROUPS, SHIPPED, config, make_cluster, make_job

CLUSTER = make_cluster()
ON = SHIPPED
TERMS = FoldTerms(margin=2.0)
COSTS = {"colo_a": 2.0, "colo_b": 3.0, "alone_a": 4.0, "alone_b": 5.0, "pair": 4.5}


def _policy_plan(st: ClusterState, job, progress):
    """The policy's validated plan for `job`, before any pairing (as a move would be placed)."""
    (place,) = st.decide(job, progress, arrival=False)
    return place.plan


def balanced(job_id: str, arrival: float = 0.0, duration: float = 100_000.0, slo: float = 1.5, **kw):
    """An 8:8 job whose phases are as long as each other: co-located alone, two of them
    interleave in one group (one rolls out while the other trains)."""
    return make_job(job_id, rollout=150.0, train=150.0, arrival=arrival, duration=duration, slo=slo,
                    colo=BALANCED_COLO, **kw)


def _state(colo_pair: bool = True) -> ClusterState:
    return ClusterState(SimEnvironment(), CLUSTER, build_policy(ON, CLUSTER), config(ON, colo_pair=colo_pair))


def test_pair_saving_shares_the_common_iterations():
    a, b = make_job("a"), make_job("b", duration=50_000.0)
    n = b.iterations
    assert pair_saving(a, b, n, COSTS) == pytest.approx(n * (2.0 + 3.0 - 4.5))


def test_pair_saving_charges_whoever_outlives_the_other_alone():
    a, b = make_job("a"), make_job("b", duration=50_000.0)
    left_a = b.iterations + 100  # a runs 100 iterations after b has left: alone, at 4 instead of 2
    assert pair_saving(a, b, left_a, COSTS) == pytest.approx(b.iterations * 0.5 - 100 * 2.0)
    left_a = b.iterations - 100  # b runs 100 alone: at 5 instead of 3
    assert pair_saving(a, b, left_a, COSTS) == pytest.approx(left_a * 0.5 - 100 * 2.0)


def test_pair_saving_does_not_price_a_fold_for_a_job_that_cannot_run_colocated():
    a, b = make_job("a", duration=50_000.0), make_job("b")
    costs = {**COSTS, "move_a": 1.0, "move_b": 1.0}
    left_a = a.iterations  # b runs its last iterations alone: with folding, back co-located at 3
    folding = pair_saving(a, b, left_a, costs, TERMS)
    assert folding > pair_saving(a, b, left_a, costs)
    fixed = make_job("b", cannot=["colocate"])
    assert pair_saving(a, fixed, left_a, costs, TERMS) == pytest.approx(pair_saving(a, fixed, left_a, costs))


def test_an_arrival_founds_a_group_with_a_colocated_job_that_moves_in():
    st = _state()
    a, b = balanced("a"), balanced("b")
    st.place(a, {})
    colo_a = next(iter(st.colocated))
    plan_b = _policy_plan(st, b, {"a": (3, 1000.0)})
    assert plan_b.case == Case.COLOCATED  # alone it would run co-located too
    pairing = st.pair(b, plan_b, {"a": (3, 1000.0)})
    assert pairing is not None and pairing.saving_usd > 0
    assert pairing.plan.case == Case.PAIRED and pairing.plan.group.job_ids() == ("b",)
    assert pairing.plan.group.n_rollout == pairing.plan.group.n_train == 1
    (regroup,) = pairing.regroups
    (move,) = regroup.moves
    assert regroup.group_id == colo_a and regroup.dissolve
    assert move.job_id == "a" and move.plan.group.group_id == pairing.plan.group.group_id
    assert set(move.plan.group.job_ids()) == {"a", "b"} and move.migration_s > 0


def test_no_pairing_with_a_colocated_job_that_cannot_be_moved():
    st = _state()  # (the test above: b founds a group with a)
    st.place(balanced("a", cannot=["move"]), {})
    b = balanced("b")
    plan_b = _policy_plan(st, b, {"a": (3, 1000.0)})
    assert plan_b.case == Case.COLOCATED and st.pair(b, plan_b, {"a": (3, 1000.0)}) is None


def test_place_applies_the_pairing_and_reserves_the_movers_slot():
    st = _state()
    st.place(balanced("a"), {})
    plan = st.place(balanced("b"), {"a": (3, 1000.0)})
    assert plan.case == Case.PAIRED and st.cases == {"colocated": 1, "paired": 1}
    assert "a" in st.arriving and st.arriving["a"].plan.group.group_id == plan.group.group_id
    assert st.ledger.nodes == {"rollout": 1, "train": 2}  # a's own node stays until it has moved
    assert sum(st.why.to_json()["placements"].values()) == 0  # a pairing is no isolated placement


def test_without_colo_pair_the_arrival_runs_colocated():
    st = _state(colo_pair=False)
    st.place(balanced("a"), {})
    assert st.place(balanced("b"), {"a": (3, 1000.0)}).case == Case.COLOCATED
    assert ON.colocation.pair is True and GROUPS.colocation.pair is False


def test_no_pairing_with_a_colocated_job_that_is_about_to_leave():
    st = _state()
    a = balanced("a", duration=3_000.0)  # about ten iterations
    st.place(a, {})
    b = balanced("b")
    progress = {"a": (a.iterations - 1, 2_900.0)}
    assert st.pair(b, _policy_plan(st, b, progress), progress) is None


def test_the_paired_plan_passes_the_written_invariants():
    st = _state()
    st.place(balanced("a"), {})
    b = balanced("b")
    pairing = st.pair(b, _policy_plan(st, b, {}), {})
    validate_plan(pairing.plan, b, st.view({}))  # a new group, provisioned by the plan


def test_the_simulated_pair_costs_less_and_meets_both_slos():
    jobs = [balanced("a"), balanced("b", arrival=1000.0)]
    sim = Simulation(jobs, CLUSTER, ON)
    res = sim.run()
    alone = run_policy("rollmux", jobs, CLUSTER, config(ON, colo_pair=False))
    assert res.placements == {"colocated": 1, "paired": 1} and alone.placements == {"colocated": 2}
    # The pairing's move, and the fold of whoever outlives the other (core/repair/fold.py).
    assert res.migrations["count"] == 2 and sim.state.folded == 1 and res.migrations["cost_usd"] > 0
    assert res.slo_attainment == alone.slo_attainment == 1.0
    assert res.cost_usd < 0.9 * alone.cost_usd  # (about 20% less: one H20 node in place of an H800 one)
    assert sim.ledger.nodes == {"rollout": 0, "train": 0} and sim.state.colocated == {}


def test_a_colocated_mover_is_charged_alone_once_the_groups_others_have_left():
    st = _state(colo_pair=False)
    a = balanced("a")
    st.place(a, {})
    colo = next(iter(st.colocated.values()))
    short = balanced("s", duration=3_000.0)  # the group's only member leaves after ~10 iterations
    st.apply(Place.of(isolated_plan(short, st.view({}), st.policy.cfg), True))  # (a group of its own)
    view = st.view({})
    (move,), _ = plan_moves(colo.members, colo.group_id, view, st.policy, {"a": 100.0}, 0.0)
    saving = colocated_saving(colo, move.plan, view, st.policy.cfg)
    shared = short.iterations
    alone = isolated_plan(a, view, st.policy.cfg)
    per_iter = colo.cost_per_hour(CLUSTER) * colo.shape.period_s / 3600
    expected = (a.iterations * per_iter - shared * plan_added_cost(move.plan, view)
                - (a.iterations - shared) * alone.delta_cost_per_hour * alone.group.shape.period_s / 3600)
    assert saving == pytest.approx(expected) and saving < a.iterations * per_iter - a.iterations * plan_added_cost(
        move.plan, view)


@pytest.mark.parametrize("rollout, train", [(150.0, 150.0), (400.0, 100.0), (60.0, 300.0)])
def test_the_saving_bound_is_never_below_the_planned_saving(rollout, train):
    st = _state()
    a = make_job("a", rollout=150.0, train=150.0, slo=1.8)
    st.place(a, {})
    colo = next(iter(st.colocated.values()))
    b = make_job("b", rollout=rollout, train=train, slo=1.8)
    plan = _policy_plan(st, b, {})
    cfg, view = st.policy.cfg, st.view({})
    own = isolated_plan(b, view, cfg)
    least = (job_planning_times(b, cfg).train, least_cycle(b, cfg), least_busy(b, cfg, CLUSTER))
    bound = saving_bound(a, a.iterations, group_cost_per_period(colo, CLUSTER), b, least, iteration_cost(plan),
                         own, cfg, CLUSTER, 1.0, 2.0)
    pairing = pair_decision(b, plan, view, [colo], st.policy, 1.0, 2.0)
    assert pairing is None or bound >= pairing.saving_usd - 1e-9
    if rollout == train:
        assert pairing is not None  # (the balanced pair is worth planning, and pays)
