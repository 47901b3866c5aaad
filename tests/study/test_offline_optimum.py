"""Offline optimum: validity rule, cheapest group per subset, exact DP, sampler, bound, CLI body."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.config import SchedulerConfig
from rollmux.core.group import Group, Member, isolated_group, residency_ok
from rollmux.core.placement import Case, ClusterView, PlacementPlan, validate_plan
from rollmux.core.trace_io import dump_jobs
from rollmux.errors import InputError
from rollmux.study.offline_optimum import (
    busy_time_bound_per_hour,
    cheapest_group,
    group_valid,
    optimal_partition,
    rollmux_static_cost,
)
from rollmux.study.offline_optimum_cli import optimal_command
from rollmux.workload import paper_jobs
from factories import make_cluster, make_job

CLUSTER = make_cluster()
PAPER = SchedulerConfig.profile("paper")  # the RollMux configuration the optimum is measured against
CFG = PAPER.intra_for(CLUSTER)            # its planner view: the optimum's validity rule


def paper(max_group_size: int) -> SchedulerConfig:
    """The `paper` profile at `max_group_size`."""
    return PAPER.with_overrides({"placement.max_group_size": max_group_size})

FAST = settings(max_examples=20, deadline=None)
PROFILES = ["balanced", "rollout-heavy", "train-heavy", "mixed"]


@st.composite
def paper_sets(draw, lo: int = 2, hi: int = 7) -> list:
    """Paper-profile jobs (one rollout node each) with a fixed or U(1,2) SLO."""
    return paper_jobs(draw(st.integers(lo, hi)), profile=draw(st.sampled_from(PROFILES)),
                      slo=draw(st.sampled_from([1.2, 1.5, 2.0, 3.0, None])),
                      seed=draw(st.integers(0, 10_000)))


@st.composite
def factory_sets(draw, lo: int = 2, hi: int = 6, max_k: int = 2) -> list:
    """Deterministic-ish factory jobs needing 1..max_k rollout nodes and 1..2 training nodes."""
    jobs = []
    for i in range(draw(st.integers(lo, hi))):
        rollout = draw(st.integers(20, 300).map(float))
        jobs.append(make_job(
            f"f{i}", rollout=rollout, rollout_max=rollout * draw(st.sampled_from([1.0, 1.2])),
            sigma=0.05, train=draw(st.integers(20, 300).map(float)),
            sync=draw(st.integers(0, 15).map(float)), slo=draw(st.sampled_from([1.3, 2.0, 3.0])),
            rollout_gpus=8 * draw(st.integers(1, max_k)), train_gpus=draw(st.sampled_from([8, 8, 16])),
            tail_frac=draw(st.sampled_from([0.0, 0.2])),
            host_rollout=draw(st.sampled_from([50.0, 700.0])), host_train=draw(st.sampled_from([100.0, 900.0]))))
    return jobs


job_sets = st.one_of(paper_sets(), factory_sets())


def _check_placement_invariants(group: Group, mgs: int) -> None:
    """validate_plan on the group as if each member had just joined the others (I1-I5, I7)."""
    for m in group.members:
        others = tuple(x for x in group.members if x is not m)
        old = Group(group.group_id, group.n_rollout, group.n_train, others)
        view = ClusterView(CLUSTER, (old,) if others else (), None, None, mgs, group.group_id + 1)
        if others:
            plan = PlacementPlan(m.job_id, Case.DIRECT, group, 0, 0, 0.0)
        else:
            plan = PlacementPlan(m.job_id, Case.ISOLATED, group, group.n_rollout, group.n_train,
                                 group.cost_per_hour(CLUSTER))
        validate_plan(plan, m.job, view)


def _brute_force_partition_cost(jobs, mgs: int) -> float:
    """Min over every set partition of the sum of cheapest_group costs (inf if a block is invalid)."""
    memo: dict[frozenset, float] = {}

    def cost(block) -> float:
        key = frozenset(j.job_id for j in block)
        if key not in memo:
            g = cheapest_group(block, CLUSTER, CFG, mgs)
            memo[key] = math.inf if g is None else g.cost_per_hour(CLUSTER)
        return memo[key]

    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for p in partitions(rest):
            for i in range(len(p)):
                yield p[:i] + [[first] + p[i]] + p[i + 1:]
            yield [[first]] + p

    return min(sum(cost(b) for b in p) for p in partitions(list(jobs)))


# -- the optimum against its references ------------------------------------------------------------

@FAST
@given(job_sets)
def test_optimum_is_at_most_rollmux_static_cost(jobs):
    opt = optimal_partition(jobs, CLUSTER, paper(5))
    rm, _ = rollmux_static_cost(jobs, CLUSTER, paper(5))
    assert opt.exact
    assert opt.cost_per_hour <= rm


@FAST
@given(job_sets)
def test_optimum_is_at_least_the_busy_time_bound(jobs):
    opt = optimal_partition(jobs, CLUSTER, paper(5))
    assert opt.cost_per_hour >= busy_time_bound_per_hour(jobs, CLUSTER) - 1e-6


@FAST
@given(job_sets, st.integers(2, 5))
def test_every_optimal_group_is_valid_and_passes_placement_invariants(jobs, mgs):
    opt = optimal_partition(jobs, CLUSTER, paper(mgs))
    ids = sorted(jid for g in opt.groups for jid in g.job_ids())
    assert ids == sorted(j.job_id for j in jobs)
    assert opt.cost_per_hour == pytest.approx(sum(g.cost_per_hour(CLUSTER) for g in opt.groups))
    for g in opt.groups:
        assert g.size <= mgs
        assert group_valid(g, CLUSTER, CFG, mgs)
        assert residency_ok(g, CLUSTER)
        _check_placement_invariants(g, mgs)


@FAST
@given(job_sets)
def test_every_rollmux_group_passes_the_validity_rule(jobs):
    _, groups = rollmux_static_cost(jobs, CLUSTER, paper(5))
    for g in groups:
        assert group_valid(g, CLUSTER, CFG, 5)
        best = cheapest_group([m.job for m in g.members], CLUSTER, CFG, 5)
        assert best is not None and best.cost_per_hour(CLUSTER) <= g.cost_per_hour(CLUSTER) + 1e-9


@settings(max_examples=15, deadline=None)
@given(st.one_of(paper_sets(2, 6), factory_sets(2, 6)), st.integers(2, 4))
def test_exact_dp_equals_brute_force_over_set_partitions(jobs, mgs):
    opt = optimal_partition(jobs, CLUSTER, paper(mgs))
    assert opt.cost_per_hour == pytest.approx(_brute_force_partition_cost(jobs, mgs))


@settings(max_examples=15, deadline=None)
@given(factory_sets(2, 3, max_k=2))
def test_cheapest_group_matches_search_over_all_pin_assignments(jobs):
    """Symmetry breaking loses nothing: the fewest rollout nodes over every (non-canonical)
    pin assignment that passes group_valid is what cheapest_group finds."""
    ks = [CLUSTER.pools.rollout.nodes_for(j.rollout_gpus) for j in jobs]
    kts = [CLUSTER.pools.train.nodes_for(j.train_gpus) for j in jobs]
    expected = None
    for n in range(max(ks), sum(ks) + 1):
        for pins in itertools.product(*(itertools.combinations(range(n), k) for k in ks)):
            g = Group(0, n, max(kts), tuple(Member(j, p, tuple(range(kt)))
                                            for j, p, kt in zip(jobs, pins, kts)))
            if group_valid(g, CLUSTER, CFG, 5):
                expected = n
                break
        if expected is not None:
            break
    got = cheapest_group(jobs, CLUSTER, CFG, 5)
    assert (got.n_rollout if got is not None else None) == expected
    if got is not None:
        assert group_valid(got, CLUSTER, CFG, 5)


@pytest.mark.parametrize("seed", range(4))
def test_member_order_is_searched_above_best_order_max(seed):
    """Above cfg.best_order_max plan_group keeps the given order; the optimum tries them all."""
    config = paper(5).with_overrides({"intra_group.best_order_max": 2})
    cfg = config.intra_for(CLUSTER)
    jobs = paper_jobs(6, profile="rollout-heavy", slo=3.0, seed=seed)
    opt = optimal_partition(jobs, CLUSTER, config)
    rm, groups = rollmux_static_cost(jobs, CLUSTER, config)
    assert all(group_valid(g, CLUSTER, cfg, 5) for g in opt.groups + groups)
    assert opt.cost_per_hour <= rm


# -- small cases ------------------------------------------------------------------------------------

def test_single_job_optimum_is_its_isolated_group_cost():
    job = make_job("solo", rollout_gpus=24, train_gpus=16, slo=1.0, sigma=0.2, rollout_max=150.0)
    opt = optimal_partition([job], CLUSTER, paper(5))
    assert opt.exact and len(opt.groups) == 1
    assert opt.cost_per_hour == pytest.approx(isolated_group(0, job, CLUSTER).cost_per_hour(CLUSTER))
    assert (opt.groups[0].n_rollout, opt.groups[0].n_train) == (3, 2)


def test_complementary_jobs_share_one_group():
    a = make_job("rollout-heavy", rollout=200.0, train=20.0, slo=2.0)
    b = make_job("train-heavy", rollout=20.0, train=200.0, slo=2.0)
    opt = optimal_partition([a, b], CLUSTER, paper(5))
    assert [sorted(g.job_ids()) for g in opt.groups] == [["rollout-heavy", "train-heavy"]]
    assert (opt.groups[0].n_rollout, opt.groups[0].n_train) == (1, 1)
    assert opt.cost_per_hour == pytest.approx(8 * 1.0 + 8 * 2.85)


def test_jobs_whose_slos_forbid_sharing_stay_apart():
    a = make_job("a", rollout=100.0, train=100.0, slo=1.0)
    b = make_job("b", rollout=100.0, train=100.0, slo=1.0)
    assert cheapest_group([a, b], CLUSTER, CFG, 5) is None
    opt = optimal_partition([a, b], CLUSTER, paper(5))
    assert sorted(g.job_ids() for g in opt.groups) == [("a",), ("b",)]


def test_group_size_limit_splits_otherwise_shareable_jobs():
    jobs = [make_job(f"j{i}", rollout=20.0, train=20.0, slo=3.0) for i in range(3)]
    assert len(optimal_partition(jobs, CLUSTER, paper(3)).groups) == 1
    opt = optimal_partition(jobs, CLUSTER, paper(2))
    assert sorted(g.size for g in opt.groups) == [1, 2]


def test_rollout_scaling_adds_nodes_only_when_one_node_breaks_the_slo():
    # Both rollouts on one node would take 2 x 150 s > the budget; two nodes fit.
    a = make_job("a", rollout=150.0, train=30.0, slo=1.5)
    b = make_job("b", rollout=150.0, train=30.0, slo=1.5)
    g = cheapest_group([a, b], CLUSTER, CFG, 5)
    assert g is not None and (g.n_rollout, g.n_train) == (2, 1)


def test_group_valid_rejects_pins_rollmux_never_makes():
    a, b = make_job("a", rollout=20.0, train=20.0, slo=3.0), make_job("b", rollout=20.0, train=20.0, slo=3.0)
    ok = Group(0, 1, 1, (Member(a, (0,), (0,)), Member(b, (0,), (0,))))
    assert group_valid(ok, CLUSTER, CFG, 5)
    assert not group_valid(ok, CLUSTER, CFG, 1)                                                   # size
    assert not group_valid(Group(0, 1, 2, ok.members), CLUSTER, CFG, 5)                           # spare train node
    assert not group_valid(Group(0, 1, 2, (ok.members[0], Member(b, (0,), (1,)))), CLUSTER, CFG, 5)  # not first
    assert not group_valid(Group(0, 1, 1, (ok.members[0], Member(b, (1,), (0,)))), CLUSTER, CFG, 5)  # no node 1
    heavy = make_job("h", rollout=20.0, train=20.0, slo=3.0, host_train=1500.0)
    assert not group_valid(Group(0, 1, 1, (Member(heavy, (0,), (0,)), ok.members[1],
                                           Member(heavy.model_copy(update={"job_id": "h2"}), (0,), (0,)))),
                           CLUSTER, CFG, 5)                                                        # residency


def test_busy_time_bound_per_hour_matches_its_formula():
    job = make_job("j", rollout=100.0, train=50.0, sync=10.0, slo=2.0, rollout_gpus=16, train_gpus=8)
    busy = 16 * 100.0 * 1.0 + 8 * 50.0 * 2.85   # GPU-seconds x $/GPU-hour per iteration
    assert busy_time_bound_per_hour([job], CLUSTER) == pytest.approx(busy / (2.0 * 160.0))


# -- the sampler ------------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(job_sets, st.integers(0, 1000))
def test_sampler_returns_a_valid_partition_never_below_the_exact_optimum(jobs, seed):
    exact = optimal_partition(jobs, CLUSTER, paper(5))
    sampled = optimal_partition(jobs, CLUSTER, paper(5), exact_limit=0,
                                rng=np.random.default_rng(seed), samples=4)
    assert not sampled.exact
    assert sorted(j for g in sampled.groups for j in g.job_ids()) == sorted(j.job_id for j in jobs)
    assert all(group_valid(g, CLUSTER, CFG, 5) for g in sampled.groups)
    assert sampled.cost_per_hour >= exact.cost_per_hour - 1e-6
    assert sampled.cost_per_hour <= rollmux_static_cost(jobs, CLUSTER, paper(5))[0] + 1e-6


def test_sampler_is_reproducible_for_a_seed():
    jobs = paper_jobs(14, slo=2.0, seed=3)
    runs = [optimal_partition(jobs, CLUSTER, paper(5), rng=np.random.default_rng(7), samples=4)
            for _ in range(2)]
    assert runs[0].cost_per_hour == runs[1].cost_per_hour
    assert [g.job_ids() for g in runs[0].groups] == [g.job_ids() for g in runs[1].groups]


# -- the CLI body -----------------------------------------------------------------------------------

def test_cli_function_writes_exactly_the_documented_keys(tmp_path):
    jobs = paper_jobs(6, slo=2.0, seed=1)
    trace, out = tmp_path / "jobs.jsonl", tmp_path / "opt.json"
    dump_jobs(jobs, trace)
    doc = optimal_command(trace, None, out, 5)
    written = json.loads(out.read_text())
    assert written == doc
    assert set(doc) == {"optimal_cost_per_hour", "rollmux_cost_per_hour", "busy_time_bound_per_hour",
                        "exact", "groups"}
    assert doc["exact"] is True
    assert sorted(j for g in doc["groups"] for j in g) == sorted(j.job_id for j in jobs)
    assert doc["busy_time_bound_per_hour"] <= doc["optimal_cost_per_hour"] <= doc["rollmux_cost_per_hour"]


def test_cli_function_raises_input_error_on_a_bad_trace(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"job_id": "x"}\n')
    with pytest.raises(InputError):
        optimal_command(bad, None, None, 5)
    with pytest.raises(InputError):
        optimal_command(tmp_path / "missing.jsonl", None, None, 5)


def test_cli_function_rejects_a_bad_group_size_and_unplaceable_jobs(tmp_path):
    trace = tmp_path / "jobs.jsonl"
    dump_jobs([make_job("big", host_train=5000.0)], trace)
    with pytest.raises(InputError, match="never be placed"):
        optimal_command(trace, None, None, 5)
    dump_jobs([make_job("ok")], trace)
    with pytest.raises(InputError, match="max-group-size"):
        optimal_command(trace, None, None, 0)
