"""What measuring jobs as they run costs against declaring their profiles (core/state/profiling.py).

Usage: .venv/bin/python benchmarks/measure_as_run.py [--jobs TRACE] [--shares 0,0.5,1] [--seed 0] [--json OUT]

On one trace (the embedded 200-job Philly-driven trace by default) it runs RollMux as shipped
with a share of the jobs (every job's in turn: the first of each pair of arrivals, all of them)
submitted without phase times, `measure: true`: each runs alone on its nominal nodes until its
`profiling.warmup` + `profiling.iterations` iterations are measured, then is planned with what was
measured and revisited (it may move, priced, into a group). The trace's phase times stay the
simulated truth. It prints cost, gain over Solo-D, SLO attainment, migrations and the
placement shares per share measured.
"""

import argparse
import json

from rollmux.core.spec import default_cluster
from rollmux.core.trace_io import load_jobs
from rollmux.study.sections import profile, run_config, summary


def main() -> None:
    """Parse the options, run each share, print a line each."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default=None, help="A JSONL trace (default: the embedded trace).")
    ap.add_argument("--shares", default="0,0.5,1", help="Shares of the jobs measured as they run.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    jobs, cluster, cfg = load_jobs(args.jobs).jobs, default_cluster(), profile("shipped")
    solo = summary(run_config(jobs, cluster, cfg, args.seed, solo=True))["cost_usd"]
    rows = []
    for share in (float(s) for s in args.shares.split(",")):
        every = round(1 / share) if share > 0 else 0
        measured = [j.model_copy(update={"measure": every > 0 and i % every == 0}) for i, j in enumerate(jobs)]
        res = summary(run_config(measured, cluster, cfg, args.seed))
        rows.append({"share": share, "measured_jobs": sum(j.measure for j in measured), **res,
                     "gain": solo / res["cost_usd"]})
        mig = res["migrations"]
        print(f"measured {rows[-1]['measured_jobs']:4d}/{len(jobs)}: cost ${res['cost_usd']:,.0f}, "
              f"gain {solo / res['cost_usd']:.3f}x, SLO {100 * res['slo']:.1f}%, "
              f"{mig['count']} migrations ({mig['stall_hours']:.1f} h, ${mig['cost_usd']:,.0f}), "
              f"placements {json.dumps({k: round(v, 3) for k, v in res['placements'].items()})}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"solo_d_cost_usd": solo, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
