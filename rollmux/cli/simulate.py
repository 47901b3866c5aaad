"""`rollmux simulate`: policies side by side on a trace, RollMux as a named profile plus overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollmux.cli import settings as s
from rollmux.cli.app import app, err, fail, out, tables_to_stderr, write_json
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.trace_io import load_cluster, load_jobs
from rollmux.errors import InputError
from rollmux.sim.accounting import ACCOUNTINGS, accounting_named
from rollmux.sim.report import comparison_table
from rollmux.sim.runner import DEFAULT_POLICIES, compare


def drop_unplaceable(jobs: list[JobSpec], cluster: ClusterSpec, skip: bool) -> list[JobSpec]:
    """The jobs some node can hold; the others are an InputError, or with `skip` a warning each."""
    kept = []
    for job in jobs:
        reason = cluster.job_unplaceable_reason(job)
        if reason is None:
            kept.append(job)
        elif skip:
            err.print(f"[yellow]warning:[/] job {job.job_id} rejected: {reason}", highlight=False)
        else:
            raise InputError(f"job {job.job_id}", f"can never be placed: {reason} "
                                                  "(use --skip-unplaceable to run without it)")
    if not kept:
        raise InputError("--jobs", "no placeable job left")
    return kept


@app.command()
def simulate(
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Job trace (JSONL); default: the embedded 200-job "
                                                             "Philly-driven trace."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML); default: the paper's "
                                                                   "H20/H800 cluster."),
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="rollmux, solo-d, verl, random, greedy, "
                                                                      "gavel (repeatable)."),
    profile: str = s.PROFILE,
    sets: Optional[list[str]] = s.SETS,
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here (-: on stdout, "
                                                                 "the table then on stderr)."),
    accounting: str = typer.Option("work", "--accounting", help=f"{' or '.join(ACCOUNTINGS)}: every job runs "
                                   "all its iterations (work), or stays exactly its trace duration whatever its "
                                   "slowdown, throughput reported (paper: the authors' cost code)."),
    skip_unplaceable: bool = typer.Option(False, "--skip-unplaceable", help="Drop jobs no node can hold, with a warning."),
    flat_sync: bool = typer.Option(False, "--flat-sync", help="Weight sync sends one copy per rollout node over "
                                                              "the inter-pool link."),
    static: bool = typer.Option(False, "--static", help="The paper's static groups: same as --no-shrink "
                                                       "--no-regroup --no-repair --no-compact."),
    max_group_size: Optional[int] = s.OPTION["--max-group-size"], migration: Optional[bool] = s.OPTION["--migration"],
    plan_quantile: Optional[float] = s.OPTION["--plan-quantile"], plan: Optional[str] = s.OPTION["--plan"],
    plan_z: Optional[float] = s.OPTION["--plan-z"], shrink: Optional[bool] = s.OPTION["--shrink"],
    regroup: Optional[bool] = s.OPTION["--regroup"], migration_scale: Optional[float] = s.OPTION["--migration-scale"],
    regroup_margin: Optional[float] = s.OPTION["--regroup-margin"], repair: Optional[bool] = s.OPTION["--repair"],
    consolidate: Optional[int] = s.OPTION["--consolidate"], train_scaling: Optional[bool] = s.OPTION["--train-scaling"],
    elastic_rollout: Optional[bool] = s.OPTION["--elastic-rollout"], order: Optional[str] = s.OPTION["--order"],
    colocate: Optional[bool] = s.OPTION["--colocate"], colo_margin: Optional[float] = s.OPTION["--colo-margin"],
    colo_regroup: Optional[bool] = s.OPTION["--colo-regroup"], colo_pair: Optional[bool] = s.OPTION["--colo-pair"],
    colo_narrow: Optional[bool] = s.OPTION["--colo-narrow"], colo_speed: Optional[float] = s.OPTION["--colo-speed"],
    colo_fold: Optional[bool] = s.OPTION["--colo-fold"],
    compact: Optional[bool] = s.OPTION["--compact"], stretch_pricing: Optional[bool] = s.OPTION["--stretch-pricing"],
) -> None:
    """Simulate policies on a trace and compare cost, SLO attainment and utilization."""
    try:
        books = accounting_named(accounting)
        cfg = s.scheduler_config(profile, s.given_flags(locals()), static, sets)
        trace = load_jobs(jobs)
        spec, warnings = load_cluster(cluster)
        for w in trace.warnings + warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
        job_list = drop_unplaceable(trace.jobs, spec, skip_unplaceable)
        names = list(dict.fromkeys(policy or DEFAULT_POLICIES))
        with Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=False) as bar:
            def progress_for(name: str):
                task = bar.add_task(name, total=len(job_list))
                return lambda done, total: bar.update(task, completed=done)
            result = compare(job_list, spec, names, cfg, progress_for, seed=seed, flat_sync=flat_sync,
                             accounting=books)
        with tables_to_stderr(json_out):
            out.print(comparison_table(result, job_list, spec, trace.source))
        if json_out is not None:
            write_json(json_out, result.to_json())
    except InputError as exc:
        fail(exc)
