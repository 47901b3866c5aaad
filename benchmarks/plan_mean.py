"""SLO admission by the mean (`admission.plan=mean`) vs the worst case, measured alone.

Usage: .venv/bin/python benchmarks/plan_mean.py [--traces-spec 2869ce:11,b436b2:12,e13805:13]
                                                [--modes paper,catalog] [--drift] [--stress N]
                                                [--z 3.09] [--json OUT] [--workers N] [--serial]
Unseen traces: for each VC:seed and mode a 200-job, 14-day Philly-driven trace (seeds other
than the study's 0); runs Solo-D, RollMux with `admission.plan=worst` and with `mean` (at
confidence `admission.z`; the `shipped` profile otherwise, DESIGN §10: priced migrations,
regrouping, drift repair, elastic rollout, the co-located mode, stretch pricing) as independent
tasks (a private local Ray by default). Per run: gain over Solo-D, SLO attainment, cost / busy-time
bound, migrations, and the isolated placements' reasons (placements_why).
--no-elastic: nominal rollout shapes in both modes (elastic rollout, on by default, acts under
both plans: the mean plan's sampled schedule scales each draw by the member's factor,
core/placement/options/, core/placement/admission.py). --drift: 30% of each trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life).
--stress N: instead, the N stress traces of benchmarks/slo_stress.py (30 heavy-load jobs each,
SLO ~ U(1, 1.5), long-tail migration on for half of them) under both modes, with the `groups`
profile's search (nominal shapes, no co-located jobs, Δ pricing); prints every miss and each
mode's job-level attainment.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import busy_time_bound
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, sweep_map, sweep_rows
from rollmux.workload.drift import add_drift


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool, z: float,
            elastic: bool = True) -> dict:
    """One row's simulation (a sweep task): "solo-d", "worst" or "mean"."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    overrides: dict = {"shapes.elastic_rollout": elastic}
    if run != "solo-d":
        overrides |= {"admission.plan": run, "admission.z": z}
    res = run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d")
    why = (res.placements_why or {}).get("placements", {})
    return {**summary(res), "counts": dict(res.placements or {}), "why": {k: v for k, v in why.items() if v}}


def stress_run(seed: int, plan: str, z: float) -> dict:
    """One stress trace of benchmarks/slo_stress.py under `plan` (a sweep task)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from factories import synthetic_trace

    jobs = synthetic_trace(np.random.default_rng(seed), 30, sigma=(0.0, 0.1, 0.3)[seed % 3],
                           mean_gap_s=(60.0, 0.0)[seed % 2], slo_range=(1.0, 1.5), duration_range=(3000.0, 20000.0))
    cfg = profile("groups", {"admission.plan": plan, "admission.z": z, "intra_group.migration": seed % 4 < 2})
    res = run_config(jobs, default_cluster(), cfg, seed)
    return {"jobs": len(jobs), "finished": len(res.outcomes), "cost": res.cost_usd,
            "missed": [o.job_id for o in res.outcomes if not o.slo_met],
            "shared": len(jobs) - res.placements.get("isolated", 0)}


def main() -> None:
    """Parse the options, map every simulation, print both modes side by side."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13")
    ap.add_argument("--drift", action="store_true")
    ap.add_argument("--no-elastic", action="store_true", help="nominal rollout shapes in both modes")
    ap.add_argument("--stress", type=int, default=0)
    ap.add_argument("--z", type=float, default=profile("shipped").admission.z)
    args = ap.parse_args()
    t0 = time.perf_counter()
    try:
        with sweep_map(args) as pmap:
            if args.stress:
                stress(pmap, args)
            else:
                unseen(pmap, args)
    except InputError as exc:
        sys.exit(f"error: {exc}")
    print(f"# wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def stress(pmap, args) -> None:
    """Both modes on the stress traces: misses per trace, attainment, shared placements, cost."""
    plans = ("worst", "mean")
    tasks = [(seed, plan, args.z) for seed in range(args.stress) for plan in plans]
    results = pmap(stress_run, tasks)
    out = {}
    for plan in plans:
        rows = [r for (_, p, _), r in zip(tasks, results) if p == plan]
        for seed, r in enumerate(rows):
            if r["missed"] or r["finished"] != r["jobs"]:
                print(f"{plan} trace {seed}: missed {r['missed']}, finished {r['finished']}/{r['jobs']}")
        jobs = sum(r["jobs"] for r in rows)
        missed = sum(len(r["missed"]) + r["jobs"] - r["finished"] for r in rows)
        out[plan] = {"traces": len(rows), "traces_with_miss": sum(bool(r["missed"]) for r in rows),
                     "jobs": jobs, "missed": missed, "attainment": 1 - missed / jobs,
                     "shared": sum(r["shared"] for r in rows), "cost_usd": sum(r["cost"] for r in rows)}
        o = out[plan]
        print(f"{plan:5}: {o['traces']} traces, {o['traces_with_miss']} with a miss; {o['missed']}/{jobs} jobs "
              f"missed ({100 * o['attainment']:.2f}% attained); {o['shared']} shared placements; "
              f"cost ${o['cost_usd']:,.0f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


def unseen(pmap, args) -> None:
    """Solo-D and both modes on the Philly-driven traces."""
    cluster, rows = default_cluster(), sweep_rows(args)
    runs = ["solo-d", "worst", "mean"]
    tasks = [(run, jobs, cluster, seed, args.drift, args.z, not args.no_elastic)
             for _, _, seed, jobs in rows for run in runs]
    results = pmap(one_run, tasks)
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>30}" for r in runs[1:]))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(runs, results[i * len(runs):(i + 1) * len(runs)]))
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% "
                 f"{res[r]['cost_usd'] / bound:.3f}b {res[r]['migrations']['count']:4d}m" for r in runs[1:]]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>30}" for c in cells), flush=True)
        for r in runs[1:]:
            print(f"{'':21} {r:>6}: isolated {res[r]['counts'].get('isolated', 0)}, why {res[r]['why']}")
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "solo_cost_usd": solo, "drift": args.drift, "runs": res})
    print("# per run: gain over Solo-D, SLO met, cost / busy-time bound, migrations", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
