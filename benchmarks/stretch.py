"""Stretch pricing (core/placement/pricing.py) against Δ pricing, side by side on Philly-driven traces.

Usage: .venv/bin/python benchmarks/stretch.py [--traces-spec 2869ce:11,b436b2:12,...]
                                              [--modes paper,catalog] [--speeds 1.0,0.8]
                                              [--json OUT] [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed, mode and co-located speed it synthesizes a 200-job, 14-day trace and runs,
as independent tasks of one Pmap (a private local Ray by default): Solo-D, RollMux as
shipped (the `shipped` profile, stretch pricing on, at `colocation.speed`) and the same with
`placement.pricing=delta` (the first valid option in Δ order, Algorithm 1's choice). At a
co-located speed other than 1 it also runs the groups alone (`colocation.enabled=False`,
stretch pricing on), the level a co-location rule that misjudges the mode should not fall below. It prints gain over Solo-D and SLO attainment per run.
"""

import argparse
import json
import sys
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, number_list, sweep_map, sweep_rows

RUNS = ("solo-d", "stretch", "delta", "groups alone")


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, speed: float) -> dict:
    """One row's simulation (a sweep task)."""
    overrides: dict = {"colocation.speed": speed}
    if run == "delta":
        overrides["placement.pricing"] = "delta"
    if run == "groups alone":
        overrides["colocation.enabled"] = False
    return summary(run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d"))


def main() -> None:
    """Parse the options, map every simulation, print one line per trace and speed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13,0e4a51:0,103959:21,11cb48:22,7f04ca:23")
    ap.add_argument("--speeds", default="1.0,0.8", help="co-located speeds, comma-separated")
    args = ap.parse_args()
    speeds = number_list(args.speeds, "--speeds", "1.0,0.8")
    cluster = default_cluster()
    rows = [(vc, mode, seed, speed, jobs) for vc, mode, seed, jobs in sweep_rows(args) for speed in speeds]
    runs = {speed: RUNS if speed != 1.0 else RUNS[:3] for speed in speeds}
    tasks = [(run, jobs, cluster, seed, speed) for _, _, seed, speed, jobs in rows for run in runs[speed]]
    t0 = time.perf_counter()
    try:
        with sweep_map(args) as pmap:
            results = iter(pmap(one_run, tasks))
    except InputError as exc:
        sys.exit(f"error: {exc}")
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4} {'speed':>5}  " + "  ".join(f"{r:>15}" for r in RUNS[1:]))
    for vc, mode, seed, speed, _ in rows:
        res = {run: next(results) for run in runs[speed]}
        solo = res["solo-d"]["cost_usd"]
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}%" if r in res else "-"
                 for r in RUNS[1:]]
        print(f"{vc:7} {mode:8} {seed:>4} {speed:>5}  " + "  ".join(f"{c:>15}" for c in cells), flush=True)
        out.append({"vc": vc, "mode": mode, "seed": seed, "colo_speed": speed, "runs": res})
    print(f"# gain over Solo-D, SLO met; wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
