"""Study section: fixed capacity (DESIGN §5a), the paper's production cluster of 41 + 41 nodes.

With a node cap per pool, a job that cannot be placed waits in a FIFO queue
(rollmux/sim/simulator.py). On the Philly-driven traces (paper and catalog
profiles) RollMux (default), RollMux with the paper's static groups, and Solo-D
run once uncapped (their peak node counts show whether the cap binds) and once
capped, and the section reports per run: the queueing delay (submission to
first placement, JobOutcome.queued_s), the job completion time (submission to
finish, JobOutcome.jct_s), and SLO attainment judged on the mean iteration
time without queueing (JobOutcome.slo_met) and with the queueing delay counted
as part of the job's time (JobOutcome.slo_met_with_queueing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rollmux.core.placement import RollMuxPlacement
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baseline_policies import SoloPlacement
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.simulator import SimConfig, simulate
from rollmux.study.config import StudyConfig
from rollmux.study.sections import pct, regenerate
from rollmux.study.sweep import Pmap
from rollmux.workload import synthesize_philly

MODES = ("paper", "catalog")
POLICIES = ("rollmux", "rollmux-static", "solo-d")
CAP_NODES = 41        # the paper's production cluster: 41 rollout + 41 training nodes (328 + 328 GPUs)
QUICK_CAP_NODES = 8   # the quick study's 30-job traces never reach 41 nodes
# The study's jobs spread over twice its days: at 200 jobs in 14 days the catalog trace offers
# Solo-D 1.46x what 41 nodes serve (queues of days, overload rather than a cap); over 28 days
# the cap still binds for every policy (uncapped peaks 44-100 nodes) at an offered load of 0.34-0.59.
SPREAD = 2.0
HOUR = 3600.0


def capped(cluster: ClusterSpec, nodes: int | None) -> ClusterSpec:
    """`cluster` with at most `nodes` nodes in each pool (None: uncapped)."""
    pools = cluster.pools.model_copy(update={
        "rollout": cluster.pools.rollout.model_copy(update={"max_nodes": nodes}),
        "train": cluster.pools.train.model_copy(update={"max_nodes": nodes})})
    return cluster.model_copy(update={"pools": pools})


def offered_load(jobs: list[JobSpec], cluster: ClusterSpec, nodes: int) -> float:
    """Solo-D node-hours of the busier pool over `nodes` nodes for the arrival window (>1: overload)."""
    window = max(j.arrival_s for j in jobs) - min(j.arrival_s for j in jobs) or 1.0
    need = max(sum(j.duration_s * getattr(cluster.pools, p).nodes_for(getattr(j, f"{p}_gpus")) for j in jobs)
               for p in ("rollout", "train"))
    return need / (nodes * window)


def simulate_policy(policy: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> PolicyResult:
    """Run one of POLICIES on the trace."""
    if policy == "rollmux-static":
        cfg = SimConfig(seed=seed, shrink=False, regroup=False, repair=False)
        return simulate(jobs, cluster, RollMuxPlacement(cfg.intra), cfg)
    cfg = SimConfig(seed=seed)
    place = RollMuxPlacement(cfg.intra) if policy == "rollmux" else SoloPlacement(cfg.intra)
    return simulate(jobs, cluster, place, cfg)


def summarize(res: PolicyResult, gpus_per_node: int = 8) -> dict:
    """Cost, queueing delay, JCT and both SLO judgements of one run (hours; picklable)."""
    queued = np.array([o.queued_s for o in res.outcomes]) / HOUR
    jct = np.array([o.jct_s for o in res.outcomes]) / HOUR
    n = res.jobs_total or 1
    return {
        "cost_usd": res.cost_usd, "span_h": res.span_s / HOUR, "finished": len(res.outcomes),
        "jobs": res.jobs_total, "queued_share": float(np.mean(queued > 1e-6)) if len(queued) else 0.0,
        "queued_mean_h": float(queued.mean()) if len(queued) else 0.0,
        "queued_p95_h": float(np.percentile(queued, 95)) if len(queued) else 0.0,
        "queued_max_h": float(queued.max()) if len(queued) else 0.0,
        "jct_mean_h": float(jct.mean()) if len(jct) else 0.0,
        "jct_p50_h": float(np.percentile(jct, 50)) if len(jct) else 0.0,
        "jct_p95_h": float(np.percentile(jct, 95)) if len(jct) else 0.0,
        "slo": sum(o.slo_met for o in res.outcomes) / n,
        "slo_with_queueing": sum(o.slo_met_with_queueing for o in res.outcomes) / n,
        "peak_nodes": {p: -(-g // gpus_per_node) for p, g in res.peak_gpus.items()},
    }


def capacity_run(mode: str, policy: str, cap: int | None, jobs: list[JobSpec], cluster: ClusterSpec,
                 seed: int) -> dict:
    """One policy on one trace with `cap` nodes per pool (None: uncapped)."""
    out = summarize(simulate_policy(policy, jobs, capped(cluster, cap), seed), cluster.pools.train.gpus_per_node)
    return {"mode": mode, "policy": policy, "cap": cap, **out}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap, cap_nodes: int | None = None,
        days: float | None = None) -> dict:
    """Every policy uncapped and at the cap (41 per pool; 8 for the quick study), on both traces
    of the study's jobs over `days` (default: SPREAD x the study's days)."""
    cap = cap_nodes or (QUICK_CAP_NODES if sc.is_quick else CAP_NODES)
    days = days or SPREAD * sc.philly_days
    tasks, loads = [], {}
    for mode in MODES:
        jobs = synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, days, mode, sc.seed)
        loads[mode] = offered_load(jobs, cluster, cap)
        tasks += [(mode, p, c, jobs, cluster, sc.seed) for c in (None, cap) for p in POLICIES]
    return {"vc": sc.philly_vc, "jobs": sc.philly_jobs, "days": days, "cap": cap,
            "quick": sc.is_quick, "offered_load": loads, "runs": pmap(capacity_run, tasks)}


def _binds(data: dict) -> str:
    """A sentence on whether the cap binds: the uncapped runs' peak nodes against it."""
    peaks = [max(r["peak_nodes"].values()) for r in data["runs"] if r["cap"] is None]
    if not peaks:
        return ""
    verdict = "binds for every policy" if min(peaks) > data["cap"] else "does not bind for every policy"
    return f"Uncapped, the busier pool peaks at {min(peaks)}-{max(peaks)} nodes: the cap {verdict}."


def render(data: dict) -> str:
    """The markdown section: what it measures, the table, the command."""
    cap = data["cap"]
    loads = ", ".join(f"{m} {v:.2f}" for m, v in data["offered_load"].items())
    lines = [
        f"## Fixed capacity: {cap} rollout + {cap} training nodes",
        "",
        f"The Philly-driven traces ({data['jobs']} jobs, VC {data['vc']}, spread over {data['days']:g} days, "
        f"{SPREAD:g}x the study's window: at the full study's size the cap then binds without "
        "overloading the cluster) on a "
        f"cluster capped at {cap} nodes per pool (the paper's production cluster has 41 + 41), where "
        "a job that cannot be placed waits in a FIFO queue, next to the same run uncapped. Queued: "
        "submission to first placement; JCT: submission to finish; SLO met: mean iteration time "
        "within slo x solo, without and with the queueing delay counted in the job's time. Offered "
        f"load (Solo-D node-hours of the busier pool / ({cap} nodes x arrival window)): {loads}; "
        "above 1 the capped Solo-D queue grows until arrivals stop, and every run still finishes. "
        + _binds(data),
        "",
        "| trace | policy | nodes / pool | peak nodes R / T | cost $ | span h | jobs queued | "
        "queued mean / p95 / max h | JCT mean / p50 / p95 h | SLO met | SLO met with queueing |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        pk = r["peak_nodes"]
        lines.append(
            f"| {r['mode']} | {r['policy']} | {r['cap'] or 'uncapped'} | {pk['rollout']} / {pk['train']} | "
            f"{r['cost_usd']:,.0f} | {r['span_h']:,.0f} | {pct(r['queued_share'])} | "
            f"{r['queued_mean_h']:.1f} / {r['queued_p95_h']:.1f} / {r['queued_max_h']:.1f} | "
            f"{r['jct_mean_h']:.1f} / {r['jct_p50_h']:.1f} / {r['jct_p95_h']:.1f} | "
            f"{pct(r['slo'])} | {pct(r['slo_with_queueing'])} |")
    lines += ["", regenerate(data, "capacity"), ""]
    return "\n".join(lines)
