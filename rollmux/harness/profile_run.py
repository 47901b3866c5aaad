"""`rollmux profile -- ENTRYPOINT`: a job's profile measured by running its own program under a scheduler.

A job that is a program, not a `make_job` module (a script on the TRL or veRL adapter, any job that
calls `rollmux.init()`), is profiled as the scheduler profiles every job submitted without phase
times (core/state/profiling.py): a private scheduler on loopback (in this process, on a fresh
in-memory journal, its admin token never written anywhere) takes the job's record without phase
times, ENTRYPOINT runs with the environment `rollmux run` gives a job (the URL, the job id, a token
file readable by its owner only, in a private folder removed afterwards), and once it exits the
profile the scheduler fitted from its iterations (`--warmup` uncounted, then `--runs` counted) is
the record written. A program cannot be told to make every response reach the maximum length, so
the maximum rollout is the slowest measured one times `profiling.max_headroom` (a `make_job`
module is profiled with a maximum-length iteration instead: harness/profile.py). The host memory is
the most the shim reported after an offload.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from rollmux.core.config import ConfigError, SchedulerConfig
from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.harness.profile import ProfileOptions, check_options, record_lines, record_of, write_record
from rollmux.live.client import HttpPermitClient, job_env, write_token
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

def measuring_config(opts: ProfileOptions) -> SchedulerConfig:
    """The shipped configuration, measuring `opts.warmup` + at least `opts.runs` iterations of a job;
    InputError naming the flag whose value the profiling settings refuse."""
    flags = {"profiling.warmup": "--warmup", "profiling.iterations": "--runs"}
    try:
        return SchedulerConfig().with_overrides({"profiling.warmup": opts.warmup, "profiling.iterations": opts.runs})
    except ConfigError as exc:
        raise InputError(flags.get(exc.setting, exc.setting), exc.message) from None


def run_measured(entrypoint: list[str], opts: ProfileOptions, say: Callable[[str], None]) -> dict:
    """Run ENTRYPOINT as job `opts.job_id` of a private scheduler; the job's view once it exited."""
    admin = secrets.token_urlsafe(24)
    core = SchedulerCore(default_cluster().model_dump(), cfg=measuring_config(opts), admin_token=admin)
    with ThreadServer(core) as server, tempfile.TemporaryDirectory(prefix="rollmux-profile-") as folder:
        client = HttpPermitClient(server.url, admin_token=admin)
        try:
            client.submit({"job_id": opts.job_id, "arrival_s": 0.0, "duration_s": 86400.0, "slo": opts.slo,
                           "rollout_gpus": opts.rollout_gpus, "train_gpus": opts.train_gpus,
                           "tail_frac": opts.tail_frac})
            token = write_token(Path(folder), opts.job_id, client.tokens[opts.job_id])
            env = {**os.environ, **job_env(server.url, opts.job_id, token)}
            say(f"profiling {opts.job_id}: running {' '.join(entrypoint)}")
            try:
                code = subprocess.run(entrypoint, env=env, check=False).returncode
            except FileNotFoundError:
                raise InputError("ENTRYPOINT", f"no such program: {entrypoint[0]}") from None
            view = client.job(opts.job_id)
        finally:
            client.close()
    if code != 0:
        raise InputError("ENTRYPOINT", f"exited with code {code} after {view['iterations']} iteration(s)")
    return view


def profile_entrypoint(entrypoint: list[str], opts: ProfileOptions, output: Path | str,
                       say: Callable[[str], None] = lambda s: None) -> dict:
    """`rollmux profile -- ENTRYPOINT`: check the options, run and measure the job, write its record."""
    check_options(opts)
    if not entrypoint:
        raise InputError("ENTRYPOINT", "give a job module, or the command to profile after --")
    view = run_measured(entrypoint, opts, say)
    if view["profile"]["plans_with"] is None:  # (it ended before it was measured)
        raise InputError("ENTRYPOINT", f"it ran {view['iterations']} iteration(s) and the profile needs at least "
                                       f"{opts.warmup + opts.runs} (--warmup {opts.warmup} + --runs {opts.runs}), more "
                                       f"when its iterations spread widely for its SLO (--slo {opts.slo:g}): run it "
                                       "longer")
    host = view["host_gb"]["measured"]
    rec = record_of(view["profile"]["plans_with"], {p: host.get(p, 0.0) for p in ("rollout", "train")}, opts)
    text = summary(rec, entrypoint, opts)
    write_record(rec, output, text)
    say(text)
    return rec


def summary(rec: dict, entrypoint: list[str], opts: ProfileOptions) -> str:
    """What was measured, in a few lines (the record's header comment and the CLI's output)."""
    return (f"measured by rollmux profile -- {' '.join(entrypoint)}: {opts.warmup} warm-up + at least {opts.runs} "
            f"runs; the maximum is the slowest run x {SchedulerConfig().profiling.max_headroom:g}\n"
            + record_lines(rec))
