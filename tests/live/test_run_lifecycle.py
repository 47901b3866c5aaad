"""A job's lifecycle through the real interface: `rollmux run --local` against `rollmux serve` in child processes.

An entrypoint that exits before its job finished fails the job at once, with its exit code and the last
line it wrote to stderr as the reason, and `rollmux run` exits with its status; a job that starts more
slowly than the heartbeat timeout is not failed for it; `--job-id` runs a record under another id, and
a finished job's id can be run again. Client commands never create a missing admin token file.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from factories import make_job
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.live.local import ProcessServer

JOB = Path(__file__).parent / "data" / "lifecycle_job.py"
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "exit_report.py"  # (its reading of the service's log)
# Start-ups are long and heartbeats short: only the exit report can fail a job that never called in time.
SERVE = ["--heartbeat-timeout", "1", "--startup-timeout", "60"]
EXIT_3_REASON = "entrypoint exited with code 3: ModuleNotFoundError: No module named 'flash_attn'"


@pytest.mark.parametrize("before,after", [(["status"], []), (["submit", "job.yaml"], []), (["cancel", "a"], []),
                                          (["run", "job.yaml", "--local"], ["--", "true"])])
def test_client_commands_never_create_a_missing_admin_token_file(tmp_path, monkeypatch, before, after):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(make_job("a").model_dump(exclude_none=True)))
    res = CliRunner().invoke(app, [*before, "--url", "http://127.0.0.1:9", "--admin-token-file", "admin.token", *after])
    assert res.exit_code == 2, res.output
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        "error: --admin-token-file admin.token: no such file (rollmux serve creates it: give the file the server "
        "was started with)"], res.stderr
    assert not (tmp_path / "admin.token").exists()


# An entrypoint that leaves a process behind holding its stderr (which it inherits), once that one is up,
# and exits with code 3; the process waits (a minute at most) for the file argv[2] to appear.
LEAVES_A_CHILD = """import os, subprocess, sys, time
stay = "import os, sys, time\\nopen(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\\n" \\
       "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n" \\
       "for _ in range(1200):\\n    if os.path.exists(sys.argv[2]): break\\n    time.sleep(0.05)"
subprocess.Popen([sys.executable, "-c", stay, sys.argv[1], sys.argv[2]])
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)  # (polling for the file: its process is starting)
print("RuntimeError: boom", file=sys.stderr)
sys.exit(3)
"""


def test_run_local_reports_an_exit_while_a_process_it_left_still_holds_its_stderr(tmp_path):
    from rollmux.cli.entrypoint import Ended, run_local
    pid_file, release = tmp_path / "pid", tmp_path / "release"
    ended = run_local([sys.executable, "-c", LEAVES_A_CHILD, str(pid_file), str(release)], {})
    try:
        assert ended == Ended(3, "RuntimeError: boom")
        os.kill(int(pid_file.read_text()), 0)  # the child it left is alive: its exit did not wait for that one
    finally:
        release.write_text("")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`rollmux serve` (1 s heartbeat timeout, 60 s start-up timeout), a job record and a folder to run in."""
    work = tmp_path_factory.mktemp("lifecycle")
    record = make_job("lifecycle", rollout=100, train=100, slo=1.0).model_dump(exclude_none=True)
    (work / "job.yaml").write_text(yaml.safe_dump(record))
    server = ProcessServer(str(work / "j.db"), work, extra=SERVE)
    try:
        yield server, work
    finally:
        server.signal()


def _run(served, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    server, work = served
    return subprocess.run([sys.executable, "-m", "rollmux.cli", "run", str(work / "job.yaml"), "--url", server.url,
                           "--admin-token-file", str(server.token_file), "--token-dir", str(work / "tokens"),
                           *args], cwd=work, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def _job(served, job_id: str) -> dict:
    server, _ = served
    r = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {server.admin_token}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_run_an_entrypoint_that_exits_3_before_its_first_call_fails_its_job_at_once(served):
    exited = served[1] / "exited"
    done = _run(served, "--job-id", "exit-3", "--local", "--", sys.executable, str(JOB), "exit3",
                env={"EXITED": str(exited)})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "ModuleNotFoundError: No module named 'flash_attn'\n" in done.stderr  # its stderr, still shown
    assert done.stderr.rstrip().endswith(f"rollmux run: job exit-3 is failed ({EXIT_3_REASON})"), done.stderr
    job = _job(served, "exit-3")
    assert (job["status"], job["reason"]) == ("failed", EXIT_3_REASON)
    # The service logged the failure (to the millisecond) within 2 s of the entrypoint's exit.
    spec = importlib.util.spec_from_file_location("exit_report", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.failed_at(served[0].output(), "exit-3") - float(exited.read_text()) < 2.0


def test_run_an_entrypoint_that_exits_0_without_finishing_fails_its_job_and_run_exits_1(served):
    done = _run(served, "--job-id", "exit-0", "--local", "--", sys.executable, str(JOB), "exit0")
    assert done.returncode == 1, done.stdout + done.stderr
    job = _job(served, "exit-0")
    assert (job["status"], job["reason"]) == ("failed", "entrypoint exited with code 0 before the job finished")


def test_run_a_job_slower_to_start_than_the_heartbeat_timeout_finishes_and_its_id_runs_again(served):
    for wait_s in ("1.8", "0"):  # 1.8 s before its first call: past the heartbeat timeout and a watchdog round
        done = _run(served, "--job-id", "slow-start", "--local", "--", sys.executable, str(JOB), "finish", wait_s)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "lifecycle job slow-start: finished" in done.stdout
        assert _job(served, "slow-start")["status"] == "done"


def test_run_refuses_the_id_of_a_running_job_saying_how_to_go_on(served):
    server, work = served
    record = make_job("busy", rollout=100, train=100, slo=1.0).model_dump(exclude_none=True)
    r = httpx.post(f"{server.url}/v1/jobs", json=record, headers={"Authorization": f"Bearer {server.admin_token}"})
    assert r.status_code == 201, r.text
    done = _run(served, "--job-id", "busy", "--local", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "still running: cancel it (rollmux cancel busy" in line and "rollmux run --job-id NEW" in line, line
