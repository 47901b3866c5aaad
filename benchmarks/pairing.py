"""Co-located pairing (core/repair/pairing.py), measured side by side with the shipped run without it.

Usage: .venv/bin/python benchmarks/pairing.py [--traces-spec 2869ce:11,b436b2:12,...] [--modes paper,catalog]
                                              [--margins 0.75,1] [--drift]
                                              [--json OUT] [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace and runs, as
independent tasks (a private local Ray by default): Solo-D; RollMux without pairing at the
co-located margin measured best without it (`colocation.pair=False`, the margin then 0.75,
`ColocationConfig.effective_margin`; "off"); and RollMux with pairing at each --margins value
(`colocation.margin`, "pair@M"). Every run is the `shipped` profile (DESIGN §10) otherwise
(narrowed co-location, co-located jobs regrouping, priced migrations, drift repair). Per trace
it prints gain over Solo-D, SLO attainment, cost over the busy-time bound, migrations and how
many arrivals founded a group with a co-located job; then, per mode and run, the mean and
lowest gain and how many traces reach 1.7x (the paper-profile gain the mode was meant to reach).
--drift: 30% of each trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life).
The default traces are the seven unseen ones of benchmarks/README.md; pass every VC at seeds
11,12,13,23 for the 28-trace sweep.
"""

import argparse
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.sim.baselines import busy_time_bound
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, number_list, sweep_done, sweep_rows, sweep_run
from rollmux.workload.drift import add_drift

UNSEEN = "2869ce:11,b436b2:12,e13805:13,7f04ca:23,0e4a51:0,103959:21,11cb48:22"
BAR = 1.7  # the paper-profile gain the mode was meant to reach


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool) -> dict:
    """One row's simulation (a sweep task): "solo-d", "off" or "pair@MARGIN"."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    overrides: dict = {"colocation.pair": False}  # (at COLO_MARGIN, its effective margin without pairing)
    if run.startswith("pair@"):
        overrides = {"colocation.pair": True, "colocation.margin": float(run.split("@")[1])}
    res = run_config(jobs, cluster, profile("shipped", overrides), seed, solo=run == "solo-d")
    return {**summary(res), "counts": dict(res.placements or {})}


def main() -> None:
    """Parse the options, map every simulation, print the runs side by side and their summary."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, UNSEEN)
    ap.add_argument("--margins", default="0.75,1")
    ap.add_argument("--drift", action="store_true")
    args = ap.parse_args()
    runs = ["solo-d", "off"] + [f"pair@{m:g}" for m in number_list(args.margins, "--margins", "0.75,1")]
    cluster, rows = default_cluster(), sweep_rows(args)
    tasks = [(run, jobs, cluster, seed, args.drift) for _, _, seed, jobs in rows for run in runs]
    t0 = time.perf_counter()
    results = sweep_run(args, one_run, tasks)
    names, out, gains = runs[1:], [], {}
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>34}" for r in names))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(runs, results[i * len(runs):(i + 1) * len(runs)]))
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        cells = []
        for r in names:
            gain = solo / res[r]["cost_usd"]
            gains.setdefault((mode, r), []).append(gain)
            cells.append(f"{gain:.3f}x {100 * res[r]['slo']:5.1f}% {res[r]['cost_usd'] / bound:.3f}b "
                         f"{res[r]['migrations']['count']:3d}m {res[r]['counts'].get('paired', 0):3d}p")
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>34}" for c in cells), flush=True)
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "solo_cost_usd": solo, "drift": args.drift, "runs": res})
    for (mode, r), g in gains.items():
        print(f"{mode:8} {r:>9}: mean {sum(g) / len(g):.3f}x, lowest {min(g):.3f}x, "
              f"{sum(x >= BAR for x in g)} of {len(g)} at {BAR}x or more")
    sweep_done(args, out, "per run: gain over Solo-D, SLO met, cost / busy-time bound, migrations, pairings", t0)


if __name__ == "__main__":
    main()
