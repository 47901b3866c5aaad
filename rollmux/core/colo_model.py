"""The co-located (veRL) execution model (DESIGN §6), shared by the veRL baseline and placement.

veRL model (co-located, one job per GPU set): a job runs every phase on its
own G = max(rollout_gpus, train_gpus) training-type (H800) GPUs, rounded up to
whole nodes for billing. Each iteration:
  rollout_colo = rollout * k_r(rho) * (rollout_gpus / G) * hw / speed
  train_colo   = train_time(rollout) * k_t(rho) / speed
  + two warm offload/onload switches (rollout -> train -> rollout) from host memory;
no cross-cluster sync (weights are resharded in place; folded into the switches).

Factors (k_r, k_t). Measured where the job carries its co-located profile (`JobSpec.colocated`,
e.g. the authors' sixteen measured pairs on the paper's trace, workload/paper_trace.py, or a
`rollmux profile --colocated` run): k_r and k_t are the ratios of its measured co-located means to
its disaggregated means. Otherwise core/colo_fit.py: the measured ratios of the job's type where
its `model` names one the authors timed (e.g. qwen2.5-7b-8k: k_r = 159.6/133.8 = 1.193,
k_t = 98.2/112.8 = 0.871, co-location 4.5% slower per iteration), else the fit on all sixteen
pairs (size, cap, phase balance), never more optimistic than the measured pairs around the job.
The measured times are taken on the job's G GPUs (the authors' jobs: 8 H800 for 8 H20); every
other factor (a narrowed G', hw, speed) applies on top.

Narrowed (elastic rollout, core/elastic.py): a job with more rollout than training GPUs may
run co-located on fewer GPUs than its rollout declares, G' = its training GPUs' whole nodes,
when G' >= rollout_gpus * MIN_SHARE (the elastic range: at most half the data-parallel
engines gone). Its batch is then split over fewer engines, and its rollout takes the elastic
model's factor c + (1 - c) * rollout_gpus / G' (the fixed part and the long tail do not
shrink with more engines, so neither do they grow with fewer) on top of k_r. E.g. a 16:8 job
runs on one H800 node instead of two. `colocated_gpus` is the veRL baseline's G; a
placement's own G is `placement_gpus`. hw rescales
for other hardware: (bw_rollout / bw_train) / (4.0 / 3.35), 1 on the paper's
cluster. `speed` is the sensitivity knob: co-located phases run `speed` times
as fast as calibrated (0.8 = 25% slower, 1.2 = 17% faster).

Pure arithmetic over specs: the veRL baseline (sim/baselines.py), Gavel+'s kind choice
(sim/gavel_alloc.py) and RollMux's per-job co-located mode (core/placement/options/colocated.py)
all use it. A co-located placement is a one-member group with no rollout nodes
(`colocated_group`); the executors run its iterations by `colocated_phases`.
"""

from __future__ import annotations

import math

from rollmux.core.colo_fit import modelled_factors
from rollmux.core.elastic import MIN_SHARE, nonscaling_share
from rollmux.core.group import Group, GroupShape, Member
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode
from rollmux.errors import InputError

# The paper's hardware: H20 (rollout) and H800 (train) HBM bandwidth, TB/s.
_PAPER_BW_RATIO = 4.0 / 3.35


def colocated_factors(job: JobSpec) -> tuple[float, float]:
    """(k_r, k_t): co-located / disaggregated phase time. Measured where the job carries its
    co-located profile (`JobSpec.colocated`: the ratios of the measured means), else its type's
    measured pair or the fit on the sixteen pairs (core/colo_fit.py)."""
    measured = job.colocated
    if measured is not None:
        return measured.rollout_s / job.mean_rollout_s, measured.train_s / job.mean_train_s
    return modelled_factors(job.model, job.rollout_s.median / job.train_s)


def check_colo_speed(speed: float) -> None:
    """InputError unless the co-located speed factor is a finite number > 0."""
    if not (math.isfinite(speed) and speed > 0):
        raise InputError("colo_speed", f"must be a number > 0, got {speed!r}")


def colocated_gpus(job: JobSpec) -> int:
    """G: the training-type GPUs a co-located job runs every phase on."""
    return max(job.rollout_gpus, job.train_gpus)


def narrowed_gpus(job: JobSpec, cluster: ClusterSpec) -> int | None:
    """G' < G: the training GPUs a narrowed co-located job runs on (its training GPUs' whole
    nodes, fewer nodes than G needs, within the elastic range); None when there is no such G'."""
    pool = cluster.pools.train
    g = pool.nodes_for(job.train_gpus) * pool.gpus_per_node
    if g >= job.rollout_gpus or g < job.rollout_gpus * MIN_SHARE or pool.nodes_for(g) >= colocated_nodes(job, cluster):
        return None
    return g


def gpu_options(job: JobSpec, cluster: ClusterSpec, narrow: bool = True) -> tuple[int, ...]:
    """The GPU counts a co-located placement of `job` may run on: the veRL model's G, then (with
    `narrow`, for a job that can take elastic rollout) the narrowed G' where there is one."""
    g = narrowed_gpus(job, cluster) if narrow and job.can(Mode.ELASTIC_ROLLOUT) else None
    return (colocated_gpus(job),) if g is None else (colocated_gpus(job), g)


def placement_gpus(job: JobSpec, cluster: ClusterSpec, n_train: int) -> int:
    """The G a co-located placement on `n_train` training nodes runs its job on: the veRL
    model's G, or a narrowed G' (fewer nodes, `narrowed_gpus`)."""
    return min(colocated_gpus(job), n_train * cluster.pools.train.gpus_per_node)


def colocated_nodes(job: JobSpec, cluster: ClusterSpec, gpus: int | None = None) -> int:
    """Whole training-pool nodes a co-located job holds (on `gpus`, default the veRL model's G)."""
    return cluster.pools.train.nodes_for(colocated_gpus(job) if gpus is None else gpus)


def verl_rollout_scale(job: JobSpec, cluster: ClusterSpec, speed: float = 1.0, gpus: int | None = None) -> float:
    """Factor by which a rollout's time changes when co-located on `gpus` training GPUs
    (default the job's G); on fewer than its rollout declares, the elastic model's factor."""
    check_colo_speed(speed)
    g = colocated_gpus(job) if gpus is None else gpus
    hw = cluster.pools.rollout.bandwidth_tbs() / cluster.pools.train.bandwidth_tbs() / _PAPER_BW_RATIO
    if g < job.rollout_gpus:
        c = nonscaling_share(job)
        return colocated_factors(job)[0] * (c + (1.0 - c) * job.rollout_gpus / g) * hw / speed
    return colocated_factors(job)[0] * job.rollout_gpus / g * hw / speed


def verl_train_scale(job: JobSpec, speed: float = 1.0) -> float:
    """Factor by which a training step's time changes when co-located."""
    check_colo_speed(speed)
    return colocated_factors(job)[1] / speed


def colocated_iter_s(job: JobSpec, cluster: ClusterSpec, rollout: float, speed: float = 1.0,
                     gpus: int | None = None) -> float:
    """Co-located iteration time (on `gpus`, default G) for a (disaggregated) rollout of `rollout` seconds."""
    return (rollout * verl_rollout_scale(job, cluster, speed, gpus)
            + job.train_time(rollout) * verl_train_scale(job, speed) + 2 * cluster.warm_switch_s)


def colocated_group(group_id: int, job: JobSpec, cluster: ClusterSpec, planned_s: float,
                    gpus: int | None = None) -> Group:
    """The co-located job's own placement: no rollout nodes, pinned to all its training nodes
    (those `gpus` need, default the veRL model's G); its shape is its planned co-located iteration time."""
    nt = colocated_nodes(job, cluster, gpus)
    return Group(group_id, 0, nt, (Member(job, (), tuple(range(nt))),),
                 GroupShape(period_s=planned_s, t_cycle_s=planned_s, t_load_s=planned_s))


def is_colocated(group: Group) -> bool:
    """True for a co-located job's own placement (`colocated_group`): no rollout nodes."""
    return group.n_rollout == 0


def group_gpus(group: Group, cluster: ClusterSpec) -> int:
    """The GPUs a co-located placement runs its job on: G, or a narrowed G' (fewer nodes)."""
    return placement_gpus(group.members[0].job, cluster, group.n_train)


def colocated_phases(job: JobSpec, cluster: ClusterSpec, rollout: float, train: float,
                     speed: float = 1.0, gpus: int | None = None) -> tuple[float, float, float]:
    """(rollout, training, switches) seconds of one co-located iteration on `gpus` (default the
    veRL model's G) whose disaggregated phases would take `rollout` and `train` seconds (drift
    already applied to both)."""
    return (rollout * verl_rollout_scale(job, cluster, speed, gpus), train * verl_train_scale(job, speed),
            2 * cluster.warm_switch_s)
