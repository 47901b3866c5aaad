"""Wall time of `rollmux simulate`, end to end as a user runs it.

Usage: .venv/bin/python benchmarks/simulate_wall_time.py [--runs 3] [--jobs N] [--days D] [--policy rollmux]
Without --jobs: the embedded default trace with the default policies. With
--jobs N: an N-job Philly-driven trace (catalog mode, seed 0) is written to a
temporary file first and simulated with `--policy` (default rollmux). One
Philly VC holds at most ~2,000 arrivals, so a larger trace concatenates
ceil(N / 2,000) traces of the two largest VCs (11cb48, b436b2, alternating,
seeds 0, 1, ...) over the same window, job ids prefixed by chunk: N jobs over
`--days` (default 14) days. Reports each run's wall time and the median, and
the CPU time of the child (user + system; on a shared machine wall time also
counts other processes' turns).
"""

import argparse
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_trace(n_jobs: int, days: float, path: Path) -> None:
    """Write an n_jobs Philly-driven trace (see the module docstring) to `path`."""
    from rollmux.core.trace_io import dump_jobs
    from rollmux.workload import find_traces_dir, synthesize_philly
    traces = find_traces_dir(None)
    chunks = max(1, math.ceil(n_jobs / 2000))
    jobs = []
    for c in range(chunks):
        n = n_jobs // chunks + (1 if c < n_jobs % chunks else 0)
        vc = ("11cb48", "b436b2")[c % 2]
        part = synthesize_philly(traces, vc, n, days, "catalog", c // 2)
        jobs += [j.model_copy(update={"job_id": f"c{c}-{j.job_id}"}) for j in part] if chunks > 1 else part
    jobs.sort(key=lambda j: j.arrival_s)
    dump_jobs(jobs, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="Simulate an N-job Philly-driven trace.")
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--policy", default="rollmux")
    ap.add_argument("--keep", default=None, help="Also write the generated trace here.")
    args = ap.parse_args()
    exe = shutil.which("rollmux") or str(Path(sys.executable).parent / "rollmux")
    cmd, label = [exe, "simulate"], "default trace"
    tmp = None
    if args.jobs is not None:
        fd, name = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        tmp = Path(name)
        make_trace(args.jobs, args.days, tmp)
        if args.keep:
            shutil.copy(tmp, args.keep)
        cmd += ["--jobs", str(tmp), "--policy", args.policy]
        label = f"{args.jobs}-job trace over {args.days:g} days, --policy {args.policy}"
    walls, cpus = [], []
    try:
        for i in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            print(f"run {i + 1}: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU", flush=True)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    print(f"median of `rollmux simulate` ({label}): {statistics.median(walls):.2f} s wall, "
          f"{statistics.median(cpus):.2f} s CPU")


if __name__ == "__main__":
    main()
