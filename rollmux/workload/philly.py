"""Reading the Philly trace extract (shipped in rollmux/data/philly, with its attribution) and drawing
arrivals and lifetimes."""

from __future__ import annotations

import csv
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from rollmux.errors import InputError

HOUR = 3600.0
DAY = 86400.0
# RL post-training runs last at least tens of iterations (~1 h); the 7-day cap keeps a
# two-week simulation bounded while keeping Philly's heavy tail (median 4 h, mean 32 h).
MIN_LIFETIME_S = 1 * HOUR
MAX_LIFETIME_S = 7 * DAY

_ENV = "ROLLMUX_TRACES"
# The traces that ship in the package: philly/ (the Philly extract) and paper/ (the authors' trace),
# each with a README naming its source and license.
PACKAGED = Path(__file__).resolve().parents[1] / "data"


def _is_traces_dir(path: Path) -> bool:
    return (path / "philly" / "job_durations.csv").is_file() and (path / "philly" / "arrivals").is_dir()


def find_traces_dir(explicit: Path | None = None) -> Path:
    """The traces dir: `explicit`, else $ROLLMUX_TRACES, else the copy in the package (PACKAGED)."""
    if explicit is not None:
        path = Path(explicit)
        if not _is_traces_dir(path):
            raise InputError(str(path), "not a traces dir (expected philly/job_durations.csv "
                                        "and philly/arrivals/)")
        return path
    if env := os.environ.get(_ENV):
        path = Path(env)
        if not _is_traces_dir(path):
            raise InputError(f"${_ENV}={env}", "not a traces dir (expected philly/job_durations.csv "
                                               "and philly/arrivals/)")
        return path
    if not _is_traces_dir(PACKAGED):  # (an installation that lost its package data)
        raise InputError(str(PACKAGED), "the packaged traces are missing (expected philly/job_durations.csv "
                                        f"and philly/arrivals/); pass a traces dir or set ${_ENV}")
    return PACKAGED


def available_vcs(traces_dir: Path) -> list[str]:
    """VC ids that have an arrivals file."""
    return sorted(p.stem for p in (Path(traces_dir) / "philly" / "arrivals").glob("*.csv"))


def read_csv(path: Path, columns: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Read a two-column numeric CSV (float, positive int); InputError names file:line."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror})") from None
    # Parsing the 33k-row durations file takes ~0.1 s; studies call this many times.
    return _read_csv(str(path), columns, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=32)
def _read_csv(path: str, columns: tuple[str, str], _mtime_ns: int, _size: int
              ) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    if not rows or tuple(c.strip() for c in rows[0]) != columns:
        raise InputError(f"{path}:1", f"expected the header {','.join(columns)}")
    values, gpus = [], []
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) != 2:
                raise ValueError(f"expected 2 fields, got {len(row)}")
            value, n = float(row[0]), int(row[1])
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"{columns[0]} must be a finite number >= 0")
            if n < 1:
                raise ValueError(f"{columns[1]} must be >= 1")
        except ValueError as exc:
            raise InputError(f"{path}:{lineno}", f"malformed row {','.join(row)!r} ({exc})") from None
        values.append(value)
        gpus.append(n)
    if not values:
        raise InputError(path, "holds no rows")
    out = np.asarray(values, dtype=float), np.asarray(gpus, dtype=int)
    for arr in out:
        arr.setflags(write=False)  # shared by every caller of the cache
    return out


def load_arrivals(traces_dir: Path, vc: str) -> tuple[np.ndarray, np.ndarray]:
    """(arrival_s, num_gpus) of one VC, sorted by arrival."""
    vcs = available_vcs(traces_dir)
    if vc not in vcs:
        raise InputError("vc", f"unknown VC {vc!r} (available: {', '.join(vcs) or 'none'})")
    times, gpus = read_csv(Path(traces_dir) / "philly" / "arrivals" / f"{vc}.csv",
                           ("arrival_s", "num_gpus"))
    order = np.argsort(times, kind="stable")
    return times[order], gpus[order]


def load_durations(traces_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(duration_s, num_gpus) of Philly's job run times."""
    return read_csv(Path(traces_dir) / "philly" / "job_durations.csv", ("duration_s", "num_gpus"))


def select_arrivals(times: np.ndarray, gpus: np.ndarray, n_jobs: int, window_s: float,
                    rng: np.random.Generator, source: str = "arrivals"
                    ) -> tuple[np.ndarray, np.ndarray]:
    """n_jobs arrivals inside [0, window_s): a seeded subset, or the first n rescaled."""
    inside = np.flatnonzero(times < window_s)
    if len(inside) >= n_jobs:
        pick = np.sort(rng.choice(inside, size=n_jobs, replace=False))
        return times[pick], gpus[pick]
    if len(times) < n_jobs:
        raise InputError(source, f"has only {len(times)} arrivals, fewer than n_jobs={n_jobs}")
    # Too few arrivals in the window: keep the VC's first n_jobs arrivals (their real
    # burstiness) and stretch/squeeze them linearly so they span the window; one mean
    # inter-arrival gap is kept free at the end so the last job lands inside it.
    t = times[:n_jobs] - times[0]
    span = t[-1] * n_jobs / (n_jobs - 1) if n_jobs > 1 else 0.0
    scaled = t * (window_s / span) if span > 0 else np.zeros_like(t)
    return scaled, gpus[:n_jobs]


def sample_lifetimes(job_gpus: np.ndarray, durations: np.ndarray, dur_gpus: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """A Philly run time per job, from rows with the same GPU count (as Gavel does), clipped."""
    sizes = np.unique(dur_gpus)
    pools = {int(s): durations[dur_gpus == s] for s in sizes}
    out = np.empty(len(job_gpus))
    for i, g in enumerate(job_gpus):
        # Jobs larger than any sampled size (e.g. 16-GPU arrivals) use the largest size below.
        below = sizes[sizes <= g]
        pool = pools[int(below[-1] if len(below) else sizes[0])]
        out[i] = pool[rng.integers(len(pool))]
    return np.clip(out, MIN_LIFETIME_S, MAX_LIFETIME_S)
