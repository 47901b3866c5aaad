"""Closed forms and the co-located (veRL) baseline (DESIGN §6).

The co-located execution model itself (G = max(rollout_gpus, train_gpus) H800 GPUs per
job, the calibration of k_r and k_t to the paper's co-located pairs) lives in
core/colo_model.py, shared with RollMux's per-job co-located mode; its names are
re-exported here. The veRL baseline runs every job that way: the job holds its nodes
from arrival until its last iteration ends; there is no sharing, so node caps are not
modelled for this baseline.
"""

from __future__ import annotations

import numpy as np

from rollmux.core.accounting import Ledger
from rollmux.core.colo_model import (  # noqa: F401  (re-exported: the model's names, as before)
    check_colo_speed,
    colocated_factors,
    colocated_iter_s,
    verl_rollout_scale,
    verl_train_scale,
)
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.accounting import WORK, Accounting, job_outcome
from rollmux.sim.draws import Rollouts
from rollmux.sim.metrics import PolicyResult


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
                  colo_speed: float = 1.0, accounting: Accounting = WORK) -> PolicyResult:
    """Run every job co-located on its own training-type nodes (no queueing)."""
    check_colo_speed(colo_speed)
    ledger = Ledger(cluster)
    pool = cluster.pools.train
    events: list[tuple[float, int, int]] = []  # (time, +/-nodes, order)
    outcomes = []
    for j in jobs:
        rollouts = accounting.draws(j, seed)
        r_scale, t_scale = verl_rollout_scale(j, cluster, colo_speed), verl_train_scale(j, colo_speed)
        done, roll, train, switches, last, left = _verl_stay(j, rollouts, r_scale, t_scale, cluster.warm_switch_s,
                                                             accounting.departure_s(j))
        g = max(j.rollout_gpus, j.train_gpus)
        nodes = pool.nodes_for(g)
        events += [(j.arrival_s, nodes, 1), (left, -nodes, 0)]
        ledger.busy("train", g, roll)
        ledger.busy("train", j.train_gpus, train)
        ledger.busy("train", g, switches)
        outcomes.append(job_outcome(j, rollouts, done, j.arrival_s, last, left))
    for t, delta, _ in sorted(events, key=lambda e: (e[0], e[2])):
        if delta > 0:
            ledger.provision("train", delta, t)
        else:
            ledger.release("train", -delta, t)
    ledger.close(max((t for t, _, _ in events), default=0.0))
    outcomes.sort(key=lambda o: o.finish_s)
    return PolicyResult.from_ledger("verl", ledger, len(jobs), outcomes)


def _verl_stay(j: JobSpec, rollouts: Rollouts, r_scale: float, t_scale: float, switch_s: float,
               leave_s: float | None) -> tuple[int, float, float, float, float, float]:
    """A co-located job's (iterations done, busy rollout, training and switch seconds, end of its last
    iteration, departure). With no departure time (`work`) it runs all its iterations back to back.
    With one (`paper`) it runs until then; the iteration in flight at its departure is abandoned, its
    busy time booked whole, as the simulator's co-located mode books an iteration when it starts."""
    if leave_s is None:
        total_r = float(np.asarray(rollouts[:j.iterations]).sum())
        switches = 2 * switch_s * j.iterations
        lifetime = total_r * r_scale + j.train_time(total_r) * t_scale + switches
        end = j.arrival_s + lifetime
        return j.iterations, total_r * r_scale, j.train_time(total_r) * t_scale, switches, end, end
    k = j.iterations
    while True:  # draw until an iteration would end after the departure
        r = np.asarray(rollouts[:k])
        ends = j.arrival_s + np.cumsum(r * r_scale + j.train_time(r) * t_scale + 2 * switch_s)
        done = int(np.searchsorted(ends, leave_s, side="left"))  # ending before it (as the simulators' ties go)
        if done < k:
            break
        k *= 2
    begun = r[:done + 1]  # the completed iterations and the abandoned one
    last = float(ends[done - 1]) if done else j.arrival_s
    return (done, float(begun.sum()) * r_scale, j.train_time(float(begun.sum())) * t_scale,
            2 * switch_s * (done + 1), last, leave_s)
