"""`rollmux profile --run -- ENTRYPOINT`: a program's profile, measured by the scheduler as it runs it
(harness/profile_run.py), as any job submitted without phase times is measured."""

from __future__ import annotations

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
    res = _profile(tmp_path, "--job-id", "qs", "--runs", "3", "--warmup", "1", "--iterations", "40", iterations=5)
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
        "error: ENTRYPOINT: it ran 2 iteration(s) and the profile needs 4 (--warmup 1 + --runs 3): run it "
        "longer, or measure fewer")


def test_options_only_a_module_takes_are_refused_with_run(tmp_path):
    res = _profile(tmp_path, "--preset", "small")
    assert res.returncode == 2 and "--run" in res.stderr.strip().splitlines()[-1]
