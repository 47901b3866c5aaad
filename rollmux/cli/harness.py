"""The harness side of the command line: the profiler, the demo, the chaos harness and the
weight-sync benchmark (rollmux.harness, rollmux.weightsync; the torch-backed ones need an extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rollmux.cli.app import app, bench_app, err, fail, out, report_and_exit, tables_to_stderr, to_stdout
from rollmux.errors import InputError, require_extra


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    ctx: typer.Context,
    job_module: str = typer.Argument(..., help="Python module with a make_job(preset, **options) entry point, "
                                               "e.g. rollmux.jobs.grpo (installed, or in the working directory); "
                                               "with --run, the command to run (after --)."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the job record (YAML, or JSON for .json)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Passed to make_job (e.g. small, medium, large)."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="KEY=VALUE passed to make_job (repeatable)."),
    job_id: Optional[str] = typer.Option(None, "--job-id", help="The record's job id (default: module-preset)."),
    slo: float = typer.Option(2.0, "--slo", help="Slowdown the job accepts over solo (>= 1)."),
    iterations: Optional[int] = typer.Option(None, "--iterations", help="The job's work in iterations (default 100)."),
    duration: Optional[float] = typer.Option(None, "--duration", help="...or in seconds run solo."),
    rollout_gpus: int = typer.Option(8, "--rollout-gpus", help="GPUs of its rollout workers."),
    train_gpus: int = typer.Option(8, "--train-gpus", help="GPUs of its trainer."),
    tail_frac: float = typer.Option(0.0, "--tail-frac", help="Share of rollout time in the long tail [0, 1)."),
    runs: int = typer.Option(5, "--runs", help="Measured iterations (plus one at maximum response length)."),
    warmup: int = typer.Option(1, "--warmup", help="Unrecorded iterations first."),
    colocated: bool = typer.Option(False, "--colocated",
                                   help="Then run it co-located (veRL mode: every phase on its training side, "
                                        "offload/onload between them) and record the mean phase times, "
                                        "switches excluded, as `colocated`."),
    run: bool = typer.Option(False, "--run", help="Profile a program instead (e.g. a script on the TRL or veRL "
                                                  "adapter): `rollmux profile --run -o job.yaml -- python train.py` "
                                                  "runs it under a private scheduler that measures its iterations."),
) -> None:
    """Measure a job's profile by running its own phases through the shim; write a record `submit` accepts."""
    from rollmux.harness.profile import ProfileOptions, profile_command
    try:
        if run and (preset or sets or colocated):
            raise InputError("--run", "a program is profiled as it runs: --preset, --set and --colocated are "
                                      "for a make_job module")
        if not run and ctx.args:
            raise InputError("JOB_MODULE", f"one module, not {[job_module, *ctx.args]}: to profile a command, "
                                           "give --run and the command after --")
        name = job_id if job_id is not None else (
            Path(ctx.args[0] if ctx.args else job_module).stem if run
            else job_module.rsplit(".", 1)[-1] + (f"-{preset}" if preset else ""))
        opts = ProfileOptions(job_id=name, slo=slo, iterations=100 if iterations is None and duration is None
                              else iterations, duration_s=duration, rollout_gpus=rollout_gpus,
                              train_gpus=train_gpus, tail_frac=tail_frac, runs=runs, warmup=warmup,
                              colocated=colocated)
        say = lambda line: err.print(line, highlight=False)  # noqa: E731
        if run:
            from rollmux.harness.profile_run import profile_entrypoint
            profile_entrypoint([job_module, *ctx.args], opts, output, say)
        else:
            profile_command(job_module, preset, sets or [], output, opts, say=say)
        out.print(f"wrote {output}", highlight=False)
    except InputError as exc:
        fail(exc)


# Fewer and every job may end before two of them shared a group long enough to lose a node
# (harness/demo_launch.py GROUP_ITERATIONS): the run fails after minutes. 10 was run to the end.
DEMO_MIN_ITERATIONS = 10


@app.command()
def demo(
    iterations: int = typer.Option(20, "--iterations", min=DEMO_MIN_ITERATIONS,
                                   help="GRPO iterations per job (at least 10: two jobs must share a group for "
                                        "3 iterations, lose a node, and still have iterations to run)."),
    json_out: Optional[Path] = typer.Option(None, "--json",
                                            help="Write the results as JSON here (else, or -: stdout)."),
    png: Optional[Path] = typer.Option(None, "--png", help="Draw the timeline of phases on nodes here (else: none)."),
) -> None:
    """A multi-node Ray cluster on this host, `rollmux serve --ray` on it, three real GRPO jobs launched
    with `rollmux run` (one node killed mid-run), then the same jobs solo. Progress, a line per job and
    iteration, goes to stderr."""
    try:
        require_extra("demo", "demo")  # the jobs are torch models: say so before Ray starts
        from rollmux.harness.demo import run_demo
        result = run_demo(iterations=iterations, json_out=None if to_stdout(json_out) else json_out, png_out=png)
        if json_out is None or to_stdout(json_out):
            out.print_json(json.dumps(result))
    except InputError as exc:
        fail(exc)
    except RuntimeError as exc:  # a job, the service or the cluster failed: what, and where its log ends
        err.print(f"error: rollmux demo: {exc}", highlight=False, markup=False)
        raise typer.Exit(1) from None


@app.command()
def chaos(
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here (-: on stdout)."),
    seconds: float = typer.Option(60.0, "--seconds", min=1.0, help="Length of the many-jobs load scenario."),
    jobs: int = typer.Option(100, "--jobs", min=1, help="Synthetic jobs in the load scenario."),
    store: Optional[str] = typer.Option(None, "--store",
                                        help="Journal (a new SQLite file or redis://...); default: a temp SQLite file."),
    waiting: int = typer.Option(10_000, "--waiting", min=1,
                                help="Outstanding long-poll acquires in the waiting-jobs scenario."),
) -> None:
    """Fault injection against a live local scheduler (`rollmux serve`): server and job kills, double
    release, forged tokens, route auth, journal failures, a hung job, a second server, a torn journal,
    huge-header floods, an idle group member, poisoned timings, a failed append, damaged journal pages,
    many jobs, many waiting jobs; exits 1 if any scenario fails."""
    from rollmux.harness.chaos.command import print_report, run_chaos
    try:
        report = run_chaos(seconds=seconds, jobs=jobs, store=store, waiting=waiting,
                           say=lambda line: err.print(line, highlight=False))
        with tables_to_stderr(json_out):
            print_report(report, out)
    except InputError as exc:
        fail(exc)
    report_and_exit(report, json_out, report["passed"])


@bench_app.command("sync")
def bench_sync(
    train_ranks: int = typer.Option(4, "--train-ranks", help="Training ranks (N), in the training namespace."),
    rollout_ranks: int = typer.Option(4, "--rollout-ranks", help="Rollout ranks (M), in the rollout namespace."),
    model_mb: float = typer.Option(64.0, "--model-mb", help="Size of the synced weights, MiB."),
    link_mbit: float = typer.Option(400.0, "--link-mbit", help="Rate of the inter-pool link, Mbit/s each way."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write {train_ranks, ..., speedup, identical} here "
                                                                 "(-: on stdout)."),
) -> None:
    """Flat vs topology-aware weight sync over a real throttled link (two network namespaces; needs root)."""
    from rich.table import Table

    from rollmux.weightsync.bench import BenchConfig, run_sync_bench
    from rollmux.weightsync.testbed import TestbedUnavailable
    try:
        require_extra("bench sync", "demo")  # its ranks (subprocesses) sync torch tensors
    except InputError as exc:
        fail(exc)
    try:
        cfg = BenchConfig(train_ranks, rollout_ranks, model_mb, link_mbit)
        doc = run_sync_bench(cfg)
    except TestbedUnavailable as exc:
        err.print(f"bench sync: cannot build the testbed: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    table = Table(title=f"weight sync, {train_ranks} -> {rollout_ranks} ranks, {model_mb:g} MiB over "
                        f"{link_mbit:g} Mbit/s")
    for col in ("strategy", "seconds", "MiB over the link"):
        table.add_column(col, justify="right")
    for strategy in ("flat", "topology"):
        table.add_row(strategy, f"{doc[f'{strategy}_s']:.2f}", f"{doc[f'{strategy}_link_mb']:.1f}")
    with tables_to_stderr(json_out):
        out.print(table)
        out.print(f"speedup {doc['speedup']:.2f}x, weights identical: {doc['identical']}", highlight=False)
    report_and_exit(doc, json_out, doc["identical"])
