"""The per-job co-located (veRL) mode measured alone (core/placement/options/colocated.py).

Usage: .venv/bin/python benchmarks/colocate.py [--traces-spec 2869ce:11,b436b2:12,e13805:13]
                                               [--modes paper,catalog] [--margins 0.8,1.0] [--regroup] [--wide]
                                               [--drift]
                                               [--json OUT] [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace (seeds other
than the study's 0) and runs, as independent tasks (a private local Ray by default): Solo-D,
RollMux with the mode off (`shipped` with `colocation.enabled=False`), and RollMux with the mode
on at each --margins value (`colocation.margin`: a job goes co-located when that costs less than
margin x its disaggregated placement per iteration) and co-located jobs regrouping off
(`colocation.regroup=False`). --regroup: also each margin with co-located jobs regrouping on (a
co-located job is then a consolidation candidate and moves into a group when that saves more
per iteration than its migration costs). --wide: also each margin with `colocation.narrow=False`
(a co-located job always runs on max(rollout, training) GPUs, the veRL model's G; by default a
16:8 job may run on its one training node, its rollout narrowed). Every run is the `shipped`
profile (DESIGN §10) otherwise (priced migrations, regrouping, drift repair, co-located pairing). The veRL baseline (every job co-located) is
computed in closed form alongside (not with --drift). Per run it prints gain over Solo-D,
SLO attainment, cost over the busy-time bound and migrations, then how the arrivals were
placed (co-located, isolated, joined a group).
--drift: 30% of each trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life).
"""

import argparse
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.sim.baselines import busy_time_bound, simulate_verl
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, number_list, sweep_done, sweep_rows, sweep_run
from rollmux.workload.drift import add_drift


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool) -> dict:
    """One row's simulation (a sweep task): "solo-d", "off", "colo@MARGIN", "wide@MARGIN" or "regroup@MARGIN"."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    overrides: dict = {"colocation.enabled": False}  # "off" (and Solo-D's planner)
    if run.startswith(("colo@", "wide@", "regroup@")):
        kind, margin = run.split("@")
        overrides = {"colocation.margin": float(margin), "colocation.regroup": kind == "regroup",
                     "colocation.narrow": kind != "wide"}
    res = run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d")
    return {**summary(res), "counts": dict(res.placements or {})}


def main() -> None:
    """Parse the options, map every simulation, print the ablation side by side."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13")
    ap.add_argument("--margins", default="0.8,1.0")
    ap.add_argument("--regroup", action="store_true", help="also each margin with --colo-regroup")
    ap.add_argument("--wide", action="store_true", help="also each margin with --no-colo-narrow")
    ap.add_argument("--drift", action="store_true")
    args = ap.parse_args()
    margins = number_list(args.margins, "--margins", "0.8,1.0")
    kinds = ["colo"] + ["wide"] * args.wide + ["regroup"] * args.regroup
    runs = ["solo-d", "off"] + [f"{kind}@{m:g}" for m in margins for kind in kinds]
    cluster, rows = default_cluster(), sweep_rows(args)
    tasks = [(run, jobs, cluster, seed, args.drift) for _, _, seed, jobs in rows for run in runs]
    t0 = time.perf_counter()
    results = sweep_run(args, one_run, tasks)
    names = runs[1:] + ([] if args.drift else ["verl"])  # (the veRL closed form has no drift)
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>30}" for r in names))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(runs, results[i * len(runs):(i + 1) * len(runs)]))
        if not args.drift:
            v = simulate_verl(jobs, cluster, seed)
            res["verl"] = {"cost_usd": v.cost_usd, "slo": v.slo_attainment,
                           "migrations": {"count": 0, "stall_hours": 0.0, "cost_usd": 0.0}, "counts": {}}
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% "
                 f"{res[r]['cost_usd'] / bound:.3f}b {res[r]['migrations']['count']:4d}m" for r in names]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>30}" for c in cells), flush=True)
        for r in runs[1:]:
            c = res[r]["counts"]
            joined = sum(n for k, n in c.items() if k not in ("isolated", "colocated", "paired"))
            print(f"{'':21} {r:>10}: co-located {c.get('colocated', 0)}, isolated {c.get('isolated', 0)}, "
                  f"paired {c.get('paired', 0)}, joined {joined}")
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "solo_cost_usd": solo, "drift": args.drift, "runs": res})
    sweep_done(args, out, "per run: gain over Solo-D, SLO met, cost / busy-time bound, migrations", t0)


if __name__ == "__main__":
    main()
