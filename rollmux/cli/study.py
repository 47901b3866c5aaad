"""The study side of the command line: traces (`workload`), the offline optimum, the study and the
placement benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollmux.cli.app import app, bench_app, err, fail, out, tables_to_stderr, to_stdout, workload_app, write_json
from rollmux.core.spec import JobSpec
from rollmux.core.trace_io import dump_jobs
from rollmux.errors import InputError

TRACES_HELP = "Trace folder (default: $ROLLMUX_TRACES, else the traces that ship in the package)."


@workload_app.command("philly")
def workload_philly(
    vc: str = typer.Option("0e4a51", "--vc", help="Philly virtual cluster id (arrivals/<vc>.csv)."),
    n_jobs: int = typer.Option(200, "--jobs", help="Number of jobs."),
    days: float = typer.Option(14.0, "--days", help="Length of the arrival window in days."),
    mode: str = typer.Option("catalog", "--mode", help="paper (Table-6 profile classes) or catalog (Qwen2.5 jobs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the JSONL trace."),
    traces: Optional[Path] = typer.Option(None, "--traces", help=TRACES_HELP),
) -> None:
    """Map real Philly arrivals and run times to RL post-training jobs."""
    from rollmux.workload import find_traces_dir, synthesize_philly
    try:
        if mode not in ("paper", "catalog"):
            raise InputError("--mode", f"unknown mode {mode!r}; choose paper or catalog")
        _write_trace(synthesize_philly(find_traces_dir(traces), vc, n_jobs, days, mode, seed), output)
    except InputError as exc:
        fail(exc)


@workload_app.command("paper-trace")
def workload_paper_trace(
    output: Path = typer.Option(..., "-o", "--out", help="Where to write the JSONL trace."),
    seed: int = typer.Option(0, "--seed", help="Seed of the SLO draws."),
    slo: tuple[float, float] = typer.Option((1.0, 2.0), "--slo", help="SLO range LO HI: each job's SLO ~ U(LO, HI)."),
    sigma: float = typer.Option(0.0, "--sigma", help="Rollout spread (lognormal sigma, capped by the model) of every "
                                "job; 0: every rollout takes its measured mean, as the authors' simulator runs it."),
    sync: str = typer.Option("model", "--sync", help="model: weight sync over the paper's 20 Gbit/s link; none: "
                             "the measured iteration is the whole iteration."),
    traces: Optional[Path] = typer.Option(None, "--traces", help=TRACES_HELP),
) -> None:
    """The paper's production trace (paper/wild.trace) with its measured profiles, as a JSONL trace."""
    from rollmux.workload import find_traces_dir
    from rollmux.workload.paper_trace import paper_trace_jobs
    try:
        _write_trace(paper_trace_jobs(find_traces_dir(traces) / "paper", seed, slo, sigma, sync), output)
    except InputError as exc:
        fail(exc)


def _write_trace(job_list: list[JobSpec], output: Path) -> None:
    """Write `job_list` as a JSONL trace and say so; InputError naming `output` if it cannot be written."""
    try:
        dump_jobs(job_list, output)
    except OSError as exc:
        raise InputError(str(output), f"cannot write ({exc.strerror})") from None
    out.print(f"wrote {len(job_list)} jobs to {output}")


@app.command()
def optimal(
    jobs: Path = typer.Option(..., "--jobs", help="Job set (JSONL); all jobs are placed at once."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result as JSON here (-: on stdout)."),
    max_group_size: int = typer.Option(5, "--max-group-size", min=1),
) -> None:
    """Offline optimum of a static job set vs RollMux and the busy-time bound ($/h)."""
    from rollmux.study.offline_optimum_cli import optimal_command
    try:
        with tables_to_stderr(json_out):
            doc = optimal_command(jobs, cluster, None if to_stdout(json_out) else json_out, max_group_size)
        if to_stdout(json_out):
            write_json(json_out, doc)
    except InputError as exc:
        fail(exc)


@app.command()
def study(
    quick: bool = typer.Option(False, "--quick", help="Small instances: under a minute."),
    out_dir: Path = typer.Option(Path("docs/study"), "--out", help="Where the markdown and PNGs go."),
    traces: Optional[Path] = typer.Option(None, "--traces", help=TRACES_HELP),
    address: Optional[str] = typer.Option(
        None, "--address", help="Run the simulations on this Ray cluster (default: a private local Ray)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, help="At most this many simulations at once (default: every CPU)."),
    serial: bool = typer.Option(False, "--serial", help="Run the simulations one by one in this process, no Ray."),
    sections: str = typer.Option("all", "--sections",
                                 help="Further sections after parts A-C: all, none, or names, comma-separated "
                                      "(migration, drift, link, residency, placements_why, mechanisms, capacity, baseline_sensitivity)."),
) -> None:
    """Regenerate the paper's scheduling study: tables and plots under --out."""
    from contextlib import ExitStack

    from rollmux.study.experiments import StudyConfig, pick_sections, run_study
    from rollmux.study.sweep import ray_session, serial_map
    from rollmux.workload import find_traces_dir
    try:
        if serial and (address or workers):
            raise InputError("--serial", "runs in this process: drop --address and --workers")
        traces = find_traces_dir(traces)  # fail on a bad folder before any work starts
        chosen = pick_sections(sections)
        sc = StudyConfig.quick() if quick else StudyConfig()
        with ExitStack() as stack:
            bar = stack.enter_context(Progress(TextColumn("{task.description:<40}"), BarColumn(),
                                               MofNCompleteColumn(), TimeElapsedColumn(), console=err))
            task = bar.add_task("study" if serial else f"starting Ray ({address or 'local'})", total=None)
            pmap = serial_map if serial else stack.enter_context(ray_session(address, workers))
            md = run_study(sc, out_dir, traces,
                           lambda what, done, total: bar.update(task, description=what, completed=done, total=total),
                           pmap=pmap, sections=chosen)
        out.print(f"wrote {md}")
    except InputError as exc:
        fail(exc)


@bench_app.command("placement")
def bench_placement(
    n_jobs: int = typer.Option(1000, "--jobs", min=1, help="Active jobs already placed."),
    probes: int = typer.Option(50, "--probes", min=1, help="Placement decisions timed."),
    seed: int = typer.Option(0, "--seed"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write {jobs, p50_ms, p99_ms} here (-: on stdout)."),
    nominal: bool = typer.Option(False, "--nominal",
                                 help="Algorithm 1: nominal shapes, worst-case admission, Δ pricing (default: "
                                      "the search simulate runs, co-located mode aside)."),
) -> None:
    """Latency of one RollMux placement decision with N active jobs."""
    from rollmux.study.placement_bench import placement_latency
    try:
        r = placement_latency(n_jobs, probes=probes, seed=seed, shipped=not nominal)
        with tables_to_stderr(json_out):
            out.print(f"{r['jobs']} active jobs in {r['groups']} groups: placement p50 {r['p50_ms']:.2f} ms, "
                      f"p99 {r['p99_ms']:.2f} ms over {probes} decisions")
        if json_out is not None:
            write_json(json_out, {k: r[k] for k in ("jobs", "p50_ms", "p99_ms")})
    except InputError as exc:
        fail(exc)
