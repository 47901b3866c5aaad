"""The scheduler service of the live plane: one detached, named Ray actor (DESIGN §8).

It runs the simulator's scheduler unchanged: `LiveState` wraps the same
`ClusterState` (placement policy, plan validation, one `GroupController` per
group, departures, regrouping). `SchedulerCore` adds what a live service
needs around it:

- one scheduler thread (`WallClockEnvironment`) owns the state; Ray's call
  threads hand it their work and wait;
- every decision is journaled (SQLite or Redis, `rollmux.live.journal`)
  before it takes effect; a restarted service replays the journal, and the
  permits jobs still hold stay held, so none is granted twice;
- each job gets a token at submission; every later call must carry it;
- heartbeats: a job silent for `heartbeat_timeout_s` is failed, its permits
  reclaimed, and its group goes on without it;
- long-tail regrouping: members of a dissolved group move at their next
  iteration boundary (their next permit carries the new placement).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, Callable

from pydantic import ValidationError

from rollmux.core.cluster_state import SchedulerConfig
from rollmux.core.env import WallClockEnvironment
from rollmux.core.intra_group import IntraConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.trace_io import unknown_fields
from rollmux.live.codec import job_to_dict, plan_to_dict
from rollmux.live.journal import open_store
from rollmux.live.live_state import LiveState
from rollmux.shim import PHASES

NAMESPACE = "rollmux"
ACTOR_NAME = "scheduler"
TIMING_FIELDS = ("wait_s", "onload_s", "run_s", "offload_s")
log = logging.getLogger("rollmux.service")


class ServiceError(Exception):
    """A request the service refused; nothing changed."""


class AuthError(ServiceError):
    """Missing or wrong job token."""


class JobGone(ServiceError):
    """The job is no longer scheduled (finished, or failed: the message says why)."""


class _NoJournal:
    """In-memory stand-in when no store is configured (tests, throwaway services)."""

    url = "memory:"

    def __init__(self) -> None:
        self.seq = 0

    def append(self, kind: str, payload: dict) -> int:
        self.seq += 1
        return self.seq

    def records(self, after: int = 0) -> list:
        return []

    def snapshot(self) -> None:
        return None

    def save_snapshot(self, seq: int, state: dict) -> None:
        pass

    def close(self) -> None:
        pass


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _config_record(cluster: ClusterSpec, cfg: SchedulerConfig) -> dict:
    return {"cluster": cluster.model_dump(exclude_none=True), "cfg": asdict(cfg)}


def _config_from(d: dict) -> tuple[ClusterSpec, SchedulerConfig]:
    cfg = dict(d["cfg"])
    cfg["intra"] = IntraConfig(**cfg["intra"])
    return ClusterSpec.model_validate(d["cluster"]), SchedulerConfig(**cfg)


class SchedulerCore:
    """The service's logic, free of Ray (so it is testable in-process)."""

    def __init__(self, cluster: dict | None = None, cfg: SchedulerConfig | None = None,
                 store: str | None = None, heartbeat_timeout_s: float | None = None,
                 check_every_s: float = 0.5, watch_ray_nodes: bool = False,
                 snapshot_every: int = 2000) -> None:
        self.env = WallClockEnvironment()
        self.journal = open_store(store) if store else _NoJournal()
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
            # The schedule's switch and migration costs are the cluster's, as in the simulator's CLI.
            cfg = cfg or SchedulerConfig(intra=IntraConfig(warm_switch_s=spec.warm_switch_s),
                                         migration_stall_s=spec.cold_switch_s)
            config = _config_record(spec, cfg)
            self.journal.append("config", config)
        self._config = config
        self.snapshot_every = snapshot_every
        self._depth = 0     # nesting of _record (a release's apply may grant): snapshot only at 0
        self._last_seq = self._snap_seq = self.recovered_records
        self.state = LiveState(self.env, spec, cfg)
        if snap:
            self.state.load(snap[1])
        for r in records:
            self.state.apply(r.kind, r.payload, replay=True)
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.refused: list[dict] = []         # refused requests (auth and bad input), newest last
        self._waiting: dict[tuple[str, str], Future] = {}  # permits asked for, not yet granted
        self._after_release: dict[tuple[str, str], Future] = {}  # acquires that overtook their release
        self._queue: deque[str] = deque(j for j, r in self.state.jobs.items() if r.status in ("queued", "moving"))
        # A restart grants every job a grace period: its heartbeats were failing while the
        # service was down, and failing a live job would hand its held nodes to others.
        grace = time.monotonic() + 2 * (heartbeat_timeout_s or 0.0)
        self._seen = {j: grace for j, r in self.state.jobs.items() if r.active}
        self._nodes_of: dict[str, set[str]] = {}  # job -> Ray node ids of its workers (heartbeats)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self.env.serve, name="rollmux-scheduler", daemon=True)
        self._thread.start()
        self._on_loop(self._drain)
        if heartbeat_timeout_s is not None:
            self._check_every = check_every_s
            self.env.call_later(check_every_s, self._watchdog)
        if watch_ray_nodes:
            threading.Thread(target=self._watch_ray_nodes, args=(check_every_s,), daemon=True).start()

    def _first_config(self, first) -> dict:
        """The payload of a journal's first record, which must be its 'config'."""
        if first.kind != "config":
            raise ServiceError(f"journal {self.journal.url}: first record is {first.kind!r}, not 'config'")
        return first.payload

    # -- plumbing -----------------------------------------------------------------------
    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn on the scheduler thread and return its result (or raise its error)."""
        fut: Future = Future()

        def call() -> None:
            try:
                fut.set_result(fn(*args))
            except Exception as exc:  # handed back to the caller's thread
                fut.set_exception(exc)
        self.env.call_at(self.env.now(), call)
        return fut.result()

    def _record(self, kind: str, payload: dict) -> Any:
        """Journal a decision, then carry it out (the write-ahead rule); returns what `apply` does."""
        self._last_seq = self.journal.append(kind, payload)
        self._depth += 1
        try:
            result = self.state.apply(kind, payload)
        finally:
            self._depth -= 1
        if self._depth == 0 and self.snapshot_every and self._last_seq - self._snap_seq >= self.snapshot_every:
            # Compaction: a restart loads this and replays only the records after it.
            self.journal.save_snapshot(self._last_seq, {"config": self._config, **self.state.dump()})
            self._snap_seq = self._last_seq
        return result

    def _refuse(self, op: str, job_id: Any, why: str, exc: type[ServiceError] = ServiceError) -> ServiceError:
        log.warning("refused %s for job %r: %s", op, job_id, why)
        self.refused.append({"op": op, "job_id": str(job_id), "why": why, "at": time.time()})
        del self.refused[:-1000]
        return exc(f"{op} for job {job_id!r}: {why}")

    def _job(self, op: str, job_id: Any, token: Any):
        """The job, once its token checks out (the error names what is wrong)."""
        job = self.state.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise self._refuse(op, job_id, "unknown job id")
        if not isinstance(token, str) or not hmac.compare_digest(_hash(token), job.token_hash):
            raise self._refuse(op, job_id, "missing or wrong token", AuthError)
        if not job.active:
            raise self._refuse(op, job_id, f"job is {job.status}" + (f" ({job.reason})" if job.reason else ""), JobGone)
        self._seen[job_id] = time.monotonic()
        return job

    # -- submission and placement -----------------------------------------------------------
    def submit(self, record: dict) -> dict:
        """Validate and place a job; returns its token and where it went (group None: queued)."""
        if not isinstance(record, dict):
            raise self._refuse("submit", None, f"a job record must be a mapping, not {type(record).__name__}")
        try:
            job = JobSpec.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(record)"
            raise self._refuse("submit", record.get("job_id"),
                               f"field {where}: {first['msg']} ({exc.error_count()} error(s))") from None
        extra = unknown_fields(job)
        if extra:  # a typo in a live submission is refused, not guessed at
            raise self._refuse("submit", job.job_id, f"unknown field(s) {', '.join(extra)}")
        reason = self.state.cluster.cluster.job_unplaceable_reason(job)
        if reason is not None:
            raise self._refuse("submit", job.job_id, f"can never be placed: {reason}")
        return self._on_loop(self._submit, job)

    def _submit(self, job: JobSpec) -> dict:
        old = self.state.jobs.get(job.job_id)
        if old is not None and old.active:
            raise self._refuse("submit", job.job_id, "already submitted and still running")
        token = secrets.token_urlsafe(24)
        self._record("submit", {"job": job_to_dict(job), "token_hash": _hash(token), "at": time.time()})
        self._seen[job.job_id] = time.monotonic()
        self._queue.append(job.job_id)
        self._drain()
        return {"job_id": job.job_id, "token": token, **self._placement(job.job_id)}

    def _placement(self, job_id: str) -> dict:
        job = self.state.jobs[job_id]
        out = {"group_id": job.group_id, "epoch": job.epoch, "status": job.status}
        if job.group_id is not None:
            m = self.state.cluster.groups[job.group_id].member(job_id)
            out.update(rollout_nodes=list(m.rollout_nodes), train_nodes=list(m.train_nodes), case=job.case)
        return out

    def _drain(self) -> None:
        """Place queued and moving jobs, first come first served (a mover goes first)."""
        while self._queue:
            jid = self._queue[0]
            job = self.state.jobs[jid]
            if not job.active:
                self._queue.popleft()
                continue
            plan = self.state.cluster.decide(job.spec, self.state.progress(time.time()))
            if plan is None:
                return  # FIFO: the head waits for nodes, and so does everyone behind it
            self._queue.popleft()
            self._record("place", {"job_id": jid, "plan": plan_to_dict(plan), "arrival": job.epoch == 0})
            for phase in PHASES:  # permits asked for while it had no group
                if (jid, phase) in self._waiting and self.state.jobs[jid].group_id is not None:
                    self._request(jid, phase)

    # -- permits --------------------------------------------------------------------------
    def acquire(self, job_id: str, phase: str, token: str | None = None, last_grant: int | None = None) -> dict:
        """Block until the job may run `phase`; returns the permit (with the job's placement).

        `last_grant`: the newest `grant_no` the caller has received. If the job still holds
        this phase, a newer held permit means the reply was lost (it is returned again); an
        older one means its release is still on the way (calls may overtake each other in a
        threaded actor), so the request waits for that release."""
        return self._on_loop(self._acquire, job_id, phase, token, last_grant).result()

    def _acquire(self, job_id: str, phase: str, token: Any, last_grant: Any = None) -> Future:
        job = self._job("acquire", job_id, token)
        if phase not in PHASES:
            raise self._refuse("acquire", job_id, f"unknown phase {phase!r}; use one of {PHASES}")
        fut: Future = Future()
        if (job_id, phase) in self._waiting or (job_id, phase) in self._after_release:
            raise self._refuse("acquire", job_id, f"already waiting for a {phase} permit")
        if phase in job.held:
            if not isinstance(last_grant, int) or job.held[phase].get("grant_no", 0) > last_grant:
                fut.set_result(job.held[phase])  # a retry whose first reply was lost
            else:
                self._after_release[(job_id, phase)] = fut
            return fut
        self._waiting[(job_id, phase)] = fut
        if job.group_id is not None:
            self._request(job_id, phase)
        return fut

    def _request(self, job_id: str, phase: str) -> None:
        job = self.state.jobs[job_id]
        ctl = self.state.cluster.controllers[job.group_id]

        def on_grant(grant) -> None:
            fut = self._waiting.pop((job_id, phase))
            m = ctl.group.member(job_id)
            payload = {**asdict(grant), "nodes": list(grant.nodes), "epoch": job.epoch, "at": time.time(),
                       "grant_no": self.state.grants + 1,
                       "rollout_nodes": list(m.rollout_nodes), "train_nodes": list(m.train_nodes)}
            try:
                self._record("grant", payload)
            except Exception as exc:  # not journaled: undo it, so it was never granted
                ctl.release(job_id, phase)
                fut.set_exception(exc)
                return
            fut.set_result(payload)
        ctl.request(job_id, phase, on_grant)

    def release(self, job_id: str, phase: str, timings: dict, token: str | None = None) -> None:
        """The job ended a phase with these measured timings; a train phase ends an iteration."""
        self._on_loop(self._release, job_id, phase, timings, token)

    def _release(self, job_id: str, phase: str, timings: Any, token: Any) -> None:
        job = self._job("release", job_id, token)
        epoch = timings.get("epoch") if isinstance(timings, dict) else None
        if isinstance(epoch, int) and 0 < epoch < job.epoch:
            log.info("stale release of %s by %s (epoch %d < %d): ignored", phase, job_id, epoch, job.epoch)
            return  # its permit was reclaimed when it was re-admitted: nothing left to free
        if phase not in job.held:
            raise self._refuse("release", job_id, f"holds no {phase!r} permit (double release?)")
        if not isinstance(timings, dict) or any(
                not isinstance(timings.get(k), (int, float)) or not timings[k] >= 0 for k in TIMING_FIELDS):
            raise self._refuse("release", job_id, f"timings must give {', '.join(TIMING_FIELDS)} as numbers >= 0")
        self._record("release", {"job_id": job_id, "phase": phase,
                                 "timings": {k: float(timings[k]) for k in TIMING_FIELDS}})
        self._resume_after_release(job_id, phase)
        if phase == "train" and self.state.jobs[job_id].migrate:
            self._move(job_id, "regroup")

    def _resume_after_release(self, job_id: str, phase: str) -> None:
        """An acquire that overtook this release may now ask for its permit."""
        fut = self._after_release.pop((job_id, phase), None)
        if fut is not None:
            self._waiting[(job_id, phase)] = fut
            if self.state.jobs[job_id].group_id is not None:
                self._request(job_id, phase)

    def tail_started(self, job_id: str, token: str | None = None) -> None:
        """Forward a tail-bound rollout to its group's controller."""
        def tail() -> None:
            job = self._job("tail_started", job_id, token)
            if "rollout" in job.held:
                self._record("tail", {"job_id": job_id})
        self._on_loop(tail)

    def heartbeat(self, job_id: str, token: str | None = None, nodes: list[str] | None = None) -> dict:
        """The job is alive (and its workers run on these Ray nodes); returns its placement."""
        def beat() -> dict:
            self._job("heartbeat", job_id, token)
            if nodes is not None and (not isinstance(nodes, (list, tuple))
                                      or not all(isinstance(n, str) for n in nodes)):
                raise self._refuse("heartbeat", job_id, "nodes must be a list of Ray node id strings")
            if nodes is not None:
                self._nodes_of[job_id] = {str(n) for n in nodes}
            return self._placement(job_id)
        return self._on_loop(beat)

    def nodes_lost(self, dead: set[str]) -> list[str]:
        """Ray nodes died: every job with workers there is re-admitted (placed again)."""
        def lost() -> list[str]:
            hit = [j for j, ns in self._nodes_of.items() if ns & dead and self.state.jobs[j].active]
            for jid in hit:
                gone = sorted(self._nodes_of.pop(jid) & dead)
                self._move(jid, f"readmit: Ray node(s) {', '.join(gone)} lost")
            return hit
        return self._on_loop(lost)

    def _watch_ray_nodes(self, every_s: float) -> None:
        """Poll Ray for dead nodes (off the scheduler thread: it is a GCS call)."""
        import ray
        known_dead: set[str] = set()
        while not self._stopping.wait(every_s):
            try:
                dead = {n["NodeID"] for n in ray.nodes() if not n["Alive"]} - known_dead
            except Exception:  # noqa: BLE001 -- GCS briefly unreachable: try again next time
                continue
            if dead:
                known_dead |= dead
                log.warning("Ray nodes lost: %s", sorted(dead))
                self.nodes_lost(dead)

    # -- leaving ------------------------------------------------------------------------
    def finish(self, job_id: str, token: str | None = None) -> None:
        """The job is done: it leaves its group (an empty group releases its nodes)."""
        def finish() -> None:
            self._job("finish", job_id, token)
            self._depart(job_id, "done", None)
        self._on_loop(finish)

    def readmit(self, job_id: str, reason: str, token: str | None = None) -> dict:
        """The job lost its workers (e.g. a node died): reclaim its permits and place it again
        like a new arrival; its next permit carries the new placement."""
        def readmit() -> dict:
            self._job("readmit", job_id, token)
            self._move(job_id, f"readmit: {reason}")
            return self._placement(job_id)
        return self._on_loop(readmit)

    def _move(self, job_id: str, why: str) -> None:
        log.info("job %s leaves its group (%s)", job_id, why)
        rest = self._record("move_out", {"job_id": job_id, "why": why})
        for phase in PHASES:  # its permits were reclaimed: overtaking acquires go ahead
            self._resume_after_release(job_id, phase)
        self._repair(rest)
        self._queue.appendleft(job_id)
        self._drain()

    def _depart(self, job_id: str, status: str, reason: str | None) -> None:
        rest = self._record("leave", {"job_id": job_id, "status": status, "reason": reason})
        for phase in PHASES:
            fut = self._waiting.pop((job_id, phase), None) or self._after_release.pop((job_id, phase), None)
            if fut is not None:
                fut.set_exception(JobGone(f"job {job_id!r} is {status}" + (f" ({reason})" if reason else "")))
        self._repair(rest)
        self._drain()

    def _repair(self, rest) -> None:
        """Departure-time regrouping, as in the simulator: movers go at their next boundary."""
        movers = self.state.cluster.after_departure(rest, self.state.progress(time.time()))
        if movers:
            self._record("movers", {"job_ids": movers, "group_ids": sorted(self.state.cluster.dissolving)})

    def _watchdog(self) -> None:
        try:
            self._check_heartbeats()
        except Exception:  # noqa: BLE001 -- a bug here must not stop the scheduler thread
            log.exception("heartbeat check failed")
        self.env.call_later(self._check_every, self._watchdog)

    def _check_heartbeats(self) -> None:
        now = time.monotonic()
        for jid, seen in list(self._seen.items()):
            job = self.state.jobs[jid]
            if job.active and now - seen > self.heartbeat_timeout_s:
                log.warning("job %s missed heartbeats for %.1fs: failed", jid, now - seen)
                self._depart(jid, "failed", f"no heartbeat for {now - seen:.1f}s")
            if not job.active:
                self._seen.pop(jid, None)

    # -- inspection ---------------------------------------------------------------------
    def status(self) -> dict:
        """Groups, members, whose turn it is on each node, and each job's iteration time vs SLO."""
        return self._on_loop(self._status)

    def _status(self) -> dict:
        now, cs = time.time(), self.state.cluster
        groups = [{"group_id": g.group_id, "members": list(g.job_ids()), "rollout_nodes": g.n_rollout,
                   "train_nodes": g.n_train, "period_s": g.shape.period_s if g.shape else None,
                   "turn": cs.controllers[g.group_id].whose_turn()} for g in cs.groups.values()]
        jobs = {}
        for jid, r in self.state.jobs.items():
            mean = (now - r.started_at) / r.iterations if r.iterations else None
            jobs[jid] = {"status": r.status, "group_id": r.group_id, "iterations": r.iterations,
                         "mean_iter_s": mean, "slo_iter_s": r.spec.slo * r.spec.solo_iter_s,
                         "profile": {"declared": {"rollout": r.spec.rollout_s.median, "train": r.spec.train_s},
                                     "measured": dict(r.profile)},
                         "held": sorted(r.held), "epoch": r.epoch, "reason": r.reason}
        return {"groups": groups, "jobs": jobs, "cost_per_hour": cs.ledger.rate_per_hour(),
                "grants": self.state.grants, "refused": len(self.refused), "journal": self.journal.url,
                "recovered_records": self.recovered_records}

    def shutdown(self) -> None:
        """Stop the scheduler thread and close the journal."""
        self._stopping.set()
        self.env.stop()
        self._thread.join(timeout=5)
        self.journal.close()


def start_service(cluster: dict | None, cfg: SchedulerConfig | None = None, store: str | None = None,
                  heartbeat_timeout_s: float | None = None, name: str = ACTOR_NAME,
                  node_id: str | None = None) -> Any:
    """Start (or connect to) the detached, named scheduler actor; Ray must be initialized.

    Ray restarts the actor if its process dies; the new instance replays the journal.
    It runs on `node_id` if given, else on the head node.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    # On the head node, not on a worker node that may be lost (if the head dies, so does Ray).
    where = ({"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)} if node_id
             else {"resources": {"node:__internal_head__": 0.001}})
    actor = ray.remote(SchedulerCore).options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_concurrency=512, num_cpus=0, max_restarts=-1, **where)
    return actor.remote(cluster, cfg, store, heartbeat_timeout_s, watch_ray_nodes=True)
