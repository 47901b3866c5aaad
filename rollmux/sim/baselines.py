"""Closed forms and the co-located (veRL) baseline (DESIGN §6).

The co-located execution model itself (G = max(rollout_gpus, train_gpus) H800 GPUs per
job, the calibration of k_r and k_t to the paper's co-located pairs) lives in
core/colo_model.py, shared with RollMux's per-job co-located mode; its names are
re-exported here. The veRL baseline runs every job that way: the job holds its nodes
from arrival until its last iteration ends; there is no sharing, so node caps are not
modelled for this baseline.
"""

from __future__ import annotations

from rollmux.core.accounting import Ledger
from rollmux.core.colo_model import (  # noqa: F401  (re-exported: the model's names, as before)
    check_colo_speed,
    colocated_factors,
    colocated_iter_s,
    verl_rollout_scale,
    verl_train_scale,
)
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


def simulate_verl(jobs: list[JobSpec], cluster: ClusterSpec, seed: int = 0,
                  colo_speed: float = 1.0) -> PolicyResult:
    """Run every job co-located on its own training-type nodes (no queueing)."""
    check_colo_speed(colo_speed)
    ledger = Ledger(cluster)
    pool = cluster.pools.train
    events: list[tuple[float, int, int]] = []  # (time, +/-nodes, order)
    outcomes = []
    for j in jobs:
        rollouts = rollout_draws(j, seed)
        r_scale, t_scale = verl_rollout_scale(j, cluster, colo_speed), verl_train_scale(j, colo_speed)
        total_r = float(rollouts.sum())
        roll, train = total_r * r_scale, j.train_time(total_r) * t_scale
        switches = 2 * cluster.warm_switch_s * j.iterations
        lifetime = roll + train + switches
        g = max(j.rollout_gpus, j.train_gpus)
        nodes = pool.nodes_for(g)
        events += [(j.arrival_s, nodes, 1), (j.arrival_s + lifetime, -nodes, 0)]
        ledger.busy("train", g, roll)
        ledger.busy("train", j.train_gpus, train)
        ledger.busy("train", g, switches)
        outcomes.append(JobOutcome(j.job_id, j.iterations, j.arrival_s, j.arrival_s + lifetime,
                                   solo_seconds(j, rollouts), j.slo, j.solo_iter_s))
    for t, delta, _ in sorted(events, key=lambda e: (e[0], e[2])):
        if delta > 0:
            ledger.provision("train", delta, t)
        else:
            ledger.release("train", -delta, t)
    ledger.close(max((t for t, _, _ in events), default=0.0))
    outcomes.sort(key=lambda o: o.finish_s)
    return PolicyResult.from_ledger("verl", ledger, len(jobs), outcomes)
