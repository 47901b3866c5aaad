"""`--profile` and `--set`: the simulator and the service run a named configuration, flags override it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from factories import job_record, served_config
from typer.testing import CliRunner

from rollmux.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Ten balanced and rollout-heavy jobs arriving a few minutes apart."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    recs = [job_record(f"j{i}", arrival_s=300.0 * i, rollout_gpus=8 * (1 + i % 2), slo=1.5, duration_s=20_000.0,
                       tail_frac=0.1, rollout_s={"median": 100.0 + 40 * (i % 3), "sigma": 0.1, "max": 200.0},
                       train_s=80.0, sync_s=5.0)
            for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _run(trace, tmp_path, *flags) -> dict:
    out = tmp_path / f"r{abs(hash(flags))}.json"
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--policy", "rollmux", "--json", str(out), *flags])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())["policies"]["rollmux"]
    doc.pop("decision_ms")
    return doc


def test_the_default_run_is_the_shipped_profile(trace, tmp_path):
    assert _run(trace, tmp_path) == _run(trace, tmp_path, "--profile", "shipped")


def test_the_paper_profile_is_the_old_flags_for_the_published_system(trace, tmp_path):
    paper = _run(trace, tmp_path, "--profile", "paper")
    assert paper == _run(trace, tmp_path, "--static", "--no-colocate", "--plan", "worst", "--no-elastic-rollout",
                         "--no-stretch-pricing")
    assert "colocated" not in paper["placements"] and "migrations" not in paper


def test_a_flag_and_a_set_override_the_profile_alike(trace, tmp_path):
    by_flag = _run(trace, tmp_path, "--profile", "paper", "--colocate")
    assert by_flag == _run(trace, tmp_path, "--profile", "paper", "--set", "colocation.enabled=true")
    assert by_flag["placements"].get("colocated", 0) > 0


@pytest.mark.parametrize("args, place", [
    (["--profile", "fast"], "--profile"),
    (["--set", "colocation.speed=0"], "--set colocation.speed"),
    (["--set", "admission.nope=1"], "--set admission.nope"),
    (["--set", "colocation.speed"], "--set"),
    (["--plan-quantile", "0.9"], "--plan-quantile (admission.quantile)"),
])
def test_a_bad_profile_or_setting_is_one_line_naming_it(trace, args, place):
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), *args])
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and place in lines[0], res.output


def test_serve_refuses_a_setting_the_live_plane_cannot_execute_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rollmux.cli", "serve", "--store", str(tmp_path / "j.db"),
                           "--admin-token-file", str(tmp_path / "t"), "--set", "shapes.train_scaling=true"],
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "shapes.train_scaling" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "j.db").exists()  # refused before anything was written


def test_serve_runs_the_shipped_profile_by_default(tmp_path):
    from rollmux.core.config import SchedulerConfig
    assert SchedulerConfig.model_validate(served_config(tmp_path, profile=None)["config"]) == SchedulerConfig()
