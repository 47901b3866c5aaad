"""Flat vs topology-aware weight sync over a throttled veth link, for several pool sizes.

    sudo .venv/bin/python benchmarks/sync_bench.py [--pools 4x4,8x8] [--model-mb 64] [--link-mbit 400] [--json OUT]

Each N x M pair runs `rollmux bench sync`'s benchmark (rollmux.weightsync.bench) on a fresh
two-namespace testbed; one line each, and the documents as a JSON list. Needs root (exit 2 with
one line where the namespaces cannot be created).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollmux.weightsync.bench import BenchConfig, run_sync_bench
from rollmux.weightsync.testbed import TestbedUnavailable


def _pools(text: str) -> list[tuple[int, int]]:
    """'4x4,8x8' -> [(4, 4), (8, 8)]."""
    try:
        return [(int(a), int(b)) for a, b in (p.lower().split("x") for p in text.split(","))]
    except ValueError:
        raise SystemExit(f"--pools: expected NxM[,NxM...] (got {text!r})") from None


def main() -> None:
    """Run every configuration, print one line each, write the JSON list."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", default="4x4,8x8", help="Training x rollout ranks, comma-separated.")
    ap.add_argument("--model-mb", type=float, default=64.0)
    ap.add_argument("--link-mbit", type=float, default=400.0)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    docs = []
    for n, m in _pools(a.pools):
        try:
            doc = run_sync_bench(BenchConfig(n, m, a.model_mb, a.link_mbit))
        except TestbedUnavailable as exc:
            print(f"sync_bench: cannot build the testbed: {exc}", file=sys.stderr)
            raise SystemExit(2)
        except ValueError as exc:
            print(f"sync_bench: {exc}", file=sys.stderr)
            raise SystemExit(2)
        docs.append(doc)
        print(f"{n} -> {m} ranks, {a.model_mb:g} MiB over {a.link_mbit:g} Mbit/s: flat {doc['flat_s']:.2f} s "
              f"({doc['flat_link_mb']:.0f} MiB on the link), topology {doc['topology_s']:.2f} s "
              f"({doc['topology_link_mb']:.0f} MiB), speedup {doc['speedup']:.2f}x, "
              f"identical {doc['identical']}", flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps(docs, indent=2) + "\n")


if __name__ == "__main__":
    main()
