"""Rollout time vs rollout nodes: the model behind elastic rollout (core/placement/options/elastic.py).

A rollout's batch is split evenly over its data-parallel engines; decoding is memory-bandwidth
bound (workload/perf.py: each decode step reads the weight shard and the KV cache of every live
response on the GPU). Of one iteration's rollout time

* the fixed part (prefill, reward scoring, batch setup: perf.ROLLOUT_FIXED_S, plus the
  environment latency of a multi-turn job's turns) does not shrink with more engines;
* the long tail (the profile's `tail_frac`: the last responses decoding nearly alone, each step
  costing the weight read whatever the batch) does not shrink either: the longest response
  decodes on one engine at the same speed however many engines share the rest;
* the rest is batch-bound: per-GPU batch, KV reads and (past KV capacity) decode steps scale
  with responses per GPU, i.e. as k0 / k on k rollout nodes instead of the nominal k0.

So t(k) = t(k0) * (c + (1 - c) * k0 / k), with the non-scaling share
c = min(0.9, tail_frac + fixed_s / median). The same factor multiplies every draw, hence the
median, the planning quantile and the cap: a proportional model of a share that is exact at
the median, kept simple on purpose. Training time depends on the tokens generated, not on the
rollout nodes, so it stays the profile's, and the SLO stays judged against the nominal solo
run. The planner (group_planning_times) and the simulator both read the factor from the member
(`Member.rollout_factor`), so what is planned is what is simulated.

Range: from ceil(k0 * MIN_SHARE) to floor(k0 * MAX_SCALE) nodes. Fewer than half the nominal
would double the per-GPU batch again and push the KV cache past what the perf model calibrates;
beyond twice the nominal the batch-bound share left is small (diminishing returns).
"""

from __future__ import annotations

import math

from rollmux.core.config import MAX_SCALE, MIN_SHARE
from rollmux.core.group import Member
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode

# The rollout model's fixed parts, shared with the workload's performance model
# (workload/perf.py imports them from here: core never imports workload).
ROLLOUT_FIXED_S = 40.0      # per iteration: prompt prefill, reward scoring, batch setup
TURNS = 4                   # turns of a multi-turn job
ENV_LATENCY_S = 5.0         # per turn: tool / sandbox call on the critical path

MAX_NONSCALING = 0.9  # the batch-bound part is never modelled below a tenth of the rollout


def nonscaling_share(job: JobSpec) -> float:
    """Share c of the job's rollout time that more rollout nodes do not shorten (fixed part + tail)."""
    fixed = ROLLOUT_FIXED_S + (TURNS * ENV_LATENCY_S if (job.model or "").endswith("-mt") else 0.0)
    return min(MAX_NONSCALING, job.tail_frac + fixed / job.rollout_s.median)


def least_share(job: JobSpec) -> float:
    """The least share of its nominal rollout time the job's rollout takes on any count of rollout
    nodes it may use: its non-scaling share, or 1 when it cannot take elastic rollout."""
    return nonscaling_share(job) if job.can(Mode.ELASTIC_ROLLOUT) else 1.0


def rollout_factor(job: JobSpec, nominal: int, nodes: int) -> float:
    """Rollout time on `nodes` rollout nodes over the time on its `nominal` ones."""
    if nodes == nominal:
        return 1.0
    c = nonscaling_share(job)
    return c + (1.0 - c) * nominal / nodes


def node_counts(nominal: int, elastic: bool, min_share: float = MIN_SHARE, max_scale: float = MAX_SCALE) -> range:
    """Rollout-node counts a job may use: its nominal alone, or the elastic range."""
    if not elastic:
        return range(nominal, nominal + 1)
    return range(max(1, math.ceil(nominal * min_share)), max(nominal, math.floor(nominal * max_scale)) + 1)


def allowed_factor(job: JobSpec, cluster: ClusterSpec, nodes: int) -> float | None:
    """The factor a member of `job` on `nodes` rollout nodes must carry; None when no elastic
    shape allows that count (validate_plan's I3), and for a job that cannot take elastic rollout
    on any count but its nominal one (compaction then cannot narrow it)."""
    k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    if nodes not in node_counts(k0, job.can(Mode.ELASTIC_ROLLOUT)):
        return None
    return rollout_factor(job, k0, nodes)


def member_rollout_gpus(member: Member, cluster: ClusterSpec) -> float:
    """GPUs the member's rollout occupies: its profile's, scaled by its node count."""
    job = member.job
    k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    k = len(member.rollout_nodes)
    return job.rollout_gpus if k == k0 else job.rollout_gpus * k / k0


def busy_time_bound_elastic(jobs, cluster: ClusterSpec) -> float:
    """The busy-time bound (sim/baselines.busy_time_bound) when every job may roll out at its
    cheapest elastic shape (its nominal one if it cannot take elastic rollout): rollout
    GPU-seconds scale as (k / k0) * factor(k), least at the fewest nodes (the non-scaling share
    then holds fewer GPUs). Training as nominal."""
    pr = cluster.pools.rollout.price_per_gpu_hour
    pt = cluster.pools.train.price_per_gpu_hour
    total = 0.0
    for j in jobs:
        k0 = cluster.pools.rollout.nodes_for(j.rollout_gpus)
        share = min(k / k0 * rollout_factor(j, k0, k) for k in node_counts(k0, j.can(Mode.ELASTIC_ROLLOUT)))
        total += j.iterations * (j.rollout_gpus * j.mean_rollout_s * share * pr + j.train_gpus * j.mean_train_s * pt)
    return total / 3600
