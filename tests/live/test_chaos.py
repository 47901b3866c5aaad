"""`rollmux chaos`: every fault-injection scenario against a live local scheduler (Ray), and
the double-grant check itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.live.chaos import double_grants, phase_intervals, read_log, run_chaos
from rollmux.live.chaos_job import PhaseLog

SCENARIOS = ["double release", "forged token", "job killed mid-rollout", "job killed mid-training",
             "service restart mid-phase", "20 jobs for 5 s"]


@pytest.fixture(scope="module")
def report():
    # The load scenario is shortened for CI: 20 jobs for 5 s (the CLI default is 100 for 60 s).
    return run_chaos(seconds=5, jobs=20, say=lambda line: None)


def test_every_scenario_ran(report):
    assert [s["name"] for s in report["scenarios"]] == SCENARIOS
    json.dumps(report)  # the --json output


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_passes_without_lost_jobs_or_double_grants(report, name):
    s = next(s for s in report["scenarios"] if s["name"] == name)
    assert not s["errors"], "\n".join(s["errors"])
    assert s["passed"] and s["jobs_lost"] == 0 and s["double_grants"] == 0
    assert s["phases"] > 0  # the phase logs were read


def test_scenario_details(report):
    # What each scenario reports beyond pass/fail (a failed scenario stops early: the test above says why).
    by = {s["name"]: s for s in report["scenarios"] if s["passed"]}
    if "forged token" in by:
        assert by["forged token"]["refused_calls"] == 12
    for name in ("job killed mid-rollout", "job killed mid-training"):
        if name in by:
            assert by[name]["resumed_from"] == 3 and by[name]["detected_after_s"] < 10
    if "service restart mid-phase" in by:
        assert by["service restart mid-phase"]["restarts"] == 5
        assert by["service restart mid-phase"]["recovered_records"] > 0
    load = next(s for s in report["scenarios"] if s["name"] == "20 jobs for 5 s")
    assert load["permits"] > 0 and load["permits_per_s"] > 0
    assert 0 < load["permit_p50_ms"] <= load["permit_p99_ms"]


def _grant(group_id, pool, nodes, phase):
    return {"group_id": group_id, "pool": pool, "nodes": nodes, "phase": phase, "epoch": 1}


def test_double_grant_check_finds_overlaps(tmp_path):
    a, b = PhaseLog(tmp_path, "a"), PhaseLog(tmp_path, "b")
    s = a.start(_grant(0, "rollout", [0, 1], "rollout"), 0, 0.0)
    t = b.start(_grant(0, "rollout", [1], "rollout"), 0, 0.0)  # node 1 while a holds it
    b.end(t)
    a.end(s)
    s = a.start(_grant(0, "train", [0], "train"), 0, 0.0)
    a.end(s)
    t = b.start(_grant(0, "train", [0], "train"), 0, 0.0)     # after a: fine
    b.end(t)
    a.close()
    b.close()
    intervals, unended = phase_intervals(read_log(tmp_path))
    assert len(intervals) == 4 and unended == []
    found = double_grants(intervals)
    assert len(found) == 1 and "rollout node 1" in found[0]


def test_double_grant_check_finds_a_phase_held_twice_and_open_phases(tmp_path):
    log = PhaseLog(tmp_path, "a")
    first = log.start(_grant(0, "rollout", [0], "rollout"), 3, 0.0)
    log.start(_grant(1, "rollout", [0], "rollout"), 4, 0.0)   # granted again, never ended
    log.end(first)
    log.close()
    intervals, unended = phase_intervals(read_log(tmp_path))
    assert [iv["iter"] for iv in unended] == [4]
    found = double_grants(intervals)
    assert len(found) == 1 and "while holding it" in found[0]
    # A phase left open by a killed process ends at the kill: nothing overlaps then.
    kill_at = intervals[1]["start"] + 1e-9
    closed, unended = phase_intervals(read_log(tmp_path), {("a", log.pid): kill_at})
    assert unended == [] and len(double_grants(closed)) == 1


def test_cli_has_chaos_command():
    result = CliRunner().invoke(app, ["chaos", "--help"])
    assert result.exit_code == 0
    for opt in ("--json", "--seconds", "--jobs", "--store"):
        assert opt in result.output
