"""`rollmux simulate --colocate` end to end on a small Philly-driven trace (core/placement/options/colocated.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.workload import find_traces_dir

runner = CliRunner()
# Regrouping alone: no pairing (core/repair/pairing.py), at the margin the mode had without it.
ALONE = ("--no-colo-pair", "--colo-margin", "0.75", "--no-colo-fold")  # co-located jobs alone, as before folding


@pytest.fixture(scope="module")
def catalog_trace(tmp_path_factory):
    """A 30-job, 3-day catalog trace from real Philly arrivals."""
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    res = runner.invoke(app, ["workload", "philly", "--vc", "b436b2", "--jobs", "30", "--days", "3",
                              "--mode", "catalog", "--seed", "3", "-o", str(path),
                              "--traces", str(find_traces_dir())])
    assert res.exit_code == 0, res.output
    return path


def _run(trace, tmp_path, *flags):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--policy", "rollmux", "--json", str(out), *flags])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())["policies"]["rollmux"], res.output


def test_colocate_counts_its_placements_and_keeps_the_why_sum(catalog_trace, tmp_path):
    doc, _ = _run(catalog_trace, tmp_path, "--colocate")
    assert doc["placements"]["colocated"] > 0 and doc["slo_attainment"] == 1.0
    assert sum(doc["placements"].values()) == pytest.approx(1.0)
    assert doc["isolated_placements"] == sum(doc["placements_why"].values())
    assert doc["isolated_placements"] == round(30 * doc["placements"]["isolated"])
    off, _ = _run(catalog_trace, tmp_path, "--no-colocate")
    assert "colocated" not in off["placements"] and off["cost_usd"] > doc["cost_usd"]


@pytest.mark.parametrize("speed", ["0", "-1", "nan"])
def test_a_bad_colo_speed_is_one_line_exit_2(catalog_trace, speed):
    res = runner.invoke(app, ["simulate", "--jobs", str(catalog_trace), "--colocate", "--colo-speed", speed])
    assert res.exit_code == 2
    assert "--colo-speed" in res.output and "Traceback" not in res.output


def test_colo_regroup_moves_colocated_jobs_into_groups(catalog_trace, tmp_path):
    # (Without narrowed co-location, which would leave this trace few groups to move into.)
    on, _ = _run(catalog_trace, tmp_path, "--no-colo-narrow", *ALONE)  # (on by default)
    stay, _ = _run(catalog_trace, tmp_path, "--no-colo-narrow", "--no-colo-regroup", *ALONE)
    # On this trace the arrivals land alike either way; with the flag co-located jobs then move
    # into groups (migrations), which costs less; without it they stay where they began.
    assert stay["placements"] == on["placements"] and stay["slo_attainment"] == on["slo_attainment"] == 1.0
    assert on["migrations"]["count"] > stay["migrations"]["count"]
    assert on["cost_usd"] < stay["cost_usd"]
