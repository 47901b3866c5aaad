"""The Makefile's two commands, read with `make -n` (nothing runs): `make run` installs the package
alone, `make test` says up front what it installs and why; both say what they are doing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make TARGET` would run from a fresh clone (a virtual environment not made yet)."""
    res = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    return res.stdout.splitlines()


def test_make_run_installs_the_package_without_any_extra(tmp_path):
    installs = [ln for ln in dry_run("run", tmp_path) if " install " in ln and "pip" in ln and "echo" not in ln]
    assert any(ln.endswith("install --quiet -e .") for ln in installs), installs
    assert not any("[" in ln for ln in installs), installs  # no extra: not [test], not [demo]


def test_make_test_explains_what_it_installs_before_installing(tmp_path):
    commands = dry_run("test", tmp_path)
    first_install = next(i for i, ln in enumerate(commands) if "pip install" in ln and not ln.startswith("echo"))
    said = " ".join(ln for ln in commands[:first_install] if ln.startswith("echo"))
    for words in ("test extra", "torch, TRL and veRL", "pytest-xdist", "redis-server", "chromium", "kubectl", "apt-get",
                  "root"):
        assert words in said, words
    assert any('install --quiet -e ".[test]"' in ln for ln in commands)


@pytest.mark.parametrize("target", ["run", "test"])
def test_both_say_what_they_are_doing(tmp_path, target):
    commands = dry_run(target, tmp_path)
    says = [ln for ln in commands if ln.startswith('echo "make: ')]
    assert len(says) >= 2, commands
