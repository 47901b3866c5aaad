"""Optional extras: without torch, the commands that need it say which extra in one line; the rest never load it.

Each case runs the real `rollmux` entry point in a subprocess whose `sys.modules["torch"]` is None,
which is what Python does for a package that is not installed (import raises ModuleNotFoundError,
`importlib.util.find_spec` finds nothing). tests/test_packaging.py checks the same from a wheel in a
fresh venv that really lacks torch.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rollmux.errors import EXTRA_MODULES, MissingExtra, extra_for

NO_TORCH = ("import sys; sys.modules['torch'] = None; from rollmux.cli import main; "
            "sys.argv = ['rollmux', *{args!r}]; main()")
DEMO_HINT = "pip install 'rollmux[demo]'"


def run_without_torch(args: list[str], cwd) -> subprocess.CompletedProcess:
    """`rollmux ARGS` with torch unimportable."""
    return subprocess.run([sys.executable, "-c", NO_TORCH.format(args=args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args,command", [
    (["demo", "--iterations", "10"], "rollmux demo"),
    (["profile", "rollmux.jobs.grpo", "--preset", "small", "-o", "job.yaml"], "rollmux profile rollmux.jobs.grpo"),
    (["bench", "sync", "--model-mb", "1"], "rollmux bench sync"),
])
def test_a_command_that_needs_torch_names_the_demo_extra_in_one_line(tmp_path, args, command):
    res = run_without_torch(args, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {command} needs the demo extra: {DEMO_HINT}"], res.stderr
    assert res.stdout == "" and not (tmp_path / "job.yaml").exists()


def test_a_user_job_importing_torch_is_told_the_extra_too(tmp_path):
    (tmp_path / "myjob.py").write_text("import torch\n\ndef make_job(preset=None, **options):\n    return None\n")
    res = run_without_torch(["profile", "myjob", "-o", "job.yaml"], tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == f"error: rollmux profile myjob needs the demo extra: {DEMO_HINT}"


def test_a_missing_module_that_no_extra_brings_is_still_a_plain_import_error(tmp_path):
    (tmp_path / "myjob.py").write_text("import no_such_dependency_xyz\n")
    res = run_without_torch(["profile", "myjob", "-o", "job.yaml"], tmp_path)
    assert res.returncode == 2 and "JOB_MODULE: cannot import 'myjob'" in res.stderr and "extra" not in res.stderr


# The commands of a plain `pip install rollmux` must not load torch, even where it is installed.
TORCH_FREE = """
import sys
from typer.testing import CliRunner
from rollmux.cli import app
for args in (["simulate", "--help"], ["serve", "--help"], ["study", "--help"], ["submit", "--help"],
             ["demo", "--help"], ["profile", "--help"], ["bench", "sync", "--help"]):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (args, res.output)
import rollmux.live.server, rollmux.live.service, rollmux.live.client, rollmux.study.experiments, rollmux.sim.runner
import rollmux.harness.demo, rollmux.harness.profile, rollmux.shim, rollmux.jobs
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


def test_the_cli_and_the_service_never_import_torch(tmp_path):
    res = subprocess.run([sys.executable, "-c", TORCH_FREE], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout


def test_the_extras_map_names_what_pyproject_installs():
    import tomllib
    from pathlib import Path
    doc = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extras = doc["project"]["optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        pinned = {req.split("==")[0].split("[")[0].strip() for req in extras[extra]}
        assert set(modules) <= pinned, (extra, pinned)
    assert "torch" not in " ".join(doc["project"]["dependencies"])


def test_missing_extra_is_one_line_and_survives_pickling():
    import pickle
    exc = pickle.loads(pickle.dumps(MissingExtra("demo", "trl")))
    assert str(exc) == "rollmux demo needs the trl extra: pip install 'rollmux[trl]'" and exc.place == "rollmux demo"
    assert extra_for(ModuleNotFoundError("x", name="torch.nn")) == "demo"
    assert extra_for(ModuleNotFoundError("x", name="transformers")) == "trl"
    assert extra_for(ModuleNotFoundError("x", name="numpy")) is None


def test_the_trl_adapter_without_trl_names_its_extra_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-c", "import sys; sys.modules['trl'] = None; import rollmux.adapters.trl"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == ("ImportError: rollmux.adapters.trl needs the trl extra (trl is "
                                                   "missing): pip install 'rollmux[trl]'")
