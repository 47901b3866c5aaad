"""Typed, validated inputs: job profiles (DESIGN §2) and the cluster description.

Everything a scheduler decision depends on is derived here from the profile, so
the simulator, the baselines and the live plane agree on one arithmetic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from rollmux.core.vocabulary import Mode

# What a job id may be (docs/reference/http-bodies.md): letters, digits, '.', '_' and '-', at most 63
# characters, starting with a letter or a digit, and none of the reserved names (any case). The
# service's own identities ("<admin>") and routes can then never be mistaken for a job.
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
RESERVED_JOB_IDS = ("admin", "dashboard", "login", "logout", "metrics", "root", "status")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")

# The ranges of a job record's numbers (docs/reference/http-bodies.md); every number is finite.
MIN_TIME_S = 1e-9                   # a declared phase time (seconds) is at least a nanosecond
MAX_PHASE_S = 7 * 86400.0           # and at most a week: one phase of one iteration, a sync, a switch
MAX_DURATION_S = 366 * 86400.0      # a job's declared work: at most a year
MAX_ARRIVAL_S = 10 * 366 * 86400.0  # a trace's arrival offsets: at most ten years
MAX_SLO = 100.0
MAX_GPUS = 4096
MAX_HOST_GB = 65536.0               # host memory per node, and one model copy (GB)
MAX_SCALE = 1000.0                  # a drift's ground-truth slowdown or speed-up
# The ranges of the cluster file's numbers; every number is finite.
MAX_GPUS_PER_NODE = 64
MAX_NODES = 4096                    # a pool's node cap
MAX_PRICE = 1000.0                  # $ per GPU-hour
MAX_MEM_BW_TBS = 100.0
MAX_LINK_GBPS = 1e6                 # the migration rate (GB/s) and the inter-pool link (Gbit/s)
# A record that gives none of its phase times is measured as it runs (`JobSpec.measure`): until then
# it stands on placeholders this long per phase (its leases and turn graces follow them) and no host memory.
MEASURE_PHASE_S = 600.0
PHASE_TIME_FIELDS = ("rollout_s", "train_s", "sync_s")


def job_id_problem(value: object) -> str | None:
    """Why `value` is not a valid job id (one line), or None when it is one."""
    if not isinstance(value, str):
        return f"a job id must be a string, not {type(value).__name__}"
    if not _JOB_ID.fullmatch(value):
        return (f"a job id must match {JOB_ID_PATTERN} (letters, digits, '.', '_', '-'; at most 63 "
                "characters; starting with a letter or digit)")
    if value.lower() in RESERVED_JOB_IDS:
        return f"{value!r} is a reserved name ({', '.join(RESERVED_JOB_IDS)})"
    return None


class _Strict(BaseModel):
    # Unknown fields are kept in model_extra so loaders can warn about them;
    # strict: "8" is not a number and 8.5 GPUs is not an int.
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False, strict=True)


class RolloutDist(_Strict):
    """Per-iteration rollout time: lognormal(median, sigma) truncated at max."""

    median: float = Field(ge=MIN_TIME_S, le=MAX_PHASE_S)
    sigma: float = Field(ge=0, le=3)
    max: float = Field(ge=MIN_TIME_S, le=MAX_PHASE_S)

    @model_validator(mode="after")
    def _max_at_least_median(self) -> "RolloutDist":
        if self.max < self.median:
            raise ValueError(f"max ({self.max}) must be >= median ({self.median})")
        return self

    def mean(self) -> float:
        """Expected rollout time: E[min(X, max)] for X ~ lognormal(ln median, sigma)."""
        if self.sigma == 0:
            return min(self.median, self.max)
        mu, s, c = math.log(self.median), self.sigma, self.max
        z = (math.log(c) - mu) / s
        body = math.exp(mu + s * s / 2) * _phi(z - s)
        return body + c * (1.0 - _phi(z))

    def quantile(self, q: float) -> float:
        """The q-quantile of the truncated distribution (q in (0, 1])."""
        if q >= 1.0 or self.sigma == 0:
            return self.max if q >= 1.0 else min(self.median, self.max)
        return min(self.max, self.median * math.exp(self.sigma * _phi_inv(q)))


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _phi_inv(q: float) -> float:
    # Bisection is plenty here: called once per job per planning mode.
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _phi(mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class HostGB(_Strict):
    """Host DRAM (GB per node) a job's state needs on each node it is pinned to."""

    rollout: float = Field(ge=0, le=MAX_HOST_GB)
    train: float = Field(ge=0, le=MAX_HOST_GB)


class Drift(_Strict):
    """Ground truth the scheduler never reads: after the job has run `after_s` seconds its
    true rollout times (including the maximum) scale by `rollout_scale` and its training
    times by `train_scale` (the paper's profile-drift experiment)."""

    after_s: float = Field(ge=0)  # (finite; a simulation's "never" is a large number)
    rollout_scale: float = Field(gt=0, le=MAX_SCALE)
    train_scale: float = Field(gt=0, le=MAX_SCALE)


class ColocatedProfile(_Strict):
    """Measured mean seconds per iteration when the job runs every phase co-located (veRL mode)
    on its training-type GPU set (core/colo_model.py `colocated_gpus`)."""

    rollout_s: float = Field(ge=MIN_TIME_S, le=MAX_PHASE_S)
    train_s: float = Field(ge=MIN_TIME_S, le=MAX_PHASE_S)


class JobSpec(_Strict):
    """One RL post-training job's profile, as written in the trace (DESIGN §2)."""

    job_id: str  # JOB_ID_PATTERN, not a reserved name (`job_id_problem`)
    arrival_s: float = Field(ge=0, le=MAX_ARRIVAL_S)
    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
    slo: float = Field(ge=1.0, le=MAX_SLO)
    model: str | None = Field(default=None, max_length=200)
    rollout_gpus: int = Field(ge=1, le=MAX_GPUS)
    train_gpus: int = Field(ge=1, le=MAX_GPUS)
    rollout_s: RolloutDist
    tail_frac: float = Field(default=0.0, ge=0, lt=1)
    train_s: float = Field(ge=MIN_TIME_S, le=MAX_PHASE_S)
    sync_s: float = Field(ge=0, le=MAX_PHASE_S)
    host_gb: HostGB
    weights_gb: float | None = Field(default=None, gt=0, le=MAX_HOST_GB)  # one model copy sent per weight sync
    drift: Drift | None = None
    # Measured co-located phase times; None: the co-located model estimates them (colo_model.py).
    colocated: ColocatedProfile | None = None
    # The execution modes its adapter cannot take (vocabulary.py `Mode`), sorted and without
    # repeats; empty (the default): every mode the configuration enables. Written out only when set.
    cannot: tuple[Mode, ...] = ()
    # Seconds from submission (or placement, after a wait for nodes) to the job's first call before the
    # service fails it as not started (live/supervision.py); None: the service's `--startup-timeout`.
    startup_timeout_s: float | None = Field(default=None, gt=0, le=MAX_PHASE_S)
    # The phase times are not known yet: the scheduler measures the job's first iterations and
    # plans with what it measured from then on (core/state/profiling.py). Until then the job runs
    # in a group of its own that no other job joins. A record that omits every phase time says
    # this too; written out only when set.
    measure: bool = False

    @model_validator(mode="before")
    @classmethod
    def _phase_times_to_measure(cls, data: Any) -> Any:
        # No phase time given: the job is measured as it runs, on placeholders until then. Some
        # but not all given is an error (the missing ones are reported as missing fields).
        if (isinstance(data, Mapping) and not any(k in data for k in PHASE_TIME_FIELDS)
                and data.get("measure", True) is not False):
            placeholder = {"median": MEASURE_PHASE_S, "sigma": 0.0, "max": MEASURE_PHASE_S}
            data = {"rollout_s": placeholder, "train_s": MEASURE_PHASE_S, "sync_s": 0.0,
                    "host_gb": {"rollout": 0.0, "train": 0.0}, **data, "measure": True}
        return data

    @field_validator("job_id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        problem = job_id_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("cannot", mode="before")
    @classmethod
    def _mode_names(cls, value: Any) -> Any:
        # (ValueError, not TypeError: pydantic reports only the former as the field's error)
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
            raise ValueError(f"must be a list of mode names ({', '.join(MODE_NAMES)})")  # noqa: TRY004
        bad = [v for v in value if not isinstance(v, str) or v not in MODE_NAMES]
        if bad:
            raise ValueError(f"unknown mode {bad[0]!r}; choose from {', '.join(MODE_NAMES)}")
        return tuple(sorted({Mode(v) for v in value}))

    @model_serializer(mode="wrap")
    def _without_empty_cannot(self, handler: Any) -> Any:
        # A job that can take every mode is written as before the field existed (traces, journals).
        data = handler(self)
        if isinstance(data, dict):
            if not self.cannot:
                data.pop("cannot", None)
            if not self.measure:
                data.pop("measure", None)
        return data

    def fields(self) -> dict[str, Any]:
        """The record's fields as this spec holds them (values, not dumps), without the derived
        times a `cached_property` keeps in the instance (`dict(spec)` would carry those along into
        a spec built from it, as unknown fields)."""
        return {k: getattr(self, k) for k in type(self).model_fields}

    def phase_times(self) -> dict:
        """The record's phase-time fields (`PHASE_TIME_FIELDS`) as JSON-native data."""
        return self.model_dump(include=set(PHASE_TIME_FIELDS))

    def can(self, mode: Mode) -> bool:
        """Whether the scheduler may run this job in `mode`: it is not in `cannot`, and a job still
        being measured (`measure`) runs on its nominal nodes where it was placed, disaggregated (its
        tail may migrate: that needs no profile)."""
        if self.measure and mode != Mode.TAIL_MIGRATION:
            return False
        return mode not in self.cannot

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> "JobSpec":
        """A copy; with `update`, its derived values (solo time, iterations, SLO budget) recomputed."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            # pydantic copies the instance dict, where cached_property keeps its values: an
            # updated slo or rollout profile would otherwise keep the original's derived times.
            for name in _DERIVED:
                copied.__dict__.pop(name, None)
        return copied

    @cached_property
    def mean_rollout_s(self) -> float:
        """E[rollout] of one iteration."""
        return self.rollout_s.mean()

    @cached_property
    def mean_train_s(self) -> float:
        """E[train]: training scales with generated tokens, i.e. with rollout time."""
        return self.train_time(self.mean_rollout_s)

    def train_time(self, rollout: float) -> float:
        """Training time of an iteration whose rollout took `rollout` seconds."""
        return self.train_s * rollout / self.rollout_s.median

    @cached_property
    def solo_iter_s(self) -> float:
        """Expected iteration time solo on dedicated disaggregated GPUs."""
        return self.mean_rollout_s + self.mean_train_s + self.sync_s

    @cached_property
    def iterations(self) -> int:
        """The job's work: round(duration_s / solo_iter_s), at least one."""
        return max(1, round(self.duration_s / self.solo_iter_s))

    @cached_property
    def slo_iter_s(self) -> float:
        """The longest mean iteration time the SLO allows: slo x solo_iter_s (DESIGN §2)."""
        return self.slo * self.solo_iter_s

    @cached_property
    def slo_budget_s(self) -> float:
        """The SLO's budget for the job's whole work: `slo_iter_s` over all its iterations."""
        return self.slo_iter_s * self.iterations


MODE_NAMES = tuple(sorted(m.value for m in Mode))
_DERIVED = tuple(n for n, v in vars(JobSpec).items() if isinstance(v, cached_property))


class PoolSpec(_Strict):
    """One GPU pool: its hardware, price and optional node cap."""

    gpu: str = Field(min_length=1, max_length=64)
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)
    host_gb_per_node: float = Field(default=2048, gt=0, le=MAX_HOST_GB)
    price_per_gpu_hour: float = Field(ge=0, le=MAX_PRICE)
    max_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    mem_bw_tbs: float | None = Field(default=None, gt=0, le=MAX_MEM_BW_TBS)

    def nodes_for(self, gpus: int) -> int:
        """Whole nodes needed for `gpus` GPUs."""
        return -(-gpus // self.gpus_per_node)

    @property
    def node_price_per_hour(self) -> float:
        """Price of one node for one hour."""
        return self.gpus_per_node * self.price_per_gpu_hour

    def bandwidth_tbs(self) -> float:
        """HBM bandwidth (TB/s): given, or known for H20/H800, else 1.0."""
        return self.mem_bw_tbs or _KNOWN_BW.get(self.gpu.upper(), 1.0)


_KNOWN_BW = {"H20": 4.0, "H800": 3.35, "H100": 3.35, "H200": 4.8, "A100": 2.0}


class Pools(_Strict):
    """The two pools of a disaggregated cluster."""

    rollout: PoolSpec
    train: PoolSpec


class ClusterSpec(_Strict):
    """The cluster file (DESIGN §2)."""

    pools: Pools
    warm_switch_s: float = Field(default=2.0, ge=0, le=MAX_PHASE_S)
    cold_switch_s: float = Field(default=135.0, ge=0, le=MAX_PHASE_S)
    # How fast a migrating job's host-resident training state moves to its new nodes (GB/s).
    migration_gb_per_s: float = Field(default=1.8, gt=0, le=MAX_LINK_GBPS)
    # Aggregate bandwidth between the pools, shared by concurrent weight syncs (None: unlimited).
    inter_pool_gbps: float | None = Field(default=None, gt=0, le=MAX_LINK_GBPS)

    def job_unplaceable_reason(self, job: JobSpec) -> str | None:
        """Why `job` can never be placed on this cluster, or None if it can."""
        for pool_name in ("rollout", "train"):
            pool: PoolSpec = getattr(self.pools, pool_name)
            need_gb = getattr(job.host_gb, pool_name)
            if need_gb > pool.host_gb_per_node:
                return (f"host_gb.{pool_name} {need_gb:g} GB exceeds the {pool_name} node's "
                        f"host DRAM {pool.host_gb_per_node:g} GB")
            nodes = pool.nodes_for(getattr(job, f"{pool_name}_gpus"))
            if pool.max_nodes is not None and nodes > pool.max_nodes:
                return (f"{pool_name}_gpus needs {nodes} nodes but the {pool_name} pool "
                        f"is capped at {pool.max_nodes}")
        return None


def default_cluster() -> ClusterSpec:
    """The paper's cluster: H20 rollout pool, H800 training pool (H800 = 2.85x H20)."""
    return ClusterSpec(pools=Pools(
        rollout=PoolSpec(gpu="H20", price_per_gpu_hour=1.0),
        train=PoolSpec(gpu="H800", price_per_gpu_hour=2.85),
    ))
