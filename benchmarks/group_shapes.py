"""Where RollMux's node-hours go, by group shape, on Philly-driven traces (rollmux/study/group_shapes.py).

Usage: .venv/bin/python benchmarks/group_shapes.py [--traces-spec 2869ce:11] [--modes paper]
                                                   [--plan worst|mean] [--rows 12] [--json OUT]
                                                   [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day trace, runs RollMux as shipped
(the `shipped` profile; `--plan` sets `admission.plan`) and prints, per group shape (members, rollout nodes, training
nodes), its share of the cost and, weighted by cost, its planned rollout- and training-pool
utilization and its planned period over its longest member cycle; co-located jobs are one row.
A pool at 0.6 in a shape that holds 40% of the cost is where the gap to the busy-time bound is.
Then by kind (co-located / lone / formed, tight when the tightest member's SLO is below 1.2):
cost share, busy share (the busy-time bound's price of the kind's planned work over its cost)
and waste share (its cost less that, over the run's): where the gap is, in the bound's terms.
"""

import argparse
import json
import sys
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.study.group_shapes import group_shapes
from rollmux.study.sections import profile
from rollmux.study.sweep import add_sweep_options, sweep_map, sweep_rows


def one_run(jobs: list[JobSpec], cluster: ClusterSpec, seed: int, plan: str) -> dict:
    """One trace's profile (a sweep task)."""
    return group_shapes(jobs, cluster, profile("shipped", {"admission.plan": plan}), seed)


def main() -> None:
    """Parse the options, profile every trace, print one table each."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11")
    ap.set_defaults(modes="paper")
    ap.add_argument("--plan", choices=("worst", "mean"), default=profile("shipped").admission.plan)
    ap.add_argument("--rows", type=int, default=12, help="shapes printed per trace, by cost share")
    args = ap.parse_args()
    cluster, rows = default_cluster(), sweep_rows(args)
    t0 = time.perf_counter()
    try:
        with sweep_map(args) as pmap:
            results = pmap(one_run, [(jobs, cluster, seed, args.plan) for _, _, seed, jobs in rows])
    except InputError as exc:
        sys.exit(f"error: {exc}")
    out = []
    for (vc, mode, seed, _), res in zip(rows, results):
        print(f"{vc} {mode} seed {seed}, --plan {args.plan}: ${res['cost_usd']:,.0f}")
        print(f"  {'shape (members, R, T)':24} {'cost':>6} {'R use':>6} {'T use':>6} {'stretch':>8}")
        for r in res["rows"][:args.rows]:
            shape = r["shape"] if isinstance(r["shape"], str) else "(" + ", ".join(map(str, r["shape"])) + ")"
            cells = (f"{r['rollout_use']:6.2f} {r['train_use']:6.2f} {r['stretch']:8.2f}"
                     if "train_use" in r else f"{'-':>6} {'-':>6} {'-':>8}")
            print(f"  {shape:24} {100 * r['cost_share']:5.1f}% {cells}", flush=True)
        print(f"  {'kind (SLO < 1.2: tight)':24} {'cost':>6} {'busy':>6} {'waste':>6}")
        for k in res["kinds"]:
            print(f"  {k['kind']:24} {100 * k['cost_share']:5.1f}% {k['busy_share']:6.2f} "
                  f"{100 * k['waste_share']:5.1f}%", flush=True)
        out.append({"vc": vc, "mode": mode, "seed": seed, "plan": args.plan, **res})
    print(f"# wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
