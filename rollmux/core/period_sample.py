"""The planner's seeded sample (DESIGN §4-§5): per-job rollout draws and a group's sampled period.

A job's SLO bounds its *mean* iteration time over its run (sim/metrics.py
`JobOutcome.slo_met`), not every iteration. Under `admission.plan == "mean"` the planner
plans each job at the mean of a fixed sample of its rollouts and a group's period by
running its exact schedule on those samples; SLO admission (core/placement/admission.py)
then asks every member's confident mean over its remaining iterations to stay within its
period budget. Evidence: docs/decisions/admission-by-mean.md.

The model (what the planner is allowed to know, and what is assumed):

* Each job's rollout time per iteration is its *declared* profile, `RolloutDist`:
  lognormal(ln median, sigma) capped at max, independent across iterations and
  jobs; training is `JobSpec.train_time(rollout)`, sync is constant. This is the
  simulator's model (sim/draws.py) minus the drift field, which the scheduler never
  reads (drift repair, core/estimates.py, re-plans from measurements instead).
* Each job gets a fixed sample of `chains x length` rollouts, drawn from a numpy
  Generator seeded by (PLAN_SEED, crc32(job_id)) alone: the same job gives the same
  sample in every group and every run, so decisions are deterministic.
* A group's period is sampled by running `chains` independent copies of the exact
  group schedule (the planning schedule of core/intra_group.py: no migration credit,
  straggler overhead added, a warm switch on every shared node) for `length`
  meta-iterations each, from idle. Chain k's mean period is Y_k = T_k / length, T_k
  the time the last member ends meta-iteration `length`. The Y_k are independent, so
  their variance v measures the variance of a `length`-iteration mean directly
  (autocorrelation between meta-iterations included); a mean over n iterations has
  variance about v * length / n (independence of iterations beyond a chain's length),
  plus 1 / chains of v for the sample's own error (`PeriodStats.upper`).

Soundness of the group index (core/placement/index.py): the index bounds the period with
the *sample means* of each job's phase times. Every node does its sampled work and every
member its sampled cycles within T_k, so mean(Y) is at least max(T_cycle, T_load) of those
means, exactly, for every sample: the closed-form bounds stay lower bounds of what
admission compares, and the confidence term is >= 0.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rollmux.core.spec import JobSpec

PLAN_SEED = 14            # the planner's own seed: unrelated to any simulation's seed
PLAN_MODES = ("worst", "mean")
Z_999 = 3.09              # one-sided 99.9% normal quantile

_SAMPLES: dict[tuple, tuple[np.ndarray, float]] = {}
_STATS: dict[tuple, "PeriodStats"] = {}
_CACHE_MAX = 200_000      # entries; cleared whole when exceeded (a long run's old groups)


def rollout_sample(job: JobSpec, chains: int, length: int) -> tuple[np.ndarray, float]:
    """The job's planning sample of rollout times, shape (length, chains), and its mean."""
    d = job.rollout_s
    key = (job.job_id, d.median, d.sigma, d.max, chains, length)
    hit = _SAMPLES.get(key)
    if hit is None:
        rng = np.random.default_rng([PLAN_SEED, zlib.crc32(job.job_id.encode())])
        z = rng.standard_normal((length, chains))
        r = np.minimum(d.median * np.exp(d.sigma * z), d.max)
        if len(_SAMPLES) > _CACHE_MAX:
            _SAMPLES.clear()
        hit = _SAMPLES[key] = (r, float(r.mean()))
    return hit


def mean_rollout(job: JobSpec, chains: int, length: int) -> float:
    """Mean of the job's planning sample of rollout times (what mean-mode planning uses)."""
    return rollout_sample(job, chains, length)[1]


@dataclass(frozen=True)
class PeriodStats:
    """Sampled mean period of a group and the variance of one chain's mean period."""

    mean: float
    var: float      # variance of Y_k, the mean period of one `length`-iteration chain
    chains: int
    length: int

    def upper(self, remaining: float, z: float) -> float:
        """mean + z * std of a `remaining`-iteration mean (plus the sample's own error)."""
        n = max(float(remaining), 1.0)
        return self.mean + z * math.sqrt(max(self.var, 0.0) * (self.length / n + 1.0 / self.chains))


def period_stats(jobs: Sequence[JobSpec], rollout_nodes: Sequence[tuple[int, ...]],
                 train_nodes: Sequence[tuple[int, ...]], overheads: Sequence[float],
                 n_rollout: int, n_train: int, warm_switch_s: float,
                 chains: int, length: int, factors: Sequence[float] | None = None) -> PeriodStats:
    """Sampled period of a group whose members (in cyclic order) are `jobs` pinned to these
    nodes, each rollout scaled by its elastic rollout factor (core/elastic.py; training keeps
    the time of the unscaled rollout) and lengthened by its straggler overhead; cached per
    composition."""
    factors = tuple(factors) if factors is not None else (1.0,) * len(jobs)
    key = (tuple((j.job_id, j.rollout_s.median, j.rollout_s.sigma, j.rollout_s.max, j.train_s, j.sync_s)
                 for j in jobs), tuple(rollout_nodes), tuple(train_nodes), tuple(overheads), factors,
           n_rollout, n_train, warm_switch_s, chains, length)
    hit = _STATS.get(key)
    if hit is not None:
        return hit
    r_cnt = np.bincount([i for ns in rollout_nodes for i in ns], minlength=n_rollout)
    t_cnt = np.bincount([i for ns in train_nodes for i in ns], minlength=n_train)
    # Nodes pinned by the same members are free at the same times: one variable per class.
    r_cls, t_cls = _node_classes(rollout_nodes), _node_classes(train_nodes)
    steps = []
    for j, rn, tn, ov, f in zip(jobs, rollout_nodes, train_nodes, overheads, factors):
        r = rollout_sample(j, chains, length)[0]
        # Per meta-iteration rows: (switch + rollout + overhead, switch + training, sync).
        sw_r = warm_switch_s if any(r_cnt[i] > 1 for i in rn) else 0.0
        sw_t = warm_switch_s if any(t_cnt[i] > 1 for i in tn) else 0.0
        steps.append((sorted({r_cls[i] for i in rn}), sorted({t_cls[i] for i in tn}),
                      (r * f if f != 1.0 else r) + (sw_r + ov), j.train_s / j.rollout_s.median * r + sw_t,
                      j.sync_s))
    zero = np.zeros(chains)
    rfree, tfree = [zero] * (max(r_cls.values(), default=-1) + 1), [zero] * (max(t_cls.values(), default=-1) + 1)
    ready = [zero] * len(jobs)
    for m in range(length):
        for k, (rn, tn, roll, train, sync) in enumerate(steps):
            start = ready[k]
            for i in rn:
                start = np.maximum(start, rfree[i])
            r_end = start + roll[m]
            for i in rn:
                rfree[i] = r_end
            for i in tn:
                r_end = np.maximum(r_end, tfree[i])
            t_end = r_end + train[m]
            for i in tn:
                tfree[i] = t_end
            ready[k] = t_end + sync
    y = np.max(np.stack(ready), axis=0) / length if jobs else zero
    out = PeriodStats(float(y.mean()), float(y.var(ddof=1)) if chains > 1 else 0.0, chains, length)
    if len(_STATS) > _CACHE_MAX:
        _STATS.clear()
    _STATS[key] = out
    return out


def _node_classes(pins: Sequence[tuple[int, ...]]) -> dict[int, int]:
    """Node -> class id, nodes pinned by the same set of members sharing a class."""
    users: dict[int, list[int]] = {}
    for k, ns in enumerate(pins):
        for i in ns:
            users.setdefault(i, []).append(k)
    ids: dict[tuple[int, ...], int] = {}
    return {i: ids.setdefault(tuple(u), len(ids)) for i, u in users.items()}

