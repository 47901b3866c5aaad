"""`rollmux simulate`: why isolated placements joined no group, in the JSON and under the table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.core.placement.why import REASON_NAMES
from rollmux.core.trace_io import dump_jobs
from factories import synthetic_trace

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 40-job synthetic trace simulated with rollmux (without the co-located mode, which would
    take most arrivals, its 16:8 ones on one training node), solo-d and greedy: (JSON, printed output)."""
    tmp = tmp_path_factory.mktemp("why")
    trace, out = tmp / "t.jsonl", tmp / "r.json"
    dump_jobs(synthetic_trace(np.random.default_rng(7), 40, mean_gap_s=900.0), trace)
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--policy", "rollmux", "--policy", "solo-d",
                              "--policy", "greedy", "--no-colocate", "--json", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output


def test_the_json_counts_every_isolated_placement_once(run):
    data, _ = run
    p = data["policies"]["rollmux"]
    assert list(p["placements_why"]) == list(REASON_NAMES) == list(p["refusals_why"])
    n = p["isolated_placements"]
    assert n == round(p["placements"]["isolated"] * 40) and n == sum(p["placements_why"].values())
    assert p["placements_why"]["no_groups"] >= 1  # the first arrival found no group
    # Every refused group counts once per isolated placement; a placement's own reason is one of them.
    assert sum(p["refusals_why"].values()) >= n - p["placements_why"]["no_groups"]
    for reason, count in p["placements_why"].items():
        assert reason == "no_groups" or count == 0 or p["refusals_why"][reason] >= count


def test_only_policies_that_explain_report_it(run):
    data, _ = run
    for name in ("solo-d", "greedy"):  # solo-d never tries a group, greedy does not say why
        assert "placements_why" not in data["policies"][name]
        assert "isolated_placements" not in data["policies"][name]


def test_the_table_gains_a_summary_line(run):
    data, output = run
    p = data["policies"]["rollmux"]
    flat = " ".join(output.split())
    assert f"why isolated, rollmux: {p['isolated_placements']} of 40 placements" in flat
    top = max((k for k in REASON_NAMES if p["placements_why"][k]), key=lambda k: p["placements_why"][k])
    assert f"{top} {p['placements_why'][top]}" in flat
    assert "why isolated, solo-d" not in flat
