"""How `rollmux run` runs a job's entrypoint and learns how it ended: its exit code and its last error line.

Locally (`--local`) the entrypoint is a child process: its standard output is this command's, and
its standard error is copied to this command's as it comes (`StderrTee`) while the last of it is
kept, so the line it died with can be the job's reason. Through Ray's job API (`--ray-address`)
the job's logs are printed as they grow and the driver's exit code is Ray's. Either way the
launcher (rollmux/cli/launch.py) reports the exit to the service at once.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from rollmux.cli.app import err, out
from rollmux.errors import InputError
from rollmux.live.exits import last_line

TAIL_CHARS = 8192  # the end of the error output kept for its last line
DRAIN_S = 1.0      # after the entrypoint exited, how long its stderr may still be read (a child it left
                   # behind may hold the pipe open: its exit is reported anyway)
RAY_POLL_S = 1.0   # how often the Ray job's status and logs are read


@dataclass(frozen=True)
class Ended:
    """How an entrypoint ended: its exit code (negative: killed by that signal, as subprocess says) and the
    last line that was not blank of its error output ('' if none)."""

    code: int
    line: str

    @property
    def status(self) -> int:
        """The exit status `rollmux run` takes from it: its code, or 128 + N for signal N (as a shell)."""
        return self.code if self.code >= 0 else 128 - self.code


def _to_stderr(chunk: bytes) -> None:
    """Write a child's bytes to this process's stderr as they came (text where stderr has no buffer)."""
    buffer = getattr(sys.stderr, "buffer", None)
    if buffer is not None:
        buffer.write(chunk)
        buffer.flush()
    else:
        sys.stderr.write(chunk.decode(errors="replace"))
        sys.stderr.flush()


class StderrTee:
    """Copies a child's stderr pipe to this process's stderr as it comes, keeping its last TAIL_CHARS."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe, self._tail = pipe, b""
        self._thread = threading.Thread(target=self._copy, name="rollmux-run-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        fd = self._pipe.fileno()
        while True:
            chunk = os.read(fd, 65536)  # whatever has come: a progress bar without a newline shows at once
            if not chunk:
                break
            _to_stderr(chunk)
            self._tail = (self._tail + chunk)[-TAIL_CHARS:]  # (one assignment: `last_line` reads it whole)
        self._pipe.close()

    def last_line(self) -> str:
        """Once the child exited: the last line of its error output that is not blank (what came within
        DRAIN_S, if a process it left behind still holds the pipe; that output is still copied)."""
        self._thread.join(DRAIN_S)
        return last_line(self._tail.decode(errors="replace"))


def run_local(entrypoint: list[str], env: dict[str, str]) -> Ended:
    """Run the driver here, its stderr teed (`StderrTee`); how it ended. Ctrl-C reaches it too (one
    process group): its exit is still waited for, and reported."""
    try:
        proc = subprocess.Popen(entrypoint, env={**os.environ, **env}, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise InputError("ENTRYPOINT", f"no such program: {entrypoint[0]}") from None
    except PermissionError:
        raise InputError("ENTRYPOINT", f"{entrypoint[0]}: permission denied (not executable?)") from None
    assert proc.stderr is not None
    tee = StderrTee(proc.stderr)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue  # the child got the same SIGINT: how it ends is what is reported
    return Ended(code, tee.last_line())


def run_ray(address: str, entrypoint: list[str], env: dict[str, str]) -> Ended:
    """Submit the driver through Ray's job API, print its logs as they grow; how it ended (the driver's exit
    code, or 1 when Ray gives none for a job that did not succeed, and the last line of its logs)."""
    from ray.job_submission import JobStatus, JobSubmissionClient
    client = JobSubmissionClient(address)
    sub = client.submit_job(entrypoint=shlex.join(entrypoint), runtime_env={"env_vars": env})
    shown, logs = 0, ""
    while True:
        status = client.get_job_status(sub)
        logs = client.get_job_logs(sub)
        if len(logs) > shown:
            out.print(logs[shown:], end="", highlight=False, markup=False)
            shown = len(logs)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        time.sleep(RAY_POLL_S)  # Ray's job API has no wait: its status is polled
    if status == JobStatus.SUCCEEDED:
        return Ended(0, "")
    err.print(f"ray job {sub}: {status}", highlight=False)
    info: Any = client.get_job_info(sub)
    code = getattr(info, "driver_exit_code", None)
    line = last_line(logs[-TAIL_CHARS:]) or str(getattr(info, "message", None) or f"ray job {status}")
    return Ended(code if isinstance(code, int) and code != 0 else 1, line)
