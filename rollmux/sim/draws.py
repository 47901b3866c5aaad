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


def solo_seconds(job: JobSpec, rollouts: np.ndarray) -> float:
    """Time the job needs solo on dedicated disaggregated GPUs for these rollouts."""
    total_r = float(rollouts.sum())
    return total_r + job.train_time(total_r) + job.sync_s * len(rollouts)
