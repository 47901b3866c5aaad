"""The co-located (veRL) execution model (DESIGN §6), shared by the veRL baseline and placement.

veRL model (co-located, one job per GPU set): a job runs every phase on its
own G = max(rollout_gpus, train_gpus) training-type (H800) GPUs, rounded up to
whole nodes for billing. Each iteration:
  rollout_colo = rollout * k_r(rho) * (rollout_gpus / G) * hw / speed
  train_colo   = train_time(rollout) * k_t(rho) / speed
  + two warm offload/onload switches (rollout -> train -> rollout) from host memory;
no cross-cluster sync (weights are resharded in place; folded into the switches).

Calibration (k_r, k_t). The paper measured two jobs both ways (DESIGN §7,
seconds per iteration, disaggregated H20+H800 -> co-located H800):
  8B-32k  rollout 888 -> 608 (k_r = 608/888 = 0.685), train 560 -> 560 (k_t = 1.000)
  32B-8k  rollout 268 -> 277 (k_r = 277/268 = 1.034), train 362 -> 271 (k_t = 271/362 = 0.749)
Co-located rollout on H800 beat the H20 rollout by a third for the long-cap,
rollout-heavy job, and co-located training beat the training cluster by a
quarter for the train-heavy job: far from the HBM-bandwidth ratio (H800 3.35 vs
H20 4.0 TB/s, i.e. rollouts 1.19x slower) used before. Two pairs
cannot separate the features that differ between them (model size, response
cap, phase balance), so the factors are interpolated over the one feature every
profile has, the phase balance rho = rollout_s.median / train_s
(8B-32k: 888/560 = 1.586; 32B-8k: 268/362 = 0.740): log k is linear in log rho
between the two anchors and constant beyond them. E.g. a balanced job (rho = 1)
gets w = ln(1/0.740) / ln(1.586/0.740) = 0.395 of the way to the 8B anchor:
k_r = 1.034^0.605 * 0.685^0.395 = 0.878 and k_t = 0.749^0.605 * 1.0^0.395 = 0.839.
The anchors reproduce the paper's pairs exactly (tests/sim/test_baselines.py
checks 1%). The catalog gives both anchor jobs G = rollout_gpus (16 H800 for
16 H20), so the measured factors are read as per-GPU-set factors; a job with
rollout_gpus < G rolls out on all G GPUs, proportionally faster.

Measured. A job whose profile carries its co-located phase times (`JobSpec.colocated`, e.g. the
authors' sixteen measured pairs on the paper's trace, workload/paper_trace.py) uses those: k_r and
k_t are the ratios of its measured co-located means to its disaggregated means, and the model
above is not consulted. The measured times are taken on its G GPUs; every other factor (a
narrowed G', hw, speed) applies on top as it does to the model.

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

import functools
import math

from rollmux.core.elastic import MIN_SHARE, nonscaling_share
from rollmux.core.group import Group, GroupShape, Member
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.errors import InputError

# The paper's co-located pairs (DESIGN §7): name -> ((disagg rollout, disagg train),
# (co-located rollout, co-located train)), seconds per iteration.
PAPER_COLOCATED_PAIRS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "qwen3-8b-32k": ((888.0, 560.0), (608.0, 560.0)),
    "qwen2.5-32b-8k": ((268.0, 362.0), (277.0, 271.0)),
}
# The paper's hardware: H20 (rollout) and H800 (train) HBM bandwidth, TB/s.
_PAPER_BW_RATIO = 4.0 / 3.35


@functools.cache
def _anchors() -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(log rho, log k_r, log k_t) of the train-heavier and the rollout-heavier anchor."""
    pts = sorted((math.log(d[0] / d[1]), math.log(c[0] / d[0]), math.log(c[1] / d[1]))
                 for d, c in PAPER_COLOCATED_PAIRS.values())
    return pts[0], pts[-1]


def colocated_factors(job: JobSpec) -> tuple[float, float]:
    """(k_r, k_t): co-located / disaggregated phase time. Measured where the job carries its
    co-located profile (`JobSpec.colocated`: the ratios of the measured means), else the
    calibrated model at the job's phase balance."""
    measured = job.colocated
    if measured is not None:
        return measured.rollout_s / job.mean_rollout_s, measured.train_s / job.mean_train_s
    return _factors(job.rollout_s.median, job.train_s)


@functools.lru_cache(maxsize=65536)
def _factors(median: float, train_s: float) -> tuple[float, float]:
    # Cached: the simulator asks once per co-located iteration, with a few distinct profiles.
    lo, hi = _anchors()
    x = math.log(median / train_s)
    w = min(1.0, max(0.0, (x - lo[0]) / (hi[0] - lo[0])))
    return (math.exp(lo[1] + w * (hi[1] - lo[1])), math.exp(lo[2] + w * (hi[2] - lo[2])))


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
    `narrow`) the narrowed G' where there is one."""
    g = narrowed_gpus(job, cluster) if narrow else None
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
