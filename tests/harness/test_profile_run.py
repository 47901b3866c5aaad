"""`rollmux profile --run -- ENTRYPOINT`: a program's profile, measured by the scheduler as it runs it
(harness/profile_run.py), as any job submitted without phase times is measured."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollmux.core.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def _profile(tmp_path: Path, *args: str, iterations: int = 5) -> subprocess.CompletedProcess:
    """`rollmux profile --run ... -- python quickstart_job.py --iterations N` in `tmp_path`."""
    shutil.copy(ROOT / "examples" / "quickstart_job.py", tmp_path / "quickstart_job.py")
    cmd = [sys.executable, "-m", "rollmux.cli", "profile", "--run", "-o", "job.yaml", *args, "--",
           sys.executable, "quickstart_job.py", "--iterations", str(iterations)]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_program_is_profiled_by_the_iterations_it_runs_and_its_record_is_a_job_record(tmp_path):
    # A wide SLO: the times of a loaded machine spread, and a tight SLO would ask for more iterations.
    res = _profile(tmp_path, "--job-id", "qs", "--runs", "3", "--warmup", "1", "--iterations", "40", "--slo", "10",
                   iterations=5)
    assert res.returncode == 0, res.stderr
    assert "quickstart: finished 5 iterations as qs" in res.stdout  # the program's own output, as it ran
    text = (tmp_path / "job.yaml").read_text()
    assert text.startswith("# measured by rollmux profile -- ")
    rec = yaml.safe_load(text)
    spec = JobSpec.model_validate(rec)
    assert spec.job_id == "qs" and not spec.measure
    assert 0 < spec.rollout_s.median < 1.0 and 0 < spec.train_s < 1.0  # microseconds of pure Python, not 600 s
    assert spec.rollout_s.max >= 1.25 * spec.rollout_s.median * 0.999  # the slowest run x profiling.max_headroom
    # The quickstart job holds 8 bytes per number offloaded: 10 rollout logits, 20 trainer numbers.
    assert spec.host_gb.rollout == pytest.approx(80e-9) and spec.host_gb.train == pytest.approx(160e-9)
    assert spec.iterations == 40


def test_a_program_that_runs_too_few_iterations_is_told_how_many_the_profile_needs(tmp_path):
    res = _profile(tmp_path, "--runs", "3", "--warmup", "1", iterations=2)
    assert res.returncode == 2 and not (tmp_path / "job.yaml").exists()
    assert res.stderr.strip().splitlines()[-1] == (
        "error: ENTRYPOINT: it ran 2 iteration(s) and the profile needs at least 4 (--warmup 1 + --runs 3), more "
        "when its iterations spread widely for its SLO (--slo 2): run it longer")


def test_options_only_a_module_takes_are_refused_with_run(tmp_path):
    res = _profile(tmp_path, "--preset", "small")
    assert res.returncode == 2 and "--run" in res.stderr.strip().splitlines()[-1]


def test_a_script_on_the_trl_adapter_is_profiled_as_it_trains(tmp_path):
    shutil.copy(ROOT / "examples" / "trl_grpo.py", tmp_path / "trl_grpo.py")
    cmd = [sys.executable, "-m", "rollmux.cli", "profile", "--run", "-o", "trl.yaml", "--job-id", "trl-grpo", "--runs",
           "3", "--slo", "10", "--", sys.executable, "trl_grpo.py", "--steps", "5", "--out", "out"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    spec = JobSpec.model_validate(yaml.safe_load((tmp_path / "trl.yaml").read_text()))
    # Its phases as the adapter ran them: a rollout on the generator copies, a GRPO step, a weight
    # push (a sync that takes time), and the state it keeps offloaded on each side.
    assert spec.rollout_s.median > 0 and spec.train_s > 0 and spec.sync_s > 0
    assert spec.host_gb.rollout > 0 and spec.host_gb.train > 0
    assert (tmp_path / "out" / "config.json").exists()  # the script went on to the end and saved its model


def test_a_run_count_the_profiling_settings_refuse_is_one_line_naming_the_flag(tmp_path):
    res = _profile(tmp_path, "--runs", "1")
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith("error: --runs: ")
    assert "Traceback" not in res.stderr
