"""What the scheduler believes about a job's phase times, from what it measured.

The scheduler plans with each job's declared profile until measurements say
otherwise. Per iteration it sees the job's rollout and training seconds; it
keeps the last `window` rollout ratios to the declared median and the last
training ratio to what the declared profile predicts for that rollout.

* Training given its rollout is deterministic in the model (training scales
  with generated tokens), so one iteration tells its scale exactly.
* Rollout times are lognormal around the median, so their scale is the
  geometric mean of the window, trusted only when it differs from 1 by more
  than `z` standard errors (sigma / sqrt(n)) over at least `min_n` iterations:
  noise alone must not trigger a repair. A rollout past the declared maximum is drift by definition.

`measured_spec` turns the estimate into a JobSpec the planner uses unchanged:
median and max scaled, training re-based, the same number of iterations. A phase
measured under `MIN_MEASURED_S` is too short to measure: it is not observed. A
measured profile outside a job record's ranges (core/spec.py) is refused like a
declared one (ValueError), and the caller keeps the profile it had.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollmux.core.spec import MAX_PHASE_S, MIN_TIME_S, JobSpec, RolloutDist

MIN_MEASURED_S = 1e-3  # a phase measured shorter than a millisecond says nothing of the job's speed


@dataclass
class PhaseEstimate:
    """Measured scales of one job's rollout and training against its declared profile."""

    job: JobSpec
    window: int = 8
    z: float = 4.0
    min_n: int = 4  # no verdict on rollout drift from fewer iterations
    logs: deque = field(default_factory=deque)
    train_ratio: float = 1.0
    over_max: float = 1.0  # largest rollout seen / declared max (> 1 only under drift)
    count: int = 0          # iterations observed
    solo_done_s: float = 0.0  # their measured phase times: what they would have taken solo
    # The last (scales, planned spec) the scheduler found within tolerance: the same scales
    # against the same plan need no new check (measured_spec builds two models).
    accepted: tuple[tuple[float, float], JobSpec] | None = None

    def observe(self, rollout_s: float, train_s: float) -> None:
        """One finished iteration's measured rollout and training seconds (each finite, within
        [MIN_MEASURED_S, MAX_PHASE_S], else ValueError and nothing changes)."""
        for name, v in (("rollout_s", rollout_s), ("train_s", train_s)):
            if not MIN_MEASURED_S <= v <= MAX_PHASE_S:  # (NaN fails too)
                raise ValueError(f"{self.job.job_id}: measured {name} {v!r} is outside "
                                 f"[{MIN_MEASURED_S:g}, {MAX_PHASE_S:g}] s")
        d = self.job.rollout_s
        logs = self.logs
        logs.append(math.log(max(rollout_s, 1e-9) / d.median))
        if len(logs) > self.window:
            logs.popleft()  # one in, one out: the window never holds more
        over = rollout_s / d.max
        if over > self.over_max:
            self.over_max = over
        self.train_ratio = train_s / self.job.train_time(rollout_s)
        self.count += 1
        self.solo_done_s += rollout_s + train_s + self.job.sync_s

    def elapsed_charge(self, done: int, planned: JobSpec) -> float:
        """Seconds to add to the job's elapsed time so that `period_budget`, computed with the
        measured profile `planned` for every iteration, gives its true budget: the iterations
        done are owed at their measured solo time, not at the measured profile's."""
        owed = self.solo_done_s + max(done - self.count, 0) * planned.solo_iter_s
        return planned.slo * (done * planned.solo_iter_s - owed)

    def rollout_scale(self) -> float:
        """Estimated factor on the declared rollout times (1.0 unless the evidence is clear)."""
        n = len(self.logs)
        if n < self.min_n:
            return max(1.0, self.over_max)
        mean = sum(self.logs) / n
        sigma = self.job.rollout_s.sigma
        noise = self.z * sigma / math.sqrt(n) if sigma > 0 else 1e-6
        scale = math.exp(mean) if abs(mean) > noise else 1.0
        return max(scale, self.over_max)

    def scales(self) -> tuple[float, float]:
        """(rollout scale, training scale) against the declared profile."""
        a = self.rollout_scale()
        return a, a * self.train_ratio


def measured_spec(job: JobSpec, rollout_scale: float, train_scale: float) -> JobSpec:
    """`job` with its phase times scaled: what the planner should assume from now on."""
    if abs(rollout_scale - 1) < 1e-9 and abs(train_scale - 1) < 1e-9:
        return job
    d = job.rollout_s
    dist = RolloutDist(median=d.median * rollout_scale, sigma=d.sigma, max=d.max * rollout_scale)
    fields = {**job.fields(), "rollout_s": dist, "train_s": job.train_s * train_scale}
    if job.colocated is not None:  # a drift slows both modes alike: the measured ratios hold
        fields["colocated"] = job.colocated.model_copy(update={"rollout_s": job.colocated.rollout_s * rollout_scale,
                                                               "train_s": job.colocated.train_s * train_scale})
    # Same work: as many iterations as declared, each at the measured solo time (a fresh
    # model, validated like a declared profile).
    probe = JobSpec(**fields)
    spec = JobSpec(**{**fields, "duration_s": job.iterations * probe.solo_iter_s})
    if spec.iterations != job.iterations:
        raise AssertionError(f"{job.job_id}: measured profile changed the iteration count")
    return spec


def fitted_phases(rollout: Sequence[float], train: Sequence[float], sync: Sequence[float],
                  max_rollout: float = 0.0, min_sigma: float = 0.0) -> dict:
    """A job record's phase-time fields from measured seconds (DESIGN §2): the rollouts' median,
    the standard deviation of their logs as sigma (at least `min_sigma`, at most 3) and, as the
    maximum, `max_rollout` or the slowest rollout if that is slower; the median training and sync
    (no sync measured: 0). Every time at least `MIN_TIME_S`, at most `MAX_PHASE_S`; each in six
    significant digits (measured seconds carry no more). ValueError without a rollout or training time."""
    if not rollout or not train:
        raise ValueError("fitted_phases: at least one rollout and one training time")
    logs = [math.log(max(r, 1e-9)) for r in rollout]
    spread = statistics.stdev(logs) if len(logs) > 1 else 0.0
    median = _measured_s(statistics.median(rollout))
    return {"rollout_s": {"median": median, "sigma": _sig(min(max(spread, min_sigma), 3.0)),
                          "max": max(median, _measured_s(max(max_rollout, *rollout)))},
            "train_s": _measured_s(statistics.median(train)),
            "sync_s": _sig(min(statistics.median(sync), MAX_PHASE_S)) if sync else 0.0}


def _sig(x: float) -> float:
    """Six significant digits."""
    return float(f"{x:.6g}")


def _measured_s(x: float) -> float:
    """A measured phase time as a record may hold it (within [MIN_TIME_S, MAX_PHASE_S])."""
    return _sig(min(max(x, MIN_TIME_S), MAX_PHASE_S))
