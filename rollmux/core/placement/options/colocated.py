"""The co-located option (beyond the paper; DESIGN §6 veRL): the job alone on training nodes.

A co-located job runs rollout and training time-shared on its own G = max(rollout_gpus,
train_gpus) training-pool (H800) GPUs, with no inter-pool sync; its phase times come from
the veRL model (core/colo_model.py, calibrated to the paper's co-located pairs). With elastic
rollout and `colocation.narrow` (`choose(narrow=True)`), a job with more rollout than training GPUs
may instead run on its training GPUs' nodes, G' < G, its rollout narrowed by the elastic
model's factor (core/colo_model.py `narrowed_gpus`); the option takes whichever of G and G'
costs less per iteration and meets the SLO. It is a
placement of its own (`Case.COLOCATED`): a one-member "group" with no rollout nodes and
`colocated_nodes` training nodes, which the executor keeps apart from the co-execution
groups (never a candidate for another job, never re-planned; with `colocation.regroup` the
departure-time consolidation pass may move the job into a group, core/repair/regroup.py). Its
permits, on the live plane, come from core/colo_controller.py; its group and phase times
from core/colo_model.py.

When RollMux's placement (placement/policy.py, with `colocation.enabled`) has its
disaggregated answer for an arrival, the cheapest valid group placement or else an isolated
group, `choose` sets the co-located option against it:

* valid when the job can take the co-located mode (`JobSpec.cannot`; nor is a narrowed G'
  offered to a job that cannot take elastic rollout), when it is an arrival (a job that
  already ran, i.e. a migrant, stays disaggregated: moving a job between modes would need a
  priced migration of its own), its training nodes fit the pool's cap, its rollout and
  training host state fit one training node together (both phases' state stay resident
  there), and its co-located iteration time meets its SLO (`colocated_slo_ok`);
* chosen when it costs less per iteration than the disaggregated answer (placement/costs.py:
  `iteration_cost` under Δ pricing, `plan_added_cost` under stretch pricing).

Like for like. A group placement's Δ is the $/h it adds while the job runs and the job runs
one iteration per planned group period, so what it adds per iteration is Δ x period; an
isolated group adds its whole rate x its planned period; a co-located job its training
nodes' rate x its co-located iteration time. All three at the same planning estimate (the
rollout the placement plans with: its quantile, or under `--plan mean` the mean of the job's
planning sample, core/period_sample.py), so the comparison is the cost of finishing the
job's remaining work (iterations x cost per iteration) in each mode. Direct packing (Δ = 0)
always wins; co-location competes with rollout scaling and isolated groups. What this does
not price: an isolated group may later host other jobs at Δ = 0 (a co-located job never
does), and a direct-packed job may keep its group's nodes held longer. So co-location must
be cheaper by a margin: it is chosen when its cost per iteration is below `margin` (default
COLO_MARGIN = 0.75, core/config.py) x the disaggregated answer's: docs/decisions/colocation.md
and docs/decisions/colocation-narrow.md give the measurements that set it.
"""

from __future__ import annotations

from typing import Callable

from rollmux.core.colo_model import colocated_group, colocated_iter_s, colocated_nodes, gpu_options
from rollmux.core.config import IntraConfig
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.costs import iteration_cost
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode


def colocated_slo_ok(job: JobSpec, cluster: ClusterSpec, speed: float = 1.0, gpus: int | None = None) -> bool:
    """True when the job's mean co-located iteration time meets its SLO on any draws.

    The SLO bounds the mean iteration time by slo x max(solo_iter_s, the realized solo mean)
    (sim/metrics.py). Both the co-located and the solo iteration are affine in the rollout r
    (training scales with it), so their means over a run are the iteration times at the mean
    draw r̄, and the ratio colo(r) / solo(r) is monotone in r. Checked at r = the expected
    rollout (covers r̄ below it: colo(r̄) <= colo(mean) <= slo x solo_iter_s) and at the cap
    (with the first, covers every r̄ up to the cap, which no draw exceeds)."""
    for r in (job.mean_rollout_s, job.rollout_s.max):
        solo = r + job.train_time(r) + job.sync_s
        if colocated_iter_s(job, cluster, r, speed, gpus) > job.slo * solo * (1 + 1e-9):
            return False
    return True


def colocated_option(job: JobSpec, view: ClusterView, cfg: IntraConfig,
                     speed: float = 1.0, narrow: bool = False) -> PlacementPlan | None:
    """The co-located plan for an arriving `job`, or None when it is not valid (see the module);
    with `narrow` (elastic rollout) on its narrowed G' too when that is valid, whichever costs
    less per iteration."""
    if view.moving or view.progress.get(job.job_id, (0, 0.0))[0] > 0:
        # A migrant: moves stay between groups, and a job placed again with iterations done brings
        # a disaggregated past. (A job with none has no past: the live plane lists a queued job's
        # wait as its progress.)
        return None
    return _cheapest(job, view, cfg, speed, narrow, lambda gpus: colocated_slo_ok(job, view.cluster, speed, gpus))


def folding_option(job: JobSpec, view: ClusterView, cfg: IntraConfig,
                    speed: float = 1.0, narrow: bool = False) -> PlacementPlan | None:
    """The co-located plan for a running job that leaves its group (core/repair/fold.py), or
    None: as `colocated_option`, but its SLO is what is left of its budget (`period_budget`
    over `view`'s progress, which the mover's wait and migration are charged to): its planned
    co-located iteration must fit it, as a group's planned period must."""
    budget = period_budget(job, view.progress)
    planned_r = job_planning_times(job, cfg).rollout
    return _cheapest(job, view, cfg, speed, narrow,
                     lambda gpus: colocated_iter_s(job, view.cluster, planned_r, speed, gpus) <= budget * (1 + 1e-9))


def _cheapest(job: JobSpec, view: ClusterView, cfg: IntraConfig, speed: float, narrow: bool,
              slo_ok: Callable[[int], bool]) -> PlacementPlan | None:
    """The co-located plan on G or (`narrow`) a narrowed G' whose SLO check `slo_ok(gpus)`
    passes and that costs least per iteration; None when none is valid, or the job cannot take
    the co-located mode (`JobSpec.cannot`: neither placed nor folded there)."""
    if (not job.can(Mode.COLOCATE)
            or job.host_gb.rollout + job.host_gb.train > view.cluster.pools.train.host_gb_per_node + 1e-9):
        return None
    plans = [p for p in (_colocated_plan(job, view, cfg, speed, g) for g in gpu_options(job, view.cluster, narrow)
                         if slo_ok(g)) if p is not None]
    return min(plans, key=iteration_cost, default=None)


def _colocated_plan(job: JobSpec, view: ClusterView, cfg: IntraConfig, speed: float,
                    gpus: int) -> PlacementPlan | None:
    """The co-located plan on `gpus` (G or a narrowed G'), or None when its nodes are not free."""
    cluster, pool = view.cluster, view.cluster.pools.train
    nt = colocated_nodes(job, cluster, gpus)
    if view.free_train_nodes is not None and nt > view.free_train_nodes:
        return None
    # At the estimate the groups are planned with (`job_planning_times`): planning the
    # co-located job at the cap while a group plans at the mean would favour the group.
    planned = colocated_iter_s(job, cluster, job_planning_times(job, cfg).rollout, speed, gpus)
    g = colocated_group(view.next_group_id, job, cluster, planned, gpus)
    return PlacementPlan(job.job_id, Case.COLOCATED, g, 0, nt, nt * pool.node_price_per_hour)


def choose(job: JobSpec, view: ClusterView, disagg: PlacementPlan | None,
           isolated: Callable[[], PlacementPlan | None], cfg: IntraConfig, speed: float,
           margin: float, cost: Callable[[PlacementPlan], float] = iteration_cost,
           narrow: bool = False) -> PlacementPlan | None:
    """The cheaper of the co-located option and the disaggregated answer.

    `disagg`: the cheapest valid group placement (None: no group takes the job);
    `isolated()`: the isolated plan, asked only when no group does. A co-located plan
    is taken when its `cost` per iteration (`iteration_cost`, or with stretch pricing
    placement/costs.py's `plan_added_cost`, which also charges the members' stretch) is below
    `margin` x the other's.
    `narrow`: the co-located option may run on a narrowed G' (elastic rollout, core/colo_model.py)."""
    other = disagg
    if other is not None and cost(other) <= 0:
        return other  # the join adds nothing: nothing is cheaper
    colo = colocated_option(job, view, cfg, speed, narrow)
    if other is None:
        other = isolated()
    if colo is None:
        return other
    if other is None or cost(colo) < margin * cost(other) * (1 - 1e-12):
        return colo
    return other

