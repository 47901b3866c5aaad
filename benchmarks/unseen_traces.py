"""Regrouping vs static groups, and drift repair, on traces the study never ran.

Usage: .venv/bin/python benchmarks/unseen_traces.py [--traces-spec 2869ce:11,b436b2:12,e13805:13]
                                                    [--modes paper,catalog] [--json OUT]
                                                    [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace
(seeds other than the study's 0) and runs, as independent tasks of one Pmap
(a private local Ray by default): Solo-D; RollMux with static groups (the
`shipped` profile without shrinking, regrouping or repair, compaction kept);
RollMux as shipped (regrouping with priced migrations, repair on); and the same
trace with 30% of its jobs drifting (rollout and training x1.5-2.5 after 20-60%
of their life) with and without repair (`regroup.repair`). It prints gain over
Solo-D, SLO attainment and migrations per run, and with --json writes them.
"""

import argparse
import json
import sys
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, sweep_map, sweep_rows
from rollmux.workload.drift import add_drift

RUNS = ("solo-d", "static", "rollmux", "drift, repair", "drift, no repair")


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """One row's simulation (a sweep task)."""
    overrides: dict = {}
    if run == "static":
        overrides = {"regroup.shrink": False, "regroup.enabled": False, "regroup.repair": False}
    if run.startswith("drift"):
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
        overrides = {"regroup.repair": run == "drift, repair"}
    return summary(run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d"))


def main() -> None:
    """Parse the options, map every simulation, print one line per trace."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13")
    args = ap.parse_args()
    cluster, rows = default_cluster(), sweep_rows(args)
    tasks = [(run, jobs, cluster, seed) for _, _, seed, jobs in rows for run in RUNS]
    t0 = time.perf_counter()
    try:
        with sweep_map(args) as pmap:
            results = pmap(one_run, tasks)
    except InputError as exc:
        sys.exit(f"error: {exc}")
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>24}" for r in RUNS[1:]))
    for i, (vc, mode, seed, _) in enumerate(rows):
        res = dict(zip(RUNS, results[i * len(RUNS):(i + 1) * len(RUNS)]))
        solo = res["solo-d"]["cost_usd"]
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% {res[r]['migrations']['count']:4d}m"
                 for r in RUNS[1:]]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>24}" for c in cells), flush=True)
        out.append({"vc": vc, "mode": mode, "seed": seed, "runs": res})
    print(f"# gain over Solo-D, SLO met, migrations; wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
