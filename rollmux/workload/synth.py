"""synthesize_philly: Philly arrivals and lifetimes mapped to RL post-training jobs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np

from rollmux.core.spec import JobSpec
from rollmux.errors import InputError
from rollmux.workload.catalog import draw_catalog_profile
from rollmux.workload.jobs import job_id, make_job
from rollmux.workload.paper import check_options, check_seed, draw_paper_profile, draw_slo
from rollmux.workload.philly import DAY, load_arrivals, load_durations, sample_lifetimes, select_arrivals

MODES = ("paper", "catalog")


def synthesize_philly(traces_dir: Path, vc: str, n_jobs: int, days: float,
                      mode: Literal["paper", "catalog"], seed: int, *, profile: str = "mixed",
                      size: str | None = None, slo: float | None = None) -> list[JobSpec]:
    """n_jobs RL jobs with one Philly VC's arrivals and Philly lifetimes over `days` days."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs < 1:
        raise InputError("n_jobs", f"must be an integer >= 1 (got {n_jobs!r})")
    if not isinstance(days, (int, float)) or not math.isfinite(days) or days <= 0:
        raise InputError("days", f"must be a number > 0 (got {days!r})")
    if mode not in MODES:
        raise InputError("mode", f"unknown mode {mode!r} (use {' or '.join(MODES)})")
    check_seed(seed)
    check_options(profile, size, slo)
    traces_dir = Path(traces_dir)
    if not traces_dir.is_dir():
        raise InputError(str(traces_dir), "traces dir does not exist")
    times, gpus = load_arrivals(traces_dir, vc)
    durations, dur_gpus = load_durations(traces_dir)

    # Independent child streams: the arrivals and lifetimes a seed picks do not
    # depend on the mode, and adding draws to one stream never shifts the others.
    arrival_rng, lifetime_rng, profile_rng = np.random.default_rng(seed).spawn(3)
    source = str(traces_dir / "philly" / "arrivals" / f"{vc}.csv")
    arrivals, job_gpus = select_arrivals(times, gpus, int(n_jobs), days * DAY, arrival_rng, source)
    lifetimes = sample_lifetimes(job_gpus, durations, dur_gpus, lifetime_rng)

    jobs = []
    for i, (t, g, life) in enumerate(zip(arrivals, job_gpus, lifetimes)):
        if mode == "paper":
            p = draw_paper_profile(profile_rng, profile, size, int(g))
        else:
            p = draw_catalog_profile(profile_rng)
        jobs.append(make_job(job_id("p", i, len(arrivals)), t, life, draw_slo(profile_rng, slo), p))
    return jobs
