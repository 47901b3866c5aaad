"""`rollmux simulate --plan worst|mean` (core/placement/admission.py) end to end on a small trace."""

from __future__ import annotations

import json

import pytest
from factories import job_record
from typer.testing import CliRunner

from rollmux.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Eight heavy-tailed jobs arriving together (median 100 s, capped at 200 s)."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    recs = [job_record(f"j{i}", rollout_gpus=8, slo=1.5, duration_s=8_000.0, tail_frac=0.0,
                       rollout_s={"median": 100.0, "sigma": 0.2, "max": 200.0}, train_s=50.0, sync_s=5.0)
            for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _run(trace, tmp_path, *flags):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--policy", "rollmux", "--json", str(out),
                                 "--no-colocate", *flags])  # (co-located, no job would share at all)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())["policies"]["rollmux"]


def test_plan_mean_shares_where_the_worst_case_isolates(trace, tmp_path):
    worst, mean = _run(trace, tmp_path, "--plan", "worst"), _run(trace, tmp_path, "--plan", "mean")
    assert worst["placements"]["isolated"] == 1.0
    assert mean["placements"]["isolated"] < 1.0 and mean["cost_usd"] < worst["cost_usd"]
    assert mean["slo_attainment"] == worst["slo_attainment"] == 1.0


@pytest.mark.parametrize("flags, place", [(["--plan", "median"], "--plan"),
                                          (["--plan", "mean", "--plan-quantile", "0.9"], "--plan-quantile"),
                                          (["--plan", "mean", "--order", "slo"], "--order")])
def test_a_bad_plan_is_one_line_exit_2(trace, flags, place):
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), *flags])
    assert res.exit_code == 2
    assert place in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
