"""Study section: a finite inter-pool link shared by every job's weight sync.

Catalog jobs carry `weights_gb` (one bf16 copy of the model); a paper-profile
job, which names no model, gets its host-resident training state (16 bytes per
parameter) / 8.
Concurrent syncs share the link evenly. Topology-aware sync sends one model
copy per job across the link (the rollout nodes all-gather on their own
network); flat sync sends one copy per rollout node (the ablation row). The
unlimited row is the model without the fields (each sync takes its profile's
`sync_s`). RollMux runs `groups_config` (study/sections.py); flat sync is the
simulator's own run setting (`flat_sync`), not a scheduler setting.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.study.config import StudyConfig
from rollmux.study.sections import GROUPS_NOTE, MODES, groups_config, pct, philly_jobs, regenerate, run_config, simulate_command, summary
from rollmux.study.sweep import Pmap

# (label, link Gb/s or None, flat sync)
ROWS = (("unlimited", None, False), ("400 Gb/s, topology-aware", 400.0, False),
        ("100 Gb/s, topology-aware", 100.0, False), ("25 Gb/s, topology-aware", 25.0, False),
        ("25 Gb/s, flat", 25.0, True))


def with_weights(jobs: list[JobSpec], cluster: ClusterSpec) -> list[JobSpec]:
    """Each job with `weights_gb`: its own, else one bf16 model copy from its training state."""
    nodes = cluster.pools.train.nodes_for
    return [j if j.weights_gb is not None else
            JobSpec(**{**j.fields(), "weights_gb": round(j.host_gb.train * nodes(j.train_gpus) / 8, 1)})
            for j in jobs]


def link_run(mode: str, label: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """RollMux on the trace with one row's link."""
    _, gbps, flat = next(r for r in ROWS if r[0] == label)
    cl = cluster.model_copy(update={"inter_pool_gbps": gbps})
    res = run_config(with_weights(jobs, cluster), cl, groups_config(), seed, flat_sync=flat)
    return {"mode": mode, "row": label, **summary(res)}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Every row on both traces."""
    tasks = [(mode, label, jobs, cluster, sc.seed) for mode in MODES
             for jobs in [philly_jobs(sc, traces, mode)] for label, _, _ in ROWS]
    return {"quick": sc.is_quick, "runs": pmap(link_run, tasks)}


def render(data: dict) -> str:
    """The markdown section."""
    lines = [
        "## A finite inter-pool link",
        "",
        GROUPS_NOTE,
        "",
        "Weight syncs share the link between the pools (`inter_pool_gbps`); a sync ends when its "
        "fixed part (`sync_s`) is over and its bytes crossed the link. Each job's `weights_gb` is one "
        "bf16 model copy (catalog: from the model; paper profiles: training state / 8). The planner still plans with `sync_s`: a congested "
        "link shows up as slowdown (and, through measured times, repair).",
        "",
        "| trace | link | cost $ | vs unlimited | SLO met | mean slowdown |",
        "|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        rows = [r for r in data["runs"] if r["mode"] == mode]
        base = rows[0]["cost_usd"]
        for r in rows:
            lines.append(f"| {mode} | {r['row']} | {r['cost_usd']:,.0f} | {r['cost_usd'] / base:.3f}x | "
                         f"{pct(r['slo'])} | {r['mean_slowdown']:.3f} |")
    lines += ["", regenerate(data, "link", "on a cluster file, set `inter_pool_gbps` and give jobs "
              f"`weights_gb`; `{simulate_command(groups_config())} --flat-sync` for the flat ablation."), ""]
    return "\n".join(lines)
