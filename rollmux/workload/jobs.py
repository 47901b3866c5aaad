"""Turning drawn profile numbers into validated JobSpecs (shared by both modes)."""

from __future__ import annotations

from dataclasses import dataclass

from rollmux.core.colo_fit import measured_factors
from rollmux.core.spec import ColocatedProfile, HostGB, JobSpec, RolloutDist

# A job shorter than this many solo iterations is not a post-training run; its
# lifetime is stretched to this many iterations (documented in docs/workload.md).
MIN_ITERATIONS = 10


@dataclass(frozen=True)
class Profile:
    """Per-iteration profile of one job before it gets an identity and a lifetime."""

    model: str
    rollout_gpus: int
    train_gpus: int
    rollout_median: float
    rollout_sigma: float
    rollout_max: float
    tail_frac: float
    train_s: float
    sync_s: float
    host_rollout_gb: float
    host_train_gb: float
    weights_gb: float | None = None  # one bf16 copy of the model (what a weight sync sends)


def job_id(prefix: str, index: int, n_jobs: int) -> str:
    """Zero-padded id such as p0007 (wider when there are more than 10,000 jobs)."""
    return f"{prefix}{index:0{max(4, len(str(n_jobs - 1)))}d}"


def make_job(jid: str, arrival_s: float, lifetime_s: float, slo: float, p: Profile) -> JobSpec:
    """A JobSpec with readable rounding; duration_s covers at least MIN_ITERATIONS iterations; a job
    of a type the authors timed both ways carries their measured co-located ratios (`colocated`)."""
    # Rounding is monotone, so max >= median survives it; the trace stays short and diffable.
    body = dict(
        job_id=jid, arrival_s=round(float(arrival_s), 1), duration_s=1.0,
        slo=round(float(slo), 3), model=p.model,
        rollout_gpus=int(p.rollout_gpus), train_gpus=int(p.train_gpus),
        rollout_s=RolloutDist(median=round(p.rollout_median, 1), sigma=round(p.rollout_sigma, 3),
                              max=round(p.rollout_max, 1)),
        tail_frac=round(p.tail_frac, 3), train_s=round(p.train_s, 1), sync_s=round(p.sync_s, 1),
        host_gb=HostGB(rollout=round(p.host_rollout_gb, 1), train=round(p.host_train_gb, 1)),
    )
    if p.weights_gb is not None:
        body["weights_gb"] = round(p.weights_gb, 1)
    spec = JobSpec(**body)
    measured = measured_factors(p.model)
    if measured is not None:
        # The authors' measured co-located / disaggregated ratios of this type, on this job's times.
        body["colocated"] = ColocatedProfile(rollout_s=round(measured[0] * spec.mean_rollout_s, 1),
                                             train_s=round(measured[1] * spec.mean_train_s, 1))
    # Round up to whole seconds so the floor holds after rounding.
    body["duration_s"] = float(max(round(lifetime_s), -(-MIN_ITERATIONS * spec.solo_iter_s // 1)))
    return JobSpec(**body)
