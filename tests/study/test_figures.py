"""The study's figures, drawn from small made-up numbers: each numbered with a caption and a CSV of its
numbers beside it, integer group sizes on an integer axis, n/a (not a zero bar) where a value is
undefined, a line equal to another's named so, and no line of one point."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest

from rollmux.study import report
from rollmux.study.config import StudyConfig
from rollmux.study.part_a import PAPER, SmallCell

POLICIES = (PAPER, "greedy", "gavel")


def _cell(workload: str, size: int, cost: float) -> SmallCell:
    """A part-A cell at SLO U(1,2); gavel has no paper's cost (it forms no groups)."""
    return SmallCell(workload, None, size, paper_cost={PAPER: [cost], "greedy": [cost + 0.1]},
                     total_cost={p: [cost + 0.05 * i] for i, p in enumerate(POLICIES)},
                     slo_attainment={p: [1.0] for p in POLICIES}, exact=True)


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn, kept open to be read (then closed)."""
    figs: list = []
    close = plt.close
    monkeypatch.setattr(report.plt, "close", figs.append)
    yield figs
    for f in figs:
        close(f)


def _csv(path) -> list[list[str]]:
    with open(path.with_suffix(".csv"), newline="") as f:
        return list(csv.reader(f))


def test_group_sizes_are_on_an_integer_axis_at_the_sizes_run(tmp_path, drawn):
    cells = [_cell("a", g, 1.0 + g / 10) for g in (2, 5)] + [_cell("b", g, 1.5) for g in (2, 5)]
    assert report.plot_sizes(cells, tmp_path / "group_size.png")
    assert list(drawn[0].axes[0].get_xticks()) == [2, 5]


def test_a_group_size_plot_of_one_size_is_not_drawn_but_its_numbers_are_written(tmp_path, drawn):
    png = tmp_path / "group_size.png"
    assert report.plot_sizes([_cell("a", 5, 1.2), _cell("b", 5, 1.3)], png) is False
    assert not png.exists() and not drawn
    assert _csv(png)[1:] == [["a", "5", "1.2"], ["b", "5", "1.3"]]


def test_a_line_equal_to_another_says_so_and_is_drawn_in_another_style(tmp_path, drawn):
    cells = [_cell(w, g, 1.2) for w in ("a", "b") for g in (2, 5)]
    report.plot_sizes(cells, tmp_path / "group_size.png")
    lines = drawn[0].axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["a", "b (identical to a)"]
    assert lines[0].get_linestyle() != lines[1].get_linestyle() and lines[0].get_marker() != lines[1].get_marker()


def test_an_undefined_value_is_marked_na_not_drawn_as_a_zero_bar(tmp_path, drawn):
    png = tmp_path / "small_sets.png"
    report.plot_small([_cell("a", 5, 1.1), _cell("b", 5, 1.2)], 5, png)
    paper_cost = drawn[0].axes[0]
    assert all(bar.get_height() > 0 for bar in paper_cost.patches)
    assert len(paper_cost.patches) == 4  # paper and greedy, two workloads; gavel none
    assert [t.get_text() for t in paper_cost.texts] == ["n/a", "n/a"]
    gavel = [r for r in _csv(png) if r[0] == "paper_cost" and r[2] == "gavel"]
    assert gavel == [["paper_cost", "a", "gavel", "n/a", "n/a", "0"], ["paper_cost", "b", "gavel", "n/a", "n/a", "0"]]


def _run(timelines: dict[str, list]) -> dict:
    pols = {n: SimpleNamespace(cost_timeline=t, cost_usd=100.0 * (i + 1)) for i, (n, t) in enumerate(timelines.items())}
    return {"jobs": 3, "mode": "made-up", "policies": pols, "labels": {}}


def test_cost_over_time_names_a_policy_whose_steps_equal_anothers_and_writes_them(tmp_path, drawn):
    same = [(0.0, 10.0), (3600.0, 20.0)]
    png = tmp_path / "cost_over_time.png"
    report.plot_cost_over_time(_run({"solo-d": [(0.0, 30.0)], "rollmux-static": same, "rollmux": same}), png)
    labels = [ln.get_label() for ln in drawn[0].axes[0].get_lines()]
    assert labels == ["solo-d ($100)", "rollmux-static ($200)", "rollmux (identical to rollmux-static) ($300)"]
    assert ["rollmux", "1.0", "20.0"] in _csv(png)


def test_every_figure_is_numbered_with_a_caption_and_its_csv(tmp_path, drawn):
    cells = [_cell(w, g, 1.1) for w in ("a", "b") for g in (2, 5)]
    run = _run({"solo-d": [(0.0, 30.0)], "rollmux-static": [(0.0, 10.0)], "rollmux": [(0.0, 5.0)]})
    md = "\n".join(line for fig in report._figures(tmp_path, StudyConfig.quick(), cells, [run], 5) for line in fig)
    for n, name in enumerate(("small_sets", "group_size", "cost_over_time"), 1):
        assert f"![Figure {n}]({name}.png)" in md and f"*Figure {n}. " in md and f"[{name}.csv]({name}.csv)" in md
        assert (tmp_path / f"{name}.png").exists() and (tmp_path / f"{name}.csv").exists()
