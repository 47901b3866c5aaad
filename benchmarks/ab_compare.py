"""Side-by-side timing of two checkouts of rollmux: the same command, interleaved, in one run.

Usage: python benchmarks/ab_compare.py --a DIR --b DIR [--runs 5] [--label-a before] [--label-b after]
                                       -- COMMAND [ARGS]

Runs COMMAND `--runs` times under each checkout (PYTHONPATH=DIR, so `python -m rollmux.cli` and
`import rollmux` resolve to that tree), alternating A, B, A, B, ... so that whatever else the
machine does falls on both alike (each round alternates which side goes first), and prints each
side's child CPU seconds (user + system) and wall seconds, their medians, the ratio B / A and the
median of the rounds' own B / A ratios (robust when the machine's speed drifts between rounds).
CPU time is the figure to quote on a shared machine: wall time also counts other processes' turns. `{python}` in COMMAND is replaced by this
interpreter. Example (the simulate wall-time A/B of a refactor):

    python benchmarks/ab_compare.py --a /work/baseline --b . -- {python} -m rollmux.cli simulate
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def timed(command: list[str], tree: str) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run of `command` with rollmux from `tree`."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{tree}: {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Parse the arguments, run both sides interleaved and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="checkout A (the reference)")
    ap.add_argument("--b", required=True, help="checkout B (the change)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = [sys.executable if c == "{python}" else c for c in args.command if c != "--"]
    if not command:
        ap.error("give the command after --")
    runs: dict[str, list[tuple[float, float]]] = {args.label_a: [], args.label_b: []}
    sides = ((args.label_a, args.a), (args.label_b, args.b))
    for i in range(args.runs):
        # A, B then B, A: a machine whose speed drifts during a round slows both sides alike.
        for label, tree in (sides if i % 2 == 0 else sides[::-1]):
            runs[label].append(timed(command, tree))
    print(f"command: {' '.join(c for c in args.command if c != '--')}")
    print(f"{'side':>10} {'cpu s (each run)':>40} {'median cpu':>11} {'median wall':>12}")
    med = {}
    for label, got in runs.items():
        med[label] = (statistics.median(c for _, c in got), statistics.median(w for w, _ in got))
        each = " ".join(f"{c:.2f}" for _, c in got)
        print(f"{label:>10} {each:>40} {med[label][0]:>11.2f} {med[label][1]:>12.2f}")
    a, b = med[args.label_a], med[args.label_b]
    print(f"ratio {args.label_b}/{args.label_a}: cpu {b[0] / a[0]:.3f}, wall {b[1] / a[1]:.3f}")
    # Each round's B / A, then their median: robust to a machine whose speed drifts between rounds.
    paired = [rb[1] / ra[1] for ra, rb in zip(runs[args.label_a], runs[args.label_b])]
    print(f"median of the rounds' cpu ratios {args.label_b}/{args.label_a}: {statistics.median(paired):.3f} "
          f"(each: {' '.join(f'{p:.3f}' for p in paired)})")


if __name__ == "__main__":
    main()
