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
    return _rollouts(job, job_rng(seed, job.job_id), job.iterations)


def _rollouts(job: JobSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` more rollout times from the job's generator."""
    d = job.rollout_s
    return np.minimum(d.median * np.exp(d.sigma * rng.standard_normal(n)), d.max)


class RolloutStream:
    """A job's rollout times drawn as far as they are read, for a run whose iteration count is
    not known in advance (the paper accounting: a job iterates until it leaves).

    Its values are `rollout_draws`'s and go on past them: the generator's normals come one at a
    time, so drawing them in chunks gives the same sequence as drawing them at once. Read it
    like the array: `stream[i]`, or `stream[:n]` for the first n."""

    def __init__(self, job: JobSpec, seed: int) -> None:
        self._job, self._rng = job, job_rng(seed, job.job_id)
        self._values = _rollouts(job, self._rng, job.iterations)

    def __getitem__(self, key: int | slice) -> np.ndarray:
        stop = key.stop if isinstance(key, slice) else key + 1
        if stop is None or stop < 0 or (isinstance(key, int) and key < 0):
            raise IndexError("a rollout stream is read by non-negative index or a [:n] slice")
        while stop > len(self._values):  # doubling: a long stay draws in few chunks
            self._values = np.concatenate([self._values, _rollouts(self._job, self._rng, len(self._values))])
        return self._values[key]

    def __len__(self) -> int:
        """How many rollout times are drawn so far."""
        return len(self._values)


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


Rollouts = np.ndarray | RolloutStream  # a job's rollout times: r[i] for iteration i, r[:n] the first n
