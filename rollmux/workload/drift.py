"""Drifted traces: the paper's profile-drift experiment on any trace.

A share of the jobs gets a `drift` field: after a uniform fraction of its solo
lifetime, its true rollout and training times scale by factors drawn from the
given ranges. The scheduler never reads the field; it only sees the measured
phase times of the simulated jobs.
"""

from __future__ import annotations

import numpy as np

from rollmux.core.spec import Drift, JobSpec
from rollmux.errors import InputError

ROLLOUT_SCALE = (1.2, 1.8)
TRAIN_SCALE = (1.0, 1.5)
AFTER = (0.2, 0.6)  # drift begins after this fraction of the job's solo lifetime


def add_drift(jobs: list[JobSpec], share: float, seed: int,
              rollout_scale: tuple[float, float] = ROLLOUT_SCALE,
              train_scale: tuple[float, float] = TRAIN_SCALE,
              after: tuple[float, float] = AFTER) -> list[JobSpec]:
    """The trace with `share` of its jobs (seeded choice) drifting; the rest unchanged."""
    if not 0 <= share <= 1:
        raise InputError("share", f"must be in [0, 1] (got {share})")
    for name, (lo, hi) in (("rollout_scale", rollout_scale), ("train_scale", train_scale), ("after", after)):
        if not 0 < lo <= hi:
            raise InputError(name, f"range must satisfy 0 < low <= high (got {lo}, {hi})")
    rng = np.random.default_rng(seed)
    picked = rng.random(len(jobs)) < share
    out = []
    for job, drift in zip(jobs, picked, strict=True):
        a, b, f = rng.uniform(*rollout_scale), rng.uniform(*train_scale), rng.uniform(*after)
        if drift:
            d = Drift(after_s=round(float(f * job.duration_s), 1), rollout_scale=round(float(a), 3),
                      train_scale=round(float(b), 3))
            job = JobSpec(**{**job.fields(), "drift": d})
        out.append(job)
    return out
