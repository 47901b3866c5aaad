"""Re-deciding the shipped defaults: each one flipped alone, on every trace family, side by side.

Usage: .venv/bin/python benchmarks/defaults.py [--traces-spec 2869ce:11,...] [--modes paper,catalog]
                                               [--paper-seeds 0,1] [--flips NAME,...] [--json OUT]
                                               [--address HOST:PORT] [--workers N] [--serial]
Trace families (one column each):
* the authors' production trace (`rollmux workload paper-trace`: measured profiles, deterministic
  rollouts, sync modelled) with each --paper-seeds SLO draw, U(1, 2);
* the seven-VC Philly-driven set, 200 jobs over 14 days, with paper and with catalog profiles;
* the same Philly traces with 30% of their jobs drifting (x1.5-2.5 after 20-60% of their life).
For each flip (`FLIPS`: a shipped default and the value it is compared with) it runs the
`shipped` profile and `shipped` with that one setting changed, and prints the mean gain over
Solo-D of each family and the lowest SLO attainment. A co-location setting is also run with
co-located phases 0.8x as fast as measured or modelled (`colocation.speed=0.8`, both arms): a
default about co-location must also win there.
"""

import argparse
import time

from rollmux.core.spec import ClusterSpec, JobSpec, default_cluster
from rollmux.study.sections import profile, run_config, summary
from rollmux.study.sweep import add_sweep_options, number_list, sweep_done, sweep_rows, sweep_run
from rollmux.workload import find_traces_dir
from rollmux.workload.drift import add_drift
from rollmux.workload.paper_trace import paper_trace_jobs

SEVEN = "2869ce:11,b436b2:12,e13805:13,7f04ca:23,0e4a51:0,103959:21,11cb48:22"
# name -> (the setting flipped, its value in the flipped arm, a co-location setting?)
FLIPS: dict[str, tuple[dict, bool]] = {
    "no co-located mode": ({"colocation.enabled": False}, True),
    "no co-located pairing": ({"colocation.pair": False}, True),
    "no narrowed co-location": ({"colocation.narrow": False}, True),
    "co-located margin 0.75": ({"colocation.margin": 0.75}, True),
    "co-located margin 1.25": ({"colocation.margin": 1.25}, True),
    "no co-located regroup": ({"colocation.regroup": False}, True),
    "no folding": ({"colocation.fold": False}, True),
    "fold below 1": ({"colocation.fold_below": 1.0}, True),
    "fold below 0.7": ({"colocation.fold_below": 0.7}, True),
    "worst-case admission": ({"admission.plan": "worst"}, False),
    "delta pricing": ({"placement.pricing": "delta"}, False),
    "no re-pinning": ({"compaction.repin": False}, False),
    "no elastic scale-up": ({"shapes.max_scale": 1.0}, False),
    "no elastic rollout": ({"shapes.elastic_rollout": False}, False),
}


def one_run(arm: str, overrides: dict, speed: float, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """One simulation (a sweep task): "solo-d", or the shipped profile with `overrides` at `speed`."""
    cfg = profile("shipped", {**overrides, "colocation.speed": speed})
    return summary(run_config(jobs, cluster, cfg, seed, solo=arm == "solo-d"))


def families(args) -> list[tuple[str, str, int, list[JobSpec]]]:
    """[(family, trace name, seed, jobs)]: the paper trace per SLO seed, the Philly set, drifted."""
    rows = [("paper trace", f"wild:{s}", s, paper_trace_jobs(find_traces_dir(args.traces) / "paper", seed=s))
            for s in (int(x) for x in number_list(args.paper_seeds, "--paper-seeds", "0,1", inclusive=True))]
    for vc, mode, seed, jobs in sweep_rows(args):
        rows.append((f"philly {mode}", f"{vc}:{seed}", seed, jobs))
        rows.append((f"drift {mode}", f"{vc}:{seed}", seed, add_drift(jobs, 0.3, seed, rollout_scale=(1.5, 2.5),
                                                                      train_scale=(1.5, 2.5))))
    return rows


def main() -> None:
    """Parse the options, map every simulation, print each flip against shipped per family."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_options(ap, SEVEN)
    ap.add_argument("--paper-seeds", default="0,1")
    ap.add_argument("--flips", default=",".join(FLIPS))
    args = ap.parse_args()
    flips = [f.strip() for f in args.flips.split(",")]
    unknown = [f for f in flips if f not in FLIPS]
    if unknown:
        raise SystemExit(f"error: --flips: unknown {unknown}; choose from {', '.join(FLIPS)}")
    arms = [("solo-d", {}, 1.0), ("shipped", {}, 1.0), ("shipped", {}, 0.8)]
    for f in flips:
        arms.append((f, FLIPS[f][0], 1.0))
        if FLIPS[f][1]:
            arms.append((f, FLIPS[f][0], 0.8))
    cluster, rows = default_cluster(), families(args)
    tasks = [(arm, ov, speed, jobs, cluster, seed) for _, _, seed, jobs in rows for arm, ov, speed in arms]
    t0 = time.perf_counter()
    results = sweep_run(args, one_run, tasks)
    out = []
    for i, (family, name, seed, _) in enumerate(rows):
        res = results[i * len(arms):(i + 1) * len(arms)]
        solo = res[0]["cost_usd"]
        out.append({"family": family, "trace": name, "seed": seed,
                    "runs": [{"arm": a, "speed": s, "gain": solo / r["cost_usd"], **r}
                             for (a, _, s), r in zip(arms[1:], res[1:])]})
    _table(out, arms[1:])
    sweep_done(args, out, "mean gain over Solo-D per family (lowest SLO attainment in brackets)", t0)


def _table(out: list[dict], arms: list[tuple[str, dict, float]]) -> None:
    fams = list(dict.fromkeys(o["family"] for o in out))
    print(f"{'arm':34}" + "".join(f"{f:>22}" for f in fams))
    for j, (arm, _, speed) in enumerate(arms):
        cells = []
        for fam in fams:
            runs = [o["runs"][j] for o in out if o["family"] == fam]
            gain = sum(r["gain"] for r in runs) / len(runs)
            cells.append(f"{gain:.3f}x ({100 * min(r['slo'] for r in runs):.1f}%)")
        print(f"{arm + (' @0.8' if speed != 1.0 else ''):34}" + "".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
