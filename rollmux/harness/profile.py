"""`rollmux profile`: a job's profile measured by running its own phases (DESIGN §8, closed loop).

A user no longer hand-writes the twelve fields of a job record: the profiler runs
the job standalone, through the same shim the job uses under the scheduler (a
local permit client on a one-member group, no service), and writes the record.

**How a job module exposes itself.** The module (e.g. ``rollmux.jobs.grpo``) defines

    def make_job(preset: str | None = None, **options) -> job

where ``preset`` and ``options`` come from ``--preset`` and ``--set KEY=VALUE``
(bad ones: raise ValueError or TypeError, the message names the problem), and the
job is a `rollmux.shim.Job`, the same object a job hands the shim under the scheduler
(`JobShim(job_id, client, job=obj)`, `rollmux.init(job=obj)`):

    rollout(max_length: bool) -> batch   one rollout; max_length: every response runs
                                         to the job's maximum response length
    train(batch) -> Any                  one training step on that batch
    sync() -> Any                        push the trainer's weights to the rollout side
    onload(pool) / offload(pool)         pool "rollout" or "train": live state from / to
                                         host memory (the shim's hooks)
    host_bytes() -> {pool: int}          bytes its offloaded state holds in host memory,
                                         per node of each pool (`rollmux.shim.tensor_bytes` helps)
    init() (optional)                    builds its state, inside the init phase

**What is measured.** The init phase first (not timed: it runs once per placement, and
its offload leaves the job holding nothing, as under the scheduler), then `warmup`
unrecorded iterations, then `runs` iterations, then
one at maximum response length. Rollout median and sigma come from the runs (sigma:
the standard deviation of log rollout times), the maximum from the max-length
iteration (or a slower run); training is the runs' median (the training time at the
median rollout, as the record defines it); sync likewise. Host memory is the most
the shim read from `host_bytes` after an offload: the bytes of the tensors the job
keeps in host memory. That, not the process's RSS, because RSS also counts the live
(onloaded) side, the allocator's cache and everything else in the process, and
cannot tell the rollout pool's share from the training pool's.

**Co-located** (``colocated=True``, ``--colocated``). After the disaggregated runs, the job
runs `warmup` + `runs` more iterations the veRL way: a one-member co-located placement
(`colocated_group`) served by the co-located permit controller, so the rollout's permit,
like training's, names the training nodes, and the shim offloads one phase's state and
onloads the other's between them. The record then carries ``colocated: {rollout_s,
train_s}``, the runs' *means* (what `JobSpec.colocated` holds). Only the phases' own run
times count: the onload/offload switches are left out, because the simulator and the
co-located model add them per iteration themselves.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from rollmux.core.colo_controller import ColocatedController
from rollmux.core.colo_model import colocated_group
from rollmux.core.config import SchedulerConfig
from rollmux.core.env import WallClockEnvironment
from rollmux.core.estimates import fitted_phases
from rollmux.core.group import isolated_group
from rollmux.core.group_controller import GroupController
from rollmux.core.spec import JobSpec, default_cluster
from rollmux.errors import InputError, MissingExtra, extra_for, pydantic_reason
from rollmux.shim import Job, JobShim, LocalPermitClient, run_init, run_iteration, tensor_bytes  # noqa: F401

ENTRY_POINT = "make_job"
METHODS = ("rollout", "train", "sync", "onload", "offload", "host_bytes")  # a Job's required methods
GB = 1e9  # host_gb is in GB (10^9 bytes)
# The profiler times one job alone on its own nodes, with no switch cost between its phases.
SOLO = SchedulerConfig().intra_for(default_cluster().model_copy(update={"warm_switch_s": 0.0}))


@dataclass(frozen=True)
class ProfileOptions:
    """What the user passes: the job's identity, SLO, length and GPUs, and how long to measure."""

    job_id: str
    slo: float = 2.0
    iterations: int | None = 100     # the job's work in iterations (or duration_s)
    duration_s: float | None = None
    rollout_gpus: int = 8
    train_gpus: int = 8
    tail_frac: float = 0.0
    runs: int = 5                    # measured iterations (plus one at maximum response length)
    warmup: int = 1                  # unrecorded iterations first (lazy initialisation, caches)
    colocated: bool = False          # also measure the job co-located (veRL mode) afterwards


@dataclass
class Measured:
    """Seconds of each measured phase, and the host memory the shim read."""

    rollout: list[float] = field(default_factory=list)
    train: list[float] = field(default_factory=list)
    sync: list[float] = field(default_factory=list)
    max_rollout: float = 0.0
    host_bytes: dict[str, int] = field(default_factory=dict)


def load_job(module: str, preset: str | None, options: dict[str, Any]) -> Job:
    """Import `module`, call its `make_job(preset, **options)`; InputError naming what is wrong."""
    if os.getcwd() not in sys.path:  # as `python -m` does: a job module in the working directory imports
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        extra = extra_for(exc)
        if extra is not None:  # the job needs an optional extra (torch for the demo jobs): name it
            raise MissingExtra(f"profile {module}", extra) from None
        raise InputError("JOB_MODULE", f"cannot import {module!r} ({exc})") from None
    except ImportError as exc:
        raise InputError("JOB_MODULE", f"cannot import {module!r} ({exc})") from None
    make = getattr(mod, ENTRY_POINT, None)
    if not callable(make):
        raise InputError("JOB_MODULE", f"{module!r} has no {ENTRY_POINT}(preset, **options) entry point")
    try:
        job = make(preset, **options)
    except (ValueError, TypeError) as exc:
        raise InputError("--preset/--set", f"{module}.{ENTRY_POINT} refused them: {exc}") from None
    missing = [m for m in METHODS if not callable(getattr(job, m, None))]
    if missing:
        raise InputError("JOB_MODULE", f"the job {module}.{ENTRY_POINT} made lacks {', '.join(missing)}")
    return job


def _solo_shim(job: Job, job_id: str, env: WallClockEnvironment, colocated: bool) -> JobShim:
    """The job's shim on its own one-member placement: disaggregated (its own rollout and
    training nodes) or co-located (every phase on its training nodes, the live plane's controller)."""
    placeholder = JobSpec(job_id=job_id, arrival_s=0.0, duration_s=1.0, slo=1.0, rollout_gpus=1, train_gpus=1,
                          rollout_s={"median": 1.0, "sigma": 0.0, "max": 1.0}, train_s=1.0, sync_s=0.0,
                          host_gb={"rollout": 0.0, "train": 0.0})
    cluster = default_cluster()
    if colocated:
        ctl: GroupController | ColocatedController = ColocatedController(
            env, colocated_group(0, placeholder, cluster, planned_s=1.0), SOLO)
    else:
        ctl = GroupController(env, isolated_group(0, placeholder, cluster), SOLO)
    return JobShim(job_id, LocalPermitClient(env, {job_id: ctl}), job=job)


def measure(job: Job, job_id: str, runs: int, warmup: int, say: Callable[[str], None] = lambda s: None,
            colocated: bool = False) -> Measured:
    """Run the job's phases standalone through the shim; what they cost. Co-located: no
    maximum-length iteration (the record keeps the co-located means only)."""
    env = WallClockEnvironment()
    shim = _solo_shim(job, job_id, env, colocated)
    thread = threading.Thread(target=env.serve, name="rollmux-profile", daemon=True)
    thread.start()
    out = Measured()
    kind = "co-located " if colocated else ""
    try:
        _step(shim, kind, "the init phase", lambda: run_init(shim, job))
        for i in range(warmup + runs + (0 if colocated else 1)):
            at_max = i == warmup + runs
            timings = _step(shim, kind, f"iteration {i + 1}", lambda: run_iteration(shim, job, at_max))
            rollout_s, train_s, sync_s = (t.run_s for t in timings)
            if i < warmup:
                continue
            if at_max:
                out.max_rollout = rollout_s
            else:
                out.rollout.append(rollout_s)
                out.train.append(train_s)
                out.sync.append(sync_s)
            say(f"{kind}{'max length' if at_max else f'run {i - warmup + 1}/{runs}'}: rollout {rollout_s:.4g} s, "
                f"train {train_s:.4g} s, sync {sync_s:.4g} s")
    finally:
        env.stop()
        thread.join(timeout=5)
    for t in shim.history:
        for pool, n in (t.host_bytes or {}).items():
            out.host_bytes[pool] = max(out.host_bytes.get(pool, 0), n)
    return out


def _step(shim: JobShim, kind: str, where: str, step: Callable[[], Any]) -> Any:
    """Run one step of the job through the shim; the job's own failure as one line naming its phase."""
    try:
        return step()
    except Exception as exc:  # the job's own code failed: where, in one line
        phase = shim.history[-1].phase  # a phase that raises is released (and recorded) first
        raise InputError("JOB_MODULE", f"the job's {phase} phase failed in {kind}{where}: "
                                       f"{type(exc).__name__}: {exc}") from None


def job_record(m: Measured, opts: ProfileOptions, model: str | None = None, colo: Measured | None = None) -> dict:
    """The job record (DESIGN §2) `rollmux submit` accepts, from the measurements and options
    (with `colo`, the co-located runs' means as its `colocated` profile)."""
    phases = fitted_phases(m.rollout, m.train, m.sync, m.max_rollout)
    rec = record_of(phases, {p: m.host_bytes.get(p, 0) / GB for p in ("rollout", "train")}, opts, model)
    if colo is not None:  # means, not medians: JobSpec.colocated is the mean seconds per iteration
        rec["colocated"] = {"rollout_s": _sig(statistics.fmean(colo.rollout)),
                            "train_s": _sig(statistics.fmean(colo.train))}
        _spec(rec)
    return rec


def record_of(phases: dict, host_gb: dict[str, float], opts: ProfileOptions, model: str | None = None) -> dict:
    """A job record from measured phase-time fields (core/estimates.py `fitted_phases`), the host
    memory measured (GB per node, by pool) and the options; its length as many iterations as asked,
    each at the measured solo time (or the duration given)."""
    rec: dict[str, Any] = {
        "job_id": opts.job_id, "arrival_s": 0.0, "duration_s": 1.0, "slo": opts.slo,
        "rollout_gpus": opts.rollout_gpus, "train_gpus": opts.train_gpus, "rollout_s": phases["rollout_s"],
        "tail_frac": opts.tail_frac, "train_s": phases["train_s"], "sync_s": phases["sync_s"], "host_gb": host_gb}
    if model is not None:
        rec["model"] = model
    probe = _spec(rec)
    rec["duration_s"] = (opts.duration_s if opts.duration_s is not None
                         else _sig(opts.iterations * probe.solo_iter_s))
    _spec(rec)
    return rec


def _sig(x: float) -> float:
    """Six significant digits: measured seconds carry no more."""
    return float(f"{x:.6g}")


def _spec(rec: dict) -> JobSpec:
    try:
        return JobSpec.model_validate(rec)
    except ValidationError as exc:
        where, why = pydantic_reason(exc)
        raise InputError(f"job record field {where}", why) from None


def profile(module: str, preset: str | None, options: dict[str, Any], opts: ProfileOptions,
            say: Callable[[str], None] = lambda s: None) -> dict:
    """Load the job module's job, measure it through the shim (then co-located, if asked), return its job record."""
    job = load_job(module, preset, options)
    m = measure(job, opts.job_id, opts.runs, opts.warmup, say)
    colo = measure(job, opts.job_id, opts.runs, opts.warmup, say, colocated=True) if opts.colocated else None
    return job_record(m, opts, f"{module}:{preset}" if preset else module, colo)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` options for `make_job`; values read as YAML scalars (3, 0.1, true, text)."""
    import yaml
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip().isidentifier():
            raise InputError("--set", f"{item!r} is not KEY=VALUE with KEY a Python name")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def check_options(opts: ProfileOptions) -> None:
    """InputError naming the flag of the first bad option."""
    checks = [(opts.runs >= 1, "--runs", "must be at least 1"),
              (opts.warmup >= 0, "--warmup", "must be at least 0"),
              (opts.slo >= 1.0, "--slo", "must be at least 1 (a job cannot run faster than solo)"),
              (opts.iterations is None or opts.iterations >= 1, "--iterations", "must be at least 1"),
              (opts.duration_s is None or opts.duration_s > 0, "--duration", "must be > 0 seconds"),
              ((opts.iterations is None) != (opts.duration_s is None), "--iterations/--duration", "give one"),
              (opts.rollout_gpus >= 1, "--rollout-gpus", "must be at least 1"),
              (opts.train_gpus >= 1, "--train-gpus", "must be at least 1"),
              (0.0 <= opts.tail_frac < 1.0, "--tail-frac", "must be in [0, 1)"),
              (bool(opts.job_id.strip()), "--job-id", "must not be empty")]
    for ok, flag, why in checks:
        if not ok:
            raise InputError(flag, why)


def write_record(rec: dict, path: Any, header: str) -> None:
    """The record as YAML (JSON for a .json path), with `header` as comments (YAML only)."""
    import json
    from pathlib import Path

    import yaml
    path = Path(path)
    if path.suffix == ".json":
        text = json.dumps(rec, indent=2) + "\n"
    else:
        text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(rec, sort_keys=False)
    try:
        path.write_text(text)
    except OSError as exc:
        raise InputError(str(path), f"cannot write ({exc.strerror})") from None


def summary(rec: dict, module: str, preset: str | None, runs: int) -> str:
    """What was measured, in a few lines (the record's header comment and the CLI's output)."""
    return (f"measured by rollmux profile {module}{f' --preset {preset}' if preset else ''}: "
            f"{runs} runs + 1 at maximum response length\n" + record_lines(rec)
            + _colo_summary(rec.get("colocated"), runs))


def record_lines(rec: dict) -> str:
    """A measured record's phase times and host memory, in two lines."""
    r, h = rec["rollout_s"], rec["host_gb"]
    return (f"rollout median {r['median']:.4g} s (sigma {r['sigma']:.3g}), max {r['max']:.4g} s; "
            f"train {rec['train_s']:.4g} s; sync {rec['sync_s']:.4g} s\n"
            f"host memory held offloaded, per node: rollout {h['rollout'] * GB:,.0f} B, "
            f"train {h['train'] * GB:,.0f} B")


def _colo_summary(colo: dict | None, runs: int) -> str:
    """The co-located line of the summary (empty without a co-located profile)."""
    if colo is None:
        return ""
    return (f"\nco-located (mean of {runs} runs, switches excluded): rollout {colo['rollout_s']:.4g} s, "
            f"train {colo['train_s']:.4g} s")


def profile_command(module: str, preset: str | None, sets: list[str], output: Any, opts: ProfileOptions,
                    say: Callable[[str], None] = lambda s: None) -> dict:
    """`rollmux profile`: check the options, measure the job, write its record to `output`."""
    check_options(opts)
    options = parse_sets(sets)
    rec = profile(module, preset, options, opts, say)
    text = summary(rec, module, preset, opts.runs)
    write_record(rec, output, text)
    say(text)
    return rec
