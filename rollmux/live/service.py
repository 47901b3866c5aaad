"""The scheduler service's core (DESIGN §8): the live `ClusterState`, free of HTTP and Ray.

It runs the simulator's scheduler unchanged: `LiveState` wraps the same
`ClusterState` (placement policy, plan validation, one `GroupController` per
group, departures, regrouping). `SchedulerCore` adds what a live service
needs around it:

- one scheduler thread (`WallClockEnvironment`) owns the state; callers (the
  HTTP server's event loop, tests) hand it their work as futures;
- **write-ahead, group commit**: every decision is staged in the journal
  before memory changes; a batch of decisions is committed (one fsync) before
  any of their replies goes out. A failed stage or commit rolls the batch
  back and rebuilds memory from the journal, so memory always equals a
  replay of what is committed, and the batch's callers get `Unavailable`;
- tokens: an admin token, and one per job (stored only as SHA-256 hashes);
  every operation is authorized for its caller (`caller`, `_authorize`);
- heartbeats (a silent job is failed) and **phase leases** (a phase that
  outlives its lease is hung: the job is failed), both reclaiming permits so
  the group goes on;
- departure-time regrouping: members of a dissolved group move at their next
  iteration boundary (their next permit carries the new placement).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from rollmux.core.config import SchedulerConfig
from rollmux.core.colo_model import colocated_phases, group_gpus
from rollmux.core.env import WallClockEnvironment
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.trace_io import unknown_fields
from rollmux.live.codec import job_to_dict, plan_to_dict, regroup_to_dict
from rollmux.live.handoff import Inbox, settle
from rollmux.live.in_process import ADMIN, InProcessApi
from rollmux.live.journal import JournalError, Store, open_store
from rollmux.live.live_state import LiveState
from rollmux.live.memory_store import MemoryStore
from rollmux.live.refusals import (
    AuthError,
    BadRequest,
    Conflict,
    Forbidden,
    JobGone,
    NotFound,
    NoToken,
    ServiceError,
    Unavailable,
)
from rollmux.live.supervision import Supervision
from rollmux.live.views import PAGE, job_view, metrics_snapshot, status_view
from rollmux.shim import PHASES

TIMING_FIELDS = ("wait_s", "onload_s", "run_s", "offload_s")
HOST_POOLS = ("rollout", "train")
GB = 1e9              # host_gb is in GB (10^9 bytes), as the job record declares it
MEMORY_STEP = 0.01    # a measured rise of host memory under 1% is not journaled again
log = logging.getLogger("rollmux.service")

__all__ = ["ADMIN", "AuthError", "BadRequest", "Conflict", "Forbidden", "JobGone", "NotFound", "SchedulerCore",
           "ServiceError", "Unavailable", "hash_token"]


def hash_token(token: str) -> str:
    """How a token is stored and compared: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


# The config record's version: 3 since the record holds the sectioned SchedulerConfig
# (core/config.py); versions 1 and 2 held its former flat fields.
CONFIG_VERSION = 3
# What a fresh store runs when the program embedding the core gives no config: the
# co-execution groups and their repairs (tests and tools embed the core with made-up jobs).
EMBEDDED_PROFILE = "groups"


def live_refusal(cfg: SchedulerConfig) -> str | None:
    """Why the live plane cannot execute `cfg` yet (one line naming the setting), or None."""
    if cfg.shapes.train_scaling:
        return ("setting shapes.train_scaling: the live plane keeps a group's training nodes as founded; "
                "run without it (--set shapes.train_scaling=false)")
    return None


def _config_record(cluster: ClusterSpec, cfg: SchedulerConfig) -> dict:
    return {"cluster": cluster.model_dump(exclude_none=True), "config": cfg.model_dump(), "version": CONFIG_VERSION}


def _config_from(d: dict) -> tuple[ClusterSpec, SchedulerConfig]:
    spec = ClusterSpec.model_validate(d["cluster"])
    if d.get("version", 1) >= 3:
        return spec, SchedulerConfig.model_validate(d["config"])
    return spec, legacy_config(d["cfg"], d.get("version", 1))


# A version 1 or 2 record's flat fields -> the setting each now is.
_LEGACY = {
    "max_group_size": "placement.max_group_size", "shrink": "regroup.shrink", "regroup": "regroup.enabled",
    "migration_scale": "regroup.migration_scale", "regroup_margin": "regroup.margin",
    "repair": "regroup.repair", "batch_order": "placement.batch_order", "consolidate": "regroup.consolidate",
    "train_scaling": "shapes.train_scaling", "elastic_rollout": "shapes.elastic_rollout",
    "colocate": "colocation.enabled", "colo_speed": "colocation.speed", "colo_margin": "colocation.margin",
    "colo_narrow": "colocation.narrow", "colo_regroup": "colocation.regroup", "colo_pair": "colocation.pair",
    "compact": "compaction.enabled", "compact_every_s": "compaction.every_s",
}
_LEGACY_INTRA = {
    "migration": "intra_group.migration", "tail_worker_frac": "intra_group.tail_worker_frac",
    "start_ratio": "intra_group.start_ratio", "migration_overhead_s": "intra_group.migration_overhead_s",
    "best_order_max": "intra_group.best_order_max", "order": "intra_group.order", "max_rate": "intra_group.max_rate",
    "plan": "admission.plan", "plan_quantile": "admission.quantile", "plan_z": "admission.z",
    "plan_chains": "admission.chains", "plan_length": "admission.length",
}


def legacy_config(flat: dict, version: int) -> SchedulerConfig:
    """The SchedulerConfig a version 1 or 2 config record meant: every field it holds, by its
    current setting; a setting it lacks keeps what those services ran (their defaults)."""
    old = {"admission.plan": "worst", "placement.pricing": "delta", "shapes.elastic_rollout": False,
           "colocation.enabled": False, "colocation.regroup": False, "colocation.pair": False,
           "regroup.repair": False, "compaction.enabled": False}
    overrides = dict(old)
    overrides.update({_LEGACY[k]: v for k, v in flat.items() if k in _LEGACY})
    overrides.update({_LEGACY_INTRA[k]: v for k, v in flat.get("intra", {}).items() if k in _LEGACY_INTRA})
    if flat.get("stretch_pricing"):
        overrides["placement.pricing"] = "stretch"
    if version < 2:
        # Version 1 services journaled the flat config's former default (elastic_rollout on) and
        # ignored it: their jobs were placed on nominal shapes, and so they stay.
        overrides["shapes.elastic_rollout"] = False
    return SchedulerConfig().with_overrides(overrides)


class SchedulerCore(Supervision, InProcessApi):
    """The service's logic, free of HTTP and Ray (so it is testable in-process)."""

    def __init__(self, cluster: dict | None = None, cfg: SchedulerConfig | None = None,
                 store: str | Store | None = None, heartbeat_timeout_s: float | None = None,
                 check_every_s: float = 0.5, watch_ray_nodes: bool = False, snapshot_every: int = 2000,
                 admin_token: str | None = None, lease_factor: float = 2.0, lease_min_s: float = 60.0,
                 telemetry: Any = None, tail_threshold: float = 0.8, repair: bool = False) -> None:
        self.env = WallClockEnvironment()
        # Live drift repair for a fresh store without `cfg` (a journal's config wins on restart).
        # Off unless asked: `rollmux serve` asks (--repair, on by default); programs that embed the
        # core with made-up profiles (tests, the demo, chaos) would see their made-up times as drift.
        self._repair_default = repair
        self.journal = (open_store(store) if isinstance(store, str) else store) if store else MemoryStore()
        self._admin_hash = hash_token(admin_token) if admin_token else None
        self.telemetry = telemetry
        self.lease_factor, self.lease_min_s, self.tail_threshold = lease_factor, lease_min_s, tail_threshold
        self.snapshot_every = snapshot_every
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.refused: deque[dict] = deque(maxlen=1000)  # refused requests (auth and bad input), newest last
        self.refused_count = 0
        self._waiting: dict[tuple[str, str], Future] = {}  # permits asked for, not yet granted
        self._after_release: dict[tuple[str, str], Future] = {}  # acquires that overtook their release
        self._replies: list[tuple[Future, Any, BaseException | None]] = []  # held until their batch commits
        self._flush_due = False
        self._gen = 0  # bumped by a rebuild: callbacks of the old controllers are void
        self._timeline: deque[dict] = deque(maxlen=5000)  # phase intervals per node (observability only)
        self._open: dict[tuple[str, str], list[dict]] = {}
        self._tail_sent: set[str] = set()
        self._nodes_of: dict[str, set[str]] = {}  # job -> Ray node ids of its workers (heartbeats)
        self._load(cluster, cfg)
        # A restart grants every job a grace period: its heartbeats were failing while the
        # service was down, and failing a live job would hand its held nodes to others.
        self._started = time.time()
        self._index_leases()
        grace = time.monotonic() + 2 * (heartbeat_timeout_s or 0.0)
        self._seen = {j: grace for j, r in self.state.jobs.items() if r.active}
        self._stopping = threading.Event()
        self._inbox = Inbox(lambda run: self.env.call_at(self.env.now(), run))
        self._thread = threading.Thread(target=self.env.serve, name="rollmux-scheduler", daemon=True)
        self._thread.start()
        self._check_every = check_every_s
        self.request("drain").result()
        self.env.call_later(check_every_s, self._watchdog)
        if watch_ray_nodes:
            self.watch_ray_nodes()

    # -- state from the journal -------------------------------------------------------------
    def _load(self, cluster: dict | None, cfg: SchedulerConfig | None) -> None:
        """Build memory from the journal (snapshot, then later records); a fresh store gets its config."""
        snap = self.journal.snapshot()
        records = self.journal.records(after=snap[0] if snap else 0)
        self.recovered_records = (snap[0] if snap else 0) + len(records)
        config = snap[1]["config"] if snap else (self._first_config(records.pop(0)) if records else None)
        if config is not None:  # a restart: the journal's cluster and knobs win
            spec, cfg = _config_from(config)
            if cluster is not None and ClusterSpec.model_validate(cluster) != spec:
                raise ServiceError(f"journal {self.journal.url} was written for another cluster; "
                                   "start with no cluster or a fresh store")
        else:
            if cluster is None:
                raise ServiceError("no cluster given and no journal to recover it from")
            spec = ClusterSpec.model_validate(cluster)
            if cfg is None:
                cfg = SchedulerConfig.profile(EMBEDDED_PROFILE).with_overrides(
                    {"regroup.repair": self._repair_default})
            refusal = live_refusal(cfg)
            if refusal is not None:
                raise ServiceError(refusal)
            config = _config_record(spec, cfg)
            self.journal.append("config", config)
            self.recovered_records = 1
        self._config = config
        self._last_seq = self._snap_seq = self.recovered_records
        self.state = LiveState(self.env, spec, cfg)
        # Evictions a live drift repair decides are journaled before they take effect.
        self.state.regroup_commit = lambda r: self._record("movers", regroup_to_dict(r))
        # So is every rollout node a compaction gives back (elastic rollout only).
        self.state.compact_commit = lambda g, n: self._record("compact", {"group_id": g, "node": n})
        if snap:
            self.state.load(snap[1])
        for r in records:
            self.state.apply(r.kind, r.payload, replay=True)
        self._token_of = {r.token_hash: j for j, r in self.state.jobs.items()}
        self._queue: deque[str] = deque(j for j, r in self.state.jobs.items() if r.status in ("queued", "moving"))

    def _first_config(self, first) -> dict:
        """The payload of a journal's first record, which must be its 'config'."""
        if first.kind != "config":
            raise ServiceError(f"journal {self.journal.url}: first record is {first.kind!r}, not 'config'")
        return first.payload

    def _rebuild(self, why: BaseException) -> None:
        """A journal write failed: drop the batch, rebuild memory from the journal, fail its callers."""
        log.error("journal write failed, rolling memory back to the journal: %s", why)
        try:
            self.journal.rollback()
        except JournalError as exc:  # the batch is lost either way; the rebuild reads what is committed
            log.error("journal rollback failed: %s", exc)
        self._gen += 1
        failed, self._replies = self._replies, []
        self._load(None, None)
        self._index_leases()
        self._open.clear()
        self._tail_sent.clear()
        # Jobs the rebuild forgot (a submission rolled back) are not watched; the rest keep their beat.
        self._seen = {j: t for j, t in self._seen.items() if j in self.state.jobs and self.state.jobs[j].active}
        err = Unavailable(f"the journal could not record the decision; nothing changed, ask again ({why})")
        answers = [(fut, None, err) for fut, _, _ in failed]
        for (jid, phase), fut in list(self._waiting.items()):  # still waiting: ask the new controllers
            job = self.state.jobs.get(jid)
            if fut.done() or job is None or not job.active:
                self._waiting.pop((jid, phase))
                answers.append((fut, None, err))
            elif phase in job.held:  # the rebuild kept a grant it had (its reply was lost)
                self._waiting.pop((jid, phase))
                answers.append((fut, job.held[phase], None))
            elif job.group_id is not None:
                self._request(jid, phase)
        settle(answers)
        self._drain()

    # -- plumbing -----------------------------------------------------------------------
    def request(self, op: str, *args: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
        """Run `_op_<op>(*args)` on the scheduler thread; its result arrives once its records commit.

        A concurrent Future, or with `loop` (called on that loop's thread) an asyncio one."""
        fn = getattr(self, f"_op_{op}")
        fut: Any = loop.create_future() if loop is not None else Future()

        def call() -> None:
            try:
                result = fn(*args)
            except ServiceError as exc:  # refused before any change
                settle([(fut, None, exc)])
                return
            except Exception as exc:  # a failed journal write, or a bug that may have half-changed memory
                if not isinstance(exc, JournalError):
                    log.exception("operation %s failed", op)
                self._replies.append((fut, None, None))  # failed by the rebuild, with the batch
                self._rebuild(exc)
                return
            self._reply(fut, result)
        self._inbox.post(call)
        return fut

    def _reply(self, fut: Any, value: Any, exc: BaseException | None = None) -> None:
        """Answer (or fail) once everything journaled so far is committed (group commit)."""
        self._replies.append((fut, value, exc))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """One commit after the calls already queued: the batch that group commit makes."""
        if not self._flush_due:
            self._flush_due = True
            self.env.call_at(self.env.now(), self._flush)

    def _flush(self) -> None:
        """Commit the batch (one fsync for every decision since the last), then send its replies."""
        self._flush_due = False
        staged = self.journal.pending()
        if staged:
            try:
                self.journal.commit()
            except JournalError as exc:
                self._rebuild(exc)
                return
            if self.telemetry is not None:
                self.telemetry.journal_records(staged)
            self._maybe_snapshot()
        replies, self._replies = self._replies, []
        settle(replies)

    def _maybe_snapshot(self) -> None:
        """Compaction: a restart loads the snapshot and replays only later records. Not fatal."""
        if not self.snapshot_every or self._last_seq - self._snap_seq < self.snapshot_every:
            return
        try:
            self.journal.save_snapshot(self._last_seq, {"config": self._config, **self.state.dump()})
            self._snap_seq = self._last_seq
        except JournalError as exc:  # the records are all there: a restart just replays more of them
            log.warning("snapshot failed (the journal is intact; tried again after %d more records): %s",
                        self.snapshot_every, exc)
            self._snap_seq = self._last_seq

    def _record(self, kind: str, payload: dict) -> Any:
        """Stage a decision in the journal, then carry it out (the write-ahead rule)."""
        self._last_seq = self.journal.stage(kind, payload)
        result = self.state.apply(kind, payload)
        if kind == "submit":
            self._token_of[payload["token_hash"]] = payload["job"]["job_id"]
        return result

    def _refuse(self, op: str, job_id: Any, why: str, exc: type[ServiceError] = BadRequest,
                field: str | None = None) -> ServiceError:
        log.warning("refused %s for job %r: %s", op, job_id, why)
        self.refused.append({"op": op, "job_id": str(job_id), "why": why, "at": time.time()})
        self.refused_count += 1
        if self.telemetry is not None:
            self.telemetry.refused(exc.reason)
        return exc(f"{op} for job {job_id!r}: {why}", field)

    # -- who is calling ---------------------------------------------------------------------
    def identify(self, token: Any) -> str | None:
        """The identity a bearer token proves: ADMIN, a job id, or None (no or unknown token)."""
        if not isinstance(token, str) or not token:
            return None
        h = hash_token(token)
        if self._admin_hash is not None and hmac.compare_digest(h, self._admin_hash):
            return ADMIN
        jid = self._token_of.get(h)
        job = self.state.jobs.get(jid) if jid is not None else None
        # The dict lookup found the candidate; the stored hash is still compared in constant time.
        return jid if job is not None and hmac.compare_digest(h, job.token_hash) else None

    def caller(self, token: Any, job_id: Any = None) -> str:
        """The identity of `token`, or AuthError (401) naming the job it was meant for."""
        who = self.identify(token)
        if who is None:
            if not token:
                raise self._refuse("auth", job_id, "no bearer token", NoToken)
            raise self._refuse("auth", job_id, "missing or wrong token", AuthError)
        return who

    def _authorize(self, op: str, caller: str, job_id: Any, admin_ok: bool = False):
        """The job `caller` may act on with `op`, or the refusal (403 / 404)."""
        if caller == ADMIN and not admin_ok:
            raise self._refuse(op, job_id, "the admin token cannot act as a job", Forbidden)
        if caller != ADMIN and caller != job_id:
            raise self._refuse(op, job_id, "this token belongs to another job", Forbidden)
        job = self.state.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise self._refuse(op, job_id, "unknown job id", NotFound)
        if caller != ADMIN and job.active:
            self._seen[job_id] = time.monotonic()
        return job

    def _active(self, op: str, job):
        """Refuse (410) an operation on a job that is no longer scheduled."""
        if not job.active:
            raise self._refuse(op, job.spec.job_id,
                               f"job is {job.status}" + (f" ({job.reason})" if job.reason else ""), JobGone)
        return job

    # -- submission and placement -----------------------------------------------------------
    def parse_job(self, record: Any) -> JobSpec:
        """Validate a job record (DESIGN §2): BadRequest naming the first bad field."""
        if not isinstance(record, dict):
            raise self._refuse("submit", None, f"a job record must be a mapping, not {type(record).__name__}")
        try:
            job = JobSpec.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(record)"
            raise self._refuse("submit", record.get("job_id"),
                               f"field {where}: {first['msg']} ({exc.error_count()} error(s))",
                               field=where) from None
        extra = unknown_fields(job)
        if extra:  # a typo in a live submission is refused, not guessed at
            raise self._refuse("submit", job.job_id, f"unknown field(s) {', '.join(extra)}", field=extra[0])
        reason = self.state.cluster.cluster.job_unplaceable_reason(job)
        if reason is not None:
            raise self._refuse("submit", job.job_id, f"can never be placed: {reason}")
        return job

    def _op_submit(self, caller: str, job: JobSpec) -> dict:
        if caller != ADMIN:
            raise self._refuse("submit", job.job_id, "only the admin may submit jobs", Forbidden)
        old = self.state.jobs.get(job.job_id)
        if old is not None and old.active:
            raise self._refuse("submit", job.job_id, "already submitted and still running", Conflict)
        token = secrets.token_urlsafe(24)
        if old is not None:
            self._token_of.pop(old.token_hash, None)
        self._record("submit", {"job": job_to_dict(job), "token_hash": hash_token(token), "at": time.time()})
        self._seen[job.job_id] = time.monotonic()
        self._queue.append(job.job_id)
        self._drain()
        return {"job_id": job.job_id, "token": token, **self._placement(job.job_id)}

    def _placement(self, job_id: str) -> dict:
        job = self.state.jobs[job_id]
        out = {"group_id": job.group_id, "group": job.group_id, "epoch": job.epoch, "status": job.status,
               "case": job.case, "nodes": None}
        if job.group_id is not None:
            cs = self.state.cluster
            colocated = job.group_id in cs.colocated
            m = (cs.colocated if colocated else cs.groups)[job.group_id].member(job_id)
            # "colocated": every phase runs on its training nodes (its rollout permits say pool "train").
            out.update(rollout_nodes=list(m.rollout_nodes), train_nodes=list(m.train_nodes),
                       nodes={"rollout": list(m.rollout_nodes), "train": list(m.train_nodes)},
                       mode="colocated" if colocated else "disaggregated")
        return out

    def _op_drain(self) -> None:
        self._drain()

    def _drain(self) -> None:
        """Place queued and moving jobs, first come first served (a mover goes first)."""
        while self._queue:
            jid = self._queue[0]
            job = self.state.jobs[jid]
            if not job.active:
                self._queue.popleft()
                continue
            # A job placed again is planned with what was measured of it (times, host memory).
            spec, progress = self.state.planning_spec(jid), self.state.progress(time.time())
            plan = self.state.cluster.decide(spec, progress)
            if plan is None:
                return  # FIFO: the head waits for nodes, and so does everyone behind it
            # With `colo_pair` an arrival may found a group with a co-located job (core/pairing.py):
            # its place record, then the mover's slot, as the simulator applies them.
            pairing = self.state.cluster.pair(spec, plan, progress) if job.epoch == 0 else None
            plan = plan if pairing is None else pairing.plan
            self._record("place", {"job_id": jid, "plan": plan_to_dict(plan), "arrival": job.epoch == 0})
            if pairing is not None:
                self._record("movers", regroup_to_dict(pairing.regroup))
            self._queue.popleft()
            if self.telemetry is not None and job.epoch == 1:
                self.telemetry.admitted(job.case)
                if plan.why is not None:  # isolated: why no group took it
                    self.telemetry.isolated(plan.why.reason.value)
            for phase in PHASES:  # permits asked for while it had no group
                if (jid, phase) in self._waiting and self.state.jobs[jid].group_id is not None:
                    self._request(jid, phase)

    # -- permits --------------------------------------------------------------------------
    def _op_acquire(self, caller: str, job_id: str, phase: Any, last_grant: Any = None) -> Future:
        """A future permit. Asking again while waiting re-attaches to the same request (long polls).

        `last_grant`: the newest `grant_no` the caller has received. If the job still holds
        this phase, a newer held permit means the reply was lost (it is returned again); an
        older one means its release is still on the way, so the request waits for it."""
        job = self._active("acquire", self._authorize("acquire", caller, job_id))
        if phase not in PHASES:
            raise self._refuse("acquire", job_id, f"unknown phase {phase!r}; use one of {PHASES}", field="phase")
        if last_grant is not None and (isinstance(last_grant, bool) or not isinstance(last_grant, int)):
            raise self._refuse("acquire", job_id, "last_grant must be an integer or null", field="last_grant")
        fut = self._waiting.get((job_id, phase)) or self._after_release.get((job_id, phase))
        if fut is not None:
            return fut
        fut = Future()
        if phase in job.held:
            if last_grant is None or job.held[phase].get("grant_no", 0) > last_grant:
                fut.set_result(job.held[phase])  # a retry whose first reply was lost
            else:
                self._after_release[(job_id, phase)] = fut
            return fut
        self._waiting[(job_id, phase)] = fut
        fut.asked_at = time.monotonic()
        if job.group_id is not None:
            self._request(job_id, phase)
        return fut

    def _request(self, job_id: str, phase: str) -> None:
        job = self.state.jobs[job_id]
        ctl = self.state.cluster.controllers[job.group_id]
        gen = self._gen

        def on_grant(grant) -> None:
            if gen != self._gen:  # a controller from before a rebuild
                return
            fut = self._waiting.pop((job_id, phase))
            m = ctl.group.member(job_id)
            at = time.time()
            payload = {**asdict(grant), "nodes": list(grant.nodes), "epoch": job.epoch, "at": at,
                       "grant_no": self.state.grants + 1,
                       "lease_s": self.lease_s(self.state.planning_spec(job_id), phase, grant.switch_s,
                                               self._phase_scale(job_id, phase)),
                       "rollout_nodes": list(m.rollout_nodes), "train_nodes": list(m.train_nodes),
                       # elastic rollout (core/elastic.py): its rollout runs this much longer on
                       # these nodes than on its declared count (1.0: the declared count)
                       "rollout_factor": m.rollout_factor,
                       # JSON-native, as a replay reads them back from the journal (tuples would differ)
                       "workers": [list(w) for w in grant.workers], "keep": [list(k) for k in grant.keep],
                       "train_held": list(grant.train_held)}
            self._record("grant", payload)  # a JournalError unwinds to `request`, which rebuilds
            self._opened(payload)
            self._lease_starts(job_id, payload)
            if self.telemetry is not None and hasattr(fut, "asked_at"):
                self.telemetry.permit_wait(time.monotonic() - fut.asked_at)
            self._reply(fut, payload)
        ctl.request(job_id, phase, on_grant)

    def _phase_scale(self, job_id: str, phase: str) -> float:
        """How much longer than declared the job's `phase` runs where it is placed: a co-located
        job's phases follow the veRL model (core/colo_model.py); a disaggregated one's rollout
        its elastic factor (core/elastic.py), its other phases 1."""
        cs = self.state.cluster
        gid = self.state.jobs[job_id].group_id
        if gid in cs.groups and phase == "rollout":
            return cs.groups[gid].member(job_id).rollout_factor
        if gid not in cs.colocated or phase not in ("rollout", "train"):
            return 1.0
        rollout, train, _ = colocated_phases(self.state.planning_spec(job_id), cs.cluster, 1.0, 1.0,
                                             self.state.cfg.colocation.speed, group_gpus(cs.colocated[gid], cs.cluster))
        return rollout if phase == "rollout" else train

    def _opened(self, grant: dict) -> None:
        """A phase interval per node starts (the dashboard's timeline)."""
        # An init holds its training nodes too; a sync holds none.
        held = [(grant["pool"], n) for n in grant["nodes"]] + [("train", n) for n in grant.get("train_held", ())]
        rows = [{"group_id": grant["group_id"], "pool": pool, "node": n, "job_id": grant["job_id"],
                 "phase": grant["phase"], "start": grant["at"], "end": None} for pool, n in held]
        self._timeline.extend(rows)
        self._open[(grant["job_id"], grant["phase"])] = rows

    def _closed(self, job_id: str, phase: str) -> None:
        for row in self._open.pop((job_id, phase), []):
            row["end"] = time.time()

    def _op_release(self, caller: str, job_id: str, phase: Any, timings: Any, grant_no: Any = None) -> dict:
        job = self._active("release", self._authorize("release", caller, job_id))
        if phase not in PHASES:
            raise self._refuse("release", job_id, f"unknown phase {phase!r}; use one of {PHASES}", field="phase")
        epoch = timings.get("epoch") if isinstance(timings, dict) else None
        if isinstance(epoch, int) and 0 < epoch < job.epoch:
            log.info("stale release of %s by %s (epoch %d < %d): ignored", phase, job_id, epoch, job.epoch)
            return {"stale": True}  # its permit was reclaimed when it was re-admitted: nothing left to free
        held = job.held.get(phase)
        if held is None or (isinstance(grant_no, int) and grant_no != held.get("grant_no")):
            raise self._refuse("release", job_id, f"holds no {phase!r} permit"
                               + (f" numbered {grant_no}" if grant_no is not None else "") + " (double release?)",
                               Conflict)
        if not isinstance(timings, dict) or any(
                isinstance(timings.get(k), bool) or not isinstance(timings.get(k), (int, float))
                or not timings[k] >= 0 for k in TIMING_FIELDS):
            raise self._refuse("release", job_id, f"timings must give {', '.join(TIMING_FIELDS)} as numbers >= 0",
                               field="timings")
        host_gb = self._host_gb(job_id, timings.get("host_bytes"))
        self._record("release", {"job_id": job_id, "phase": phase,
                                 "timings": {k: float(timings[k]) for k in TIMING_FIELDS}})
        self._measured(job_id, phase, host_gb)
        self._closed(job_id, phase)
        if self.telemetry is not None:
            self.telemetry.phase_done(phase, float(timings["run_s"]))
        if self.telemetry is not None and phase in ("rollout", "train"):  # the phases that onload
            self.telemetry.context_switch("cold" if held.get("switch_s", 0) > self.state.cluster.intra.warm_switch_s
                                          else "warm", float(timings["onload_s"]))
        if phase == "rollout":
            self._tail_sent.discard(job_id)
        self._resume_after_release(job_id, phase)
        if phase == "train" and self.state.jobs[job_id].migrate:
            self._move(job_id, "regroup")
        return {}

    def _host_gb(self, job_id: str, host_bytes: Any) -> dict[str, float] | None:
        """A release's measured host memory (bytes per node, by pool) in GB, or the refusal."""
        if host_bytes is None:
            return None
        if not isinstance(host_bytes, dict) or any(
                p not in HOST_POOLS or isinstance(n, bool) or not isinstance(n, int) or n < 0
                for p, n in host_bytes.items()):
            raise self._refuse("release", job_id, "host_bytes must map rollout/train to integers >= 0",
                               field="timings.host_bytes")
        return {p: n / GB for p, n in host_bytes.items()}

    def _measured(self, job_id: str, phase: str, host_gb: dict[str, float] | None) -> None:
        """Feed what a release measured to the scheduler: host memory that rose (journaled as
        `memory`), and at an iteration's end its phase times (`observe`: the drift repair)."""
        job = self.state.jobs[job_id]
        seen = job.host_measured
        if host_gb and any(p not in seen or gb > seen[p] * (1 + MEMORY_STEP) for p, gb in host_gb.items()):
            self._record("memory", {"job_id": job_id, "host_gb": {p: max(gb, seen.get(p, 0.0))
                                                                  for p, gb in host_gb.items()}})
        rollout_s = job.last_run.get("rollout")
        if (phase == "train" and self.state.cfg.regroup.repair and rollout_s is not None and job.group_id is not None
                and not job.migrate):
            self._record("observe", {"job_id": job_id, "rollout_s": rollout_s, "train_s": job.last_run["train"],
                                     "at": time.time(), "rollout_factor": job.last_factor})

    def _resume_after_release(self, job_id: str, phase: str) -> None:
        """An acquire that overtook this release may now ask for its permit."""
        fut = self._after_release.pop((job_id, phase), None)
        if fut is not None:
            self._waiting[(job_id, phase)] = fut
            fut.asked_at = time.monotonic()
            if self.state.jobs[job_id].group_id is not None:
                self._request(job_id, phase)

    def _op_progress(self, caller: str, job_id: str, done: Any, total: Any) -> dict:
        """Finished/total responses of the running rollout; past the threshold it is tail-bound."""
        job = self._active("progress", self._authorize("progress", caller, job_id))
        for name, v in (("done", done), ("total", total)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise self._refuse("progress", job_id, f"{name} must be an integer >= 0", field=name)
        if done > total:
            raise self._refuse("progress", job_id, "done must not exceed total", field="done")
        grant = job.held.get("rollout")
        tail = (grant is not None and total > 0 and done / total >= self.tail_threshold
                and job_id not in self._tail_sent and grant.get("tail_share", 0) > 0)
        if tail:
            self._record("tail", {"job_id": job_id})
            self._tail_sent.add(job_id)  # after the record: a failed one is tried again
        return {"tail": tail}

    def _op_heartbeat(self, caller: str, job_id: str, nodes: Any = None, readmit: Any = None) -> dict:
        """The job is alive (its workers run on these Ray nodes); `readmit`: it lost them, place it again."""
        self._active("heartbeat", self._authorize("heartbeat", caller, job_id))
        if nodes is not None and (not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) for n in nodes)):
            raise self._refuse("heartbeat", job_id, "nodes must be a list of Ray node id strings", field="nodes")
        if readmit is not None and not isinstance(readmit, str):
            raise self._refuse("heartbeat", job_id, "readmit must be a reason string", field="readmit")
        if nodes is not None:
            self._nodes_of[job_id] = {str(n) for n in nodes}
        if readmit is not None:
            self._move(job_id, f"readmit: {readmit[:200]}")
        return self._placement(job_id)

    # -- leaving ------------------------------------------------------------------------
    def _op_finish(self, caller: str, job_id: str) -> dict:
        self._active("finish", self._authorize("finish", caller, job_id))
        self._depart(job_id, "done", None)
        return {}

    def _op_cancel(self, caller: str, job_id: str) -> dict:
        """Cancel a job (admin or the job itself): its permits are reclaimed, its group goes on."""
        self._active("cancel", self._authorize("cancel", caller, job_id, admin_ok=True))
        self._depart(job_id, "cancelled", "cancelled by " + ("the admin" if caller == ADMIN else "the job"))
        return {}

    def _move(self, job_id: str, why: str) -> None:
        log.info("job %s leaves its group (%s)", job_id, why)
        rest = self._record("move_out", {"job_id": job_id, "why": why})
        for phase in PHASES:  # its permits were reclaimed: overtaking acquires go ahead
            self._closed(job_id, phase)
            self._resume_after_release(job_id, phase)
        self._repair(rest)
        if self.state.jobs[job_id].group_id is None:  # no reserved slot: placed again, first in line
            self._queue.appendleft(job_id)
        else:
            for phase in PHASES:  # it took its reserved slot: permits it waits for are asked there
                if (job_id, phase) in self._waiting:
                    self._request(job_id, phase)
        self._drain()

    def _depart(self, job_id: str, status: str, reason: str | None) -> None:
        rest = self._record("leave", {"job_id": job_id, "status": status, "reason": reason})
        self._seen.pop(job_id, None)
        self._nodes_of.pop(job_id, None)
        for phase in PHASES:
            self._closed(job_id, phase)
            fut = self._waiting.pop((job_id, phase), None) or self._after_release.pop((job_id, phase), None)
            if fut is not None:
                self._reply(fut, None, JobGone(f"job {job_id!r} is {status}" + (f" ({reason})" if reason else "")))
        self._repair(rest)
        self._drain()

    def _repair(self, rest) -> None:
        """Departure-time regrouping, as in the simulator: each decision is journaled (its moves'
        slots reserved) before the next is made; movers go at their next boundary."""
        self.state.cluster.after_departure(rest, self.state.progress(time.time()),
                                           commit=lambda r: self._record("movers", regroup_to_dict(r)))

    # -- inspection ---------------------------------------------------------------------
    def _op_job(self, caller: str, job_id: str) -> dict:
        return job_view(self._authorize("job", caller, job_id, admin_ok=True), time.time(),
                        self.state.cluster.planned.get(job_id))

    def _op_status(self, caller: str, offset: int = 0, limit: int = PAGE) -> dict:
        if caller != ADMIN:
            raise self._refuse("status", None, "only the admin may read the whole status", Forbidden)
        return status_view(self, time.time(), offset, limit)

    def _op_dump(self) -> dict:
        return self.state.dump()

    def _op_metrics(self) -> dict:
        return metrics_snapshot(self)

    def _op_stop_waiting(self) -> int:
        """Shutting down: every long poll is answered now (it will ask the next instance)."""
        waiting = list(self._waiting.values()) + list(self._after_release.values())
        for fut in waiting:
            self._reply(fut, None, Unavailable("the scheduler is stopping; ask again"))
        self._waiting.clear()
        self._after_release.clear()
        return len(waiting)

    def shutdown(self) -> None:
        """Answer every waiter, commit what is staged, stop the scheduler thread, close the journal."""
        if not self._stopping.is_set():
            self._stopping.set()
            try:
                self.request("stop_waiting").result(timeout=5)
            except Exception:  # noqa: BLE001 -- stopping anyway
                log.exception("could not answer waiters before stopping")
            self.env.stop()
            self._thread.join(timeout=5)
            self.journal.close()
