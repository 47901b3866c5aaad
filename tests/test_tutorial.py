"""The newcomer path: docs/tutorial.md's commands, extracted from its fenced blocks and run in
order, verbatim, ending with a real job run against `rollmux serve`.

The one change made to the text: the tutorial's port (8470) becomes a free one, so the test never
meets another server. The commands run through `bash -e` in a fresh folder holding a copy of
`examples/`, with this interpreter's environment first on PATH; a trap stops the background
server whatever happens.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(bash|console)\n(.*?)^```", re.M | re.S)
PORT = "8470"


def commands(text: str) -> list[str]:
    """The command lines of the fenced bash/console blocks, in order (a console block's `$ ` prompt
    dropped, its output lines skipped)."""
    lines: list[str] = []
    for kind, body in FENCE.findall(text):
        for line in body.splitlines():
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line.strip():
                lines.append(line)
    return lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, list[str]]:
    """The tutorial run once in a fresh folder: (the finished bash, the folder, its commands)."""
    work = tmp_path_factory.mktemp("tutorial")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    lines = commands(TUTORIAL.read_text())
    script = "\n".join(["trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", *lines]).replace(PORT, str(_free_port()))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=180)
    return done, work, lines


def test_the_tutorial_shows_each_step_as_a_command():
    lines = commands(TUTORIAL.read_text())
    starts = [line.split()[:2] for line in lines]
    for step in (["rollmux", "simulate"], ["rollmux", "serve"], ["rollmux", "run"], ["rollmux", "status"],
                 ["kill", "%1"]):
        assert step in starts, f"docs/tutorial.md has no `{' '.join(step)}` command"
    assert lines[-1] == "kill %1"  # stopping the server is the last step
    assert any(line.rstrip().endswith("&") for line in lines if line.startswith("rollmux serve"))


def test_run_every_command_succeeds(tutorial):
    done, work, _ = tutorial
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def test_run_the_simulation_prints_its_table(tutorial):
    done, _, _ = tutorial
    for policy in ("rollmux", "solo-d", "verl"):
        assert re.search(rf"│ {policy}\s*│", done.stdout), policy


def test_run_the_example_job_ran_every_iteration_under_the_scheduler(tutorial):
    done, _, _ = tutorial
    assert [f"quickstart: iteration {i}/5" in done.stdout for i in range(1, 6)] == [True] * 5
    assert "quickstart: finished 5 iterations as quickstart\n" in done.stdout
    assert "quickstart: finished 5 iterations as quickstart-profiled\n" in done.stdout


def test_run_the_status_after_the_job_says_it_is_done(tutorial):
    done, _, _ = tutorial
    assert re.search(r"│ quickstart\s*│ done\s*│", done.stdout), done.stdout[-3000:]


def test_run_the_service_kept_a_journal_and_a_private_admin_token(tutorial):
    _, work, _ = tutorial
    assert (work / "tutorial.db").stat().st_size > 0
    assert "SIGINT/SIGTERM stops it" in (work / "serve.log").read_text()
    assert (work / "admin.token").stat().st_mode & 0o077 == 0  # created readable by its owner only


def test_run_leaves_only_files_git_ignores(tutorial):
    # Run in a checkout, the tutorial's token, journal, log and profiled record must not become changes.
    _, work, _ = tutorial
    left = [p.name + ("/" if p.is_dir() else "") for p in work.iterdir() if p.name != "examples"]
    assert {"admin.token", "tutorial.db", "serve.log", ".rollmux-tokens/", "quickstart-profiled.yaml"} <= set(left)
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"], input="\n".join(left),
                             capture_output=True, text=True).stdout.split()
    assert sorted(set(left) - set(ignored)) == []
