"""The `rollmux` command line (typer + rich).

Bad input of any kind exits with status 2 and one line naming the place.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollmux.core.intra_group import IntraConfig
from rollmux.core.trace_io import dump_jobs, load_cluster, load_jobs, parse_jobs
from rollmux.errors import InputError
from rollmux.sim.report import comparison_table
from rollmux.sim.runner import DEFAULT_POLICIES, compare
from rollmux.sim.simulator import SimConfig

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="RollMux: multiplex RL post-training jobs across rollout and training pools.")
workload_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build job traces.")
app.add_typer(workload_app, name="workload")
bench_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure the scheduler itself.")
app.add_typer(bench_app, name="bench")
# Piped output gets a fixed width wide enough for the comparison table.
out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _write_json(path: Path, doc: dict) -> None:
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise InputError(str(path), f"cannot write ({exc.strerror})") from None


def _drop_unplaceable(jobs, cluster, skip: bool):
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
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Job trace (JSONL); default: the embedded 200-job Philly-driven trace."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML); default: the paper's H20/H800 cluster."),
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="rollmux, solo-d, verl, random, greedy (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    max_group_size: int = typer.Option(5, "--max-group-size", min=1, help="Most jobs per co-execution group."),
    migration: bool = typer.Option(True, "--migration/--no-migration", help="Long-tail migration at run time."),
    plan_quantile: float = typer.Option(1.0, "--plan-quantile", min=0.5, max=1.0,
                                        help="Rollout quantile used for SLO admission; 1.0 = worst case."),
    skip_unplaceable: bool = typer.Option(False, "--skip-unplaceable", help="Drop jobs no node can hold, with a warning."),
    shrink: bool = typer.Option(True, "--shrink/--no-shrink", help="Release nodes a group no longer needs when members leave."),
    regroup: bool = typer.Option(True, "--regroup/--no-regroup",
                                 help="Dissolve a group whose remaining members fit elsewhere for less."),
    migration_stall: float = typer.Option(300.0, "--migration-stall", min=0.0,
                                          help="Seconds a re-placed job pauses (state move, cold start)."),
    consolidate: int = typer.Option(2, "--consolidate", min=0,
                                    help="On any departure, also try to dissolve groups of at most N members."),
    static: bool = typer.Option(False, "--static", help="The paper's static groups: same as --no-shrink --no-regroup."),
) -> None:
    """Simulate policies on a trace and compare cost, SLO attainment and utilization."""
    try:
        trace = load_jobs(jobs)
        spec, warnings = load_cluster(cluster)
        for w in trace.warnings + warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
        job_list = _drop_unplaceable(trace.jobs, spec, skip_unplaceable)
        cfg = SimConfig(seed=seed, max_group_size=max_group_size,
                        intra=IntraConfig(warm_switch_s=spec.warm_switch_s, migration=migration,
                                          plan_quantile=plan_quantile),
                        shrink=shrink and not static, regroup=regroup and not static,
                        migration_stall_s=migration_stall, consolidate=consolidate)
        names = list(dict.fromkeys(policy or DEFAULT_POLICIES))
        with Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=False) as bar:
            def progress_for(name: str):
                task = bar.add_task(name, total=len(job_list))
                return lambda done, total: bar.update(task, completed=done)
            result = compare(job_list, spec, names, cfg, progress_for)
        out.print(comparison_table(result, job_list, spec, trace.source))
        if json_out is not None:
            _write_json(json_out, result.to_json())
    except InputError as exc:
        _fail(exc)


@workload_app.command("philly")
def workload_philly(
    vc: str = typer.Option("0e4a51", "--vc", help="Philly virtual cluster id (arrivals/<vc>.csv)."),
    n_jobs: int = typer.Option(200, "--jobs", help="Number of jobs."),
    days: float = typer.Option(14.0, "--days", help="Length of the arrival window in days."),
    mode: str = typer.Option("catalog", "--mode", help="paper (Table-6 profile classes) or catalog (Qwen2.5 jobs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the JSONL trace."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Trace folder (default: $ROLLMUX_TRACES or ../shared/traces)."),
) -> None:
    """Map real Philly arrivals and run times to RL post-training jobs."""
    from rollmux.workload import find_traces_dir, synthesize_philly
    try:
        if mode not in ("paper", "catalog"):
            raise InputError("--mode", f"unknown mode {mode!r}; choose paper or catalog")
        job_list = synthesize_philly(find_traces_dir(traces), vc, n_jobs, days, mode, seed)
        try:
            dump_jobs(job_list, output)
        except OSError as exc:
            raise InputError(str(output), f"cannot write ({exc.strerror})") from None
        out.print(f"wrote {len(job_list)} jobs to {output}")
    except InputError as exc:
        _fail(exc)


@app.command()
def optimal(
    jobs: Path = typer.Option(..., "--jobs", help="Job set (JSONL); all jobs are placed at once."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result as JSON here."),
    max_group_size: int = typer.Option(5, "--max-group-size", min=1),
) -> None:
    """Offline optimum of a static job set vs RollMux and the busy-time bound ($/h)."""
    from rollmux.study.offline_optimum_cli import optimal_command
    try:
        optimal_command(jobs, cluster, json_out, max_group_size)
    except InputError as exc:
        _fail(exc)


@app.command()
def study(
    quick: bool = typer.Option(False, "--quick", help="Small instances: under a minute."),
    out_dir: Path = typer.Option(Path("docs/study"), "--out", help="Where the markdown and PNGs go."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Trace folder (default: ../shared/traces)."),
) -> None:
    """Regenerate the paper's scheduling study: tables and plots under --out."""
    from rollmux.study.experiments import StudyConfig, run_study
    from rollmux.workload import find_traces_dir
    try:
        traces = find_traces_dir(traces)  # fail on a bad folder before any work starts
        sc = StudyConfig.quick() if quick else StudyConfig()
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err) as bar:
            task = bar.add_task("study", total=None)
            md = run_study(sc, out_dir, traces,
                           lambda what, done, total: bar.update(task, description=what, completed=done, total=total))
        out.print(f"wrote {md}")
    except InputError as exc:
        _fail(exc)


@app.command()
def serve(
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to join (default: start one here)."),
    store: str = typer.Option("rollmux-journal.db", "--store",
                              help="Journal: a SQLite file path, or redis://host:port/db[?prefix=name]."),
    heartbeat_timeout: float = typer.Option(30.0, "--heartbeat-timeout", min=0.1,
                                            help="Fail a job silent for this many seconds."),
) -> None:
    """Start (or connect to) a Ray cluster and the scheduler service; runs until Ctrl-C.

    With a journal that already has records, the service recovers from it (the cluster
    file must then match the journal's, or be omitted)."""
    from rollmux.live.journal import JournalError, open_store
    from rollmux.live.service import NAMESPACE, start_service
    try:
        try:
            journal = open_store(store)
            recovering = bool(journal.records())
            journal.close()
        except JournalError as exc:
            raise InputError("--store", str(exc)) from None
        spec, warnings = load_cluster(cluster)
        for w in warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
        import ray
        # Ask Ray for loopback (recent Ray versions may still bind the host's own address).
        local = {} if address else {"_node_ip_address": "127.0.0.1"}
        ray.init(address=address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False, **local)
        store_url = store if "://" in store else str(Path(store).resolve())
        handle = start_service(None if recovering and cluster is None else spec.model_dump(),
                               store=store_url, heartbeat_timeout_s=heartbeat_timeout)
        try:
            st = ray.get(handle.status.remote())
        except ray.exceptions.RayActorError as exc:
            raise InputError("--store", f"the scheduler could not start: {exc}") from None
        out.print(f"rollmux scheduler serving in Ray namespace '{NAMESPACE}' "
                  f"(Ray at {ray.get_runtime_context().gcs_address}); journal {st['journal']} "
                  f"({st['recovered_records']} records recovered); Ctrl-C stops it")
        while True:
            time.sleep(3600)
    except InputError as exc:
        _fail(exc)


def _service(address: str):
    import ray

    from rollmux.live.service import ACTOR_NAME, NAMESPACE
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except (ConnectionError, ValueError) as exc:
        raise InputError("--address", f"no rollmux scheduler reachable at {address!r} ({exc})") from None


@app.command()
def submit(
    job_file: Path = typer.Argument(..., help="Job profile (YAML or JSON, the trace's fields)."),
    address: str = typer.Option("auto", "--address", help="Ray cluster of the scheduler."),
) -> None:
    """Submit one job to the running scheduler; prints where it was placed."""
    import ray
    import yaml
    try:
        text = job_file.read_text() if job_file.exists() else None
        if text is None:
            raise InputError(str(job_file), "no such file")
        try:
            record = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(str(job_file), f"not valid YAML/JSON ({exc})") from None
        parse_jobs([json.dumps(record)], str(job_file))  # same validation and messages as a trace line
        handle = _service(address)
        try:
            placed = ray.get(handle.submit.remote(record))
        except ray.exceptions.RayTaskError as exc:
            raise InputError(str(job_file), str(exc.cause)) from None
        # The token is the job's credential for every later call: print it once, keep it secret.
        out.print_json(json.dumps(placed))
    except InputError as exc:
        _fail(exc)


@app.command()
def status(address: str = typer.Option("auto", "--address", help="Ray cluster of the scheduler."),
           as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON.")) -> None:
    """Groups, members, whose turn it is on each node, and iteration times vs SLO."""
    import ray

    from rollmux.live.status_view import groups_table, jobs_table, summary_line
    try:
        st = ray.get(_service(address).status.remote())
        if as_json:
            out.print_json(json.dumps(st))
            return
        out.print(groups_table(st))
        out.print(jobs_table(st))
        out.print(summary_line(st))
    except InputError as exc:
        _fail(exc)


@app.command()
def demo(
    iterations: int = typer.Option(20, "--iterations", min=1, help="GRPO iterations per job."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    png: Path = typer.Option(Path("demo_timeline.png"), "--png", help="Timeline picture of phases on nodes."),
) -> None:
    """Emulated Ray cluster: three real GRPO jobs multiplexed by the scheduler, then solo."""
    from rollmux.live.demo import run_demo
    try:
        result = run_demo(iterations=iterations, json_out=json_out, png_out=png)
        out.print_json(json.dumps(result))
    except InputError as exc:
        _fail(exc)


@app.command()
def chaos(
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here."),
    seconds: float = typer.Option(60.0, "--seconds", min=1.0, help="Length of the many-jobs load scenario."),
    jobs: int = typer.Option(100, "--jobs", min=1, help="Synthetic jobs in the load scenario."),
    store: Optional[str] = typer.Option(None, "--store",
                                        help="Journal (a new SQLite file or redis://...); default: a temp SQLite file."),
) -> None:
    """Fault injection against a live local scheduler: service and job kills, double release,
    forged tokens, many jobs; exits 1 if any scenario fails."""
    from rollmux.live.chaos import print_report, run_chaos
    try:
        report = run_chaos(seconds=seconds, jobs=jobs, store=store,
                           say=lambda line: err.print(line, highlight=False))
        print_report(report, out)
        if json_out is not None:
            _write_json(json_out, report)
    except InputError as exc:
        _fail(exc)
    if not report["passed"]:
        raise typer.Exit(1)


@bench_app.command("placement")
def bench_placement(
    n_jobs: int = typer.Option(1000, "--jobs", min=1, help="Active jobs already placed."),
    probes: int = typer.Option(50, "--probes", min=1, help="Placement decisions timed."),
    seed: int = typer.Option(0, "--seed"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write {jobs, p50_ms, p99_ms} here."),
) -> None:
    """Latency of one RollMux placement decision with N active jobs."""
    from rollmux.study.placement_bench import placement_latency
    try:
        r = placement_latency(n_jobs, probes=probes, seed=seed)
        out.print(f"{r['jobs']} active jobs in {r['groups']} groups: placement p50 {r['p50_ms']:.2f} ms, "
                  f"p99 {r['p99_ms']:.2f} ms over {probes} decisions")
        if json_out is not None:
            _write_json(json_out, {k: r[k] for k in ("jobs", "p50_ms", "p99_ms")})
    except InputError as exc:
        _fail(exc)


def main() -> None:
    """Entry point of the `rollmux` script."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
