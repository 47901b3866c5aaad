"""The study's figures, drawn from small made-up numbers: each numbered with a caption and a CSV of its
numbers beside it, integer group sizes on an integer axis, n/a (not a zero bar) where a value is
undefined, a line equal to another's named so, and no line of one point; and the quick study's
group-size figure, from its real cells, showing what the group size does."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest

from rollmux.core.spec import default_cluster
from rollmux.study import report
from rollmux.study.config import StudyConfig
from rollmux.study.part_a import PAPER, SmallCell, small_cell, study_cells

POLICIES = (PAPER, "greedy", "gavel")


def _cell(workload: str, size: int, cost: float, optimum_usd: float = 100.0) -> SmallCell:
    """A part-A cell at SLO U(1,2), one instance whose optimum costs `optimum_usd`; gavel has no
    paper's cost (it forms no groups)."""
    return SmallCell(workload, None, size, paper_cost={PAPER: [cost], "greedy": [cost + 0.1]},
                     total_cost={p: [cost + 0.05 * i] for i, p in enumerate(POLICIES)},
                     slo_attainment={p: [1.0] for p in POLICIES}, exact=True, optimum_usd=[optimum_usd])


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
    assert ["a", PAPER, "5", "1.2", "0.0", "1"] in _csv(png) and ["b", "optimum", "5", "1.0", "0.0", "1"] in _csv(png)


def test_group_size_costs_are_measured_against_the_optimum_at_the_smallest_size(tmp_path, drawn):
    png = tmp_path / "group_size.png"
    report.plot_sizes([_cell("a", 1, 1.0, optimum_usd=200.0), _cell("a", 4, 1.2, optimum_usd=150.0)], png)
    rows = {(r[1], r[2]): float(r[3]) for r in _csv(png)[1:]}
    assert rows[("optimum", "1")] == 1.0 and rows[("optimum", "4")] == 0.75
    assert rows[(PAPER, "4")] == pytest.approx(1.2 * 150 / 200)


def test_a_randomized_policys_runs_are_each_divided_by_their_own_instances_reference(tmp_path, drawn):
    ref, big = _cell("a", 1, 1.0), _cell("a", 3, 1.0)
    for cell, optimum in ((ref, [100.0, 400.0]), (big, [50.0, 400.0])):  # two instances
        cell.optimum_usd = optimum
        cell.total_cost = {"random": [1.0, 1.0, 2.0, 2.0]}  # two placement seeds per instance
    report.plot_sizes([ref, big], tmp_path / "group_size.png")
    row = next(r for r in _csv(tmp_path / "group_size.png") if r[1] == "random" and r[2] == "3")
    assert [float(v) for v in row[3:5]] == pytest.approx([1.25, 0.75]) and row[5] == "4"  # 0.5, 0.5, 2, 2


def test_a_policy_line_equal_to_another_is_named_under_its_panel_and_drawn_in_another_style(tmp_path, drawn):
    cells = [_cell("a", g, 1.2) for g in (2, 5)]
    for c in cells:
        c.total_cost["greedy"] = list(c.total_cost[PAPER])
    report.plot_sizes(cells, tmp_path / "group_size.png")
    ax = drawn[0].axes[0]
    assert f"same line: {PAPER} = greedy" in ax.get_xlabel()
    styles = {c.get_label(): (c.lines[0].get_linestyle(), c.lines[0].get_marker()) for c in ax.containers}
    assert styles[PAPER] != styles["greedy"]


def test_the_quick_studys_group_size_figure_shows_what_the_size_does(tmp_path, drawn):
    sc = StudyConfig.quick()
    cells = [small_cell(w, s, g, sc, default_cluster()) for w, s, g in study_cells(sc) if s is None]
    assert report.plot_sizes(cells, tmp_path / "group_size.png")
    curves: dict[tuple[str, str], list[float]] = {}
    for workload, line, _size, mean, *_ in _csv(tmp_path / "group_size.png")[1:]:
        curves.setdefault((workload, line), []).append(float(mean))
    assert all(len(ys) == len(sc.group_sizes) for ys in curves.values())
    for w in {w for w, _ in curves}:  # no panel of flat lines
        assert any(len(set(ys)) > 1 for (cw, _), ys in curves.items() if cw == w), w
    paper = [ys for (_, line), ys in curves.items() if line == PAPER]
    assert sum(len(set(ys)) > 1 for ys in paper) >= 3  # RollMux's own line moves in most workloads


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


def test_the_small_sets_legend_stands_below_the_panels_not_over_a_bar(tmp_path, drawn):
    report.plot_small([_cell("a", 5, 1.1), _cell("b", 5, 1.2)], 5, tmp_path / "small_sets.png")
    fig = drawn[0]
    assert [ax.get_legend() for ax in fig.axes] == [None, None, None] and len(fig.legends) == 1
    legend_top = fig.legends[0].get_window_extent(fig.canvas.get_renderer()).y1
    assert all(legend_top <= ax.get_window_extent().y0 for ax in fig.axes)


def test_a_cost_step_line_drawn_over_another_leaves_the_one_under_it_showing(tmp_path, drawn):
    same = [(0.0, 10.0), (3600.0, 20.0)]
    report.plot_cost_over_time(_run({"solo-d": same, "rollmux-static": same, "rollmux": [(0.0, 5.0)]}),
                               tmp_path / "cost_over_time.png")
    widths = [ln.get_linewidth() for ln in drawn[0].axes[0].get_lines()]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
