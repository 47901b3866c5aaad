"""Rewrite rollmux/data/default_trace.jsonl: python -m rollmux.workload.regenerate_default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollmux.core.spec import JobSpec
from rollmux.core.trace_io import dump_jobs
from rollmux.errors import InputError
from rollmux.workload.philly import find_traces_dir
from rollmux.workload.synth import synthesize_philly

# The embedded default: 200 catalog jobs over two weeks of VC 0e4a51 (214 arrivals there).
DEFAULT_ARGS = dict(vc="0e4a51", n_jobs=200, days=14.0, mode="catalog", seed=0)
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "default_trace.jsonl"


def default_jobs(traces_dir: Path | None = None) -> list[JobSpec]:
    """The jobs of the embedded default trace."""
    return synthesize_philly(find_traces_dir(traces_dir), **DEFAULT_ARGS)


def main(argv: list[str] | None = None) -> int:
    """Regenerate the default trace (or write it to --out)."""
    ap = argparse.ArgumentParser(prog="python -m rollmux.workload.regenerate_default",
                                 description=__doc__)
    ap.add_argument("--traces", type=Path, default=None, help="traces dir (default: search)")
    ap.add_argument("--out", type=Path, default=DEFAULT_PATH, help="output JSONL path")
    args = ap.parse_args(argv)
    try:
        jobs = default_jobs(args.traces)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dump_jobs(jobs, args.out)
    print(f"wrote {len(jobs)} jobs to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
