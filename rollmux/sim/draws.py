"""Seeded per-job random draws, identical for every policy that runs the job.

Each job gets its own generator derived from (seed, job_id), so a job's
rollout times do not depend on which policy runs it or on the other jobs:
slowdowns compare a policy's schedule with the solo run on the same draws.
"""

from __future__ import annotations

import zlib

import numpy as np

from rollmux.core.spec import JobSpec


def job_rng(seed: int, job_id: str) -> np.random.Generator:
    """The job's own generator for run `seed`."""
    return np.random.default_rng([seed, zlib.crc32(job_id.encode())])


def rollout_draws(job: JobSpec, seed: int) -> np.ndarray:
    """One rollout time per iteration: lognormal(median, sigma) truncated (capped) at max."""
    d = job.rollout_s
    z = job_rng(seed, job.job_id).standard_normal(job.iterations)
    return np.minimum(d.median * np.exp(d.sigma * z), d.max)


def drift_scales(job: JobSpec, ran_s: float) -> tuple[float, float]:
    """True (rollout, training) factors once the job has run `ran_s` seconds (1, 1 before drift)."""
    d = job.drift
    if d is None or ran_s < d.after_s:
        return 1.0, 1.0
    return d.rollout_scale, d.train_scale


def solo_seconds(job: JobSpec, rollouts: np.ndarray) -> float:
    """Time the job needs solo on dedicated disaggregated GPUs for these rollouts.

    A drifting job drifts after `after_s` seconds of its own solo run: its SLO is judged
    against that drifted solo time."""
    if job.drift is None:
        total_r = float(rollouts.sum())
        return total_r + job.train_time(total_r) + job.sync_s * len(rollouts)
    t = 0.0
    for r in rollouts:
        a, b = drift_scales(job, t)
        t += a * float(r) + b * job.train_time(float(r)) + job.sync_s
    return t
