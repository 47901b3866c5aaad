"""A per-job execution mode: co-located on training nodes (the veRL mode), chosen by placement.

A co-located job runs rollout and training time-shared on its own G = max(rollout_gpus,
train_gpus) training-pool (H800) GPUs, with no inter-pool sync; its phase times come from
the veRL model (core/colo_model.py, calibrated to the paper's co-located pairs). With elastic
rollout and `colo_narrow` (`choose(narrow=True)`), a job with more rollout than training GPUs
may instead run on its training GPUs' nodes, G' < G, its rollout narrowed by the elastic
model's factor (core/colo_model.py `narrowed_gpus`); the option takes whichever of G and G'
costs less per iteration and meets the SLO. It is a
placement of its own (`Case.COLOCATED`): a one-member "group" with no rollout nodes and
`colocated_nodes` training nodes, which the executor keeps apart from the co-execution
groups (never a candidate for another job, never re-planned; with `colo_regroup` the
departure-time consolidation pass may move the job into a group, core/regroup.py). Its
permits, on the live plane, come from core/colo_controller.py.

When RollMux's placement (core/inter_group.py, `RollMuxPlacement(colocate=True)`) has its
disaggregated answer for an arrival, the cheapest valid group placement or else an isolated
group, `choose` sets the co-located option against it:

* valid when the job is an arrival (a job that already ran, i.e. a migrant, stays
  disaggregated: moving a job between modes would need a priced migration of its own),
  its training nodes fit the pool's cap, its rollout and training host state fit one
  training node together (both phases' state stay resident there), and its co-located
  iteration time meets its SLO (`colocated_slo_ok`);
* chosen when it costs less per iteration than the disaggregated answer (`iteration_cost`).

Like for like. A group placement's Δ is the $/h it adds while the job runs and the job runs
one iteration per planned group period, so what it adds per iteration is Δ x period; an
isolated group adds its whole rate x its planned period; a co-located job its training
nodes' rate x its co-located iteration time. All three at the same planning estimate (the
rollout the placement plans with: its quantile, or under `--plan mean` the mean of the job's
planning sample, core/admission.py), so the comparison is the cost of finishing the
job's remaining work (iterations x cost per iteration) in each mode. Direct packing (Δ = 0)
always wins; co-location competes with rollout scaling and isolated groups. What this does
not price: an isolated group may later host other jobs at Δ = 0 (a co-located job never
does), and a direct-packed job may keep its group's nodes held longer. So co-location must
be cheaper by a margin: it is chosen when its cost per iteration is below `margin` (default
COLO_MARGIN = 0.75) x the disaggregated answer's. Against an isolated group the ratio splits
the jobs in two on both profile sets (unseen traces 2869ce:11, paper and catalog): 0.53-0.64
for every job with as many rollout as training GPUs (8:8, 16:16; co-located it holds one
H800 set instead of an H20 set and an H800 one), 0.83-1.02 for every 16:8 job (co-located
it needs 16 H800 GPUs where it trained on 8), nothing in between. (Narrowed onto one H800
node a 16:8 job drops to about 0.5-0.65, so with `colo_narrow` most 16:8 arrivals go
co-located too: benchmarks/README.md, "Narrowed co-location".) At 1.0 most
paper-profile arrivals went co-located and the groups they would have seeded were missing
(gain over Solo-D 1.18-1.39x instead of 1.35-1.48x without the mode); any margin in the gap
gives the same decisions there (0.7 and 0.8 measured identical), and 0.75 sits in its middle.
benchmarks/colocate.py measures it.
"""

from __future__ import annotations

from typing import Callable

from rollmux.core.colo_model import (
    colocated_gpus,
    colocated_iter_s,
    colocated_nodes,
    gpu_options,
    placement_gpus,
    verl_rollout_scale,
    verl_train_scale,
)
from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, GroupShape, Member
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec

__all__ = ["choose", "colocated_group", "colocated_option", "colocated_phases", "colocated_slo_ok",
           "iteration_cost", "colocated_gpus", "colocated_nodes", "group_gpus", "is_colocated"]


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
    if job.host_gb.rollout + job.host_gb.train > view.cluster.pools.train.host_gb_per_node + 1e-9:
        return None
    plans = [p for p in (_colocated_plan(job, view, cfg, speed, g) for g in gpu_options(job, view.cluster, narrow))
             if p is not None]
    return min(plans, key=iteration_cost, default=None)


def _colocated_plan(job: JobSpec, view: ClusterView, cfg: IntraConfig, speed: float,
                    gpus: int) -> PlacementPlan | None:
    """The co-located plan on `gpus` (G or a narrowed G'), or None when it is not valid."""
    cluster, pool = view.cluster, view.cluster.pools.train
    nt = colocated_nodes(job, cluster, gpus)
    if view.free_train_nodes is not None and nt > view.free_train_nodes:
        return None
    if not colocated_slo_ok(job, cluster, speed, gpus):
        return None
    # At the estimate the groups are planned with (`job_planning_times`): planning the
    # co-located job at the cap while a group plans at the mean would favour the group.
    planned = colocated_iter_s(job, cluster, job_planning_times(job, cfg).rollout, speed, gpus)
    g = colocated_group(view.next_group_id, job, cluster, planned, gpus)
    return PlacementPlan(job.job_id, Case.COLOCATED, g, 0, nt, nt * pool.node_price_per_hour)


def iteration_cost(plan: PlacementPlan) -> float:
    """$ the plan adds per iteration of its job: its Δ ($/h) over the job's planned iteration
    time (the group's period; a new group's or a co-located job's Δ is its whole rate)."""
    return plan.delta_cost_per_hour * plan.group.shape.period_s / 3600


def choose(job: JobSpec, view: ClusterView, disagg: PlacementPlan | None,
           isolated: Callable[[], PlacementPlan | None], cfg: IntraConfig, speed: float,
           margin: float, cost: Callable[[PlacementPlan], float] = iteration_cost,
           narrow: bool = False) -> PlacementPlan | None:
    """The cheaper of the co-located option and the disaggregated answer.

    `disagg`: the cheapest valid group placement (None: no group takes the job);
    `isolated()`: the isolated plan, asked only when no group does. A co-located plan
    is taken when its `cost` per iteration (`iteration_cost`, or with stretch pricing
    core/marginal.py's, which also charges the members' stretch) is below `margin` x the other's.
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


def colocated_phases(job: JobSpec, cluster: ClusterSpec, rollout: float, train: float,
                     speed: float = 1.0, gpus: int | None = None) -> tuple[float, float, float]:
    """(rollout, training, switches) seconds of one co-located iteration on `gpus` (default the
    veRL model's G) whose disaggregated phases would take `rollout` and `train` seconds (drift
    already applied to both)."""
    return (rollout * verl_rollout_scale(job, cluster, speed, gpus), train * verl_train_scale(job, speed),
            2 * cluster.warm_switch_s)
