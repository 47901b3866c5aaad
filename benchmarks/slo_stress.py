"""SLO stress: RollMux (the shipped profile) on many heavy-load synthetic traces; counts SLO misses.

Usage: .venv/bin/python benchmarks/slo_stress.py [--traces 100] [--start 0] [--order rr|slo] [--plan worst|mean]
       [--no-elastic-rollout] [--train-scaling] [--no-colocate] [--no-colo-pair] [--no-stretch-pricing]
       [--no-compact] [--compact-every SECONDS]
Every option defaults to the `shipped` profile's setting (core/config.py, DESIGN §10) and
overrides it as the CLI's flag of the same name does: elastic rollout on, training scaling
off, the per-job co-located mode, narrowed co-location, co-located pairing (the co-located
margin follows it, `ColocationConfig.effective_margin`), stretch pricing and rollout
compaction (tried at most once per `--compact-every` seconds per group; 0: at every iteration
end, the hardest test of its SLO check) on, admission by the mean. The policy is built by
`build_policy` from that configuration.
Each trace: 30 jobs of the paper's profile classes (tests/factories.synthetic_trace),
SLO ~ U(1, 1.5), rollout sigma cycling over 0 / 0.1 / 0.3, arrivals every ~60 s or all
at t=0 (alternating), long-tail migration (`intra_group.migration`) on for half of the
traces. Prints every miss and a summary line; the scheduler's admission is meant to make
the count zero.
"""

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from factories import synthetic_trace  # noqa: E402

from rollmux.core.config import ConfigError, SchedulerConfig  # noqa: E402
from rollmux.core.spec import (  # noqa: E402
    ClusterSpec,
    default_cluster,  # noqa: E402
)
from rollmux.sim.simulator import simulate  # noqa: E402  # noqa: E402

SHIPPED = SchedulerConfig.profile("shipped")
ON_OFF = {True: "on", False: "off"}
# Boolean option -> the setting it overrides (argparse's attribute names).
SWITCHES = {"elastic_rollout": "shapes.elastic_rollout", "train_scaling": "shapes.train_scaling",
            "colocate": "colocation.enabled", "colo_narrow": "colocation.narrow", "colo_pair": "colocation.pair",
            "compact": "compaction.enabled"}


def parse_args() -> argparse.Namespace:
    """The options, each defaulting to the shipped profile's setting."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--order", choices=("rr", "slo"), default=SHIPPED.intra_group.order,
                    help="order inside a group (intra_group.order, core/slo_order.py)")
    ap.add_argument("--plan", choices=("worst", "mean"), default=SHIPPED.admission.plan,
                    help="SLO admission (admission.plan, core/placement/admission.py)")
    helps = {"elastic_rollout": "a job may roll out on fewer/more rollout nodes (core/elastic.py)",
             "train_scaling": "a job may join a group by adding training nodes (core/placement/options/)",
             "colocate": "an arrival may run co-located on training nodes (core/placement/options/colocated.py)",
             "colo_narrow": "with --elastic-rollout: a co-located 16:8 job may run on one training node",
             "colo_pair": "an arrival may found a group with a co-located job (core/repair/pairing.py)",
             "compact": "rollout compaction (core/repair/compaction.py)"}
    for name, setting in SWITCHES.items():
        default = _setting(SHIPPED, setting)
        ap.add_argument(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=default,
                        help=f"{helps[name]}; {setting}, {ON_OFF[default]} in the shipped profile")
    ap.add_argument("--stretch-pricing", action=argparse.BooleanOptionalAction,
                    default=SHIPPED.placement.pricing == "stretch",
                    help="take the option that adds least per iteration (placement.pricing, core/placement/pricing.py)")
    ap.add_argument("--compact-every", type=float, default=SHIPPED.compaction.every_s,
                    help="seconds between a group's compaction tries (compaction.every_s)")
    args = ap.parse_args()
    try:
        trace_config(args, args.start)
    except ConfigError as exc:
        ap.error(str(exc))
    return args


def _setting(cfg: SchedulerConfig, dotted: str) -> object:
    section, key = dotted.split(".")
    return getattr(getattr(cfg, section), key)


def trace_config(args: argparse.Namespace, seed: int) -> SchedulerConfig:
    """The shipped profile with the options' overrides, long-tail migration on for half the traces."""
    overrides = {setting: getattr(args, name) for name, setting in SWITCHES.items()}
    overrides |= {"intra_group.order": args.order, "admission.plan": args.plan,
                  "placement.pricing": "stretch" if args.stretch_pricing else "delta",
                  "compaction.every_s": args.compact_every, "intra_group.migration": seed % 4 < 2}
    return SHIPPED.with_overrides(overrides)


def run_trace(args: argparse.Namespace, seed: int, cluster: ClusterSpec, tally: Counter) -> None:
    """One trace: its placements and compactions added to `tally`, a line for a miss."""
    jobs = synthetic_trace(np.random.default_rng(seed), 30, sigma=(0.0, 0.1, 0.3)[seed % 3],
                           mean_gap_s=(60.0, 0.0)[seed % 2], slo_range=(1.0, 1.5),
                           duration_range=(3000.0, 20000.0))
    res = simulate(jobs, cluster, trace_config(args, seed), seed=seed)
    tally["shared"] += res.placements.get("direct_packing", 0) + res.placements.get("rollout_scaling", 0)
    tally["colocated"] += res.placements.get("colocated", 0)
    tally["paired"] += res.placements.get("paired", 0)
    tally["compacted"] += res.compactions or 0
    missed = [o.job_id for o in res.outcomes if not o.slo_met]
    if missed or len(res.outcomes) != len(jobs):
        tally["bad"] += 1
        print(f"trace {seed}: missed {missed}, finished {len(res.outcomes)}/{len(jobs)}")


def main() -> None:
    """Every trace, then the summary line."""
    args = parse_args()
    cluster = default_cluster()
    tally: Counter = Counter()
    for seed in range(args.start, args.start + args.traces):
        run_trace(args, seed, cluster, tally)
    shapes = (f"elastic rollout {ON_OFF[args.elastic_rollout]}, training scaling {ON_OFF[args.train_scaling]}, "
              f"co-located mode {ON_OFF[args.colocate]} (narrowed {ON_OFF[args.colo_narrow]}, "
              f"pairing {ON_OFF[args.colo_pair]}), "
              f"stretch pricing {ON_OFF[args.stretch_pricing]}, "
              f"plan {args.plan}, compaction {ON_OFF[args.compact]} every {args.compact_every:g} s")
    print(f"{args.traces} traces ({shapes}), {tally['bad']} with an SLO miss or unfinished job; "
          f"{tally['shared']} shared placements, {tally['colocated']} co-located, {tally['paired']} paired, "
          f"{tally['compacted']} rollout nodes compacted")


if __name__ == "__main__":
    main()
