"""Wall time of `rollmux simulate` (default trace, default policies), end to end as a user runs it.

Usage: .venv/bin/python benchmarks/simulate_wall_time.py [--runs 3]
Runs the installed `rollmux simulate` command in a subprocess and reports each
run's wall time and the median.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    exe = shutil.which("rollmux") or str(Path(sys.executable).parent / "rollmux")
    walls = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run([exe, "simulate"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        print(f"run {i + 1}: {walls[-1]:.2f} s")
    print(f"median wall time of `rollmux simulate` (default trace): {statistics.median(walls):.2f} s")


if __name__ == "__main__":
    main()
