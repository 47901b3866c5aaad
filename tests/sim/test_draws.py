"""Seeded per-job rollout draws: the fixed array and the stream drawn as far as it is read."""

from __future__ import annotations

import numpy as np
import pytest

from rollmux.sim.draws import RolloutStream, rollout_draws
from factories import make_job

JOB = make_job("a", rollout=120.0, sigma=0.4, rollout_max=300.0, duration=20 * 225.0)


def test_the_stream_starts_with_the_fixed_draws_and_goes_on_past_them():
    fixed = rollout_draws(JOB, seed=7)
    stream = RolloutStream(JOB, seed=7)
    assert np.array_equal(stream[:len(fixed)], fixed)
    assert stream[5 * len(fixed)] > 0 and len(stream) > 5 * len(fixed)
    long_job = JOB.model_copy(update={"duration_s": 200 * 225.0})
    longer = RolloutStream(long_job, seed=7)
    assert len(longer) == long_job.iterations > 150  # drawn at once, where `stream` drew in chunks
    assert np.array_equal(stream[:150], longer[:150])


def test_the_stream_draws_are_capped_and_seeded():
    a, b = RolloutStream(JOB, seed=1), RolloutStream(JOB, seed=2)
    assert float(np.max(a[:500])) <= 300.0
    assert not np.array_equal(a[:50], b[:50])


def test_the_stream_refuses_negative_or_open_ended_reads():
    stream = RolloutStream(JOB, seed=0)
    with pytest.raises(IndexError):
        stream[-1]
    with pytest.raises(IndexError):
        stream[3:]
