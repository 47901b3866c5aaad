"""Study section: why arrivals get a group of their own, on a tiny config."""

from __future__ import annotations

from rollmux.core.spec import default_cluster
from rollmux.study import placements_why
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir

TINY = StudyConfig(small_jobs=4, instances=1, group_sizes=(2,), philly_jobs=12, philly_days=1.0, is_quick=True)


def test_every_isolated_placement_has_one_reason_and_the_table_shows_them():
    data = placements_why.run(TINY, default_cluster(), find_traces_dir(None), serial_map)
    runs = data["runs"]
    assert {(r["trace"], r["row"]) for r in runs} == {
        (f"philly {m}", label) for m in ("paper", "catalog") for label, _, _ in placements_why.ROWS}
    for r in runs:
        assert r["jobs"] == 12 and 0 <= r["isolated"] <= 12 - r["colocated"]
        assert sum(r["placements"].values()) == r["isolated"]
        if r["config"].startswith("groups"):  # no co-located jobs: the first arrival found no group
            assert r["colocated"] == 0 and r["placements"]["no_groups"] >= 1
    md = placements_why.render(data)
    assert "| philly catalog | median rollout: `groups (admission.quantile=0.5)` | 12 | 0 |" in md
    assert "no_groups" in md and "unplanned" not in md  # reasons never seen are left out
    assert "rollmux/study/placements_why.py" in md
