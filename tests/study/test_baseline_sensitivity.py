"""Study section baseline_sensitivity: veRL calibration sensitivity, plain and heterogeneity-aware Gavel+."""

from __future__ import annotations

import pickle

import pytest

from rollmux.core.spec import default_cluster
from rollmux.study import baseline_sensitivity as bs
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir

SMALL = StudyConfig(philly_jobs=12, philly_days=1.0, is_quick=True)


@pytest.fixture(scope="module")
def data():
    return bs.run(SMALL, default_cluster(), find_traces_dir(), serial_map, cap_nodes=4)


def pick(data, mode, policy, speed=1.0, cap=None):
    (r,) = [r for r in data["runs"] if (r["mode"], r["policy"], r["speed"], r["cap"]) == (mode, policy, speed, cap)]
    return r


def test_every_run_of_every_trace_is_there_and_finishes(data):
    assert len(data["runs"]) == len(bs.MODES) * len(bs.runs_of(4))
    assert all(r["finished"] == r["jobs"] == SMALL.philly_jobs for r in data["runs"])


def test_tasks_are_picklable_for_a_distributed_map():
    seen = []

    def recording_map(fn, args, on_done=None):
        seen.append(pickle.dumps((fn, list(args))))
        return serial_map(fn, args[:1]) * len(args)

    bs.run(SMALL, default_cluster(), find_traces_dir(), recording_map, cap_nodes=4)
    assert len(seen) == 1 and len(seen[0]) > 0


@pytest.mark.parametrize("mode", bs.MODES)
def test_verl_cost_falls_as_the_colocated_speed_rises(data, mode):
    costs = [pick(data, mode, "verl", s)["cost_usd"] for s in bs.SPEEDS]
    assert costs[0] > costs[1] > costs[2]


@pytest.mark.parametrize("mode", bs.MODES)
def test_plain_gavel_uncapped_costs_at_least_solo_d(data, mode):
    assert pick(data, mode, "gavel-plain")["cost_usd"] >= pick(data, mode, "solo-d")["cost_usd"] * (1 - 1e-9)


@pytest.mark.parametrize("mode", bs.MODES)
def test_heterogeneity_aware_gavel_is_cheaper_than_plain(data, mode):
    # Calibrated co-location is cheaper than disaggregation for most of these jobs.
    assert pick(data, mode, "gavel-hetero")["colocated_share"] > 0.5
    assert pick(data, mode, "gavel-hetero")["cost_usd"] < pick(data, mode, "gavel-plain")["cost_usd"]


@pytest.mark.parametrize("policy", ["gavel-plain", "gavel-hetero"])
def test_caps_hold_and_time_slice_gavel(data, policy):
    r = pick(data, "catalog", policy, cap=4)
    assert max(r["peak_nodes"].values()) <= 4
    assert r["preemptions"] > 0


def test_render_has_a_table_row_per_run_and_the_findings(data):
    md = bs.render(data)
    rows = [ln for ln in md.splitlines() if ln.startswith("| paper |") or ln.startswith("| catalog |")]
    assert len(rows) == len(data["runs"])
    assert md.startswith("## ") and "What the table shows" in md
    assert "rollmux study --quick" in md
    # Each RollMux row names its configuration.
    assert "| paper | rollmux: `shipped (colocation.speed=0.8)` | x0.8 |" in md
    assert "| catalog | rollmux-groups: `shipped (colocation.enabled=False)` | - |" in md


def _run(mode, policy, cost, speed=1.0, cap=None, colo=0.0):
    return {"mode": mode, "policy": policy, "speed": speed, "cap": cap, "cost_usd": cost, "colocated_share": colo}


def test_findings_name_the_speeds_where_verl_beats_rollmux_and_the_gavel_ties():
    runs = [_run("paper", "solo-d", 100.0), _run("paper", "rollmux-groups", 70.0),
            _run("paper", "verl", 80.0, 0.8), _run("paper", "verl", 65.0, 1.0), _run("paper", "verl", 55.0, 1.2),
            _run("paper", "gavel-plain", 100.0), _run("paper", "gavel-hetero", 64.0, colo=0.9)]
    text = "\n".join(bs.findings({"runs": runs}))
    assert "cheaper than RollMux's groups alone at x1, x1.2" in text
    assert "ties Solo-D (within 0.1%): gavel-plain uncapped" in text
    assert "gavel-hetero uncapped" not in text.split("ties Solo-D")[1]


@pytest.mark.parametrize("mode", bs.MODES)
def test_shipped_rollmux_is_never_dearer_than_groups_alone_or_than_verl_by_much(data, mode):
    # Per job it takes the cheaper of its group answer and co-location (with a margin), so at the
    # calibrated speed it is at most the groups-alone cost, and co-locates where veRL would.
    shipped = pick(data, mode, "rollmux")
    assert shipped["slo"] == 1.0 and shipped["colocated_share"] > 0
    assert shipped["cost_usd"] <= pick(data, mode, "rollmux-groups")["cost_usd"] * (1 + 1e-9)
    assert shipped["cost_usd"] <= pick(data, mode, "verl")["cost_usd"] * 1.25
