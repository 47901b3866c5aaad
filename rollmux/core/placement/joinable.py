"""A cheap necessary test of whether jobs could join groups (DESIGN §5a: the repair side's filter).

The departure pass (core/state/) and co-located pairing (placement/options/paired.py)
ask it about many (job, group) pairs at once, to find the few a placement search could put
together. False means no plan of the search puts the job there, with the view's progress or
any later charge to it: the SLO budgets are taken uncharged (a migration charge only lowers
them) and the period only through closed-form lower bounds (placement/index.py), so it may say
True where the exact check refuses.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from rollmux.core.config import IntraConfig, ShapesConfig
from rollmux.core.elastic import node_counts, rollout_factor
from rollmux.core.group import Group
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.index import MARGIN, group_bounds, progress_rows
from rollmux.core.placement.model import ClusterView
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode


class JoinTest:
    """`matrix(targets, jobs, view)`: the necessary test for every pair, as a boolean matrix.
    What depends on a target is computed once, what depends on a job is vectorized (the
    budgets read through one `progress_rows` call); per-job constants are cached by spec."""

    def __init__(self, cfg: IntraConfig, shapes: ShapesConfig, prune_saturated: bool) -> None:
        self.cfg, self.shapes, self.prune_saturated = cfg, shapes, prune_saturated
        self._features: dict[str, tuple[JobSpec, tuple]] = {}

    def matrix(self, targets: Sequence[Group], jobs: Sequence[JobSpec], view: ClusterView) -> np.ndarray:
        """False at [i, k] where no plan of the search puts `jobs[i]` into `targets[k]`."""
        out = np.zeros((len(jobs), len(targets)), bool)
        if not jobs:
            return out
        train = view.cluster.pools.train
        t_cap = train.host_gb_per_node + 1e-9
        kt, host, own_sum, own_train, S, iters = self._job_features(jobs, train)
        if self.shapes.elastic_rollout:
            own_sum = least_cycles(jobs, own_sum, own_train, view.cluster, self.shapes)
        done, elapsed = np.nan_to_num(progress_rows(view.progress, [j.job_id for j in jobs]), nan=0.0).T
        slack = (S - elapsed) / (np.maximum(iters - done, 0.0) + 1.0)
        slo = self.cfg.order == "slo"  # bounds as the search's candidates (placement/candidates.py)
        for k, g in enumerate(targets):
            shape = g.shape
            if len(g.members) >= view.max_group_size or shape is None or (
                    self.prune_saturated and shape.status != "unsaturated"):
                continue
            members_slack = (max if slo else min)((period_budget(m.job, view.progress) for m in g.members),
                                                  default=-math.inf if slo else math.inf)
            b = group_bounds(g, self.cfg)
            prefix = np.maximum.accumulate(np.array((0.0,) + tuple(g.train_gb[:g.n_train]), float))
            fits = (kt <= g.n_train) | self.shapes.train_scaling
            k_of = np.minimum(kt, g.n_train).astype(int)
            least = (np.maximum if slo else np.minimum)(slack, members_slack)  # (slo: the loosest)
            out[:, k] = (fits & (shape.t_cycle_s <= (least if slo else slack))
                         & ((kt == 0) | (prefix[k_of] + host <= t_cap)) & (own_sum <= (slack if slo else least))
                         & (np.maximum(b.lb_s, b.train0_sw + own_train) <= least * (1 + 1e-9) * (1 + MARGIN)))
        return out

    def _job_features(self, jobs: Sequence[JobSpec], train) -> tuple[np.ndarray, ...]:
        """Per job: training nodes, training host GB, planned rollout + train + sync, planned
        training, SLO time budget and iterations (cached per job spec)."""
        cache = self._features
        rows = []
        for job in jobs:
            hit = cache.get(job.job_id)
            if hit is None or hit[0] is not job:
                own = job_planning_times(job, self.cfg)
                hit = cache[job.job_id] = (job, (train.nodes_for(job.train_gpus), job.host_gb.train,
                                                 own.rollout + own.train + own.sync, own.train,
                                                 job.slo_budget_s, job.iterations))
            rows.append(hit[1])
        return tuple(np.array(rows, float).T)


def least_cycles(jobs: Sequence[JobSpec], own_sum: np.ndarray, own_train: np.ndarray, cluster: ClusterSpec,
                 cfg: ShapesConfig) -> np.ndarray:
    """Per job, its planned rollout + train + sync (`own_sum`) at its fastest allowed shape
    (the test stays necessary with elastic rollout)."""
    out = np.array(own_sum, float)
    if not cfg.elastic_rollout:
        return out
    for i, job in enumerate(jobs):
        if not job.can(Mode.ELASTIC_ROLLOUT):
            continue  # (its nominal shape only)
        k0 = cluster.pools.rollout.nodes_for(job.rollout_gpus)
        f = min(rollout_factor(job, k0, k) for k in node_counts(k0, True, cfg.min_share, cfg.max_scale))
        rollout = own_sum[i] - own_train[i] - job.sync_s
        out[i] = own_sum[i] - (1.0 - f) * rollout
    return out
