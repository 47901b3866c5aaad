"""How soon a job whose entrypoint dies before its first call is failed: `rollmux run --local` against
`rollmux serve` (child processes), the entrypoint exiting with code 3 at once.

Each run's entrypoint writes the wall-clock time it exits at; the service logs the failure (its
log line's time, to the millisecond), and `rollmux run` returns once the failure is committed.
Printed per run and as p50 / max: entrypoint exit -> job failed (the service's log), and entrypoint
exit -> `rollmux run` returned (with its exit code, which must be 3). The service's heartbeat and
start-up timeouts are 60 s, so only the exit report can fail the job this soon.

    .venv/bin/python benchmarks/exit_report.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from rollmux.live.local import ProcessServer

ENTRYPOINT = ("import sys, time; print('ModuleNotFoundError: flash_attn', file=sys.stderr); "
              "open(sys.argv[1], 'w').write(repr(time.time())); sys.exit(3)")
RECORD = {"job_id": "exit-3", "arrival_s": 0.0, "duration_s": 3600.0, "slo": 1.5, "rollout_gpus": 8,
          "train_gpus": 8, "rollout_s": {"median": 100.0, "sigma": 0.0, "max": 100.0}, "train_s": 100.0,
          "sync_s": 1.0, "host_gb": {"rollout": 1.0, "train": 1.0}}


def failed_at(log: str, job_id: str) -> float:
    """The wall-clock time of the service's log line that failed `job_id` for its entrypoint's exit."""
    m = re.search(rf"^(\S+ \S+),(\d{{3}}) WARNING rollmux.service job {re.escape(job_id)}: entrypoint exited", log,
                  re.M)
    if m is None:
        raise SystemExit(f"the service did not log the failure of {job_id}")
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000


def main() -> None:
    """Run the measurement and print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rollmux-exit-"))
    (work / "job.yaml").write_text(yaml.safe_dump(RECORD))
    server = ProcessServer(str(work / "j.db"), work, extra=["--heartbeat-timeout", "60", "--startup-timeout", "60"])
    to_fail, to_return = [], []
    try:
        for i in range(args.runs):
            job_id, exited = f"exit-3-{i}", work / f"exited-{i}"
            done = subprocess.run([sys.executable, "-m", "rollmux.cli", "run", str(work / "job.yaml"), "--job-id",
                                   job_id, "--url", server.url, "--admin-token-file", str(server.token_file),
                                   "--token-dir", str(work / "tokens"), "--local", "--", sys.executable, "-c",
                                   ENTRYPOINT, str(exited)], capture_output=True, text=True, cwd=work,
                                  env={**os.environ})
            returned = time.time()
            if done.returncode != 3:
                raise SystemExit(f"rollmux run exited {done.returncode}, not 3: {done.stderr[-500:]}")
            t_exit = float(exited.read_text())
            to_fail.append(failed_at(server.output(), job_id) - t_exit)
            to_return.append(returned - t_exit)
            print(f"{job_id}: failed {to_fail[-1] * 1e3:.0f} ms after its entrypoint exited; rollmux run exited 3 "
                  f"after {to_return[-1] * 1e3:.0f} ms")
    finally:
        server.signal()
    for what, xs in (("entrypoint exit -> job failed", to_fail),
                     ("entrypoint exit -> rollmux run returned", to_return)):
        print(f"{what}: p50 {statistics.median(xs) * 1e3:.0f} ms, max {max(xs) * 1e3:.0f} ms over {len(xs)} runs")


if __name__ == "__main__":
    main()
