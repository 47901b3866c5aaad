"""Closed forms and the co-located (veRL) baseline (DESIGN §6).

veRL model (co-located, one job per GPU set): a job runs every phase on its
own G = max(rollout_gpus, train_gpus) training-type GPUs, rounded up to whole
nodes for billing. Each iteration:
  rollout_colo = rollout * (rollout_gpus / G) * (bw_rollout_gpu / bw_train_gpu)
      (decode is memory-bandwidth bound: fewer bytes/s per GPU on H800 than on
      H20, 3.35 vs 4.0 TB/s, and more GPUs share the work when G > rollout_gpus);
  train unchanged (the same train_gpus do the same work; extra GPUs idle);
  two offload/onload switches (rollout -> train -> rollout), warm, from host memory;
  no cross-cluster sync (weights are resharded in place; its cost is folded into
  the switches).
The job holds its nodes from arrival until its last iteration ends; there is no
sharing, so node caps are not modelled for this baseline.
"""

from __future__ import annotations

from rollmux.core.accounting import Ledger
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.draws import rollout_draws, solo_seconds
from rollmux.sim.metrics import JobOutcome, PolicyResult


def solo_d_cost(jobs: list[JobSpec], cluster: ClusterSpec) -> float:
    """Closed-form Solo-D cost: each job holds its own nodes for duration_s."""
    r, t = cluster.pools.rollout, cluster.pools.train
    return sum(j.duration_s * (r.nodes_for(j.rollout_gpus) * r.node_price_per_hour
                               + t.nodes_for(j.train_gpus) * t.node_price_per_hour) / 3600
               for j in jobs)


def busy_time_bound(jobs: list[JobSpec], cluster: ClusterSpec) -> float:
    """Physical limit: pay only for busy GPU-seconds at nominal sizes."""
    pr = cluster.pools.rollout.price_per_gpu_hour
    pt = cluster.pools.train.price_per_gpu_hour
    return sum(j.iterations * (j.rollout_gpus * j.mean_rollout_s * pr + j.train_gpus * j.mean_train_s * pt)
               for j in jobs) / 3600


def verl_rollout_scale(job: JobSpec, cluster: ClusterSpec) -> float:
    """Factor by which a rollout stretches when co-located on training GPUs."""
    g = max(job.rollout_gpus, job.train_gpus)
    bw = cluster.pools.rollout.bandwidth_tbs() / cluster.pools.train.bandwidth_tbs()
    return job.rollout_gpus / g * bw


def simulate_verl(jobs: list[JobSpec], cluster: ClusterSpec, seed: int = 0) -> PolicyResult:
    """Run every job co-located on its own training-type nodes (no queueing)."""
    ledger = Ledger(cluster)
    pool = cluster.pools.train
    events: list[tuple[float, int, int]] = []  # (time, +/-nodes, order)
    outcomes = []
    for j in jobs:
        rollouts = rollout_draws(j, seed)
        scale = verl_rollout_scale(j, cluster)
        total_r = float(rollouts.sum())
        lifetime = total_r * scale + j.train_time(total_r) + 2 * cluster.warm_switch_s * j.iterations
        g = max(j.rollout_gpus, j.train_gpus)
        nodes = pool.nodes_for(g)
        events += [(j.arrival_s, nodes, 1), (j.arrival_s + lifetime, -nodes, 0)]
        ledger.busy("train", g, total_r * scale)
        ledger.busy("train", j.train_gpus, j.train_time(total_r))
        ledger.busy("train", g, 2 * cluster.warm_switch_s * j.iterations)
        outcomes.append(JobOutcome(j.job_id, j.iterations, j.arrival_s, j.arrival_s + lifetime,
                                   solo_seconds(j, rollouts), j.slo, j.solo_iter_s))
    for t, delta, _ in sorted(events, key=lambda e: (e[0], e[2])):
        if delta > 0:
            ledger.provision("train", delta, t)
        else:
            ledger.release("train", -delta, t)
    ledger.close(max(t for t, _, _ in events))
    outcomes.sort(key=lambda o: o.finish_s)
    return PolicyResult.from_ledger("verl", ledger, len(jobs), outcomes)
