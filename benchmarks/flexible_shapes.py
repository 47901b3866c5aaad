"""Training scaling and elastic rollout parallelism measured alone (core/placement/options/).

Usage: .venv/bin/python benchmarks/flexible_shapes.py [--traces-spec 2869ce:11,b436b2:12,e13805:13]
                                                      [--modes paper,catalog] [--drift] [--json OUT]
                                                      [--address HOST:PORT] [--workers N] [--serial]
For each VC:seed and mode it synthesizes a 200-job, 14-day Philly-driven trace (seeds other
than the study's 0) and runs, as independent tasks (a private local Ray by default): Solo-D,
RollMux with both switches off (`shapes.train_scaling`, `shapes.elastic_rollout`), with
training scaling alone, with elastic rollout alone, and with both. Every run is the `shipped`
profile (DESIGN §10) otherwise (priced migrations, regrouping, drift repair, admission by the
mean, the co-located mode, stretch pricing), its policy built by `build_policy`. Per run it prints gain over Solo-D, SLO attainment, cost over the busy-time bound (b: at
nominal shapes; e: every job at its cheapest elastic shape, core/elastic.py) and
migrations, then the isolated placements by reason (core/placement/why.py) and what the shapes chose
(joined with added training nodes, on fewer or more rollout nodes, isolated on fewer).
--drift: 30% of each trace's jobs drift (rollout and training x1.5-2.5 after 20-60% of their life);
the busy-time bound stays the declared (undrifted) trace's, so cost / bound is higher there.
"""

import argparse
import json
import sys
import time
from dataclasses import asdict

from rollmux.core.elastic import busy_time_bound_elastic
from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import busy_time_bound
from rollmux.sim.simulator import Simulation
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, sweep_map, sweep_rows
from rollmux.workload.drift import add_drift

RUNS = {"solo-d": None, "off": (False, False), "train scaling": (True, False),
        "elastic rollout": (False, True), "both": (True, True)}


def one_run(run: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int, drift: bool) -> dict:
    """One row's simulation (a sweep task)."""
    if drift:
        jobs = add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5), train_scale=(1.5, 2.5))
    switches = RUNS[run]
    if switches is None:
        res = run_config(jobs, cluster, profile("shipped"), seed, solo=True)
        return {**summary(res), "why": None, "shapes": None}
    cfg = profile("shipped", {"shapes.train_scaling": switches[0], "shapes.elastic_rollout": switches[1]})
    sim = Simulation(jobs, cluster, cfg, seed=seed)  # (its policy, built from `cfg`, counts the shapes)
    res = sim.run()
    why = (res.placements_why or {}).get("placements", {})
    return {**summary(res), "why": why, "shapes": asdict(sim.policy.shape_stats)}


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
    print(f"{'vc':7} {'mode':8} {'seed':>4}  " + "  ".join(f"{r:>37}" for r in names))
    for i, (vc, mode, seed, jobs) in enumerate(rows):
        res = dict(zip(RUNS, results[i * len(RUNS):(i + 1) * len(RUNS)]))
        solo, bound = res["solo-d"]["cost_usd"], busy_time_bound(jobs, cluster)
        bound_el = busy_time_bound_elastic(jobs, cluster)
        cells = [f"{solo / res[r]['cost_usd']:.3f}x {100 * res[r]['slo']:5.1f}% "
                 f"{res[r]['cost_usd'] / bound:.3f}b {res[r]['cost_usd'] / bound_el:.3f}e "
                 f"{res[r]['migrations']['count']:4d}m" for r in names]
        print(f"{vc:7} {mode:8} {seed:>4}  " + "  ".join(f"{c:>37}" for c in cells), flush=True)
        for r in names:
            why = " ".join(f"{k} {v}" for k, v in res[r]["why"].items() if v)
            sh = " ".join(f"{k} {v}" for k, v in res[r]["shapes"].items() if v)
            print(f"{'':21} {r:>16}: isolated {sum(res[r]['why'].values())} ({why}); shapes: {sh or '-'}")
        out.append({"vc": vc, "mode": mode, "seed": seed, "busy_time_bound_usd": bound,
                    "elastic_bound_usd": bound_el,
                    "solo_cost_usd": solo, "runs": res})
    print("# per run: gain over Solo-D, SLO met, cost / busy-time bound (b: nominal shapes, e: every job at "
          "its cheapest elastic shape), migrations; "
          f"wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
