"""Gavel+'s accelerator choice (DESIGN §6): where a job's rollout runs, and what it costs.

A job can run in one of two configurations ("kinds"):
  disagg  rollout on ceil(rollout_gpus/8) H20 nodes, training on ceil(train_gpus/8) H800
          nodes; an iteration is rollout + train + sync (the job's solo time, Solo-D's shape);
  colo    rollout and training co-located on ceil(G/8) H800 nodes, G = max(rollout_gpus,
          train_gpus), no H20 node held; an iteration is veRL's calibrated co-located one
          (baselines.colocated_iter_s: rollout x k_r, train x k_t, two warm
          offload/onload switches, no cross-cluster sync; see rollmux/sim/baselines.py).
Gavel's throughput matrix is then one row per job: normalized throughput
solo_iter_s / iteration time of each kind (the disaggregated kind is 1 by definition).

Policy: Gavel's "minimize cost subject to SLOs" objective (Gavel §4), per job. Each job
takes the kind with the least expected node cost per iteration (node $/h x expected
iteration time) among the kinds whose iteration stays within slo x solo at the mean
and at the worst-case rollout; ties keep the disaggregated kind. Why cost and not
max-min fairness: every comparison in this project is the cost of finishing the same
work on pay-per-node pools with per-job SLOs; max-min fairness over normalized
throughput with no cap gives every job its fastest kind whatever it costs, which is
not what a cost-aware Gavel deployment would run. Fairness still decides time shares
when node caps bind (rounds, in gavel.py). Under caps the choice is load-aware, as
Gavel's heterogeneity-aware allocation is: the demand of a pool is the nodes all
live gangs (running or waiting) would hold, plus the newcomer's; if the cheapest
valid kind keeps every pool's demand within its cap, the job takes it, otherwise
it takes the valid kind that oversubscribes the most loaded pool least (demand /
cap), the cheaper on a tie. Oversubscription is what time-slicing divides among
the gangs, so this is the kind that raises everyone's fair share the most; with
the training pool oversubscribed, a 16 H20 + 8 H800 job then stays disaggregated
(one H800 node instead of two). The kind is fixed at arrival: Gavel would
re-solve each round and could move a job between types, but a move costs a cold
state transfer (DESIGN §5a) that this simulation would not charge, so it is left out.
"""

from __future__ import annotations

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baselines import colocated_iter_s, verl_rollout_scale, verl_train_scale

KINDS = ("disagg", "colo")
_EPS = 1e-9


def job_nodes(job: JobSpec, cluster: ClusterSpec, kind: str = "disagg") -> dict[str, int]:
    """Nodes per pool the job's gang holds in configuration `kind`."""
    pools = cluster.pools
    if kind == "colo":
        return {"rollout": 0, "train": pools.train.nodes_for(max(job.rollout_gpus, job.train_gpus))}
    return {"rollout": pools.rollout.nodes_for(job.rollout_gpus), "train": pools.train.nodes_for(job.train_gpus)}


def node_rate(nodes: dict[str, int], cluster: ClusterSpec) -> float:
    """$/h of holding `nodes`."""
    return sum(n * getattr(cluster.pools, p).node_price_per_hour for p, n in nodes.items())


def iteration_phases(job: JobSpec, cluster: ClusterSpec, kind: str, rollout: float,
                     speed: float = 1.0) -> list[float]:
    """Phase durations of one iteration whose disaggregated rollout takes `rollout` seconds."""
    if kind == "colo":
        sw = cluster.warm_switch_s
        return [rollout * verl_rollout_scale(job, cluster, speed), sw,
                job.train_time(rollout) * verl_train_scale(job, speed), sw]
    return [rollout, job.train_time(rollout), job.sync_s]


def iter_s(job: JobSpec, cluster: ClusterSpec | None, kind: str, rollout: float, speed: float = 1.0) -> float:
    """Iteration time of `kind` for a disaggregated rollout of `rollout` seconds."""
    if kind == "colo":
        return colocated_iter_s(job, cluster, rollout, speed)
    return rollout + job.train_time(rollout) + job.sync_s


def worst_iter_s(job: JobSpec, cluster: ClusterSpec | None = None, kind: str = "disagg",
                 speed: float = 1.0) -> float:
    """Planning (worst-case) iteration time: every response at the max-token cap."""
    return iter_s(job, cluster, kind, job.rollout_s.max, speed)


def packed_period_s(jobs: list[JobSpec], warm_switch_s: float, cluster: ClusterSpec | None = None,
                    kind: str = "disagg", speed: float = 1.0) -> float:
    """Planned phase-unaware round-robin period of a gang: whole worst-case iterations back to back."""
    sw = warm_switch_s if len(jobs) > 1 else 0.0
    return sum(worst_iter_s(j, cluster, kind, speed) + sw for j in jobs)


def expected_iter_s(job: JobSpec, cluster: ClusterSpec, kind: str, speed: float = 1.0) -> float:
    """Expected iteration time of `kind` (every phase is linear in the rollout)."""
    return iter_s(job, cluster, kind, job.mean_rollout_s, speed)


def host_fits(jobs: list[JobSpec], cluster: ClusterSpec, kind: str) -> bool:
    """The members' resident state fits one node of each pool the kind uses."""
    pools = cluster.pools
    if kind == "colo":  # rollout engine state and training state on the same H800 node
        return sum(j.host_gb.rollout + j.host_gb.train for j in jobs) <= pools.train.host_gb_per_node + _EPS
    return (sum(j.host_gb.rollout for j in jobs) <= pools.rollout.host_gb_per_node + _EPS
            and sum(j.host_gb.train for j in jobs) <= pools.train.host_gb_per_node + _EPS)


def kind_valid(job: JobSpec, cluster: ClusterSpec, kind: str, speed: float = 1.0) -> bool:
    """The kind keeps the job within its SLO (mean and worst-case rollout) and fits the node caps."""
    nodes = job_nodes(job, cluster, kind)
    if any(getattr(cluster.pools, p).max_nodes is not None and n > getattr(cluster.pools, p).max_nodes
           for p, n in nodes.items()):
        return False
    if not host_fits([job], cluster, kind):
        return False
    r_max = job.rollout_s.max
    return (expected_iter_s(job, cluster, kind, speed) <= job.slo_iter_s * (1 + _EPS)
            and worst_iter_s(job, cluster, kind, speed) <= job.slo * iter_s(job, cluster, "disagg", r_max) * (1 + _EPS))


def cost_per_iteration(job: JobSpec, cluster: ClusterSpec, kind: str, speed: float = 1.0) -> float:
    """Expected node $ of one iteration in configuration `kind`."""
    return node_rate(job_nodes(job, cluster, kind), cluster) * expected_iter_s(job, cluster, kind, speed) / 3600


def oversubscription(job: JobSpec, cluster: ClusterSpec, kind: str, demand: dict[str, int]) -> float:
    """Highest demand / cap over the capped pools once the job joins in `kind` (0 without caps)."""
    worst = 0.0
    for p, n in job_nodes(job, cluster, kind).items():
        cap = getattr(cluster.pools, p).max_nodes
        if cap is not None:
            worst = max(worst, (demand.get(p, 0) + n) / cap)
    return worst


def choose_kind(job: JobSpec, cluster: ClusterSpec, speed: float = 1.0,
                demand: dict[str, int] | None = None) -> str:
    """Cheapest SLO-valid kind; given the live gangs' node `demand` under caps, the cheapest that keeps
    every pool within its cap, else the one that oversubscribes the most loaded pool least."""
    valid = [k for k in KINDS if k == "disagg" or kind_valid(job, cluster, k, speed)]
    valid.sort(key=lambda k: cost_per_iteration(job, cluster, k, speed))  # stable: ties keep disagg
    if demand is None or oversubscription(job, cluster, valid[0], demand) <= 1.0 + _EPS:
        return valid[0]
    return min(valid, key=lambda k: oversubscription(job, cluster, k, demand))  # min is stable too
