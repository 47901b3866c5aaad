"""Placement decision latency of RollMux's inter-group scheduler with 10, 100 and 1,000 active jobs.

Usage: .venv/bin/python benchmarks/placement_latency.py [--json OUT]
Each row places N paper-profile jobs (no departures), then times 50 fresh
placement decisions against that state and reports p50 / p99 in milliseconds.
"""

import argparse
import json

from rollmux.study.placement_bench import placement_latency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sizes", default="10,100,1000")
    args = ap.parse_args()
    rows = [placement_latency(int(n)) for n in args.sizes.split(",")]
    print(f"{'active jobs':>12} {'groups':>7} {'p50 ms':>9} {'p99 ms':>9}")
    for r in rows:
        print(f"{r['jobs']:>12} {r['groups']:>7} {r['p50_ms']:>9.2f} {r['p99_ms']:>9.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
