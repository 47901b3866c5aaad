"""The wheel as a new user gets it: built from this tree, installed into a fresh venv, run from there.

Without extras, `rollmux simulate` works and `rollmux demo` names the extra in one line (exit 2); with
`[demo]` the demo's GRPO job is profiled, and the demo runs (its Ray cluster, `rollmux serve --ray` and
`rollmux run` processes all started from the installed package) and its JSON passes every check of
tests/demo_checks.py (the suite's one demo run). The venv has no system site packages and never sees the
source tree (every
command runs elsewhere, without PYTHONPATH). Its dependencies come through pip as configured on the
machine (the package index, its local mirrors and the pip cache); nothing is faked. This is the slow
test of the suite: it prints each step's seconds (run with -s to see them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from demo_checks import check_demo, check_demo_output

REPO = Path(__file__).resolve().parents[1]
DEMO_HINT = "error: rollmux demo needs the demo extra: pip install 'rollmux[demo]'"


def _run(cmd: list, cwd: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command; its output comes back as text."""
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _clean_env() -> dict:
    """This process's environment without what would let the venv see the source tree or this venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


class Steps:
    """Seconds of each step, printed as they finish."""

    def __init__(self) -> None:
        self.t = time.perf_counter()

    def done(self, what: str) -> None:
        """Print how long `what` took since the last step."""
        now = time.perf_counter()
        print(f"[packaging] {what}: {now - self.t:.1f}s", flush=True)
        self.t = now


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this working tree, built (with pip, in an isolated build env) from a copy of its sources."""
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    src.mkdir()
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    shutil.copy(REPO / "LICENSE", src)
    shutil.copytree(REPO / "rollmux", src / "rollmux", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    steps = Steps()
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", root / "dist", src], root, 600)
    assert res.returncode == 0, res.stdout + res.stderr
    steps.done("pip wheel")
    (found,) = (root / "dist").glob("rollmux-*.whl")
    return found


def test_the_wheel_carries_the_demo_jobs_data_and_dashboard(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ("rollmux/jobs/__init__.py", "rollmux/jobs/grpo/__init__.py", "rollmux/jobs/grpo/job.py",
                 "rollmux/jobs/grpo/model.py", "rollmux/jobs/grpo/profiled.py", "rollmux/data/default_trace.jsonl",
                 "rollmux/data/default_cluster.yaml", "rollmux/live/dashboard/index.html",
                 "rollmux/live/dashboard/login.html", "rollmux/cli/__init__.py"):
        assert path in names, path
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Provides-Extra: demo" in text and "Provides-Extra: trl" in text
    assert 'Requires-Dist: torch==2.13.0; extra == "demo"' in text
    assert not any(line.startswith("Requires-Dist: torch") and "extra" not in line for line in text.splitlines())
    assert not any(n.startswith(("tests/", "examples/")) for n in names)


def test_the_wheel_carries_the_license_and_the_traces_with_their_attribution(wheel):
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())
    (license_path,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert z.read(license_path) == (REPO / "LICENSE").read_bytes()
    meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode().splitlines()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    traces = REPO / "rollmux" / "data"
    for folder in ("philly", "philly/arrivals", "paper"):
        for path in (traces / folder).iterdir():
            if path.is_file():
                assert z.read(f"rollmux/data/{folder}/{path.name}") == path.read_bytes(), path
    assert {"rollmux/data/philly/README.md", "rollmux/data/paper/README.md"} <= names


def test_a_fresh_venv_runs_simulate_without_extras_and_the_demo_with_its_extras(wheel, tmp_path):
    steps = Steps()
    venv, env, work = tmp_path / "venv", _clean_env(), tmp_path / "work"
    work.mkdir()
    res = _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, 120)
    assert res.returncode == 0, res.stderr
    py, rollmux = venv / "bin" / "python", venv / "bin" / "rollmux"
    # This venv's pip installs into the new one (--python): the same pip a user runs, without bootstrapping
    # a second copy of pip into the venv. pip compiles the bytecode as it installs, as it does for a user:
    # without it the demo's Ray processes (a raylet and its agents per node) all compile Ray at once.
    pip = [sys.executable, "-m", "pip", "--python", py, "install", "--quiet"]
    res = _run([*pip, wheel], work, 900, env)
    assert res.returncode == 0, res.stdout + res.stderr
    steps.done("pip install the wheel")

    res = _run([py, "-c", "import rollmux, sys; print(rollmux.__file__); print(sys.prefix)"], work, 60, env)
    origin, prefix = res.stdout.split()
    assert Path(origin).is_relative_to(venv) and Path(prefix) == venv, res.stdout  # the installed copy
    res = _run([py, "-c", "import importlib.util as u; print(u.find_spec('torch'))"], work, 60, env)
    assert res.stdout.strip() == "None", res.stdout  # no torch without the extra

    res = _run([rollmux, "simulate", "--json", work / "sim.json"], work, 600, env)
    assert res.returncode == 0, res.stderr
    doc = json.loads((work / "sim.json").read_text())
    assert set(doc["policies"]) == {"rollmux", "solo-d", "verl"}
    assert all(p["cost_usd"] > 0 for p in doc["policies"].values())
    assert "policy" in res.stdout and "cost $" in res.stdout  # the comparison table
    steps.done("rollmux simulate (200 jobs, 3 policies)")
    # The Philly traces come with the package: no traces folder beside it.
    res = _run([rollmux, "workload", "philly", "--jobs", "5", "--days", "1", "-o", work / "philly.jsonl"],
               work, 120, env)
    assert res.returncode == 0, res.stderr
    assert len((work / "philly.jsonl").read_text().splitlines()) == 5
    steps.done("rollmux workload philly")

    res = _run([rollmux, "demo", "--iterations", "10"], work, 120, env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [DEMO_HINT], res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    steps.done("rollmux demo without the extra")

    res = _run([*pip, f"{wheel}[demo]"], work, 900, env)
    assert res.returncode == 0, res.stdout + res.stderr
    steps.done("pip install the wheel's [demo] extra (torch)")
    # The demo's GRPO job runs from the package (profiled through the shim).
    res = _run([rollmux, "profile", "rollmux.jobs.grpo", "--preset", "small", "--runs", "1",
                "-o", work / "job.yaml"], work, 600, env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "rollout_s" in (work / "job.yaml").read_text()
    steps.done("rollmux profile rollmux.jobs.grpo")
    # The one demo run of the suite.
    res = _run([rollmux, "demo", "--iterations", "12", "--json", work / "demo.json", "--png", work / "demo.png"],
               work, 1200, env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    check_demo(json.loads((work / "demo.json").read_text()), 12)
    assert (work / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    check_demo_output(res.stdout, res.stderr, 12)
    steps.done("rollmux demo --iterations 12")
