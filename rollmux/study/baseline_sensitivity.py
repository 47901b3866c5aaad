"""Study section: the co-located baselines on their own terms (DESIGN §6).

On the Philly-driven traces (paper and catalog profiles), against simulated
Solo-D and with RollMux for reference, twice, each a configuration its label
names (DESIGN §10): as `rollmux simulate` runs it (`rollmux`: the `shipped`
profile, run at each co-located speed `colocation.speed`, since its co-located
jobs use the same calibration) and its co-execution groups alone
(`rollmux-groups`: `shipped` with the co-located mode off, study/sections.py
`groups_config`):

- veRL on the co-located model (measured pairs first, core/colo_fit.py; rollmux/sim/baselines.py),
  at co-located speed x0.8, x1 and x1.2: the sensitivity row.
- Gavel+ plain (every job disaggregated, the old model) and heterogeneity-aware
  (each job's rollout on H20 or co-located on H800, whichever costs less within
  its SLO; rollmux/sim/gavel_alloc.py), uncapped and at 41 + 41 nodes (the
  paper's production cluster; 8 + 8 for the quick study's short traces), where
  Gavel time-slices gangs in rounds. Heterogeneity-aware Gavel+ uncapped also
  runs at the three co-located speeds, since it uses the same calibration.

Per run: cost to finish the trace, gain = Solo-D cost / cost, SLO attainment
(mean iteration time within slo x solo, without and with the wait before the
job first ran), mean slowdown, peak nodes, share of jobs co-located, and
Gavel's preemptions.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baselines import simulate_verl
from rollmux.sim.gavel import GavelSimulation
from rollmux.sim.metrics import PolicyResult
from rollmux.study.capacity import capped
from rollmux.study.config import StudyConfig
from rollmux.study.sections import groups_config, label, pct, profile, regenerate, run_config
from rollmux.study.sweep import Pmap
from rollmux.workload import synthesize_philly

MODES = ("paper", "catalog")
SPEEDS = (0.8, 1.0, 1.2)
CAP_NODES = 41        # the paper's production cluster: 41 rollout + 41 training nodes
QUICK_CAP_NODES = 8   # the quick study's 30-job, 2-day traces never reach 41 nodes
TIE_REL = 1e-3        # a cost within 0.1% of Solo-D's is reported as a tie
RM = ("rollmux", "rollmux-groups")  # the RollMux runs


def runs_of(cap: int) -> list[tuple[str, float, int | None]]:
    """(policy, co-located speed, nodes per pool or None) of every run on one trace."""
    out: list[tuple[str, float, int | None]] = [("solo-d", 1.0, None), ("rollmux-groups", 1.0, None)]
    out += [("rollmux", s, None) for s in SPEEDS]
    out += [("verl", s, None) for s in SPEEDS]
    out += [("gavel-plain", 1.0, None), ("gavel-plain", 1.0, cap)]
    out += [("gavel-hetero", s, None) for s in SPEEDS]
    out += [("gavel-hetero", 1.0, cap)]
    return out


def rollmux_config(policy: str, speed: float) -> SchedulerConfig:
    """The configuration of a RollMux run (Solo-D plans with `shipped`): `rollmux` is the
    `shipped` profile at co-located speed `speed`, `rollmux-groups` its groups alone."""
    if policy == "rollmux-groups":
        return groups_config()
    return profile("shipped", {"colocation.speed": speed})


def summarize(res: PolicyResult, colocated: int, preemptions: int | None, gpn: int = 8) -> dict:
    """The picklable numbers of one run (`gpn`: GPUs per node)."""
    n = res.jobs_total or 1
    s = res.slowdowns
    return {"cost_usd": res.cost_usd, "finished": len(res.outcomes), "jobs": res.jobs_total,
            "slo": sum(o.slo_met for o in res.outcomes) / n,
            "slo_with_queueing": sum(o.slo_met_with_queueing for o in res.outcomes) / n,
            "mean_slowdown": float(s.mean()) if len(s) else float("nan"),
            "peak_nodes": {p: -(-g // gpn) for p, g in res.peak_gpus.items()},
            "colocated_share": colocated / n, "preemptions": preemptions}


def baseline_run(mode: str, policy: str, speed: float, cap: int | None, jobs: list[JobSpec],
                 cluster: ClusterSpec, seed: int) -> dict:
    """One policy on one trace at co-located speed `speed` and `cap` nodes per pool (None: uncapped)."""
    c = capped(cluster, cap)
    gpn = cluster.pools.train.gpus_per_node
    head = {"mode": mode, "policy": policy, "speed": speed, "cap": cap}
    if policy == "verl":
        return {**head, **summarize(simulate_verl(jobs, c, seed, colo_speed=speed), len(jobs), None, gpn)}
    if policy.startswith("gavel"):
        sim = GavelSimulation(jobs, c, seed, hetero=policy == "gavel-hetero", colo_speed=speed)
        res = sim.run()
        return {**head, **summarize(res, sim.kind_counts["colo"], sim.preemptions, gpn)}
    res = run_config(jobs, c, rollmux_config(policy, speed), seed, solo=policy == "solo-d")
    return {**head, **summarize(res, res.placements.get("colocated", 0), None, gpn)}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap, cap_nodes: int | None = None) -> dict:
    """Every run of `runs_of` on both Philly-driven traces."""
    cap = cap_nodes or (QUICK_CAP_NODES if sc.is_quick else CAP_NODES)
    tasks = []
    for mode in MODES:
        jobs = synthesize_philly(traces, sc.philly_vc, sc.philly_jobs, sc.philly_days, mode, sc.seed)
        tasks += [(mode, p, s, c, jobs, cluster, sc.seed) for p, s, c in runs_of(cap)]
    return {"vc": sc.philly_vc, "jobs": sc.philly_jobs, "days": sc.philly_days, "cap": cap,
            "quick": sc.is_quick, "runs": pmap(baseline_run, tasks)}


def _solo_cost(data: dict, mode: str) -> float:
    return next(r["cost_usd"] for r in data["runs"] if r["mode"] == mode and r["policy"] == "solo-d")


def findings(data: dict) -> list[str]:
    """Sentences the table supports, computed from it: veRL vs RollMux per speed, Gavel+ vs Solo-D."""
    out = []
    for mode in MODES:
        runs = [r for r in data["runs"] if r["mode"] == mode]
        if not runs:
            continue
        solo = _solo_cost(data, mode)
        rm = next(r for r in runs if r["policy"] == "rollmux-groups")
        verl = {r["speed"]: r for r in runs if r["policy"] == "verl"}
        cheaper = [f"x{s:g}" for s, r in sorted(verl.items()) if r["cost_usd"] < rm["cost_usd"]]
        gains = ", ".join(f"{solo / r['cost_usd']:.2f}x at x{s:g}" for s, r in sorted(verl.items()))
        out.append(f"- {mode}: veRL gains {gains} over Solo-D against RollMux's groups alone "
                   f"{solo / rm['cost_usd']:.2f}x; "
                   + (f"veRL is cheaper than RollMux's groups alone at {', '.join(cheaper)}." if cheaper
                      else "RollMux's groups alone are cheaper at every calibration."))
        shipped = {r["speed"]: r for r in runs if r["policy"] == "rollmux"}
        if shipped:
            out.append(f"- {mode}: RollMux as shipped (per-job co-located mode) gains " + ", ".join(
                f"{solo / r['cost_usd']:.2f}x at x{s:g} ({pct(r['colocated_share'])} co-located, veRL "
                f"{solo / verl[s]['cost_usd']:.2f}x)" for s, r in sorted(shipped.items()) if s in verl) + ".")
        ties = [r for r in runs if r["policy"].startswith("gavel") and abs(r["cost_usd"] / solo - 1) < TIE_REL]
        het = [r for r in runs if r["policy"] == "gavel-hetero"]
        shares = ", ".join(f"{pct(r['colocated_share'])} (x{r['speed']:g}, {r['cap'] or 'uncapped'})" for r in het)
        tie_txt = ("; ties Solo-D (within 0.1%): " + ", ".join(
            f"{r['policy']} {r['cap'] or 'uncapped'}" for r in ties)) if ties else "; no Gavel+ run ties Solo-D"
        out.append(f"- {mode}: heterogeneity-aware Gavel+ co-locates {shares}{tie_txt}.")
    return out


def render(data: dict) -> str:
    """The markdown section: what it measures, the table, what it shows, the command."""
    cap = data["cap"]
    lines = [
        "## The co-located baselines: veRL calibration sensitivity and heterogeneity-aware Gavel+",
        "",
        f"The Philly-driven traces ({data['jobs']} jobs, VC {data['vc']}, {data['days']:g} days). veRL runs "
        "each job on max(rollout, train) GPUs of H800, with its co-located phase times from the authors' "
        "measured pairs (a catalog job of a measured type carries its pair; the paper's profile classes, "
        "which name no model, take the fit on the sixteen pairs by phase balance: a model, "
        "core/colo_fit.py); the speed column scales the co-located phases (x0.8 = 25% slower than "
        "measured or modelled). Each RollMux row names its configuration: "
        "`rollmux` is what `rollmux simulate` runs (the `shipped` profile: elastic rollout, stretch pricing, "
        "the per-job co-located mode at the row's speed, `colocation.speed`); `rollmux-groups` is its "
        "co-execution groups alone (the co-located mode off); Solo-D plans with `shipped`. Gavel+ plain "
        "keeps every job "
        "disaggregated; "
        "heterogeneity-aware Gavel+ runs each job's rollout on H20 or co-located on its H800 gang, "
        "whichever costs less per iteration within its SLO, at the same co-located speed. With a cap "
        f"({cap} nodes per pool) Gavel+ time-slices its gangs in 6-minute rounds (max-min fairness over "
        "normalized throughput). Gain = simulated Solo-D cost (uncapped) / cost. SLO met: mean iteration "
        "time within slo x solo while the job ran; with queueing, counting its wait before it first ran.",
        "",
        "| trace | policy | co-located speed | nodes / pool | cost $ | gain vs Solo-D | SLO met | "
        "SLO met with queueing | mean slowdown | peak nodes R / T | jobs co-located | preemptions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        solo = _solo_cost(data, r["mode"])
        colo = r["policy"] in ("verl", "gavel-hetero", "rollmux")
        pk = r["peak_nodes"]
        shown = label(r["policy"], rollmux_config(r["policy"], r["speed"])) if r["policy"] in RM else r["policy"]
        lines.append(
            f"| {r['mode']} | {shown} | {'x' + format(r['speed'], 'g') if colo else '-'} | "
            f"{r['cap'] or 'uncapped'} | {r['cost_usd']:,.0f} | {solo / r['cost_usd']:.2f}x | {pct(r['slo'])} | "
            f"{pct(r['slo_with_queueing'])} | {r['mean_slowdown']:.3f} | {pk['rollout']} / {pk['train']} | "
            f"{pct(r['colocated_share'])} | {'-' if r['preemptions'] is None else r['preemptions']} |")
    lines += ["", "What the table shows:", "", *findings(data), "",
              "Uncapped, plain Gavel+ is Solo-D by construction (a gang holds its nodes for whole iterations "
              "and nothing fills its bubbles); heterogeneity-aware Gavel+ is, job by job, the cheaper of "
              "Solo-D and veRL within the SLO, so it can at best match the cheaper of the two on each job: "
              "neither fills one job's bubbles with another's phases.",
              "", regenerate(data, "baseline_sensitivity"), ""]
    return "\n".join(lines)
