"""Study part A (rollmux.study.part_a): Random and Greedy as different policies, the two costs."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.core.spec import default_cluster
from rollmux.study.config import StudyConfig
from rollmux.study.offline_optimum import optimal_partition
from rollmux.study.part_a import (
    PAPER,
    PLACEMENT_SEEDS,
    ROLLMUX_COLUMNS,
    SMALL_POLICIES,
    _small_policy,
    cell_config,
    optimum_run,
    paper_cost_of,
    rate_at_start,
    small_cell,
)
from rollmux.study.report import mean_spread, small_tables
from rollmux.workload import paper_jobs

CLUSTER = default_cluster()
QUICK = StudyConfig.quick()


@pytest.fixture(scope="module")
def cell():
    return small_cell("balanced", None, 5, QUICK, CLUSTER)


def test_random_and_greedy_are_different_policies_with_spreads(cell):
    rand, greedy = cell.total_cost["random"], cell.total_cost["greedy"]
    assert len(rand) == QUICK.instances * PLACEMENT_SEEDS and len(greedy) == QUICK.instances
    assert np.std(rand) > 0.01                      # the placement seed matters
    assert np.std(cell.paper_cost["random"]) > 0.01
    assert abs(np.mean(rand) - np.mean(greedy)) > 0.01
    assert abs(np.mean(cell.paper_cost["random"]) - np.mean(cell.paper_cost["greedy"])) > 0.01


def test_every_policy_has_every_number_except_gavels_paper_cost(cell):
    assert set(cell.total_cost) == set(SMALL_POLICIES) == set(cell.slo_attainment)
    assert set(cell.paper_cost) == set(SMALL_POLICIES) - {"gavel"}
    assert all(v > 0 for runs in cell.total_cost.values() for v in runs)


def test_rollmux_meets_every_slo_and_never_beats_the_optimums_rate(cell):
    # The optimum is exact here and RollMux's groups are candidates for it.
    assert cell.exact
    assert cell.slo_attainment[PAPER] == [1.0]
    assert cell.paper_cost[PAPER][0] >= 1.0 - 1e-9


def test_rollmux_columns_are_named_by_their_configuration():
    assert list(ROLLMUX_COLUMNS) == ["paper", "paper (placement.batch_order=False, placement.prune_saturated=True)"]
    assert SMALL_POLICIES[:2] == tuple(ROLLMUX_COLUMNS)
    assert cell_config(3).describe() == "paper (placement.max_group_size=3)"


def test_the_optimum_replayed_in_the_simulator_has_its_rate_and_meets_every_slo():
    jobs = paper_jobs(6, profile="mixed", slo=None, seed=3)
    opt = optimal_partition(jobs, CLUSTER, cell_config(3))
    res = optimum_run(jobs, CLUSTER, 3, 3, opt.groups)
    assert rate_at_start(res) == pytest.approx(opt.cost_per_hour)
    assert res.slo_attainment == 1.0
    assert res.cost_usd > 0


def test_paper_cost_is_the_start_rate_when_every_slo_holds_and_more_when_one_breaks():
    jobs = paper_jobs(5, profile="balanced", slo=None, seed=0)
    res, groups = _small_policy(PAPER, jobs, CLUSTER, 5, 0)
    assert res.slo_attainment == 1.0
    assert paper_cost_of(res, groups) == pytest.approx(rate_at_start(res))
    assert sum(rate for rate, _ in groups) == pytest.approx(rate_at_start(res))
    res, groups = _small_policy("greedy", jobs, CLUSTER, 5, 0)
    assert res.slo_attainment < 1.0
    assert paper_cost_of(res, groups) > rate_at_start(res) * 1.01


def test_gavel_has_no_groups_to_charge():
    jobs = paper_jobs(4, profile="balanced", slo=None, seed=0)
    assert _small_policy("gavel", jobs, CLUSTER, 2, 0)[1] is None


def test_report_shows_mean_and_spread_and_a_dash_for_missing_numbers(cell):
    assert mean_spread([1.0, 2.0]) == "1.50x ± 0.50"
    assert mean_spread([0.5, 1.0], pct=True) == "75% ± 25"
    assert mean_spread([1.25]) == "1.25x"
    assert mean_spread([]) == "—"
    text = "\n".join(small_tables([cell], 5))
    assert text.count("| workload | SLO |") == 3     # paper's cost, total cost, SLO attainment
    assert "—" in text and "±" in text
