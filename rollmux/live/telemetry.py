"""Prometheus metrics of the live control plane, all in this one module (STYLE: Kueue's metrics.go).

Every metric lives on a `CollectorRegistry` of the `Telemetry` instance's own, never on
prometheus_client's global one, so two services (or two tests) in one process never collide.
Event metrics are written only through the typed helpers below (`admitted`, `refused`, ...);
state metrics are read at scrape time by one Collector from ONE call of the `snapshot()`
callback, so a scrape never mixes two moments (client_python's custom-collector pattern).

| metric                              | type      | labels          | meaning                                        |
|-------------------------------------|-----------|-----------------|------------------------------------------------|
| rollmux_build_info                  | gauge (1) | version, python | the running rollmux and Python versions        |
| rollmux_admissions_total            | counter   | case            | jobs admitted, by placement (ADMISSION_CASES)  |
| rollmux_isolated_placements_total   | counter   | reason          | jobs admitted to a group of their own, by why  |
|                                     |           |                 | no group took them (ISOLATION_REASONS)         |
| rollmux_refused_requests_total      | counter   | reason          | requests refused (REFUSAL_REASONS, else other) |
| rollmux_permit_wait_seconds         | histogram | -               | from asking for a phase permit to getting it   |
| rollmux_phase_duration_seconds      | histogram | phase           | a finished phase (init, rollout, train, sync)  |
| rollmux_context_switch_seconds      | histogram | kind            | switching a node to another job: warm or cold  |
| rollmux_journal_records_total       | counter   | -               | records committed to the journal               |
| rollmux_state_snapshot_errors_total | counter   | -               | scrapes whose snapshot raised (state left out) |
| rollmux_jobs                        | gauge     | state           | jobs per state (JOB_STATES, all six always)    |
| rollmux_groups                      | gauge     | -               | co-execution groups alive                      |
| rollmux_pool_gpus                   | gauge     | pool, state     | GPUs of each pool that are busy or idle        |
| rollmux_cost_per_hour               | gauge     | pool            | provisioning cost rate of each pool, $/h       |
| rollmux_job_iteration_slowdown      | gauge     | job             | a running job's mean iteration / solo time     |
| rollmux_host_memory_bytes           | gauge     | pool, source    | host memory per node summed over active jobs:  |
|                                     |           |                 | declared, or measured by the jobs' shims       |
| rollmux_jobs_over_memory_declaration| gauge     | -               | active jobs measured above their declaration   |
| rollmux_rollout_nodes_compacted_total| counter  | -               | rollout nodes groups gave back by compaction   |

Label values are bounded: every label but `job` takes values from a fixed tuple in this
module. `rollmux_job_iteration_slowdown` is the one per-job series; it exists only while the
snapshot lists its job as running, so the series vanishes when the job leaves. Job ids are
tenants' names: `exposition(per_job=False)` leaves that series out, and `rollmux serve` serves
it only to an authenticated scrape (`--metrics-token-file`). No label ever
carries a token, a node name or error text. Which job is over its memory declaration is
shown in `rollmux status` (and GET /v1/status), not as a per-job series: the slowdown gauge
stays the only one (STYLE).
"""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import rollmux
from rollmux.core.placement.why import REASON_NAMES
from rollmux.core.vocabulary import Case, JobStatus, Phase, Pool

log = logging.getLogger("rollmux.telemetry")

# The cases the live plane admits by (it refuses training scaling), as plain label strings.
ADMISSION_CASES = tuple(c.value for c in (Case.DIRECT, Case.SCALING, Case.ISOLATED, Case.COLOCATED, Case.PAIRED))
ISOLATION_REASONS = REASON_NAMES  # core/placement/why.py's fixed set, in its attribution order
REFUSAL_REASONS = ("no_token", "bad_token", "forbidden", "bad_request", "not_found", "conflict", "gone", "too_large",
                   "rate_limited", "unavailable")
OTHER_REASON = "other"
PHASES = tuple(p.value for p in Phase)
SWITCH_KINDS = ("warm", "cold")
JOB_STATES = tuple(s.value for s in JobStatus)
POOLS = tuple(p.value for p in Pool)
GPU_STATES = ("busy", "idle")
MEMORY_SOURCES = ("declared", "measured")
PER_JOB = frozenset({"rollmux_job_iteration_slowdown"})  # the families with a `job` label

# Permit waits span six orders of magnitude. A permit for a node nobody else holds comes back
# in one loopback round trip (about a millisecond); otherwise the job waits for the other
# members' phases on that node, tens of seconds to a few minutes per round-robin period. Ten
# minutes is beyond any planned period we admit, so +Inf above it means a stuck group.
PERMIT_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                       1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A rollout or train phase of RL post-training takes from seconds (small models, short
# responses) to tens of minutes (long reasoning rollouts); an hour bounds the slowest.
PHASE_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
# A warm switch reloads weights and optimizer state from host memory (sub-second to seconds);
# a cold one loads from disk and re-initializes the engine (tens of seconds to minutes).
SWITCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
    return value


class _StateCollector(Collector):
    """State gauges read at scrape time from one `snapshot()` call; nothing on failure."""

    def __init__(self, snapshot: Callable[[], dict], errors: Counter) -> None:
        self._snapshot = snapshot
        self._errors = errors
        self._lock = threading.Lock()
        self._failing = False  # log a failure once, not on every scrape while it lasts

    def describe(self) -> Iterable[Metric]:
        """The state families without samples, so registering checks names without a snapshot."""
        return self._families()

    def collect(self) -> Iterator[Metric]:
        """Take one snapshot and turn it into the state families."""
        try:
            snap = self._snapshot()
            families = self._families(snap)
        except Exception:
            self._errors.inc()
            with self._lock:
                first, self._failing = not self._failing, True
            if first:
                log.exception("state snapshot for /metrics failed; state series left out until it recovers")
            return iter(())
        with self._lock:
            if self._failing:
                log.info("state snapshot for /metrics recovered")
            self._failing = False
        return iter(families)

    @staticmethod
    def _families(snap: dict | None = None) -> list[Metric]:
        jobs = GaugeMetricFamily("rollmux_jobs", "Jobs per state.", labels=["state"])
        groups = GaugeMetricFamily("rollmux_groups", "Co-execution groups alive.")
        gpus = GaugeMetricFamily("rollmux_pool_gpus", "GPUs held per pool, busy or idle.", labels=["pool", "state"])
        cost = GaugeMetricFamily("rollmux_cost_per_hour", "Provisioning cost rate per pool, $/h.", labels=["pool"])
        slowdown = GaugeMetricFamily("rollmux_job_iteration_slowdown",
                                     "A running job's mean iteration time over its solo iteration time.",
                                     labels=["job"])
        host = GaugeMetricFamily("rollmux_host_memory_bytes",
                                 "Host memory per node summed over active jobs, declared or measured.",
                                 labels=["pool", "source"])
        over = GaugeMetricFamily("rollmux_jobs_over_memory_declaration",
                                 "Active jobs measured to hold more host memory than they declared.")
        compacted = CounterMetricFamily("rollmux_rollout_nodes_compacted",
                                        "Rollout nodes groups gave back by compaction (elastic rollout).")
        out: list[Metric] = [jobs, groups, gpus, cost, slowdown, host, over, compacted]
        if snap is None:
            return out
        # Build every sample before yielding any, so a malformed snapshot yields nothing at all.
        by_state = snap.get("jobs_by_state", {})
        for state in JOB_STATES:
            jobs.add_metric([state], float(by_state.get(state, 0)))
        groups.add_metric([], float(snap.get("groups", 0)))
        pool_gpus, pool_cost = snap.get("pool_gpus", {}), snap.get("cost_per_hour", {})
        for pool in POOLS:
            for state in GPU_STATES:
                gpus.add_metric([pool, state], float(pool_gpus.get(pool, {}).get(state, 0)))
            cost.add_metric([pool], float(pool_cost.get(pool, 0.0)))
        for job_id, value in sorted(snap.get("slowdown", {}).items()):
            slowdown.add_metric([str(job_id)], float(value))
        memory = snap.get("host_memory_bytes", {})
        for pool in POOLS:
            for source in MEMORY_SOURCES:
                host.add_metric([pool, source], float(memory.get(pool, {}).get(source, 0.0)))
        over.add_metric([], float(snap.get("over_memory_declaration", 0)))
        compacted.add_metric([], float(snap.get("rollout_nodes_compacted", 0)))
        return out


class Telemetry:
    """All rollmux metrics on one CollectorRegistry of their own (never the global one)."""

    def __init__(self, snapshot: Callable[[], dict], registry: CollectorRegistry | None = None,
                 version: str = rollmux.__version__) -> None:
        """Register every metric on `registry` (a fresh one by default); `snapshot` feeds the state gauges."""
        self.registry = CollectorRegistry() if registry is None else registry
        r = self.registry
        Info("rollmux_build", "The running rollmux and Python versions.", registry=r).info(
            {"version": version, "python": platform.python_version()})
        self._admissions = Counter("rollmux_admissions", "Jobs admitted, by placement case.", ["case"], registry=r)
        self._isolated = Counter("rollmux_isolated_placements",
                                 "Jobs admitted to a group of their own, by why no existing group took them.",
                                 ["reason"], registry=r)
        self._refused = Counter("rollmux_refused_requests", "Requests refused, by reason.", ["reason"], registry=r)
        self._permit_wait = Histogram("rollmux_permit_wait_seconds",
                                      "Wait from asking for a phase permit to getting it.",
                                      buckets=PERMIT_WAIT_BUCKETS, registry=r)
        self._phase = Histogram("rollmux_phase_duration_seconds", "Length of a finished phase.", ["phase"],
                                buckets=PHASE_BUCKETS, registry=r)
        self._switch = Histogram("rollmux_context_switch_seconds", "Time to switch a node to another job.", ["kind"],
                                 buckets=SWITCH_BUCKETS, registry=r)
        self._journal = Counter("rollmux_journal_records", "Records committed to the journal.", registry=r)
        # Registered after the state collector, so a scrape already counts its own snapshot failure.
        snapshot_errors = Counter("rollmux_state_snapshot_errors", "Scrapes whose state snapshot raised.",
                                  registry=None)
        # Every known label value exists from the start at 0, so rate() sees the first event.
        for case in ADMISSION_CASES:
            self._admissions.labels(case)
        for reason in ISOLATION_REASONS:
            self._isolated.labels(reason)
        for reason in (*REFUSAL_REASONS, OTHER_REASON):
            self._refused.labels(reason)
        for phase in PHASES:
            self._phase.labels(phase)
        for kind in SWITCH_KINDS:
            self._switch.labels(kind)
        r.register(_StateCollector(snapshot, snapshot_errors))
        r.register(snapshot_errors)

    def admitted(self, case: str) -> None:
        """Count one admitted job; `case` is one of ADMISSION_CASES (ValueError otherwise)."""
        self._admissions.labels(_check(case, ADMISSION_CASES, "admission case")).inc()

    def isolated(self, reason: str) -> None:
        """Count one job admitted alone; `reason` is one of ISOLATION_REASONS (ValueError otherwise)."""
        self._isolated.labels(_check(reason, ISOLATION_REASONS, "isolation reason")).inc()

    def refused(self, reason: str) -> None:
        """Count one refused request; a reason outside REFUSAL_REASONS counts as "other"."""
        self._refused.labels(reason if reason in REFUSAL_REASONS else OTHER_REASON).inc()

    def permit_wait(self, seconds: float) -> None:
        """Observe how long one permit request waited before it was granted."""
        self._permit_wait.observe(seconds)

    def phase_done(self, phase: str, seconds: float) -> None:
        """Observe the length of one finished phase; `phase` is rollout or train (ValueError otherwise)."""
        self._phase.labels(_check(phase, PHASES, "phase")).observe(seconds)

    def context_switch(self, kind: str, seconds: float) -> None:
        """Observe one context switch; `kind` is warm or cold (ValueError otherwise)."""
        self._switch.labels(_check(kind, SWITCH_KINDS, "context switch kind")).observe(seconds)

    def journal_records(self, n: int = 1) -> None:
        """Count `n` records committed to the journal."""
        self._journal.inc(n)

    def exposition(self, per_job: bool = True) -> tuple[bytes, str]:
        """The registry in Prometheus text format, with the content type to serve it under; without
        `per_job` the series that name a job (PER_JOB) are left out."""
        return generate_latest(_Served(self.registry, per_job)), CONTENT_TYPE_LATEST


class _Served:
    """A registry's collection as served (what generate_latest reads): no `_created` samples (each
    counter's and histogram's creation time, one more series per series, that no query of ours reads),
    and without `per_job` no family that names a job. (prometheus_client's `disable_created_metrics()`
    would do the first for every registry of the process, Ray's included; this touches only ours.)"""

    def __init__(self, registry: CollectorRegistry, per_job: bool) -> None:
        self._registry, self._per_job = registry, per_job

    def collect(self) -> Iterator[Metric]:
        """Every family of the registry (less PER_JOB's unless `per_job`), without `_created` samples."""
        for family in self._registry.collect():
            if self._per_job or family.name not in PER_JOB:
                served = Metric(family.name, family.documentation, family.type, family.unit)
                served.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield served
