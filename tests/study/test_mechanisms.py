"""Study section `mechanisms`: the mechanisms beyond the paper, each alone and flipped from `shipped`."""

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import default_cluster
from rollmux.sim.runner import run_policy
from rollmux.study import mechanisms
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir

SHIPPED = SchedulerConfig.profile("shipped")


def test_each_only_row_differs_from_all_off_in_its_own_switch():
    rows = mechanisms.rows()
    off = rows["all off"]
    for m in mechanisms.MECHANISMS:
        label = f"only {m.name}"
        assert label in rows, label
        assert set(rows[label].changes(off)) == {x.setting for x in (m, *m.needs)}
        assert m.value(rows[label]) == m.on and m.value(off) == m.off


def test_all_off_is_the_groups_profile_without_compaction_and_narrowing():
    off = mechanisms.rows()["all off"]
    assert off.changes(SchedulerConfig.profile("groups")) == {"colocation.narrow": False, "compaction.enabled": False}
    assert off.describe() == "groups (colocation.narrow=False, compaction.enabled=False)"


def test_the_shipped_row_is_the_shipped_profile_and_the_flipped_rows_flip_one_switch():
    rows = mechanisms.rows()
    assert rows["shipped"] == SHIPPED
    flipped = [label for label in rows if label.startswith("shipped ")]
    # Every switch flips, but the SLO order: it plans with the worst case, `shipped` with the mean.
    assert SHIPPED.admission.plan == "mean"
    assert len(flipped) == len(mechanisms.MECHANISMS) - 1 and "shipped with SLO-aware order" not in rows
    for label in flipped:
        assert len(rows[label].changes(rows["shipped"])) == 1, label
    assert rows["shipped without co-located pairing"].describe() == "shipped (colocation.pair=False)"


def test_a_refused_combination_is_left_out_not_raised():
    rows = mechanisms.rows(SHIPPED.with_overrides({"admission.plan": "mean"}))
    # admission.plan="mean" with intra_group.order="slo" is refused by the configuration: absent.
    assert not any(cfg.admission.plan == "mean" and cfg.intra_group.order == "slo" for cfg in rows.values())
    assert "shipped" in rows


def test_a_row_runs_exactly_its_configuration():
    jobs = mechanisms.philly_jobs(StudyConfig(philly_jobs=8, philly_days=1.0), find_traces_dir(None), "catalog")
    label = "only admission by the mean"
    got = mechanisms.mechanisms_run("t", label, jobs, default_cluster(), 3)
    direct = run_policy("rollmux", jobs, default_cluster(), mechanisms.rows()[label], seed=3)
    assert got["cost_usd"] == direct.cost_usd and got["slo"] == direct.slo_attainment
    assert got["config"] == mechanisms.rows()[label].describe()


def test_the_section_renders_every_row_on_both_profiles_named_by_configuration(monkeypatch):
    keep = ("all off", "shipped", "only co-located mode")
    full = mechanisms.rows
    monkeypatch.setattr(mechanisms, "rows", lambda base=None: {k: v for k, v in full(base).items() if k in keep})
    sc = StudyConfig(philly_jobs=6, philly_days=1.0, is_quick=True)
    data = mechanisms.run(sc, default_cluster(), find_traces_dir(None), serial_map)
    text = mechanisms.render(data)
    assert text.count("| shipped: `shipped` |") == 2
    assert text.count("| all off: `groups (colocation.narrow=False, compaction.enabled=False)` |") == 2
    assert "rollmux study --quick --sections mechanisms" in text and "issue" not in text
    colo = [r for r in data["runs"] if r["row"].startswith("only co-located")]
    assert colo and all(r["colocated"] + r["isolated"] <= r["jobs"] for r in colo)


def test_a_flipped_row_the_configuration_refuses_is_named_in_the_section():
    assert mechanisms.refused_rows() == ["shipped with SLO-aware order"]
    solo = {"cost_usd": 100.0, "slo": 1.0, "jobs": 1, "config": "shipped"}
    runs = [{"trace": f"philly {mode}{d}", "row": row, **solo, "migrations": 0, "isolated": 0, "colocated": 0}
            for mode in mechanisms.MODES for d in ("", ", drifted") for row in ("solo-d", "shipped")]
    data = {"vc": "v", "quick": True, "bounds": {f"philly {m}": 50.0 for m in mechanisms.MODES}, "runs": runs,
            "refused": mechanisms.refused_rows()}
    assert 'refuses the combination: "shipped with SLO-aware order"' in mechanisms.render(data)
