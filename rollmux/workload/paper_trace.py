"""The paper's production trace (DESIGN §7; the authors' `wild.trace` and `profile.json`) as a workload.

What each job's numbers rest on:

* measured (the authors' files): its arrival and its wall time in the trace, its model size and
  response cap, and its mean rollout and training seconds per iteration run disaggregated
  (`profile.json` `disagg`: rollout on H20, training on H800) and co-located (`colo`: every
  phase on the H800s), the latter as `JobSpec.colocated`;
* as the authors' simulator reads them: one rollout node and one training node of 8 GPUs a job,
  32B jobs two of each (`NODES_PER_POOL`);
* modelled (workload/perf.py, workload/catalog.py, for the Qwen model of that size): the tail
  share, host DRAM per node, the weights a sync sends and the sync time over the paper's 20 Gbit/s
  link (`sync="none"`: none, the measured iteration read as the whole iteration, as the authors'
  simulator does);
* drawn from a seeded generator: each job's SLO, U(lo, hi) (the paper's text: U(1, 2)).

The rollout's spread. By default (`sigma=0`) every rollout takes its measured mean, as the
authors' simulator runs the profile: the profile is one number per phase and says nothing of its
spread, so nothing is added to it (`max = median`, and worst-case admission plans on the measured
time). With `sigma > 0` the rollout is lognormal with that sigma, capped at the modelled ratio of
the every-response-at-the-cap time to the typical one (`perf.rollout_times`, about 2x); its median
is solved so its mean stays the measured rollout. Either way `train_s` is set so the job's mean
training time is the measured one (training scales with the rollout drawn, `JobSpec.train_time`).
`duration_s` is the trace's wall time: under equal-work accounting the job runs that many seconds
of solo iterations.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from rollmux.core.spec import ColocatedProfile, HostGB, JobSpec, RolloutDist
from rollmux.errors import InputError
from rollmux.workload.catalog import label, recipe, tail_frac
from rollmux.workload.paper import check_seed
from rollmux.workload.perf import GPUS_PER_NODE, host_gb, rollout_times, sync_time

TRACE, PROFILE = "wild.trace", "profile.json"
# The trace's model sizes and the Qwen models the performance model knows by those sizes.
MODELS = {"3B": "qwen2.5-3b", "4B": "qwen3-4b", "7B": "qwen2.5-7b", "8B": "qwen3-8b",
          "14B": "qwen2.5-14b", "32B": "qwen2.5-32b"}
NODES_PER_POOL = {"32B": 2}  # every other size: one rollout and one training node
SLO_RANGE = (1.0, 2.0)
SYNC_MODES = ("model", "none")
_TYPE = re.compile(r"(?P<size>\d+B)_(?P<cap>\d+)k")
_TIME = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class TraceJob:
    """One job of the trace: its id, type (e.g. `7B_8k`), arrival and departure."""

    job_id: str
    kind: str
    arrival: datetime
    departure: datetime


def read_trace(path: Path) -> list[TraceJob]:
    """The trace's jobs by arrival; InputError naming the file and line of a bad event."""
    events: dict[str, dict[str, tuple[datetime, str, int]]] = {}
    for line_no, line in enumerate(_read(path).splitlines(), 1):
        if line.strip():
            job, when, sign, kind = _event(line, f"{path}:{line_no}")
            seen = events.setdefault(job, {})
            if sign in seen:
                raise InputError(f"{path}:{line_no}", f"{job} has a second {sign} event (first on line "
                                 f"{seen[sign][2]})")
            seen[sign] = (when, kind, line_no)
    jobs = [_job(path, job, seen) for job, seen in events.items()]
    if not jobs:
        raise InputError(str(path), "no events")
    return sorted(jobs, key=lambda j: (j.arrival, j.job_id))


def _event(line: str, where: str) -> tuple[str, datetime, str, str]:
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 4:
        raise InputError(where, f"expected 4 fields `job, YYYY-MM-DD HH:MM:SS, 1|-1, TYPE`, got {len(fields)}")
    job, when, sign, kind = fields
    if not job:
        raise InputError(where, "empty job id")
    try:
        at = datetime.strptime(when, _TIME)
    except ValueError:
        raise InputError(where, f"time {when!r} is not YYYY-MM-DD HH:MM:SS") from None
    if sign not in ("1", "-1"):
        raise InputError(where, f"event {sign!r} is neither 1 (arrival) nor -1 (departure)")
    m = _TYPE.fullmatch(kind)
    if m is None or m["size"] not in MODELS:
        raise InputError(where, f"type {kind!r} is not SIZE_CAPk with SIZE one of {', '.join(MODELS)}")
    return job, at, "arrival" if sign == "1" else "departure", kind


def _job(path: Path, job: str, seen: dict[str, tuple[datetime, str, int]]) -> TraceJob:
    for sign in ("arrival", "departure"):
        if sign not in seen:
            other = next(iter(seen.values()))
            raise InputError(f"{path}:{other[2]}", f"{job} has no {sign} event")
    (arrival, kind, line_a), (departure, kind_d, line_d) = seen["arrival"], seen["departure"]
    if kind_d != kind:
        raise InputError(f"{path}:{line_d}", f"{job} departs as {kind_d}, arrived as {kind} (line {line_a})")
    if departure <= arrival:
        raise InputError(f"{path}:{line_d}", f"{job} departs at or before its arrival (line {line_a})")
    return TraceJob(job, kind, arrival, departure)


def read_profile(path: Path, mode: str = "disagg", required: bool = True) -> dict[str, tuple[float, float]]:
    """TYPE -> measured (rollout s, train s) per iteration in `mode` (disagg or colo; an absent
    table is empty unless `required`); InputError naming the field."""
    return _table(path, _load(path), mode, required)


def _load(path: Path) -> object:
    try:
        return json.loads(_read(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}", f"not JSON ({exc.msg})") from None


def _table(path: Path, doc: object, mode: str, required: bool) -> dict[str, tuple[float, float]]:
    table = doc.get(mode) if isinstance(doc, dict) else None
    if table is None and not required and isinstance(doc, dict):
        return {}
    if not isinstance(table, dict):
        raise InputError(f"{path}: {mode}", "missing: an object TYPE -> {generate, train}")
    return {kind: tuple(_seconds(path, f"{mode}.{kind}.{phase}", row.get(phase) if isinstance(row, dict) else None)
                        for phase in ("generate", "train"))
            for kind, row in table.items()}


def _seconds(path: Path, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{path}: {field}", f"{value!r} is not a positive number of seconds")
    return float(value)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror})") from None


def paper_trace_jobs(folder: Path, seed: int = 0, slo: tuple[float, float] = SLO_RANGE,
                     sigma: float = 0.0, sync: str = "model") -> list[JobSpec]:
    """The trace in `folder` (wild.trace, profile.json) as JobSpecs, by arrival (module docstring)."""
    lo, hi = slo
    if not (math.isfinite(lo) and math.isfinite(hi) and 1.0 <= lo <= hi):
        raise InputError("--slo", f"needs 1 <= LO <= HI, finite; got {lo} {hi}")
    if not (math.isfinite(sigma) and 0.0 <= sigma <= 3.0):
        raise InputError("--sigma", f"needs a number in [0, 3]; got {sigma}")
    if sync not in SYNC_MODES:
        raise InputError("--sync", f"unknown {sync!r}; choose {' or '.join(SYNC_MODES)}")
    check_seed(seed)
    trace, doc = read_trace(folder / TRACE), _load(folder / PROFILE)
    measured, colocated = _table(folder / PROFILE, doc, "disagg", True), _table(folder / PROFILE, doc, "colo", False)
    rng = np.random.default_rng(seed)
    start = trace[0].arrival
    jobs = []
    for t in trace:
        if t.kind not in measured:
            raise InputError(f"{folder / PROFILE}: disagg.{t.kind}", f"no measured profile for {t.job_id}'s type")
        jobs.append(_spec(t, measured[t.kind], colocated.get(t.kind), (t.arrival - start).total_seconds(),
                          float(rng.uniform(lo, hi)), sigma, sync))
    return jobs


def _spec(t: TraceJob, measured: tuple[float, float], colocated: tuple[float, float] | None, arrival_s: float,
          slo: float, sigma: float, sync: str) -> JobSpec:
    m = _TYPE.fullmatch(t.kind)
    size, cap = m["size"], int(m["cap"]) * 1024
    gpus = GPUS_PER_NODE * NODES_PER_POOL.get(size, 1)
    r = replace(recipe(MODELS[size], cap), rollout_gpus=gpus, train_gpus=gpus)
    typical, worst = rollout_times(r)
    # The distribution is a scale family in its median (the cap a fixed multiple of it), so
    # its mean is proportional to the median: solve for the measured mean.
    unit = RolloutDist(median=1.0, sigma=sigma, max=worst / typical if sigma > 0 else 1.0)
    rollout, train = measured
    median = rollout / unit.mean()
    host_rollout, host_train = host_gb(r)
    return JobSpec(
        job_id=t.job_id, arrival_s=arrival_s, duration_s=(t.departure - t.arrival).total_seconds(), slo=slo,
        model=label(MODELS[size], cap, False), rollout_gpus=gpus, train_gpus=gpus,
        rollout_s=RolloutDist(median=median, sigma=sigma, max=median * unit.max),
        tail_frac=tail_frac(cap, False), train_s=train * median / rollout, sync_s=sync_time(r) if sync == "model" else 0.0,
        host_gb=HostGB(rollout=host_rollout, train=host_train), weights_gb=r.arch.weight_bytes / 1e9,
        colocated=None if colocated is None else ColocatedProfile(rollout_s=colocated[0], train_s=colocated[1]))
