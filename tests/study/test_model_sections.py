"""Study sections on priced migrations, drift and the shared link, on a tiny config."""

from __future__ import annotations

import pytest

from rollmux.core.spec import default_cluster
from rollmux.study import drift, link, migration
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir

TINY = StudyConfig(small_jobs=4, instances=1, group_sizes=(2,), philly_jobs=12, philly_days=1.0, is_quick=True)


@pytest.fixture(scope="module")
def traces():
    return find_traces_dir(None)


def test_migration_section_scales_the_price_and_reports_every_row(traces):
    data = migration.run(TINY, default_cluster(), traces, serial_map)
    assert len(data["runs"]) == 2 * len(migration.ROWS) * migration.SEEDS
    rows = {(r["mode"], r["row"]): r for r in data["runs"] if r["seed"] == TINY.seed}
    assert set(rows) == {(m, r) for m in ("paper", "catalog") for r in migration.ROWS}
    for mode in ("paper", "catalog"):
        assert rows[(mode, "static")]["migrations"]["count"] == 0
        x1, x4 = rows[(mode, "x1")]["migrations"], rows[(mode, "x4")]["migrations"]
        if x1["count"] and x4["count"]:  # each move of x4 holds four times as long
            assert x4["cost_usd"] / x4["count"] > x1["cost_usd"] / x1["count"]
    md = migration.render(data)
    assert "rollmux/study/migration.py" in md
    # Each RollMux row names its configuration.
    assert "| paper | x4: `shipped (colocation.enabled=False, regroup.migration_scale=4.0)` |" in md
    assert "| catalog | solo-d |" in md


def test_drift_section_drifts_a_share_and_compares_repair(traces):
    data = drift.run(TINY, default_cluster(), traces, serial_map)
    runs = data["runs"]
    assert len(runs) == 2 * (1 + 2 * len(drift.SEVERITIES))
    assert all(r["drifting"] == 0 for r in runs if r["severity"] == "none")
    assert any(r["drifting"] > 0 for r in runs if r["severity"] == "severe")
    assert "| catalog | severe | off | `shipped (colocation.enabled=False, regroup.repair=False)` |" in drift.render(data)


def test_link_section_slows_a_narrow_link(traces):
    data = link.run(TINY, default_cluster(), traces, serial_map)
    by = {(r["mode"], r["row"]): r for r in data["runs"]}
    for mode in ("paper", "catalog"):
        assert by[(mode, "25 Gb/s, topology-aware")]["mean_slowdown"] >= by[(mode, "unlimited")]["mean_slowdown"]
    assert "| paper | 25 Gb/s, flat |" in link.render(data)


def test_weights_are_one_bf16_copy_of_the_training_state():
    from factories import make_job
    (job,) = link.with_weights([make_job("j", host_train=112.0, train_gpus=16)], default_cluster())
    assert job.weights_gb == pytest.approx(112.0 * 2 / 8)
