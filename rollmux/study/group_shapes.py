"""Where a run's node-hours go: its groups by shape, and how busy their plans keep each pool.

A diagnostic for the gap between RollMux and the busy-time bound (issue 14): the run is
sampled every `every_s` seconds of simulated time, and each group held at that instant adds
its node rate x `every_s` to its shape's cost. A shape is (members, rollout nodes, training
nodes); co-located jobs form one row. Per shape it reports the cost share and, weighted by
cost, the planned utilization of each pool (the members' planned phase seconds on its nodes
over nodes x planned period, `group_planning_times`) and the planned period over the longest
member cycle (what sharing stretches the slowest member by).
"""

from __future__ import annotations

from collections import defaultdict

from rollmux.core.group import Group
from rollmux.core.intra_group import IntraConfig, group_planning_times, node_loads
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.runner import rollmux_policy
from rollmux.sim.simulator import SimConfig, Simulation

COLOCATED = "co-located"


def planned_use(g: Group, cfg: IntraConfig) -> tuple[float, float, float]:
    """(rollout-pool, training-pool utilization, period / longest member cycle) of a planned group."""
    times = group_planning_times(g.members, cfg)
    period = g.shape.period_s
    r_load, _, t_load, _ = node_loads(g.members, g.n_rollout, g.n_train, times)
    return (sum(r_load) / (g.n_rollout * period), sum(t_load) / (g.n_train * period),
            period / max(pt.rollout + pt.train + pt.sync for pt in times))


def group_shapes(jobs: list[JobSpec], cluster: ClusterSpec, cfg: SimConfig, every_s: float = 600.0) -> dict:
    """Run RollMux as `rollmux simulate` does and profile its groups (module docstring):
    {"cost_usd", "rows": [{"shape", "cost_share", "rollout_use", "train_use", "stretch"}]},
    rows by cost share, largest first."""
    sim = Simulation(jobs, cluster, rollmux_policy(cfg), cfg)
    pr, pt = cluster.pools.rollout.node_price_per_hour, cluster.pools.train.node_price_per_hour
    acc: dict[object, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])

    def tick() -> None:
        # A co-located job holds its own training nodes, busy whenever it runs (state.colocated).
        if sim.state.colocated:
            acc[COLOCATED][0] += sum(g.n_train for g in sim.state.colocated.values()) * pt * every_s / 3600
        for g in sim.state.groups.values():
            if g.shape is None or not g.members:
                continue
            usd = (g.n_rollout * pr + g.n_train * pt) * every_s / 3600
            a = acc[(len(g.members), g.n_rollout, g.n_train)]
            a[0] += usd
            for i, v in enumerate(planned_use(g, cfg.intra), start=1):
                a[i] += v * usd
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
    return {"cost_usd": res.cost_usd, "rows": rows}
