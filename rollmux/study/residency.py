"""Study section: how often residency (host DRAM per node) decides a placement.

On the Philly-driven traces (paper and catalog profiles) RollMux runs as
`CONFIG` sets it (the shipped configuration with the co-located mode off,
study/sections.py `groups_config`: residency decides where jobs share nodes, and
on the paper-profile trace the mode takes every job out of the groups) with a
probe (`ResidencyProbe`, which wraps the policy `build_policy` builds, places
exactly as it does and has its capabilities) which, on each job's arrival,
classifies every existing group by Algorithm 1's candidates (nominal shapes):

- ineligible: refused before memory matters (group full, saturated, or the
  SLO budget rules the newcomer out whatever the pinning);
- accepted: some candidate placement into it (direct packing or rollout
  scaling) is valid;
- refused by residency alone: no candidate is valid under the real host DRAM,
  but one is with unlimited host DRAM (the pins residency forced or forbade
  were the only obstacle);
- refused for another reason: invalid with unlimited host DRAM too (SLO).

For an arrival with at least one residency refusal it also asks the policy
where the job would have gone with unlimited DRAM; if that is a different
group or case, residency changed the decision. The counterfactual run then
simulates the whole trace with unlimited host DRAM per node, for cost and
placement shares with vs without the residency limit. Node DRAM 2 TiB is the
DESIGN's cluster; 1 TiB is the low end of the paper's "1-2 TB per node".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from rollmux.core.config import SchedulerConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import planning_times
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy, RollMuxPlacement, build_policy
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.pinning import pin_into, rollout_node_loads
from rollmux.core.placement.trial import try_join
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.simulator import simulate
from rollmux.study.config import StudyConfig
from rollmux.study.sections import groups_config, pct, regenerate
from rollmux.study.sweep import Pmap
from rollmux.workload import synthesize_philly

MODES = ("paper", "catalog")
UNLIMITED_GB = 1e9          # host DRAM per node of the counterfactual (no job comes near it)
NODE_GB = (2048.0, 1024.0)  # DESIGN's 2 TiB nodes, and the paper's low end (1 TB)
VERDICTS = ("ineligible", "accepted", "residency", "other")
CONFIG = groups_config()  # the configuration every run of the section runs


def with_host_gb(cluster: ClusterSpec, gb: float) -> ClusterSpec:
    """`cluster` with `gb` of host DRAM on every node of both pools."""
    pools = cluster.pools.model_copy(update={
        "rollout": cluster.pools.rollout.model_copy(update={"host_gb_per_node": gb}),
        "train": cluster.pools.train.model_copy(update={"host_gb_per_node": gb})})
    return cluster.model_copy(update={"pools": pools})


class ResidencyProbe(PlacementPolicy):
    """Wraps a RollMux policy built by `build_policy`: places exactly as it does (every other
    attribute, its capabilities included, is the wrapped policy's, so the cluster state treats
    the probe as that policy) and counts, per arrival, why each group was refused."""

    def __init__(self, policy: RollMuxPlacement) -> None:
        self.policy = policy
        self.name = policy.name
        self.counts: Counter[str] = Counter()
        self.extra_per_hour = 0.0  # Δ $/h the real decisions committed beyond the unlimited-DRAM ones
        self._seen: set[str] = set()

    @classmethod
    def built(cls, config: SchedulerConfig, cluster: ClusterSpec) -> "ResidencyProbe":
        """A probe around the policy `config` builds for `cluster`."""
        return cls(build_policy(config, cluster))

    def __getattr__(self, name: str) -> Any:
        # Only attributes the probe lacks get here: the wrapped policy's (cfg, place_joined,
        # join_matrix, shapes, colocate, explains, ...).
        if name == "policy":  # (not set yet: never delegate to itself)
            raise AttributeError(name)
        return getattr(self.policy, name)

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The wrapped policy's placement; on a job's first decision, also its refusal census."""
        plan = self.policy.place(job, view)
        if job.job_id not in self._seen:
            self._seen.add(job.job_id)
            self._census(job, view, plan)
        return plan

    def _census(self, job: JobSpec, view: ClusterView, plan: PlacementPlan | None) -> None:
        unl = replace(view, cluster=with_host_gb(view.cluster, UNLIMITED_GB))
        verdicts = Counter(self.verdict(g, job, view, unl) for g in view.groups)
        self.counts["arrivals"] += 1
        self.counts.update(verdicts)
        if not verdicts["residency"]:
            return
        self.counts["arrivals_with_residency_refusal"] += 1
        other = self.policy.place(job, unl)
        if plan is None or other is None:
            return
        if (plan.case, plan.group.group_id) != (other.case, other.group.group_id):
            self.counts["arrivals_changed"] += 1
            self.extra_per_hour += plan.delta_cost_per_hour - other.delta_cost_per_hour

    def verdict(self, g: Group, job: JobSpec, view: ClusterView, unl: ClusterView) -> str:
        """One of VERDICTS for joining `job` to group `g` (see the module docstring)."""
        q = self.cfg.plan_quantile
        k = view.cluster.pools.rollout.nodes_for(job.rollout_gpus)
        kt = view.cluster.pools.train.nodes_for(job.train_gpus)
        slack_new = period_budget(job, view.progress)
        shape = g.shape
        if (len(g.members) >= view.max_group_size or shape is None or shape.t_cycle_s > slack_new
                or kt > g.n_train or (self.prune_saturated and shape.status != "unsaturated")):
            return "ineligible"
        slack = min([slack_new] + [period_budget(m.job, view.progress) for m in g.members])
        own = planning_times(job, q)
        if own.rollout + own.train + own.sync > slack:
            return "ineligible"
        news = [n for n in range(k + 1) if view.free_rollout_nodes is None or n <= view.free_rollout_nodes]
        if any(try_join(self.cfg, g, job, view, k, 1.0, n, 0, slack) is not None for n in news):
            return "accepted"
        loads = rollout_node_loads(g, q)
        order = sorted(range(g.n_rollout), key=lambda n: (loads[n], n))
        # Residency mattered only where it changed the pinning (or forbade it).
        mattered = [n for n in news
                    if _pins(pin_into(g, job, view.cluster, n, order)) != _pins(pin_into(g, job, unl.cluster, n, order))]
        if any(try_join(self.cfg, g, job, unl, k, 1.0, n, 0, slack) is not None for n in mattered):
            return "residency"
        return "other"


def _pins(g: Group | None) -> tuple | None:
    return None if g is None else (g.n_rollout, g.members[-1].rollout_nodes, g.members[-1].train_nodes)


def residency_run(mode: str, node_gb: float | None, jobs: list[JobSpec], cluster: ClusterSpec,
                  seed: int) -> dict:
    """One run of CONFIG with `node_gb` host DRAM per node (None: unlimited, no probe)."""
    c = with_host_gb(cluster, UNLIMITED_GB if node_gb is None else node_gb)
    policy = ResidencyProbe.built(CONFIG, c) if node_gb is not None else None
    res = simulate(jobs, c, CONFIG, policy, seed=seed)
    out = {"mode": mode, "node_gb": node_gb, "jobs": len(jobs), "cost_usd": res.cost_usd,
           "slo_attainment": res.slo_attainment, "shares": res.placement_shares() or {},
           "counts": None, "extra_per_hour": None}
    if isinstance(policy, ResidencyProbe):
        out["counts"] = {key: policy.counts[key] for key in
                         ("arrivals", *VERDICTS, "arrivals_with_residency_refusal", "arrivals_changed")}
        out["extra_per_hour"] = policy.extra_per_hour
    return out


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Probe runs at 2 TiB and 1 TiB per node and the unlimited-DRAM counterfactual, per trace."""
    tasks = []
    for mode in MODES:
        jobs = synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, sc.philly_days, mode, sc.seed)
        tasks += [(mode, gb, jobs, cluster, sc.seed) for gb in (*NODE_GB, None)]
    return {"vc": sc.philly_vc, "days": sc.philly_days, "quick": sc.is_quick, "config": CONFIG.describe(),
            "runs": pmap(residency_run, tasks)}


def render(data: dict) -> str:
    """The markdown section: what it measures, the table, the command."""
    unlimited = {r["mode"]: r for r in data["runs"] if r["node_gb"] is None}
    lines = [
        "## Residency: how often host DRAM decides a placement",
        "",
        f"On each Philly-driven trace (VC {data['vc']}, {data['days']:g} days) RollMux runs "
        f"`{data['config']}` (the co-located mode off: residency decides where jobs share nodes) "
        "with its real host-DRAM limit and a probe that classifies, on every arrival, "
        "each existing group by Algorithm 1's candidates (nominal shapes): refused by residency alone (no valid placement with the real DRAM, "
        "one with unlimited DRAM), refused for another reason (SLO), accepted, or ineligible "
        "before memory matters (full, saturated, SLO budget). 'Decision changed' counts arrivals "
        "that would have gone to another group or case with unlimited DRAM (Δ: the extra $/h "
        "those decisions committed). Only arrivals are probed, not the departure-time "
        "re-placement checks, where residency can also steer a run. The last columns compare the "
        "run with a counterfactual "
        "run whose nodes have unlimited host DRAM. Catalog jobs keep 81-357 GB per node "
        "(docs/workload.md); paper-profile jobs 300 / 500 / 800 GB per training node.",
        "",
        "| trace | host DRAM / node | arrivals | groups examined | eligible | accepted | "
        "refused: residency alone | refused: other (SLO) | arrivals with a residency refusal | "
        "decision changed (Δ $/h) | cost $ | cost / unlimited | direct / scaling / isolated | SLO met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        base = unlimited[r["mode"]]["cost_usd"]
        s = r["shares"]
        mix = " / ".join(pct(s.get(c, 0.0)) for c in ("direct_packing", "rollout_scaling", "isolated"))
        cost = f"{r['cost_usd']:,.0f} | {r['cost_usd'] / base:.3f}x | {mix} | {pct(r['slo_attainment'])}"
        if r["counts"] is None:
            lines.append(f"| {r['mode']} | unlimited | {r['jobs']} | – | – | – | – | – | – | – | {cost} |")
            continue
        c = r["counts"]
        examined = sum(c[v] for v in VERDICTS)
        eligible = examined - c["ineligible"]
        lines.append(
            f"| {r['mode']} | {r['node_gb'] / 1024:g} TiB | {c['arrivals']} | {examined} | {eligible} | "
            f"{c['accepted']} | {c['residency']} ({pct(c['residency'] / eligible if eligible else 0.0)} "
            f"of eligible) | {c['other']} | {c['arrivals_with_residency_refusal']} | "
            f"{c['arrivals_changed']} ({r['extra_per_hour']:+,.0f}) | {cost} |")
    lines += ["", regenerate(data, "residency"), ""]
    return "\n".join(lines)
