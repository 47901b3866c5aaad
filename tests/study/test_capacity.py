"""Study section capacity: node caps, queueing delay, JCT and SLO with and without queueing."""

from __future__ import annotations

import pytest

from rollmux.core.spec import default_cluster
from rollmux.sim.metrics import JobOutcome
from rollmux.study import capacity
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir, synthesize_philly

SMALL = StudyConfig(philly_jobs=12, philly_days=1.0, is_quick=True)


def test_queueing_counts_against_the_slo_only_when_asked():
    # 10 iterations of 100 s against a 50 s solo iteration and SLO 2: met on its own,
    # but the 100 s it queued make 110 s per iteration.
    o = JobOutcome("j", 10, start_s=100.0, finish_s=1100.0, solo_s=500.0, slo=2.0, solo_iter_s=50.0,
                   arrival_s=0.0)
    assert o.queued_s == 100.0 and o.jct_s == 1100.0
    assert o.slo_met and not o.slo_met_with_queueing
    never_queued = JobOutcome("k", 10, 0.0, 1000.0, 500.0, 2.0, 50.0, arrival_s=0.0)
    assert never_queued.slo_met_with_queueing and never_queued.jct_s == 1000.0
    legacy = JobOutcome("l", 10, 5.0, 1005.0, 500.0, 2.0, 50.0)  # no arrival recorded
    assert legacy.queued_s == 0.0 and legacy.jct_s == 1000.0 and legacy.slo_met_with_queueing


def test_capped_cluster_caps_both_pools():
    c = capacity.capped(default_cluster(), 41)
    assert c.pools.rollout.max_nodes == 41 and c.pools.train.max_nodes == 41
    assert capacity.capped(c, None).pools.train.max_nodes is None
    assert c.pools.train.price_per_gpu_hour == default_cluster().pools.train.price_per_gpu_hour


def test_a_binding_cap_queues_jobs_and_holds_the_peak():
    jobs = synthesize_philly(find_traces_dir(), "0e4a51", 12, 1.0, "catalog", 0)
    free = capacity.capacity_run("catalog", "solo-d", None, jobs, default_cluster(), 0)
    tight = capacity.capacity_run("catalog", "solo-d", 4, jobs, default_cluster(), 0)
    assert free["queued_share"] == 0.0 and free["slo"] == free["slo_with_queueing"] == 1.0
    assert max(free["peak_nodes"].values()) > 4  # the cap binds
    assert max(tight["peak_nodes"].values()) <= 4 and tight["finished"] == len(jobs)
    assert tight["queued_share"] > 0 and tight["queued_max_h"] > 0
    assert tight["jct_mean_h"] > free["jct_mean_h"]
    # Solo-D never shares nodes: without queueing every job meets its SLO, with it some do not.
    assert tight["slo"] == 1.0 and tight["slo_with_queueing"] < 1.0
    # The same work on the same dedicated nodes costs the same, however long it waited.
    assert tight["cost_usd"] == pytest.approx(free["cost_usd"])


def test_run_and_render_on_a_small_config():
    data = capacity.run(SMALL, default_cluster(), find_traces_dir(), serial_map, cap_nodes=4)
    assert data["days"] == capacity.SPREAD * SMALL.philly_days
    assert data["cap"] == 4 and len(data["runs"]) == len(capacity.MODES) * 2 * len(capacity.POLICIES)
    for r in data["runs"]:
        assert r["finished"] == SMALL.philly_jobs
        assert r["slo_with_queueing"] <= r["slo"]
        if r["cap"] is None:
            assert r["queued_share"] == 0.0
        else:
            assert max(r["peak_nodes"].values()) <= 4
    md = capacity.render(data)
    assert md.startswith("## Fixed capacity: 4 rollout + 4 training nodes")
    assert md.count("\n| catalog | ") == 6 and "rollmux study --quick" in md
    assert md.count("\n| catalog | rollmux: `shipped` |") == 2 and "| rollmux-static: `paper` |" in md
    assert "Uncapped, the busier pool peaks at" in md and "the cap binds for every policy" in md
