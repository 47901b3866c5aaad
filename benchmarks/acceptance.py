"""Acceptance sweep: RollMux vs Solo-D on Philly-driven traces of every VC, both workload modes.

Usage: .venv/bin/python benchmarks/acceptance.py [--modes paper,catalog] [--seeds 11]
                                                  [--policies rollmux,solo-d] [--traces DIR]
                                                  [--address HOST:PORT] [--workers N] [--serial]
For each VC, mode and seed it synthesizes a 200-job, 14-day trace from
the packaged Philly traces, simulates the policies side by side and prints the gain over
simulated Solo-D, SLO attainment, jobs finished, simulated/closed-form Solo-D
cost, and the placement-case shares of rollmux. RollMux runs the `shipped` profile
(what `rollmux simulate` runs, DESIGN §10); the group-based baselines plan with it.

Every (trace, policy) simulation is an independent Ray task: on a private local
Ray by default (--workers at a time, default every CPU), on the Ray cluster at
--address, or one by one in this process with --serial. Rows print in order as
soon as their runs are done; the numbers do not depend on the engine.
"""

import argparse
import sys
import time
from contextlib import ExitStack

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import ClusterSpec, default_cluster
from rollmux.errors import InputError
from rollmux.sim.baselines import solo_d_cost
from rollmux.sim.runner import POLICY_NAMES
from rollmux.study.sections import policy_run
from rollmux.study.sweep import ray_session, serial_map
from rollmux.workload import available_vcs, find_traces_dir, synthesize_philly

CONFIG = SchedulerConfig.profile("shipped")  # what every run is configured by


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    """The options, and the policies to run (Solo-D always among them)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="paper,catalog")
    ap.add_argument("--seeds", default="11")
    ap.add_argument("--policies", default="rollmux,solo-d")
    ap.add_argument("--traces", default=None)
    ap.add_argument("--address", default=None, help="Ray cluster to run on (default: a private local Ray)")
    ap.add_argument("--workers", type=int, default=None, help="at most N simulations at once (default: every CPU)")
    ap.add_argument("--serial", action="store_true", help="run the simulations one by one in this process, no Ray")
    args = ap.parse_args()
    if args.serial and (args.address or args.workers):
        ap.error("--serial runs in this process: drop --address and --workers")
    if args.workers is not None and args.workers < 1:
        ap.error("--workers must be at least 1")
    names = args.policies.split(",")
    if "solo-d" not in names:
        names.append("solo-d")
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICY_NAMES)}")
    return args, names


def row_line(row: tuple, res: dict, others: list[str], cluster: ClusterSpec) -> str:
    """One trace's printed row: Solo-D simulated/closed form, each policy's gain, SLO and finished."""
    mode, vc, seed, jobs = row
    solo = res["solo-d"].cost_usd
    line = f"{mode:8} {vc:7} {seed:>4} {solo / solo_d_cost(jobs, cluster):>11.4f} "
    line += " ".join(f"{solo / res[n].cost_usd:>13.3f}x {100 * res[n].slo_attainment:>11.1f}% "
                     f"{len(res[n].outcomes):>4}" for n in others)
    if "rollmux" in res:
        p = res["rollmux"].placement_shares()
        line += "  " + " / ".join(f"{100 * p[k]:.0f}%" for k in ("direct_packing", "rollout_scaling", "isolated"))
    return line


def main() -> None:
    """Parse the options, run every simulation through the chosen map, print one row per trace."""
    args, names = parse_args()
    traces = find_traces_dir(args.traces)
    cluster = default_cluster()
    others = [n for n in names if n != "solo-d"]
    seeds = list(map(int, args.seeds.split(",")))
    rows = [(mode, vc, seed, synthesize_philly(traces, vc, 200, 14.0, mode, seed))
            for mode in args.modes.split(",") for vc in available_vcs(traces) for seed in seeds]
    runs = [(name, jobs, cluster, CONFIG, seed) for _, _, seed, jobs in rows for name in names]
    results: dict[int, dict] = {}
    printed = [0]

    def row_done(i: int, res) -> None:
        results.setdefault(i // len(names), {})[names[i % len(names)]] = res
        while printed[0] < len(rows) and len(results.get(printed[0], {})) == len(names):
            print(row_line(rows[printed[0]], results.pop(printed[0]), others, cluster), flush=True)
            printed[0] += 1

    engine = "serial" if args.serial else f"Ray ({args.address or 'local'}, workers {args.workers or 'every CPU'})"
    print(f"# {len(runs)} simulations ({len(rows)} traces x {len(names)} policies) on {engine}; "
          f"configuration {CONFIG.describe()}", file=sys.stderr)
    t0 = time.perf_counter()
    head = f"{'mode':8} {'vc':7} {'seed':>4} {'solo/closed':>11} " + " ".join(
        f"{n + ' gain':>14} {n + ' SLO':>12} {'fin':>4}" for n in others) + "  rollmux cases (direct/scaling/isolated)"
    with ExitStack() as stack:
        try:
            pmap = serial_map if args.serial else stack.enter_context(ray_session(args.address, args.workers))
        except InputError as exc:
            sys.exit(f"error: {exc}")
        print(head, flush=True)
        pmap(policy_run, runs, row_done)
    print(f"# wall time {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
