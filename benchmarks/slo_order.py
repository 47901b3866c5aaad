"""The SLO-aware order inside a group measured alone (core/slo_order.py).

Usage: .venv/bin/python benchmarks/slo_order.py [--traces-spec 2869ce:11,b436b2:12,e13805:13]
                                                [--modes paper,catalog] [--drift] [--json OUT]
                                                [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace (seeds other
than the study's 0) and runs, as independent tasks (a private local Ray by default): Solo-D,
RollMux with round robin inside groups (`intra_group.order=rr`, the default) and with the SLO
order (`intra_group.order=slo`). Both run the `groups` profile (DESIGN §10): worst-case
admission (the SLO order plans with it, so round robin is compared at the same admission) and
Algorithm 1's search (nominal shapes, no co-located jobs, Δ pricing), with priced migrations,
regrouping and drift repair; Solo-D plans with it too. Per run it prints gain over Solo-D, SLO
attainment, cost over the busy-time bound and migrations, then the isolated placements by
reason (core/placement/why.py: member_slo is the one the SLO order targets). --drift: 30% of each
trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life).
"""

import argparse
import json
import sys
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import busy_time_bound
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, sweep_map, sweep_rows
from rollmux.workload.drift import add_drift

RUNS = ("solo-d", "rr", "slo")


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool) -> dict:
    """One row's simulation (a sweep task)."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    if run == "solo-d":
        return {**summary(run_config(jobs, cluster, profile("groups"), seed, solo=True)), "why": None}
    t0 = time.process_time()
    res = run_config(jobs, cluster, profile("groups", {"intra_group.order": run}), seed)
    why = (res.placements_why or {}).get("placements", {})
    return {**summary(res), "why": why, "cpu_s": time.process_time() - t0}


def main() -> None:
    """Parse the options, map every simulation, print the ablation side by side."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13")
    ap.add_argument("--drift", action="store_true")
    args = ap.parse_args()
    cluster, rows = default_cluster(), sweep_rows(args)
    tasks = [(run, jobs, cluster, seed, args.drift) for _, _, seed, jobs in rows for run in RUNS]
    t0 = time.perf_counter()
    try:
        with sweep_map(args) as pmap:
            results = pmap(one_run, tasks)
    except InputError as exc:
        sys.exit(f"error: {exc}")
    names = list(RUNS)[1:]
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>30}" for r in names))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(RUNS, results[i * len(RUNS):(i + 1) * len(RUNS)]))
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% "
                 f"{res[r]['cost_usd'] / bound:.3f}b {res[r]['migrations']['count']:4d}m" for r in names]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>30}" for c in cells), flush=True)
        for r in names:
            why = " ".join(f"{k} {v}" for k, v in res[r]["why"].items() if v)
            print(f"{'':21} {r:>4}: isolated {sum(res[r]['why'].values())} ({why}); cpu {res[r]['cpu_s']:.0f} s")
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "solo_cost_usd": solo, "runs": res})
    print("# per run: gain over Solo-D, SLO met, cost / busy-time bound, migrations; "
          f"wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
