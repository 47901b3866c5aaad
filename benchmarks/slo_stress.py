"""SLO stress: RollMux (default config) on many heavy-load synthetic traces; counts SLO misses.

Usage: .venv/bin/python benchmarks/slo_stress.py [--traces 100] [--start 0] [--order rr|slo] [--plan worst|mean]
       [--no-elastic-rollout] [--train-scaling] [--no-colocate] [--no-colo-pair] [--no-stretch-pricing]
       [--no-compact] [--compact-every SECONDS]
Shapes and modes as `rollmux simulate` ships them (core/shapes.py, core/colocate.py,
core/marginal.py): elastic rollout on, training scaling off, the per-job co-located mode and
stretch pricing on, co-located pairing on (core/pairing.py); `--no-elastic-rollout`,
`--train-scaling`, `--no-colocate`, `--no-colo-pair` and `--no-stretch-pricing` switch them as
the CLI's flags do (the co-located margin follows pairing, `colocation_margin`); rollout compaction (core/compaction.py)
is on, tried at most once per `--compact-every` seconds per group (the default's 1800; 0: at
every iteration end, the hardest test of its SLO check).
Each trace: 30 jobs of the paper's profile classes (tests/factories.synthetic_trace),
SLO ~ U(1, 1.5), rollout sigma cycling over 0 / 0.1 / 0.3, arrivals every ~60 s or all
at t=0 (alternating), long-tail migration on for half of the traces. Prints every miss and
a summary line; the scheduler's admission is meant to make the count zero.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from factories import synthetic_trace  # noqa: E402

from rollmux.core.placement import RollMuxPlacement  # noqa: E402
from rollmux.core.config import IntraConfig  # noqa: E402
from rollmux.core.config import ShapesConfig as ShapeConfig  # noqa: E402
from rollmux.core.spec import default_cluster  # noqa: E402
from rollmux.sim.simulator import SimConfig, simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--order", choices=("rr", "slo"), default="rr",
                    help="order inside a group (IntraConfig.order, core/slo_order.py)")
    ap.add_argument("--plan", choices=("worst", "mean"), default=SimConfig().intra.plan,
                    help="SLO admission (IntraConfig.plan, core/admission.py; worst, as the CLI ships)")
    ap.add_argument("--elastic-rollout", action=argparse.BooleanOptionalAction, default=True,
                    help="a job may roll out on fewer/more rollout nodes (core/elastic.py; on, as the CLI ships)")
    ap.add_argument("--train-scaling", action=argparse.BooleanOptionalAction, default=False,
                    help="a job may join a group by adding training nodes (core/shapes.py; off, as the CLI ships)")
    ap.add_argument("--colocate", action=argparse.BooleanOptionalAction, default=True,
                    help="an arrival may run co-located on training nodes (core/colocate.py; on, as the CLI ships)")
    ap.add_argument("--colo-narrow", action=argparse.BooleanOptionalAction, default=True,
                    help="with --elastic-rollout: a co-located 16:8 job may run on one training node")
    ap.add_argument("--colo-pair", action=argparse.BooleanOptionalAction, default=True,
                    help="an arrival may found a group with a co-located job (core/pairing.py; on, as the CLI ships)")
    ap.add_argument("--stretch-pricing", action=argparse.BooleanOptionalAction, default=True,
                    help="take the option that adds least per iteration (core/marginal.py; on, as the CLI ships)")
    ap.add_argument("--compact", action=argparse.BooleanOptionalAction, default=True,
                    help="rollout compaction (core/compaction.py; on, as the CLI ships)")
    ap.add_argument("--compact-every", type=float, default=SimConfig().compact_every_s,
                    help="seconds between a group's compaction tries")
    args = ap.parse_args()
    if args.order == "slo" and args.plan == "mean":
        ap.error("--order slo plans with --plan worst only")
    cluster = default_cluster()
    bad = shared = colocated = compacted = paired = 0
    for seed in range(args.start, args.start + args.traces):
        jobs = synthetic_trace(np.random.default_rng(seed), 30, sigma=(0.0, 0.1, 0.3)[seed % 3],
                               mean_gap_s=(60.0, 0.0)[seed % 2], slo_range=(1.0, 1.5),
                               duration_range=(3000.0, 20000.0))
        # (the cluster state re-plans groups on departures with its own IntraConfig: same order)
        cfg = SimConfig(seed=seed, intra=IntraConfig(order=args.order, plan=args.plan),
                        train_scaling=args.train_scaling, elastic_rollout=args.elastic_rollout,
                        colocate=args.colocate, colo_narrow=args.colo_narrow, colo_pair=args.colo_pair,
                        stretch_pricing=args.stretch_pricing, compact=args.compact, compact_every_s=args.compact_every)
        policy = RollMuxPlacement(IntraConfig(migration=seed % 4 < 2, order=args.order, plan=args.plan),
                                  colocate=args.colocate, colo_margin=cfg.colocation_margin())
        # The shapes as sim/runner.py sets them from the config (the library default is nominal).
        policy.shapes = ShapeConfig(args.train_scaling, args.elastic_rollout)
        policy.stretch_pricing = args.stretch_pricing
        policy.colo_narrow = args.colo_narrow
        res = simulate(jobs, cluster, policy, cfg)
        shared += res.placements.get("direct_packing", 0) + res.placements.get("rollout_scaling", 0)
        colocated += res.placements.get("colocated", 0)
        paired += res.placements.get("paired", 0)
        compacted += res.compactions or 0
        missed = [o.job_id for o in res.outcomes if not o.slo_met]
        if missed or len(res.outcomes) != len(jobs):
            bad += 1
            print(f"trace {seed}: missed {missed}, finished {len(res.outcomes)}/{len(jobs)}")
    onoff = {True: "on", False: "off"}
    shapes = (f"elastic rollout {onoff[args.elastic_rollout]}, training scaling {onoff[args.train_scaling]}, "
              f"co-located mode {onoff[args.colocate]} (narrowed {onoff[args.colo_narrow]}, "
              f"pairing {onoff[args.colo_pair]}), "
              f"stretch pricing {onoff[args.stretch_pricing]}, "
              f"plan {args.plan}, compaction {onoff[args.compact]} every {args.compact_every:g} s")
    print(f"{args.traces} traces ({shapes}), {bad} with an SLO miss or unfinished job; {shared} shared placements, "
          f"{colocated} co-located, {paired} paired, {compacted} rollout nodes compacted")


if __name__ == "__main__":
    main()
