"""`rollmux chaos`: every fault-injection scenario against a live local scheduler (`rollmux serve`
over HTTP, small numbers), and the double-grant check itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.harness.chaos.checks import first_diff, settled_state, without
from rollmux.harness.chaos.command import double_grants, phase_intervals, read_log, run_chaos
from rollmux.harness.chaos.job import PhaseLog

SCENARIOS = ["double release", "forged token", "job killed mid-rollout", "job killed mid-training",
             "service restart mid-phase", "second server on one store", "auth on every route", "hung job",
             "journal append failures", "torn journal", "header flood", "idle member", "poisoned timing",
             "append failure costs one call", "damaged journal repaired", "20 jobs for 5 s", "200 waiting jobs"]
# Their jobs only wait, beat or release by hand, or the scenario works on a store: nobody runs a logged phase.
NO_PHASES = {"200 waiting jobs", "header flood", "append failure costs one call", "damaged journal repaired"}


@pytest.fixture(scope="module")
def report():
    # Shortened for CI: 20 jobs for 5 s, 200 waiting jobs (the CLI defaults: 100 for 60 s, 10,000).
    # Latencies are reported, not judged (`rollmux chaos` judges them): a busy CI machine is no bug.
    return run_chaos(seconds=5, jobs=20, waiting=200, say=lambda line: None, p99_limit_ms=None)


def test_every_scenario_ran(report):
    assert [s["name"] for s in report["scenarios"]] == SCENARIOS
    json.dumps(report)  # the --json output
    for s in report["scenarios"]:
        assert {"name", "passed", "jobs_lost", "double_grants", "errors"} <= set(s)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_passes_without_lost_jobs_or_double_grants(report, name):
    s = next(s for s in report["scenarios"] if s["name"] == name)
    assert not s["errors"], "\n".join(s["errors"])
    assert s["passed"] and s["jobs_lost"] == 0 and s["double_grants"] == 0
    assert name in NO_PHASES or s["phases"] > 0  # the phase logs were read


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
    if "second server on one store" in by:
        assert by["second server on one store"]["exit_status"] == 2
        assert "in use" in by["second server on one store"]["message"]
    if "hung job" in by:
        assert "lease" in by["hung job"]["reason"] and by["hung job"]["lease_s"] == 1.0
    if "journal append failures" in by:
        assert by["journal append failures"]["failed_kinds"] == 8
    if "torn journal" in by:
        torn = by["torn journal"]
        assert f"record {torn['torn_record']}" in torn["message"] and "backup" in torn["repair"]
    if "200 waiting jobs" in by:
        w = by["200 waiting jobs"]
        assert w["outstanding"] + w["granted"] == 200
        assert 0 < w["heartbeat_p50_ms"] <= w["heartbeat_p99_ms"] and 0 < w["status_p50_ms"] <= w["status_p99_ms"]
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


def test_state_checks_name_the_difference():
    status = {"grants": 3, "groups": [{"group_id": 0, "members": ["a", "b"], "rollout_nodes": 1, "train_nodes": 1,
                                       "turn": {}}, {"group_id": 1, "members": ["c"], "rollout_nodes": 1,
                                                     "train_nodes": 1, "turn": {}}],
              "jobs": {j: {"status": "running", "group_id": 0 if j != "c" else 1, "iterations": 1, "held": [],
                           "epoch": 1, "reason": None, "profile": {"measured": {}}} for j in "abc"}}
    state = settled_state(status)
    assert [g["group_id"] for g in without(state, {"c"})["groups"]] == [0] and "c" not in without(state, {"c"})["jobs"]
    other = json.loads(json.dumps(state))
    other["jobs"]["b"]["held"] = ["train"]
    assert first_diff(state, other) == "/jobs/b/held: 0 items != 1 items" and first_diff(state, state) is None


def test_cli_has_chaos_command():
    result = CliRunner().invoke(app, ["chaos", "--help"])
    assert result.exit_code == 0
    for opt in ("--json", "--seconds", "--jobs", "--store", "--waiting"):
        assert opt in result.output
