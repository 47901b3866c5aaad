"""Where a run's node-hours go: its groups by shape, and how busy their plans keep each pool.

A diagnostic for the gap between RollMux and the busy-time bound (DESIGN §7): the run is
sampled every `every_s` seconds of simulated time, and each group held at that instant adds
its node rate x `every_s` to its shape's cost. A shape is (members, rollout nodes, training
nodes); co-located jobs form one row. Per shape it reports the cost share and, weighted by
cost, the planned utilization of each pool (the members' planned phase seconds on its nodes
over nodes x planned period, `group_planning_times`) and the planned period over the longest
member cycle (what sharing stretches the slowest member by).
"""

from __future__ import annotations

from collections import defaultdict

from rollmux.core.colo_model import is_colocated
from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import group_planning_times, job_planning_times, node_loads
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.simulator import Simulation

COLOCATED = "co-located"
TIGHT_SLO = 1.2  # a group is "tight" when its tightest member's SLO is below this (kinds)


def planned_use(g: Group, cfg: IntraConfig) -> tuple[float, float, float]:
    """(rollout-pool, training-pool utilization, period / longest member cycle) of a planned group."""
    times = group_planning_times(g.members, cfg)
    period = g.shape.period_s
    r_load, _, t_load, _ = node_loads(g.members, g.n_rollout, g.n_train, times)
    return (sum(r_load) / (g.n_rollout * period), sum(t_load) / (g.n_train * period),
            period / max(pt.rollout + pt.train + pt.sync for pt in times))


def busy_rate(g: Group, cluster: ClusterSpec, cfg: IntraConfig) -> float:
    """$/h the busy-time bound prices the group's planned work at: each member's GPUs busy for
    its planned phases (nominal GPU counts and times, each at its pool's price) once per planned
    period; a co-located job's likewise once per planned co-located iteration."""
    pr, pt = cluster.pools.rollout.price_per_gpu_hour, cluster.pools.train.price_per_gpu_hour
    work = 0.0
    for m in g.members:  # (nominal shapes: what the bound prices, whatever the member runs on)
        t = job_planning_times(m.job, cfg)
        work += m.job.rollout_gpus * t.rollout * pr + m.job.train_gpus * t.train * pt
    return work / g.shape.period_s


def kind(g: Group) -> str:
    """The group's kind: co-located, lone (one member) or formed, and tight or loose by its
    tightest member's SLO (TIGHT_SLO)."""
    how = COLOCATED if is_colocated(g) else ("lone" if len(g.members) == 1 else "formed")
    return f"{how}, {'tight' if min(m.job.slo for m in g.members) < TIGHT_SLO else 'loose'}"


def group_shapes(jobs: list[JobSpec], cluster: ClusterSpec, cfg: SchedulerConfig, seed: int = 0,
                 every_s: float = 600.0) -> dict:
    """Run RollMux as `cfg` sets it, as `rollmux simulate` does with draws `seed`, and profile its
    groups (module docstring):
    {"cost_usd", "rows": [{"shape", "cost_share", "rollout_use", "train_use", "stretch"}],
    "kinds": [{"kind", "cost_share", "busy_share", "waste_share"}]}, rows by cost share,
    largest first. A kind's busy share is the busy-time bound's price of its planned work
    over its cost (1 = no idle GPU); its waste share, its cost less that, over the run's."""
    sim = Simulation(jobs, cluster, cfg, seed=seed)
    intra = cfg.intra_for(cluster)  # the planner view the run's groups were planned with
    pr, pt = cluster.pools.rollout.node_price_per_hour, cluster.pools.train.node_price_per_hour
    acc: dict[object, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # kind -> [$, busy $]
    hours = every_s / 3600

    def tick() -> None:
        # A co-located job holds its own training nodes, busy whenever it runs (state.colocated).
        for g in sim.state.colocated.values():
            usd = g.n_train * pt * hours
            acc[COLOCATED][0] += usd
            k = kinds[kind(g)]
            k[0] += usd
            k[1] += busy_rate(g, cluster, intra) * hours
        for g in sim.state.groups.values():
            if g.shape is None or not g.members:
                continue
            usd = (g.n_rollout * pr + g.n_train * pt) * hours
            a = acc[(len(g.members), g.n_rollout, g.n_train)]
            a[0] += usd
            for i, v in enumerate(planned_use(g, intra), start=1):
                a[i] += v * usd
            k = kinds[kind(g)]
            k[0] += usd
            k[1] += busy_rate(g, cluster, intra) * hours
        if len(sim.outcomes) < len(jobs) and sim.env.pending:  # (only while the run has events:
            sim.env.call_at(sim.env.now() + every_s, tick)        # a stalled run must still stop)

    sim.env.call_at(min(j.arrival_s for j in jobs) + every_s, tick)
    res = sim.run()
    total = sum(a[0] for a in acc.values()) or 1.0
    rows = []
    for shape, (usd, r, t, s) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        row = {"shape": shape if shape == COLOCATED else list(shape), "cost_share": usd / total}
        if shape != COLOCATED and usd > 0:
            row |= {"rollout_use": r / usd, "train_use": t / usd, "stretch": s / usd}
        rows.append(row)
    total_k = sum(usd for usd, _ in kinds.values()) or 1.0
    by_kind = [{"kind": k, "cost_share": usd / total_k, "busy_share": busy / usd if usd else 0.0,
                "waste_share": (usd - busy) / total_k}
               for k, (usd, busy) in sorted(kinds.items(), key=lambda kv: -kv[1][0])]
    return {"cost_usd": res.cost_usd, "rows": rows, "kinds": by_kind}
