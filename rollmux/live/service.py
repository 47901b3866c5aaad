"""The scheduler service's core (DESIGN §8): the live `ClusterState`, free of HTTP and Ray.

It runs the simulator's scheduler unchanged: `LiveState` wraps the same
`ClusterState` (placement policy, plan validation, one `GroupController` per
group, departures, regrouping). `SchedulerCore` adds what a live service
needs around it:

- one scheduler thread (`WallClockEnvironment`) owns the state; callers (the
  HTTP server's event loop, tests) hand it their work as futures;
- **write-ahead, group commit**: every decision is a typed record
  (core/records.py), staged in the journal before memory changes (`_record`); a batch of decisions is committed (one fsync) before
  any of their replies goes out. A failed stage undoes only its operation, a
  failed commit its batch (live/rollback.py: from an in-memory checkpoint, never
  a replay of the journal), so memory always equals a replay of what is
  committed, and only the undone operations' callers get `Unavailable`; a
  refused operation changes nothing;
- tokens: an admin token, and one per job (stored only as SHA-256 hashes);
  every operation is listed in one table (`OPS`) with who may call it, and is
  authorized for its caller before it runs (`caller`, `_admit`);
- start-up and heartbeat deadlines (a job that does not start, or a started one
  that falls silent, is failed), an entrypoint's exit its launcher reports, and
  **phase leases** (a phase that outlives its lease is hung: the job is failed),
  each reclaiming permits so the group goes on;
- departure-time regrouping: members of a dissolved group move at their next
  iteration boundary (their next permit carries the new placement).

The permit protocol is `Permits` (live/permits.py), tokens and scopes `Access`
(live/access.py), start-ups, heartbeats, exits and leases `Supervision` (live/supervision.py).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from pydantic import ValidationError

from rollmux.core.config import SchedulerConfig
from rollmux.core.env import WallClockEnvironment
from rollmux.core.lifecycle import may_move
from rollmux.core.records import DECISIONS, Leave, MoveOut, Node, Submit, config_from, config_record
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.trace_io import unknown_fields
from rollmux.core.vocabulary import JobStatus, Pool
from rollmux.live.access import ADMIN_ON_JOB, ADMIN_ONLY, INTERNAL, JOB, JOB_OR_ADMIN, Access, Op, hash_token
from rollmux.live.events_log import event
from rollmux.live.handoff import Inbox, settle
from rollmux.live.in_process import ADMIN, InProcessApi
from rollmux.live.inventory import Inventory
from rollmux.live.journal import JournalError, MemoryStore, Store, open_store
from rollmux.live.live_state import LiveState
from rollmux.live.permits import Permits
from rollmux.live.refusals import (
    AuthError,
    BadRequest,
    Conflict,
    Forbidden,
    JobGone,
    NotFound,
    ServiceError,
    Unavailable,
)
from rollmux.live.rollback import Rollback
from rollmux.live.supervision import HEARTBEAT_TIMEOUT_S, STARTUP_TIMEOUT_S, Supervision
from rollmux.live.views import PAGE, job_view, measuring_of, metrics_snapshot, status_view
from rollmux.shim import PHASES

log = logging.getLogger("rollmux.service")

__all__ = ["ADMIN", "AuthError", "BadRequest", "Conflict", "Forbidden", "JobGone", "NotFound", "OPS", "Op",
           "SchedulerCore", "ServiceError", "Unavailable", "hash_token"]


# What a fresh store runs when the program embedding the core gives no config: the
# co-execution groups and their repairs (tests and tools embed the core with made-up jobs).
EMBEDDED_PROFILE = "groups"


def live_refusal(cfg: SchedulerConfig) -> str | None:
    """Why the live plane cannot execute `cfg` yet (one line naming the setting), or None."""
    if cfg.shapes.train_scaling:
        return ("setting shapes.train_scaling: the live plane keeps a group's training nodes as founded; "
                "run without it (--set shapes.train_scaling=false)")
    return None


# Records after which a node inventory's bindings are brought in line (live/inventory.py).
REBINDS = (*DECISIONS, Node)


class SchedulerCore(Access, Supervision, Permits, Inventory, Rollback, InProcessApi):
    """The service's logic, free of HTTP and Ray (so it is testable in-process)."""

    def __init__(self, cluster: dict | None = None, cfg: SchedulerConfig | None = None,
                 store: str | Store | None = None, heartbeat_timeout_s: float | None = HEARTBEAT_TIMEOUT_S,
                 check_every_s: float = 0.5, watch_ray_nodes: bool = False, snapshot_every: int = 2000,
                 admin_token: str | None = None, lease_factor: float = 2.0, lease_min_s: float = 60.0,
                 telemetry: Any = None, tail_threshold: float = 0.8, repair: bool = False,
                 turn_grace_s: float = 10.0, startup_timeout_s: float | None = STARTUP_TIMEOUT_S) -> None:
        """`heartbeat_timeout_s`, `startup_timeout_s`: a job's liveness deadlines (live/supervision.py; None: none)."""
        self.env = WallClockEnvironment()
        self.turn_grace_s = turn_grace_s  # shortest grace for asking for a turn (live/supervision.py)
        # Live drift repair for a fresh store without `cfg` (a journal's config wins on restart).
        # Off unless asked: `rollmux serve` asks (--repair, on by default); programs that embed the
        # core with made-up profiles (tests, the demo, chaos) would see their made-up times as drift.
        self._repair_default = repair
        self.journal = (open_store(store) if isinstance(store, str) else store) if store else MemoryStore()
        self._admin_hash = hash_token(admin_token) if admin_token else None
        self.telemetry = telemetry
        self.lease_factor, self.lease_min_s, self.tail_threshold = lease_factor, lease_min_s, tail_threshold
        self.snapshot_every = snapshot_every
        self.heartbeat_timeout_s, self.startup_timeout_s = heartbeat_timeout_s, startup_timeout_s
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
        self._start_clocks()
        self._stopping = threading.Event()
        self._inbox = Inbox(lambda run: self.env.call_at(self.env.now(), run))
        self._thread = threading.Thread(target=self.env.serve, args=(self._on_error,), name="rollmux-scheduler",
                                        daemon=True)
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
            spec, cfg = config_from(config)
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
            config = config_record(spec, cfg).payload()
            self.journal.append("config", config)
            self.recovered_records = 0  # a new journal: its config record is written, nothing was recovered
        self._config = config
        self._last_seq = self._snap_seq = self.recovered_records or 1
        state = LiveState(self.env, spec, cfg)
        # What a live drift repair decides (evictions; with elastic rollout, each rollout node a
        # compaction gives back) is journaled before it takes effect.
        state.commit = self._record
        if snap:
            state.load(snap[1])
        for r in records:
            state.apply(r.kind, r.payload, replay=True)
        self._token_of, self.state = {r.token_hash: j for j, r in state.jobs.items()}, state
        self._checkpoint()
        self._queue: deque[str] = deque(j for j, r in self.state.jobs.items()
                                        if r.status in (JobStatus.QUEUED, JobStatus.MOVING))

    def _first_config(self, first) -> dict:
        """The payload of a journal's first record, which must be its 'config'."""
        if first.kind != "config":
            raise ServiceError(f"journal {self.journal.url}: first record is {first.kind!r}, not 'config'")
        return first.payload

    # -- plumbing -----------------------------------------------------------------------
    def request(self, op: str, *args: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
        """Run operation `op` (`OPS`) on the scheduler thread, once its caller is admitted; its
        result arrives once its records commit.

        A concurrent Future, or with `loop` (called on that loop's thread) an asyncio one."""
        entry = OPS.get(op)
        if entry is None:
            raise ValueError(f"unknown operation {op!r}; the core runs {', '.join(OPS)}")
        fut: Any = loop.create_future() if loop is not None else Future()

        def call() -> None:
            mark = self._mark()
            try:
                self._admit(op, entry, args)
                result = entry.run(self, *args)
                if entry.scope in (JOB, JOB_OR_ADMIN) and args[0] != ADMIN:
                    self._called(args[1])  # (a job's first call is journaled)
            except ServiceError as exc:  # refused: whatever it had staged is undone first
                if self._mark()[0] > mark[0]:
                    self._rebuild(exc, mark)
                settle([(fut, None, exc)])
                return
            except Exception as exc:  # a failed journal write, or a bug that may have half-changed memory
                if not isinstance(exc, JournalError):
                    log.exception("operation %s failed", op)
                self._replies.append((fut, None, None))  # failed by the rollback, with what it did
                self._rebuild(exc, mark)
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
            self._committed_batch()
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

    def _record(self, record) -> Any:
        """Stage a record (core/records.py) in the journal, then carry it out (the write-ahead rule)."""
        payload = record.payload()
        self._last_seq = self.journal.stage(record.kind, payload)
        self._pending.append((record.kind, payload))  # (what a rollback of a later operation keeps)
        result = self.state.apply_record(record)
        if isinstance(record, Submit):
            self._token_of[record.token_hash] = record.job.job_id
        elif self.state.inventory and isinstance(record, REBINDS):
            self._rebind()
        return result

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
        """A new job (or a resubmission of one that ended): its token, and where it went."""
        old = self.state.jobs.get(job.job_id)
        if old is not None and old.active:
            raise self._refuse("submit", job.job_id, f"already submitted and still {old.status}: cancel it "
                               f"(rollmux cancel {job.job_id}, or DELETE /v1/jobs/{job.job_id}) or submit under "
                               "another job_id (rollmux run --job-id NEW)", Conflict)
        token = secrets.token_urlsafe(24)
        if old is not None:
            self._token_of.pop(old.token_hash, None)
        self._record(Submit(job=job, token_hash=hash_token(token), at=time.time()))
        event("submit", job=job.job_id, rollout_gpus=job.rollout_gpus, train_gpus=job.train_gpus, slo=job.slo)
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
                       nodes={Pool.ROLLOUT: list(m.rollout_nodes), Pool.TRAIN: list(m.train_nodes)},
                       mode="colocated" if colocated else "disaggregated")
            ids = self.placement_nodes(job.group_id, list(m.rollout_nodes), list(m.train_nodes))
            if ids is not None:  # which machines those are (live/inventory.py)
                out["node_ids"] = ids
        elif job.status in (JobStatus.QUEUED, JobStatus.MOVING):  # waiting to be placed (again)
            out["queue_position"] = self.queue_position(job_id)
        return out

    def queue_position(self, job_id: str) -> int | None:
        """1 for the head of the placement queue; None when not queued."""
        for i, jid in enumerate(self._queue):
            if jid == job_id:
                return i + 1
        return None

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
            # With `colo_pair` an arrival may found a group with a co-located job (core/repair/pairing.py):
            # its `place` record, then the mover's `movers`, as the simulator applies them.
            records = self.state.cluster.decide(spec, progress, arrival=job.epoch == 0)
            if not records:
                return  # FIFO: the head waits for nodes, and so does everyone behind it
            for record in records:
                self._record(record)
            plan = records[0].plan
            self._queue.popleft()
            if not job.called:  # its start-up clock runs from its placement
                self._heard(jid)
            event("placed", job=jid, case=job.case, group=job.group_id, epoch=job.epoch)
            if self.telemetry is not None and job.epoch == 1:
                self.telemetry.admitted(job.case)
                if plan.why is not None:  # isolated: why no group took it
                    self.telemetry.isolated(plan.why.reason.value)
            for phase in PHASES:  # permits asked for while it had no group
                if (jid, phase) in self._waiting and self.state.jobs[jid].group_id is not None:
                    self._request(jid, phase)

    # -- leaving ------------------------------------------------------------------------
    def _op_finish(self, caller: str, job_id: str) -> dict:
        """The job is done: it leaves its group (an empty group releases its nodes)."""
        self._depart(job_id, JobStatus.DONE, None)
        return {}

    def _op_cancel(self, caller: str, job_id: str) -> dict:
        """Cancel a job (admin or the job itself): its permits are reclaimed, its group goes on."""
        self._depart(job_id, JobStatus.CANCELLED, "cancelled by " + ("the admin" if caller == ADMIN else "the job"))
        return {}

    def _move(self, job_id: str, why: str) -> None:
        """The job leaves its group (a regrouping's move, a re-admission): its reserved slot, or
        the head of the queue. Only a running job moves: one that waits to be placed stays in
        line (a `move_out` would queue it twice)."""
        if not may_move(self.state.jobs[job_id].status, JobStatus.MOVING):
            log.info("job %s is %s, not running: nothing to leave (%s)", job_id, self.state.jobs[job_id].status, why)
            return
        log.info("job %s leaves its group (%s)", job_id, why)
        event("move", job=job_id, why=why)
        rest = self._record(MoveOut(job_id=job_id, why=why))
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

    def _depart(self, job_id: str, status: JobStatus, reason: str | None) -> None:
        """The job ends (done, failed or cancelled): its waiters are answered, its group repaired."""
        rest = self._record(Leave(job_id=job_id, status=status, reason=reason))
        event("leave", job=job_id, status=status, reason=reason)
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
        self.state.cluster.after_departure(rest, self.state.progress(time.time()), commit=self._record)

    # -- inspection ---------------------------------------------------------------------
    def _op_job(self, caller: str, job_id: str) -> dict:
        """One job's view (its own token, or the admin's)."""
        view = job_view(self.state.jobs[job_id], time.time(), self.state.cluster.planned.get(job_id),
                        measuring_of(self, job_id))
        return {**view, **self._placement(job_id)}

    def _op_status(self, caller: str, offset: int = 0, limit: int = PAGE) -> dict:
        """The admin's view of everything, a page at a time."""
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


# Every operation `request` runs, and who may call it (DESIGN §8's threat model).
OPS: dict[str, Op] = {
    "submit": Op(SchedulerCore._op_submit, ADMIN_ONLY, denied="only the admin may submit jobs"),
    "status": Op(SchedulerCore._op_status, ADMIN_ONLY, denied="only the admin may read the whole status"),
    "job": Op(SchedulerCore._op_job, JOB_OR_ADMIN),
    "cancel": Op(SchedulerCore._op_cancel, JOB_OR_ADMIN, active=True),
    "acquire": Op(SchedulerCore._op_acquire, JOB, active=True),
    "release": Op(SchedulerCore._op_release, JOB, active=True),
    "progress": Op(SchedulerCore._op_progress, JOB, active=True),
    "heartbeat": Op(SchedulerCore._op_heartbeat, JOB, active=True),
    "finish": Op(SchedulerCore._op_finish, JOB, active=True),
    "exit": Op(SchedulerCore._op_exit, ADMIN_ON_JOB,
               denied="only the admin (rollmux run) reports an entrypoint's exit"),
    "drain": Op(SchedulerCore._op_drain, INTERNAL),
    "dump": Op(SchedulerCore._op_dump, INTERNAL),
    "metrics": Op(SchedulerCore._op_metrics, INTERNAL),
    "stop_waiting": Op(SchedulerCore._op_stop_waiting, INTERNAL),
    "nodes_lost": Op(SchedulerCore._op_nodes_lost, INTERNAL),
    "node_up": Op(SchedulerCore._op_node_up, INTERNAL),
    "node_down": Op(SchedulerCore._op_node_down, INTERNAL),
}
