"""Placement decision latency of RollMux's inter-group scheduler with 10 to 10,000 active jobs.

Usage: .venv/bin/python benchmarks/placement_latency.py [--sizes 10,100,1000,10000] [--probes 50] [--nominal]
                                                        [--json OUT]
Each row places N paper-profile jobs (no departures; the groups kept indexed as
the cluster state keeps them), then times `--probes` fresh placement decisions
against that state and reports p50 / p99 in milliseconds, wall clock and CPU
time of this process (on a shared machine the wall clock also counts other
processes' turns), and how long building the state took. `rollmux bench
placement --jobs N` prints the same wall-clock row for one size. The policy is built by
`build_policy` from `rollmux.study.placement_bench.latency_config` (DESIGN §10): the group
search `rollmux simulate` runs (the `shipped` profile: admission by the mean, elastic rollout
shapes, stretch pricing) with the per-job co-located mode off, since these 8:8 jobs would all
run co-located and leave no group to search; `--nominal`: the `paper` profile (Algorithm 1:
nominal shapes, worst-case admission, Δ pricing).
"""

import argparse
import json

from rollmux.study.placement_bench import placement_latency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--nominal", action="store_true", help="Algorithm 1 (default: the search rollmux simulate runs)")
    args = ap.parse_args()
    print(f"{'active jobs':>12} {'groups':>7} {'p50 ms':>9} {'p99 ms':>9} {'p50 cpu':>9} {'p99 cpu':>9} {'build s':>8}",
          flush=True)
    rows = []
    for n in args.sizes.split(","):
        r = placement_latency(int(n), probes=args.probes, shipped=not args.nominal)
        rows.append(r)
        print(f"{r['jobs']:>12} {r['groups']:>7} {r['p50_ms']:>9.2f} {r['p99_ms']:>9.2f} "
              f"{r['p50_cpu_ms']:>9.2f} {r['p99_cpu_ms']:>9.2f} {r['build_s']:>8.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
