"""An entrypoint's exit as its job's reason (live/exits.py), and how `rollmux run` learns it through Ray's
job API (cli/entrypoint.py `run_ray`, against a stand-in for Ray's client)."""

from __future__ import annotations

import pytest

from rollmux.cli import entrypoint
from rollmux.cli.entrypoint import Ended
from rollmux.live.exits import REASON_LINE_CHARS, clean_line, exit_reason, last_line, redact


def test_a_line_is_cleaned_of_escapes_and_control_characters_and_cut():
    assert clean_line("\x1b[1;31mError:\x1b[0m bad\tthing\x07 \u202eevil\x1b]0;title\x07 end\n") == \
        "Error: bad thing evil end"
    long = clean_line("x" * 1000)
    assert len(long) == REASON_LINE_CHARS and long.endswith("...")


def test_the_last_line_is_the_last_that_is_not_blank_progress_bars_included():
    assert last_line("Traceback (most recent call last):\n  File x\nValueError: no\n\n  \n") == "ValueError: no"
    assert last_line("loading  10%\rloading 100%\r") == "loading 100%"
    assert last_line("\n\x1b[0m\n") == "" and last_line("") == ""


def test_a_token_the_service_knows_and_whatever_follows_bearer_are_redacted():
    known = "s3cr3t-token-0123456789abcdef"
    text = f"auth {known} failed; header Authorization: Bearer abc.def; other 0123456789abcdefXYZ ok"
    assert redact(text, lambda w: w == known) == (
        "auth [redacted] failed; header Authorization: Bearer [redacted] other 0123456789abcdefXYZ ok")


@pytest.mark.parametrize("code,line,reason", [
    (3, "RuntimeError: boom", "entrypoint exited with code 3: RuntimeError: boom"),
    (0, "", "entrypoint exited with code 0 before the job finished"),
    (-9, "", "entrypoint killed by signal 9 (SIGKILL)"),
    (-200, "x", "entrypoint killed by signal 200: x"),
])
def test_the_reason_says_how_the_entrypoint_ended_and_its_last_line(code, line, reason):
    assert exit_reason(code, line) == reason


def test_the_launchers_status_is_the_entrypoints_or_128_plus_its_signal():
    assert (Ended(3, "").status, Ended(0, "").status, Ended(-15, "").status) == (3, 0, 143)


class _RayJobs:
    """Ray's JobSubmissionClient as `run_ray` uses it: a driver that logs two lines and fails with code 3."""

    submitted: list = []

    def __init__(self, address: str) -> None:
        self.polls = 0

    def submit_job(self, entrypoint: str, runtime_env: dict) -> str:
        _RayJobs.submitted.append((entrypoint, runtime_env))
        return "raysubmit_1"

    def get_job_status(self, sub: str):
        from ray.job_submission import JobStatus
        self.polls += 1
        return JobStatus.RUNNING if self.polls == 1 else JobStatus.FAILED

    def get_job_logs(self, sub: str) -> str:
        return "starting\n" if self.polls == 1 else "starting\nValueError: no dataset at /data\n"

    def get_job_info(self, sub: str):
        return type("Info", (), {"driver_exit_code": 3, "message": "Job entrypoint command failed"})()


def test_through_rays_job_api_the_drivers_exit_code_and_last_log_line_are_what_is_reported(monkeypatch, capsys):
    import ray.job_submission
    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", _RayJobs)
    monkeypatch.setattr(entrypoint, "RAY_POLL_S", 0.0)
    ended = entrypoint.run_ray("http://head:8265", ["python", "train.py", "--x"], {"ROLLMUX_JOB_ID": "a"})
    assert ended == Ended(3, "ValueError: no dataset at /data")
    assert _RayJobs.submitted[-1] == ("python train.py --x", {"env_vars": {"ROLLMUX_JOB_ID": "a"}})
    shown = capsys.readouterr()
    assert shown.out.count("starting") == 1 and "ValueError: no dataset" in shown.out  # each log line once
