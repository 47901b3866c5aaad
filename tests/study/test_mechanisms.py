"""Study section `mechanisms`: issue 14's switches, each alone and flipped from the default."""

from dataclasses import fields, replace

from rollmux.core.spec import default_cluster
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import SimConfig
from rollmux.study import mechanisms
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir


def _diff(a: SimConfig, b: SimConfig) -> set[str]:
    out = {f.name for f in fields(a) if f.name != "intra" and getattr(a, f.name) != getattr(b, f.name)}
    return out | {f"intra.{f.name}" for f in fields(a.intra) if getattr(a.intra, f.name) != getattr(b.intra, f.name)}


def test_each_only_row_differs_from_all_off_in_its_own_switch():
    rows = mechanisms.rows()
    off = rows["all off (before issue 14)"]
    for m in mechanisms.MECHANISMS:
        label = f"only {m.name} ({m.flag})"
        assert label in rows, label
        want = {f"intra.{x.field}" if x.intra else x.field for x in (m, *m.needs)}
        assert _diff(off, rows[label]) == want
        assert m.value(rows[label]) == m.on and m.value(off) == m.off


def test_the_default_row_is_the_shipped_default_and_the_flipped_rows_flip_one_switch():
    rows = mechanisms.rows()
    assert rows["default"] == SimConfig()
    flipped = [label for label in rows if label.startswith("default ")]
    # Every switch flips, but the SLO order: it plans with the worst case, the default with the mean.
    assert SimConfig().intra.plan == "mean"
    assert len(flipped) == len(mechanisms.MECHANISMS) - 1 and "default with SLO-aware order" not in rows
    for label in flipped:
        assert len(_diff(rows["default"], rows[label])) == 1, label


def test_a_refused_combination_is_left_out_not_raised():
    base = replace(SimConfig(), intra=replace(SimConfig().intra, plan="mean"))
    rows = mechanisms.rows(base)
    # plan="mean" with order="slo" is refused by IntraConfig: that flipped row is absent.
    assert not any(cfg.intra.plan == "mean" and cfg.intra.order == "slo" for cfg in rows.values())
    assert "default" in rows


def test_a_row_runs_exactly_its_configuration():
    jobs = mechanisms.philly_jobs(StudyConfig(philly_jobs=8, philly_days=1.0), find_traces_dir(None), "catalog")
    label = "only admission by the mean (--plan mean)"
    got = mechanisms.mechanisms_run("t", label, jobs, default_cluster(), 3)
    direct = run_policy("rollmux", jobs, default_cluster(), replace(mechanisms.rows()[label], seed=3))
    assert got["cost_usd"] == direct.cost_usd and got["slo"] == direct.slo_attainment


def test_the_section_renders_every_row_on_both_profiles(monkeypatch):
    keep = ("all off (before issue 14)", "default", "only co-located mode (--colocate)")
    full = mechanisms.rows
    monkeypatch.setattr(mechanisms, "rows", lambda base=None: {k: v for k, v in full(base).items() if k in keep})
    sc = StudyConfig(philly_jobs=6, philly_days=1.0, is_quick=True)
    data = mechanisms.run(sc, default_cluster(), find_traces_dir(None), serial_map)
    text = mechanisms.render(data)
    assert text.count("| default |") == 2 and text.count("| all off (before issue 14) |") == 2
    assert "rollmux study --quick --sections mechanisms" in text
    colo = [r for r in data["runs"] if r["row"].startswith("only co-located")]
    assert colo and all(r["colocated"] + r["isolated"] <= r["jobs"] for r in colo)


def test_a_flipped_row_the_configuration_refuses_is_named_in_the_section():
    assert mechanisms.refused_rows() == ["default with SLO-aware order"]
    solo = {"cost_usd": 100.0, "slo": 1.0, "jobs": 1}
    runs = [{"trace": f"philly {mode}{d}", "row": row, **solo, "migrations": 0, "isolated": 0, "colocated": 0}
            for mode in mechanisms.MODES for d in ("", ", drifted") for row in ("solo-d", "default")]
    data = {"vc": "v", "quick": True, "bounds": {f"philly {m}": 50.0 for m in mechanisms.MODES}, "runs": runs,
            "refused": mechanisms.refused_rows()}
    assert 'refuses the combination: "default with SLO-aware order"' in mechanisms.render(data)
