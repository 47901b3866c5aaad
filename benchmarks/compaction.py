"""Rollout compaction measured alone (core/repair/compaction.py): a group gives back an idle rollout node.

Usage: .venv/bin/python benchmarks/compaction.py [--traces-spec 2869ce:11,b436b2:12,e13805:13,7f04ca:23]
                                                 [--modes paper,catalog] [--every 600,1800,3600] [--drift]
                                                 [--json OUT] [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace and runs, as
independent tasks (a private local Ray by default): Solo-D, RollMux as shipped but without
compaction (`compaction.enabled=False`), and RollMux as shipped with compaction tried at most
once per --every seconds per group (`compaction.every_s`; the shipped profile's value is the
default). Every run is the `shipped` profile (DESIGN §10) otherwise (priced migrations,
regrouping, drift repair, elastic rollout, the co-located mode). Per run it
prints gain over Solo-D, SLO attainment, cost over the busy-time bound, migrations and the
rollout nodes compaction gave back.
--drift: 30% of each trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life).
"""

import argparse
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.sim.baselines import busy_time_bound
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, number_list, sweep_done, sweep_rows, sweep_run
from rollmux.workload.drift import add_drift


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool) -> dict:
    """One row's simulation (a sweep task): "solo-d", "off" or "every@SECONDS"."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    overrides: dict = {"compaction.enabled": False}
    if run.startswith("every@"):
        overrides = {"compaction.enabled": True, "compaction.every_s": float(run.split("@")[1])}
    return summary(run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d"))


def main() -> None:
    """Parse the options, map every simulation, print the ablation side by side."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, "2869ce:11,b436b2:12,e13805:13,7f04ca:23")
    ap.add_argument("--every", default=f"{profile('shipped').compaction.every_s:g}")
    ap.add_argument("--drift", action="store_true")
    args = ap.parse_args()
    every = number_list(args.every, "--every", "600,1800", inclusive=True)
    runs = ["solo-d", "off"] + [f"every@{e:g}" for e in every]
    cluster, rows = default_cluster(), sweep_rows(args)
    tasks = [(run, jobs, cluster, seed, args.drift) for _, _, seed, jobs in rows for run in runs]
    t0 = time.perf_counter()
    results = sweep_run(args, one_run, tasks)
    out = []
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>34}" for r in runs[1:]))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(runs, results[i * len(runs):(i + 1) * len(runs)]))
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% {res[r]['cost_usd'] / bound:.3f}b "
                 f"{res[r]['migrations']['count']:4d}m {res[r]['compactions']:3d}c" for r in runs[1:]]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>34}" for c in cells), flush=True)
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "solo_cost_usd": solo, "drift": args.drift, "runs": res})
    for mode in dict.fromkeys(m for _, m, _, _ in rows):
        mine = [o for o in out if o["mode"] == mode]
        means = [sum(o["solo_cost_usd"] / o["runs"][r]["cost_usd"] for o in mine) / len(mine) for r in runs[1:]]
        print(f"{'mean':7} {mode:8} {'':>4}  " + "  ".join(f"{m:>33.3f}x" for m in means))
    sweep_done(args, out, "per run: gain over Solo-D, SLO met, cost / busy-time bound, migrations, "
                          "rollout nodes compacted", t0)


if __name__ == "__main__":
    main()
