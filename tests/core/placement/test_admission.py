"""SLO admission by the mean (core/placement/admission.py, on core/period_sample.py's sample) against the
worst case (IntraConfig.plan)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from factories import intra, make_cluster, make_group, make_job, make_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core import period_sample
from rollmux.core.config import IntraConfig
from rollmux.core.intra_group import (
    _without_migration,
    group_period_stats,
    group_planning_times,
    period,
    plan_group,
    planning_times,
    t_cycle,
    t_load,
)
from rollmux.core.period_sample import PeriodStats, rollout_sample
from rollmux.core.placement import Case
from rollmux.core.placement.admission import admits, group_fits
from rollmux.core.placement.index import IndexedGroups
from rollmux.study.placement_bench import indexed_view

CLUSTER = make_cluster()
MEAN, WORST = intra(plan="mean"), intra(plan="worst")


def _heavy_tailed(job_id: str, slo: float):
    # Median 100 s, capped at 200 s: the worst case plans twice the typical rollout.
    return make_job(job_id, rollout=100.0, rollout_max=200.0, sigma=0.2, train=50.0, sync=5.0, slo=slo)


def _place_pair(cfg: IntraConfig, slo: float):
    policy = make_policy(cfg)
    groups = IndexedGroups(cfg)
    for j in (_heavy_tailed("a", slo), _heavy_tailed("b", slo)):
        plan = policy.place(j, indexed_view(groups, CLUSTER))
        groups[plan.group.group_id] = plan.group
    return plan


def test_mean_admits_a_pair_the_worst_case_refuses_when_the_mean_fits():
    # Budget ~1.5 x 158 s = 237 s: two mean rollouts (~2 x 102 s) fit, two capped ones (400 s) do not.
    assert _place_pair(WORST, 1.5).case is Case.ISOLATED
    plan = _place_pair(MEAN, 1.5)
    assert plan.case is Case.DIRECT and len(plan.group.members) == 2
    assert plan.group.shape.period_s < 237.0


def test_mean_refuses_when_the_mean_does_not_fit():
    # Budget ~1.05 x 158 s = 166 s < the pair's mean rollout-node load (~208 s).
    plan = _place_pair(MEAN, 1.05)
    assert plan.case is Case.ISOLATED
    assert plan.why is not None and plan.why.groups == 1 and plan.why.reason.value.endswith("_slo")


def test_same_inputs_same_decision():
    first = _place_pair(MEAN, 1.5)
    period_sample._STATS.clear()
    period_sample._SAMPLES.clear()  # recomputed from the seeds, not read back from a cache
    again = _place_pair(MEAN, 1.5)
    assert first == again and first.group.shape == again.group.shape


def test_the_sample_is_the_declared_distribution_seeded_by_job_id():
    job = make_job("x", rollout=100.0, rollout_max=150.0, sigma=0.3)
    r, mean = rollout_sample(job, 32, 16)
    assert r.shape == (16, 32) and r.max() <= 150.0 and abs(mean - r.mean()) < 1e-9
    assert abs(np.median(r) - 100.0) < 15.0
    other = rollout_sample(make_job("y", rollout=100.0, rollout_max=150.0, sigma=0.3), 32, 16)[0]
    assert not np.array_equal(r, other)  # independent across jobs


def test_confidence_term_shrinks_with_remaining_iterations_and_binds():
    s = PeriodStats(mean=100.0, var=4.0, chains=32, length=16)
    assert s.upper(1, 3.09) > s.upper(100, 3.09) > s.upper(10_000, 3.09) > 100.0
    assert PeriodStats(100.0, 0.0, 32, 16).upper(1, 3.09) == 100.0
    budget = s.upper(50, 3.09)
    assert admits(s, [budget], [50], 3.09) and not admits(s, [budget], [10], 3.09)


def test_a_member_near_its_end_is_held_to_the_per_iteration_spread():
    # The same pair, one member with one iteration left and its budget spent down to just
    # above the sampled mean: its mean over one iteration is not confident, so it refuses.
    g = plan_group(make_group([(_heavy_tailed("a", 1.5), (0,)), (_heavy_tailed("b", 1.5), (0,))], 1), MEAN)
    st_ = group_period_stats(g.members, 1, 1, MEAN)
    a = g.members[0].job
    far = {"a": (0, 0.0)}
    spent = a.slo * a.solo_iter_s * a.iterations - 2 * (st_.mean + 1e-3)  # budget = mean + 1 ms
    near = {"a": (a.iterations - 1, spent)}
    assert group_fits(g, far, MEAN)
    assert not group_fits(g, near, MEAN)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 4), nr=st.integers(1, 3), seed=st.integers(0, 10_000), tail=st.booleans(),
       elastic=st.booleans())
def test_the_sampled_mean_is_at_least_the_closed_form_bound_of_the_sample_means(n, nr, seed, tail, elastic):
    """What keeps the index sound in mean mode (core/placement/index.py uses these bounds), elastic
    rollout factors (core/elastic.py) included."""
    rng = np.random.default_rng(seed)
    pairs = [(make_job(f"j{i}", rollout=float(rng.uniform(20, 200)), rollout_max=float(rng.uniform(200, 400)),
                       sigma=float(rng.uniform(0, 0.5)), train=float(rng.uniform(20, 200)),
                       tail_frac=0.3 if tail else 0.0), (int(rng.integers(nr)),)) for i in range(n)]
    g = make_group(pairs, nr)
    if elastic:
        g = dataclasses.replace(g, members=tuple(dataclasses.replace(m, rollout_factor=float(rng.uniform(0.5, 2.0)))
                                                 for m in g.members))
    times = group_planning_times(g.members, MEAN)
    bound = max(t_cycle(g.members, times), t_load(g.members, nr, 1, times, MEAN.warm_switch_s))
    assert group_period_stats(g.members, nr, 1, MEAN).mean >= bound * (1 - 1e-9)


def test_worst_mode_plans_exactly_as_before():
    """plan='worst' keeps the planned period: the exact steady-state period at plan_quantile,
    and the mean-only knobs never reach it."""
    g = make_group([(_heavy_tailed("a", 1.5), (0,)), (_heavy_tailed("b", 1.5), (0,))], 1)
    for q in (1.0, 0.9):
        cfg = intra(plan_quantile=q)
        times = [planning_times(m.job, q) for m in g.members]
        assert plan_group(g, cfg).shape.period_s == period(g.members, 1, 1, times, _without_migration(cfg))
    other = dataclasses.replace(WORST, plan_z=0.0, plan_chains=4, plan_length=2)
    assert _place_pair(WORST, 1.5) == _place_pair(other, 1.5)


def test_bad_plan_values_are_refused():
    with pytest.raises(ValueError, match="admission.plan Input should be 'worst' or 'mean'"):
        intra(plan="median")
    with pytest.raises(ValueError, match="admission.quantile applies"):
        intra(plan="mean", plan_quantile=0.9)
