"""Acceptance sweep: RollMux vs Solo-D on Philly-driven traces of every VC, both workload modes.

Usage: .venv/bin/python benchmarks/acceptance.py [--modes paper,catalog] [--seeds 11]
                                                  [--policies rollmux,solo-d] [--traces DIR]
For each VC, mode and seed it synthesizes a 200-job, 14-day trace from
../shared/traces, simulates the policies side by side and prints the gain over
simulated Solo-D, SLO attainment, jobs finished, simulated/closed-form Solo-D
cost, and the placement-case shares of rollmux.
"""

import argparse

from rollmux.core.spec import default_cluster
from rollmux.sim.baselines import solo_d_cost
from rollmux.sim.runner import compare
from rollmux.sim.simulator import SimConfig
from rollmux.workload import available_vcs, find_traces_dir, synthesize_philly


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="paper,catalog")
    ap.add_argument("--seeds", default="11")
    ap.add_argument("--policies", default="rollmux,solo-d")
    ap.add_argument("--traces", default=None)
    args = ap.parse_args()
    traces = find_traces_dir(args.traces)
    cluster = default_cluster()
    names = args.policies.split(",")
    if "solo-d" not in names:
        names.append("solo-d")
    others = [n for n in names if n != "solo-d"]
    head = f"{'mode':8} {'vc':7} {'seed':>4} {'solo/closed':>11} " + " ".join(
        f"{n + ' gain':>14} {n + ' SLO':>12} {'fin':>4}" for n in others) + "  rollmux cases (direct/scaling/isolated)"
    print(head)
    for mode in args.modes.split(","):
        for vc in available_vcs(traces):
            for seed in map(int, args.seeds.split(",")):
                jobs = synthesize_philly(traces, vc, 200, 14.0, mode, seed)
                res = compare(jobs, cluster, names, SimConfig(seed=seed)).results
                solo = res["solo-d"].cost_usd
                row = f"{mode:8} {vc:7} {seed:>4} {solo / solo_d_cost(jobs, cluster):>11.4f} "
                row += " ".join(f"{solo / res[n].cost_usd:>13.3f}x {100 * res[n].slo_attainment:>11.1f}% "
                                f"{len(res[n].outcomes):>4}" for n in others)
                if "rollmux" in res:
                    p = res["rollmux"].placement_shares()
                    row += "  " + " / ".join(f"{100 * p[k]:.0f}%" for k in ("direct_packing", "rollout_scaling", "isolated"))
                print(row, flush=True)


if __name__ == "__main__":
    main()
