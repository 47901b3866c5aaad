"""The `rollmux` command line (typer + rich).

Bad input of any kind exits with status 2 and one line naming the place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollmux.core.config import ConfigError, SchedulerConfig
from rollmux.core.trace_io import dump_jobs, load_cluster, load_jobs, parse_jobs
from rollmux.errors import InputError, has_extra, require_extra
from rollmux.sim.report import comparison_table
from rollmux.sim.runner import DEFAULT_POLICIES, compare

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
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)  # "[demo]" is text
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


# Each scheduler flag overrides one setting of the chosen profile (core/config.py); a flag
# left out keeps the profile's value. Shared by `simulate` and `serve`.
SETTING_OF_FLAG = {
    "--max-group-size": "placement.max_group_size",
    "--migration": "intra_group.migration",
    "--plan-quantile": "admission.quantile",
    "--plan": "admission.plan",
    "--plan-z": "admission.z",
    "--shrink": "regroup.shrink",
    "--regroup": "regroup.enabled",
    "--migration-scale": "regroup.migration_scale",
    "--regroup-margin": "regroup.margin",
    "--repair": "regroup.repair",
    "--consolidate": "regroup.consolidate",
    "--train-scaling": "shapes.train_scaling",
    "--elastic-rollout": "shapes.elastic_rollout",
    "--order": "intra_group.order",
    "--colocate": "colocation.enabled",
    "--colo-margin": "colocation.margin",
    "--colo-regroup": "colocation.regroup",
    "--colo-pair": "colocation.pair",
    "--colo-narrow": "colocation.narrow",
    "--colo-speed": "colocation.speed",
    "--compact": "compaction.enabled",
    "--stretch-pricing": "placement.pricing",
}
STATIC = {"regroup.shrink": False, "regroup.enabled": False, "regroup.repair": False, "compaction.enabled": False}
_PROFILE_HELP = "Named configuration: shipped (the default: the best measured), paper (the published system) or groups."


def scheduler_config(profile: str, flags: dict[str, object], static: bool = False,
                     sets: list[str] | None = None) -> SchedulerConfig:
    """The profile with every `--set SETTING=VALUE` and every given flag (`SETTING_OF_FLAG` name ->
    value, None: not given) as an override; InputError naming the flag of the first bad setting."""
    overrides: dict[str, object] = dict(STATIC) if static else {}
    for item in sets or ():
        setting, eq, value = item.partition("=")
        if not eq:
            raise InputError("--set", f"expected SETTING=VALUE, got {item!r}")
        try:
            overrides[setting.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise InputError("--set", f"{setting.strip()}: not a value: {value!r}") from None
    for flag, value in flags.items():
        if value is not None:
            setting = SETTING_OF_FLAG[flag]
            overrides[setting] = ({True: "stretch", False: "delta"}[value]
                                  if setting == "placement.pricing" else value)
    try:
        return SchedulerConfig.profile(profile).with_overrides(overrides)
    except ConfigError as exc:
        given = [f for f, setting in SETTING_OF_FLAG.items() if setting == exc.setting and flags.get(f) is not None]
        set_names = {item.partition("=")[0].strip() for item in sets or ()}
        where = ("--profile" if exc.setting == "profile" else f"{given[0]} ({exc.setting})" if given
                 else f"--set {exc.setting}" if exc.setting in set_names else exc.setting)
        raise InputError(where, exc.message) from None


def _flag(default_help: str) -> str:
    return f"{default_help} [default: the profile's]"


@app.command()
def simulate(
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Job trace (JSONL); default: the embedded 200-job Philly-driven trace."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML); default: the paper's H20/H800 cluster."),
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="rollmux, solo-d, verl, random, greedy, gavel (repeatable)."),
    profile: str = typer.Option("shipped", "--profile", help=_PROFILE_HELP),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="SETTING=VALUE overriding one setting of the profile, "
                                                                "e.g. colocation.pair=false (repeatable; core/config.py)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    max_group_size: Optional[int] = typer.Option(None, "--max-group-size", min=1, help=_flag("Most jobs per co-execution group.")),
    migration: Optional[bool] = typer.Option(None, "--migration/--no-migration", help=_flag("Long-tail migration at run time.")),
    plan_quantile: Optional[float] = typer.Option(None, "--plan-quantile", min=0.5, max=1.0,
                                                  help=_flag("Rollout quantile used for SLO admission with --plan worst; 1.0 = worst case.")),
    plan: Optional[str] = typer.Option(None, "--plan",
                                       help=_flag("SLO admission: worst (every rollout at its cap) or mean (each member's mean "
                                                  "iteration time within its SLO with confidence, core/placement/admission.py).")),
    plan_z: Optional[float] = typer.Option(None, "--plan-z", min=0.0,
                                           help=_flag("--plan mean: one-sided normal quantile of the confidence term (3.09 ~ 99.9%).")),
    skip_unplaceable: bool = typer.Option(False, "--skip-unplaceable", help="Drop jobs no node can hold, with a warning."),
    shrink: Optional[bool] = typer.Option(None, "--shrink/--no-shrink", help=_flag("Release nodes a group no longer needs when members leave.")),
    regroup: Optional[bool] = typer.Option(None, "--regroup/--no-regroup",
                                           help=_flag("Dissolve a group whose remaining members fit elsewhere for less.")),
    migration_scale: Optional[float] = typer.Option(None, "--migration-scale", min=0.0,
                                                    help=_flag("Stretch every migration's time (state moved + cold start); 1 = calibrated.")),
    regroup_margin: Optional[float] = typer.Option(None, "--regroup-margin", min=0.0,
                                                   help=_flag("A regroup must save this many times what its migrations cost.")),
    repair: Optional[bool] = typer.Option(None, "--repair/--no-repair",
                                          help=_flag("Re-plan groups from measured phase times; move members a drifted group cannot keep.")),
    flat_sync: bool = typer.Option(False, "--flat-sync", help="Weight sync sends one copy per rollout node over the inter-pool link."),
    consolidate: Optional[int] = typer.Option(None, "--consolidate", min=0,
                                              help=_flag("On any departure, also try to dissolve groups of at most N members.")),
    static: bool = typer.Option(False, "--static", help="The paper's static groups: same as --no-shrink --no-regroup "
                                                       "--no-repair --no-compact."),
    train_scaling: Optional[bool] = typer.Option(None, "--train-scaling/--no-train-scaling",
                                                 help=_flag("A job may join a group by adding the training nodes it lacks (core/placement/options/train_scaling.py).")),
    elastic_rollout: Optional[bool] = typer.Option(None, "--elastic-rollout/--no-elastic-rollout",
                                                   help=_flag("A job may roll out on fewer or more rollout nodes than nominal (core/elastic.py).")),
    order: Optional[str] = typer.Option(None, "--order",
                                        help=_flag("Order inside a group: rr (round robin) or slo (a tight member may run "
                                                   "more often per meta-iteration, core/slo_order.py).")),
    colocate: Optional[bool] = typer.Option(None, "--colocate/--no-colocate",
                                            help=_flag("An arrival may run co-located on training nodes (veRL mode) when that is "
                                                       "cheaper at its SLO (core/placement/options/colocated.py).")),
    colo_margin: Optional[float] = typer.Option(None, "--colo-margin", min=0.0,
                                                help=_flag("Co-located only when below this share of the disaggregated "
                                                           "cost (unset: 1 with --colo-pair, 0.75 without; core/placement/options/colocated.py).")),
    colo_regroup: Optional[bool] = typer.Option(None, "--colo-regroup/--no-colo-regroup",
                                                help=_flag("A co-located job may later move into a group (a priced migration) when "
                                                           "that costs less per iteration (core/repair/regroup.py).")),
    colo_pair: Optional[bool] = typer.Option(None, "--colo-pair/--no-colo-pair",
                                             help=_flag("An arrival that would run co-located may found a group with a co-located "
                                                        "job, which migrates into it (priced), when that saves more (core/repair/pairing.py).")),
    colo_narrow: Optional[bool] = typer.Option(None, "--colo-narrow/--no-colo-narrow",
                                               help=_flag("With --elastic-rollout, a co-located job with more rollout than training "
                                                          "GPUs may run on its training GPUs' nodes, its rollout narrowed "
                                                          "(core/colo_model.py).")),
    colo_speed: Optional[float] = typer.Option(None, "--colo-speed",
                                               help=_flag("Co-located phases run this many times as fast as calibrated (sensitivity).")),
    compact: Optional[bool] = typer.Option(None, "--compact/--no-compact",
                                           help=_flag("A group gives back an idle rollout node when the members pinned there can "
                                                      "narrow onto their other nodes within their SLOs (core/repair/compaction.py).")),
    stretch_pricing: Optional[bool] = typer.Option(None, "--stretch-pricing/--no-stretch-pricing",
                                                   help=_flag("Place each job where it adds least per iteration, the members' stretch "
                                                              "included (core/placement/pricing.py); off: the first valid option in Δ order.")),
) -> None:
    """Simulate policies on a trace and compare cost, SLO attainment and utilization."""
    try:
        cfg = scheduler_config(profile, {
            "--max-group-size": max_group_size, "--migration": migration, "--plan-quantile": plan_quantile,
            "--plan": plan, "--plan-z": plan_z, "--shrink": shrink, "--regroup": regroup,
            "--migration-scale": migration_scale, "--regroup-margin": regroup_margin, "--repair": repair,
            "--consolidate": consolidate, "--train-scaling": train_scaling, "--elastic-rollout": elastic_rollout,
            "--order": order, "--colocate": colocate, "--colo-margin": colo_margin, "--colo-regroup": colo_regroup,
            "--colo-pair": colo_pair, "--colo-narrow": colo_narrow, "--colo-speed": colo_speed,
            "--compact": compact, "--stretch-pricing": stretch_pricing}, static, sets)
        trace = load_jobs(jobs)
        spec, warnings = load_cluster(cluster)
        for w in trace.warnings + warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
        job_list = _drop_unplaceable(trace.jobs, spec, skip_unplaceable)
        names = list(dict.fromkeys(policy or DEFAULT_POLICIES))
        with Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=False) as bar:
            def progress_for(name: str):
                task = bar.add_task(name, total=len(job_list))
                return lambda done, total: bar.update(task, completed=done)
            result = compare(job_list, spec, names, cfg, progress_for, seed=seed, flat_sync=flat_sync)
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
        _fail(exc)


DEFAULT_URL = "http://127.0.0.1:8470"


@app.command()
def serve(
    listen: str = typer.Option("127.0.0.1:8470", "--listen", help="HOST:PORT to serve the HTTP API on."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML; default: the embedded one)."),
    store: str = typer.Option("rollmux-journal.db", "--store",
                              help="Journal: a SQLite file path, or redis://host:port/db[?prefix=name]."),
    admin_token_file: Path = typer.Option(Path("rollmux-admin.token"), "--admin-token-file",
                                          help="The admin token (created with mode 0600 if missing)."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
    heartbeat_timeout: float = typer.Option(30.0, "--heartbeat-timeout", min=0.1,
                                            help="Fail a job silent for this many seconds."),
    lease_min: float = typer.Option(60.0, "--lease-min", min=0.1,
                                    help="Shortest phase lease (s); a lease is 2x the declared worst case."),
    watch_ray: Optional[str] = typer.Option(None, "--watch-ray",
                                            help="Ray cluster whose dead nodes re-admit the jobs on them."),
    wait_store: float = typer.Option(0.0, "--wait-store", min=0.0,
                                     help="Wait this long for a store another server holds (a Redis writer "
                                          "lease of a killed server lapses after 10 s)."),
    profile: str = typer.Option("shipped", "--profile", help=_PROFILE_HELP + " A new store only."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="SETTING=VALUE overriding one setting of the profile, "
                                                                "e.g. colocation.pair=false (repeatable; core/config.py)."),
    repair: Optional[bool] = typer.Option(None, "--repair/--no-repair",
                                          help=_flag("Re-plan a group from its jobs' measured phase times and move members "
                                                     "it cannot keep (the simulator's drift repair).")),
    colocate: Optional[bool] = typer.Option(None, "--colocate/--no-colocate",
                                            help=_flag("A job may be placed co-located (veRL mode) when that is cheaper at its "
                                                       "SLO: its rollout permits then name pool 'train' and its training nodes, "
                                                       "and the job must run its rollout there.")),
    colo_pair: Optional[bool] = typer.Option(None, "--colo-pair/--no-colo-pair",
                                             help=_flag("With --colocate, an arrival may found a group with a co-located job, "
                                                        "which then migrates into it at its next iteration boundary "
                                                        "(core/repair/pairing.py).")),
    elastic_rollout: Optional[bool] = typer.Option(None, "--elastic-rollout/--no-elastic-rollout",
                                                   help=_flag("A job may be placed on more or fewer rollout nodes than it "
                                                              "declares, and groups give back rollout nodes their members can "
                                                              "spare (compaction): its rollout permits name the nodes it has "
                                                              "now, and the job must roll out on exactly those.")),
) -> None:
    """Serve the scheduler's authenticated HTTP API until SIGINT/SIGTERM.

    With a journal that already has records, the service recovers from it (the cluster
    file must then match the journal's, or be omitted)."""
    import logging

    from rollmux.live.journal import JournalError
    from rollmux.live.refusals import ServiceError
    from rollmux.live.server import admin_token, parse_listen
    from rollmux.live.server import serve as run_server
    from rollmux.live.service import SchedulerCore, live_refusal
    from rollmux.live.telemetry import Telemetry
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        where = parse_listen(listen)
        if (tls_cert is None) != (tls_key is None):
            raise InputError("--tls-cert/--tls-key", "give both or neither")
        # A new store's settings (a journal's own config wins on recovery).
        cfg = scheduler_config(profile, {"--repair": repair, "--colocate": colocate, "--colo-pair": colo_pair,
                                         "--elastic-rollout": elastic_rollout}, sets=sets)
        if colo_pair and not cfg.colocation.enabled:
            raise InputError("--colo-pair", "pairs co-located jobs: it needs --colocate (colocation.enabled)")
        refusal = live_refusal(cfg)
        if refusal is not None:
            raise InputError(f"--profile {profile}", refusal)
        token = admin_token(admin_token_file)
        journal = _open_store(store, wait_store)
        try:
            recovering = bool(journal.records())
            spec, warnings = load_cluster(cluster)
            for w in warnings:
                err.print(f"[yellow]warning:[/] {w}", highlight=False)
            holder: dict = {}
            telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
            core = SchedulerCore(None if recovering and cluster is None else spec.model_dump(), cfg=cfg,
                                 store=journal, heartbeat_timeout_s=heartbeat_timeout, admin_token=token,
                                 lease_min_s=lease_min, telemetry=telemetry, watch_ray_nodes=False)
            holder["core"] = core
        except (JournalError, ServiceError) as exc:
            journal.close()
            raise InputError("--store", str(exc)) from None
        if watch_ray:
            import ray
            ray.init(address=watch_ray, log_to_driver=False)
            core.watch_ray_nodes()
        scheme = "https" if tls_cert else "http"
        out.print(f"rollmux scheduler on {scheme}://{listen}; journal {journal.url} "
                  f"({core.recovered_records} records recovered); admin token in {admin_token_file}; "
                  "SIGINT/SIGTERM stops it", highlight=False)
        run_server(core, where, telemetry, tls_cert, tls_key)
    except InputError as exc:
        _fail(exc)


def _open_store(store: str, wait_s: float):
    """The journal store, waiting up to `wait_s` while another writer still holds it."""
    import time

    from rollmux.live.journal import JournalError, open_store
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return open_store(store)
        except JournalError as exc:
            if "in use" not in str(exc) or time.monotonic() >= deadline:
                raise InputError("--store", str(exc)) from None
        time.sleep(0.5)  # the holder's lease lapses on its own; nothing to wait on but time


def _admin_client(url: str, admin_token_file: Path):
    from rollmux.live.client import HttpPermitClient
    from rollmux.live.server import admin_token
    return HttpPermitClient(url, admin_token=admin_token(admin_token_file), retry_for_s=5.0)


_URL = typer.Option(DEFAULT_URL, "--url", help="The scheduler's HTTP API.")
_TOKEN_FILE = typer.Option(Path("rollmux-admin.token"), "--admin-token-file", help="The admin token.")


def _api_call(fn, what: str):
    """Run an API call; a refusal or an unreachable server is one line and exit 2."""
    from rollmux.live.refusals import ServiceError
    try:
        return fn()
    except ServiceError as exc:
        raise InputError(what, str(exc)) from None


@app.command()
def submit(
    job_file: Path = typer.Argument(..., help="Job profile (YAML or JSON, the trace's fields)."),
    url: str = _URL,
    admin_token_file: Path = _TOKEN_FILE,
) -> None:
    """Submit one job to the running scheduler; prints where it was placed and the job's token."""
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
        client = _admin_client(url, admin_token_file)
        placed = _api_call(lambda: client.submit(record), str(job_file))
        # The token is the job's credential for every later call: print it once, keep it secret.
        out.print_json(json.dumps(placed))
    except InputError as exc:
        _fail(exc)


@app.command()
def profile(
    job_module: str = typer.Argument(..., help="Python module with a make_job(preset, **options) entry point, "
                                               "e.g. rollmux.jobs.grpo (installed, or in the working directory)."),
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
) -> None:
    """Measure a job's profile by running its own phases through the shim; write a record `submit` accepts."""
    from rollmux.live.profile import ProfileOptions, profile_command
    try:
        name = job_id if job_id is not None else job_module.rsplit(".", 1)[-1] + (f"-{preset}" if preset else "")
        opts = ProfileOptions(job_id=name, slo=slo, iterations=100 if iterations is None and duration is None
                              else iterations, duration_s=duration, rollout_gpus=rollout_gpus,
                              train_gpus=train_gpus, tail_frac=tail_frac, runs=runs, warmup=warmup)
        profile_command(job_module, preset, sets or [], output, opts, say=lambda line: err.print(line, highlight=False))
        out.print(f"wrote {output}", highlight=False)
    except InputError as exc:
        _fail(exc)


@app.command()
def cancel(job_id: str = typer.Argument(..., help="The job to cancel."), url: str = _URL,
           admin_token_file: Path = _TOKEN_FILE) -> None:
    """Cancel a job: its permits are reclaimed and its group goes on."""
    try:
        client = _admin_client(url, admin_token_file)
        _api_call(lambda: client.cancel(job_id), job_id)
        out.print(f"cancelled {job_id}")
    except InputError as exc:
        _fail(exc)


@app.command()
def status(url: str = _URL, admin_token_file: Path = _TOKEN_FILE,
           as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON.")) -> None:
    """Groups, members, whose turn it is on each node, and iteration times vs SLO."""
    from rollmux.live.status_view import groups_table, jobs_table, summary_line
    try:
        client = _admin_client(url, admin_token_file)
        st = _api_call(client.status, url)
        if as_json:
            out.print_json(json.dumps(st))
            return
        out.print(groups_table(st))
        out.print(jobs_table(st))
        out.print(summary_line(st))
        page = st["page"]
        if page["jobs_total"] > len(st["jobs"]) or page["groups_total"] > len(st["groups"]):
            out.print(f"showing {len(st['groups'])} of {page['groups_total']} groups and {len(st['jobs'])} of "
                      f"{page['jobs_total']} jobs (--json and GET /v1/status?offset=&limit= page through all)")
    except InputError as exc:
        _fail(exc)


journal_app = typer.Typer(help="Check or repair a journal store.", no_args_is_help=True)
app.add_typer(journal_app, name="journal")


@journal_app.command("check")
def journal_check(store: str = typer.Argument(..., help="A SQLite file path or redis://... URL.")) -> None:
    """Read every record; one line on the first bad one (exit 1), else a summary."""
    from rollmux.live.journal import JournalError
    from rollmux.live.journal_repair import check_store
    try:
        report = check_store(store)
    except JournalError as exc:
        _fail(InputError("journal", str(exc)))
    if report.ok:
        out.print(f"{report.url}: {report.records} records, snapshot at "
                  f"{report.snapshot_seq if report.snapshot_seq is not None else '-'}: ok", highlight=False)
        return
    err.print(f"{report.url}: {report.first_bad}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@journal_app.command("repair")
def journal_repair(store: str = typer.Argument(..., help="A SQLite file path or redis://... URL.")) -> None:
    """Back the journal up, then truncate it after its last good record."""
    from rollmux.live.journal import JournalError
    from rollmux.live.journal_repair import repair_store
    try:
        report = repair_store(store)
    except JournalError as exc:
        _fail(InputError("journal", str(exc)))
    out.print(f"kept {report.kept} records, dropped {report.dropped}; backup {report.backup}", highlight=False)


@app.command()
def demo(
    iterations: int = typer.Option(20, "--iterations", min=1, help="GRPO iterations per job."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    png: Path = typer.Option(Path("demo_timeline.png"), "--png", help="Timeline picture of phases on nodes."),
    trl: Optional[bool] = typer.Option(None, "--trl/--no-trl",
                                       help="Add a TRL GRPOTrainer job (rollmux.adapters.trl). Default: "
                                            "added when the trl extra is installed; --trl requires it."),
) -> None:
    """Emulated Ray cluster: three real GRPO jobs and a TRL job (with the trl extra) multiplexed, then solo."""
    try:
        require_extra("demo", "demo")  # the jobs are torch models: say so before Ray starts
        if trl:
            require_extra("demo --trl", "trl")
        elif trl is None:
            trl = has_extra("trl")
            if not trl:
                err.print("note: the TRL job is left out: pip install 'rollmux\\[trl]' adds it", highlight=False)
        from rollmux.live.demo import run_demo
        result = run_demo(iterations=iterations, json_out=json_out, png_out=png, trl=trl)
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
    waiting: int = typer.Option(10_000, "--waiting", min=1,
                                help="Outstanding long-poll acquires in the waiting-jobs scenario."),
) -> None:
    """Fault injection against a live local scheduler (`rollmux serve`): server and job kills, double
    release, forged tokens, route auth, journal failures, a hung job, a second server, a torn journal,
    many jobs, many waiting jobs; exits 1 if any scenario fails."""
    from rollmux.live.chaos import print_report, run_chaos
    try:
        report = run_chaos(seconds=seconds, jobs=jobs, store=store, waiting=waiting,
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
    nominal: bool = typer.Option(False, "--nominal",
                                 help="Algorithm 1: nominal shapes, worst-case admission, Δ pricing (default: "
                                      "the search simulate runs, co-located mode aside)."),
) -> None:
    """Latency of one RollMux placement decision with N active jobs."""
    from rollmux.study.placement_bench import placement_latency
    try:
        r = placement_latency(n_jobs, probes=probes, seed=seed, shipped=not nominal)
        out.print(f"{r['jobs']} active jobs in {r['groups']} groups: placement p50 {r['p50_ms']:.2f} ms, "
                  f"p99 {r['p99_ms']:.2f} ms over {probes} decisions")
        if json_out is not None:
            _write_json(json_out, {k: r[k] for k in ("jobs", "p50_ms", "p99_ms")})
    except InputError as exc:
        _fail(exc)


@bench_app.command("sync")
def bench_sync(
    train_ranks: int = typer.Option(4, "--train-ranks", help="Training ranks (N), in the training namespace."),
    rollout_ranks: int = typer.Option(4, "--rollout-ranks", help="Rollout ranks (M), in the rollout namespace."),
    model_mb: float = typer.Option(64.0, "--model-mb", help="Size of the synced weights, MiB."),
    link_mbit: float = typer.Option(400.0, "--link-mbit", help="Rate of the inter-pool link, Mbit/s each way."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write {train_ranks, ..., speedup, identical} here."),
) -> None:
    """Flat vs topology-aware weight sync over a real throttled link (two network namespaces; needs root)."""
    from rich.table import Table

    from rollmux.weightsync.bench import BenchConfig, run_sync_bench
    from rollmux.weightsync.testbed import TestbedUnavailable
    try:
        require_extra("bench sync", "demo")  # its ranks (subprocesses) sync torch tensors
    except InputError as exc:
        _fail(exc)
    try:
        cfg = BenchConfig(train_ranks, rollout_ranks, model_mb, link_mbit)
        doc = run_sync_bench(cfg)
    except TestbedUnavailable as exc:
        err.print(f"bench sync: cannot build the testbed: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    table = Table(title=f"weight sync, {train_ranks} -> {rollout_ranks} ranks, {model_mb:g} MiB over "
                        f"{link_mbit:g} Mbit/s")
    for col in ("strategy", "seconds", "MiB over the link"):
        table.add_column(col, justify="right")
    for strategy in ("flat", "topology"):
        table.add_row(strategy, f"{doc[f'{strategy}_s']:.2f}", f"{doc[f'{strategy}_link_mb']:.1f}")
    out.print(table)
    out.print(f"speedup {doc['speedup']:.2f}x, weights identical: {doc['identical']}", highlight=False)
    try:
        if json_out is not None:
            _write_json(json_out, doc)
    except InputError as exc:
        _fail(exc)
    if not doc["identical"]:
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the `rollmux` script."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
