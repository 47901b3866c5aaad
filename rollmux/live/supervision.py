"""Liveness of the jobs a scheduler serves: start-ups, heartbeats, phase leases, entrypoint exits and
lost Ray nodes.

A mixin of `SchedulerCore` (it uses the core's state, `_depart`, `_move` and
`request`). Everything here runs on the scheduler thread except the Ray node
watch, which polls Ray's GCS from a thread of its own and hands what it finds
to the scheduler thread, and `note_serving`, which the HTTP server's event loop calls.

A job's liveness has two deadlines. Until its first call (its first authenticated request with
its own token: a heartbeat, an acquire, ...) it has its **start-up timeout** (its record's
`startup_timeout_s`, else the service's), counted from its submission, or from its placement when
it waited in line for nodes: a trainer that imports its libraries for minutes is not silent. The
first call is journaled (a granted permit, or else a `first_call` record), so a restart knows
which jobs started. From then
on it must be heard within the **heartbeat timeout**. A job that misses either is failed with a
reason naming the deadline. `rollmux run` reports an entrypoint that exits before its job finished
(`_op_exit`): the job is failed at once with the exit code and the entrypoint's last error line.

Liveness is judged fairly: time in which the server itself was not serving (its event
loop or the scheduler thread stalled, seen as a gap between their ticks longer than
`STALL_S`, or a quarter of a shorter heartbeat timeout) does not count as a job's silence,
nor against a phase's lease: every deadline is extended by the part of the stall that fell
after its job was last heard (or its start-up clock started). A restart gives every job that had
started a grace of two heartbeat timeouts, and every job that had not its whole start-up timeout
again, from the restart: the time the service was down counts for neither.

Turns (core/turns.py): a group member whose turn came and that has not asked for it within
its grace (the larger of `turn_grace_s` and the declared time of the phase it is due for)
while a mate waits loses it (a `turn` record): the group goes on without it until it asks
again. Absent longer than that phase's lease, it is failed as hung. Stalls count for
neither.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rollmux.core.group_controller import GroupController
from rollmux.core.records import FirstCall, Turn
from rollmux.core.spec import JobSpec
from rollmux.core.vocabulary import JobStatus, Phase
from rollmux.live.exits import EXIT_LINE_CHARS, clean_line, exit_reason, redact
from rollmux.live.journal import JournalError
from rollmux.live.refusals import shown
from rollmux.shim import PHASES

log = logging.getLogger("rollmux.service")
# The liveness deadlines' defaults, for `SchedulerCore` and `rollmux serve` alike (seconds).
HEARTBEAT_TIMEOUT_S = 30.0  # a job that has started and is not heard for this long is failed
STARTUP_TIMEOUT_S = 600.0   # from submission (or placement) to a job's first call
STALL_S = 1.0  # a loop tick (0.1 s) or a watchdog run this much overdue: the server was not serving
STALL_MIN_S = 0.3  # ... or this much, with a heartbeat timeout under 4 * STALL_S


class Supervision:
    """Heartbeat timeouts, phase leases and Ray node loss (a mixin of SchedulerCore)."""

    lease_factor: float
    lease_min_s: float
    heartbeat_timeout_s: float | None
    startup_timeout_s: float | None
    state: Any
    _seen: dict[str, float]
    _nodes_of: dict[str, set[str]]
    _started: float
    _check_every: float
    _stopping: threading.Event
    _leases: list[tuple[float, int, str, str]]
    _served_at: float | None = None  # monotonic time the HTTP loop last ticked (None: no HTTP server)
    _last_watch: float | None = None  # monotonic time of the watchdog's last run
    _discounted_until = 0.0  # stalls up to this monotonic time are already discounted
    _loop_stalls: deque | None = None  # (from, to) gaps between the HTTP loop's ticks, not yet discounted
    _stall_began: float | None = None  # start of the stall being discounted (for its log line)
    turn_grace_s: float = 10.0  # (SchedulerCore's argument) shortest grace for asking for a turn
    _stall_log: deque | None = None  # (from, to) stalls discounted lately (monotonic), for the turn clocks
    _absent_at: dict[str, float]  # absent member -> when it lost its turn (monotonic)
    _waiting: dict
    _is_token: Callable[[str], bool]  # (Access's: whether a word is a token the service knows)

    def _record(self, record) -> Any: ...
    def _depart(self, job_id: str, status: JobStatus, reason: str | None) -> None: ...

    @staticmethod
    def declared_s(spec: JobSpec, phase: str) -> float:
        """The declared worst-case time of a job's rollout or training phase."""
        return (spec.rollout_s.max if phase == Phase.ROLLOUT
                else spec.train_s * spec.rollout_s.max / spec.rollout_s.median)

    def lease_s(self, spec: JobSpec, phase: str, switch_s: float, scale: float = 1.0) -> float:
        """How long a permit may be held: the declared worst-case phase time (x `scale`: a
        co-located phase's, core/colo_model.py) with a margin."""
        return max(self.lease_min_s, self.lease_factor * self.declared_s(spec, phase) * scale + switch_s)

    def _op_nodes_lost(self, dead: set[str]) -> list[str]:
        """Ray nodes died: every job with workers there is re-admitted (placed again)."""
        hit = [j for j, ns in self._nodes_of.items() if ns & dead and self.state.jobs[j].active]
        for jid in hit:
            gone = sorted(self._nodes_of.pop(jid) & dead)
            self._move(jid, f"readmit: Ray node(s) {', '.join(gone)} lost")
        return hit

    def watch_ray_nodes(self) -> None:
        """Poll the Ray cluster this process is connected to for dead nodes (single-cluster mode)."""
        threading.Thread(target=self._watch_ray_nodes, args=(self._check_every,), name="rollmux-ray-watch",
                         daemon=True).start()

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
                self.request("nodes_lost", dead).result()

    # -- fair liveness -------------------------------------------------------------------
    def _stall_s(self) -> float:
        """How late a tick must be to count as not serving: STALL_S, or a quarter of a shorter heartbeat
        timeout, but well over the loop's own tick (0.1 s)."""
        return max(STALL_MIN_S, min(STALL_S, (self.heartbeat_timeout_s or STALL_S * 4) / 4))

    def note_serving(self) -> None:
        """The HTTP server's event loop is serving (called on each of its ticks, from its thread)."""
        now, last = time.monotonic(), self._served_at
        if last is not None and now - last > self._stall_s():
            if self._loop_stalls is None:
                self._loop_stalls = deque()
            self._loop_stalls.append((last, now))  # a deque: appended here, taken on the scheduler thread
        self._served_at = now

    def _stalls(self, now: float) -> list[tuple[float, float]]:
        """Intervals (monotonic) in which the server was not serving, not yet discounted."""
        found, tolerance = [], self._stall_s()
        if self._last_watch is not None and now - self._last_watch > self._check_every + tolerance:
            found.append((self._last_watch + self._check_every, now))  # the scheduler thread stalled
        while self._loop_stalls:
            found.append(self._loop_stalls.popleft())  # the event loop stalled, and came back
        served = self._served_at
        if served is not None and now - served > tolerance:
            found.append((served, now))  # the event loop is not serving now
        self._last_watch = now
        return sorted(found)

    def _discount_stalls(self, now: float) -> None:
        """Extend every heartbeat and lease deadline by the not-serving time after its job was last heard."""
        stalls = self._stalls(now)
        if not stalls and self._stall_began is not None:  # a stall ended: one line for all of it
            log.warning("the server was not serving for %.1fs: heartbeat and lease deadlines were extended by it",
                        self._discounted_until - self._stall_began)
            self._stall_began = None
        for start, end in stalls:
            start = max(start, self._discounted_until)
            if end <= start:
                continue
            if self._stall_began is None:
                self._stall_began = start
            self._discounted_until = end
            if self._stall_log is None:
                self._stall_log = deque(maxlen=256)
            self._stall_log.append((start, end))
            for jid, seen in list(self._seen.items()):
                if seen < end:
                    self._seen[jid] = seen + end - max(start, seen)
            wall_start = time.time() - (now - start)
            self._leases = [(due + end - start if due > wall_start else due, *rest)
                            for due, *rest in self._leases]
            heapq.heapify(self._leases)

    # -- heartbeats and leases -------------------------------------------------------------
    def _watchdog(self) -> None:
        try:
            self._discount_stalls(time.monotonic())
            self._check_liveness()
            self._check_leases()
            self._check_turns()
            if self.journal.pending():  # the watchdog's decisions are no request's: commit them here
                self._schedule_flush()
        except JournalError as exc:
            self._rebuild(exc)
        except Exception:  # noqa: BLE001 -- a bug here must not stop the scheduler thread
            log.exception("heartbeat or lease check failed")
        if not self._stopping.is_set():
            self.env.call_later(self._check_every, self._watchdog)

    def _check_liveness(self) -> None:
        """Fail each job past its deadline: a started one silent past the heartbeat timeout, one placed
        that has not made its first call past its start-up timeout (one waiting for nodes has none)."""
        now = time.monotonic()
        for jid, seen in list(self._seen.items()):
            job = self.state.jobs.get(jid)
            if job is None or not job.active:
                self._seen.pop(jid, None)
            elif job.called:
                if self.heartbeat_timeout_s is not None and now - seen > self.heartbeat_timeout_s:
                    log.warning("job %s missed heartbeats for %.1fs: failed", jid, now - seen)
                    self._depart(jid, JobStatus.FAILED, f"no heartbeat for {now - seen:.1f}s")
            elif job.group_id is not None:
                limit = self.startup_limit_s(job.spec)
                if limit is not None and now - seen > limit:
                    log.warning("job %s made no call %.1fs after it was placed: failed", jid, now - seen)
                    self._depart(jid, JobStatus.FAILED, f"did not start: no call from the job within its start-up "
                                                        f"timeout of {limit:g}s after it was placed")

    def startup_limit_s(self, spec: JobSpec) -> float | None:
        """A job's start-up timeout: its record's, else the service's (None: none)."""
        return spec.startup_timeout_s if spec.startup_timeout_s is not None else self.startup_timeout_s

    def _heard(self, job_id: str) -> None:
        """A call from the job: its heartbeat deadline starts again (its start-up clock stops)."""
        self._seen[job_id] = time.monotonic()

    def _called(self, job_id: str) -> None:
        """After a job's call went through: its first one is journaled (a restart knows it started), unless
        the call was granted a permit (the grant says so)."""
        job = self.state.jobs.get(job_id)
        if job is not None and job.active and not job.called:
            self._record(FirstCall(job_id=job_id, at=time.time()))

    def _start_clocks(self) -> None:
        """Each scheduled job's liveness clock once its state is loaded: a started job gets a grace of two
        heartbeat timeouts, one not started its whole start-up timeout, both from now."""
        now = time.monotonic()
        grace = now + 2 * (self.heartbeat_timeout_s or 0.0)
        self._seen = {j: grace if r.called else now for j, r in self.state.jobs.items() if r.active}

    def _op_exit(self, caller: str, job_id: str, code: int, line: str) -> dict:
        """The job's entrypoint exited (its launcher says: `rollmux run`). A job still scheduled is failed,
        its reason the exit code and the entrypoint's last error line (a token in it redacted); a job that
        ended keeps its status. Its status and reason either way."""
        if self.state.jobs[job_id].active:
            # (redacted before exit_reason cuts the line: no token is left half)
            reason = exit_reason(code, redact(clean_line(line, EXIT_LINE_CHARS), self._is_token))
            log.warning("job %s: %s: failed", job_id, shown(reason, 240, quoted=False))
            self._depart(job_id, JobStatus.FAILED, reason)
        job = self.state.jobs[job_id]
        return {"job_id": job_id, "status": job.status, "reason": job.reason}

    def _index_leases(self) -> None:
        """Rebuild the lease deadlines of every held permit (after loading state from the journal)."""
        self._leases = []
        for jid, job in self.state.jobs.items():
            for grant in job.held.values():
                self._lease_starts(jid, grant)
        # Absent members (core/turns.py) keep their clocks; one read back from the journal starts now.
        old, now = getattr(self, "_absent_at", {}), time.monotonic()
        self._absent_at = {j: old.get(j, now) for ctl in self.state.cluster.controllers.values()
                           if isinstance(ctl, GroupController) for j in ctl.absent()}

    def _lease_starts(self, job_id: str, grant: dict) -> None:
        """Watch a granted permit's lease (a heap of deadlines: a check looks only at what is due)."""
        due = grant["at"] + grant.get("lease_s", float("inf"))
        if grant["at"] < self._started:  # held across a restart: the grace period applies too
            due = max(due, self._started + 2 * (self.heartbeat_timeout_s or 0.0))
        heapq.heappush(self._leases, (due, grant["grant_no"], job_id, grant["phase"]))

    def _check_leases(self) -> None:
        """A phase past its lease is hung (e.g. a deadlocked collective): the job is failed."""
        now = time.time()
        while self._leases and self._leases[0][0] < now:
            _, grant_no, jid, phase = heapq.heappop(self._leases)
            job = self.state.jobs.get(jid)
            grant = job.held.get(phase) if job is not None and job.active else None
            if grant is None or grant.get("grant_no") != grant_no:
                continue  # released (or the job left) in time
            log.warning("job %s held its %s permit past its lease of %.0fs: failed as hung",
                        jid, phase, grant.get("lease_s"))
            self._depart(jid, JobStatus.FAILED, f"hung: {phase} phase outlived its lease of {grant['lease_s']:.0f}s")

    # -- turns no member holds hostage (core/turns.py) -------------------------------------
    def _not_serving_after(self, t: float) -> float:
        """Seconds after monotonic time `t` in which the server was not serving."""
        return sum(max(0.0, end - max(start, t)) for start, end in self._stall_log or ())

    def _check_turns(self) -> None:
        """Members that hold a waiting mate's turn past their grace lose it; absent past a lease: hung."""
        now, env_now = time.monotonic(), self.env.now()
        jobs, controllers = self.state.jobs, self.state.cluster.controllers
        groups = {jobs[j].group_id for j, _ in self._waiting if j in jobs} - {None}
        for gid in groups:
            ctl = controllers.get(gid)
            if not isinstance(ctl, GroupController):
                continue
            for jid, pool, since in ctl.blocking():
                job, waited = jobs[jid], env_now - since
                if job.held or any((jid, p) in self._waiting for p in PHASES):
                    continue  # it runs a sync, or asked meanwhile
                grace = max(self.turn_grace_s, self.declared_s(self.state.planning_spec(jid), pool))
                if waited - self._not_serving_after(now - waited) > grace:
                    log.warning("job %s did not ask for its %s turn for %.1fs: its group goes on without it",
                                jid, pool, waited)
                    self._record(Turn(job_id=jid, absent=True, phase=pool))
                    self._absent_at[jid] = now
        for jid, at in list(self._absent_at.items()):
            self._check_absent(jid, at, now)

    def _check_absent(self, jid: str, at: float, now: float) -> None:
        """An absent member past the lease of the phase it did not ask for is failed as hung."""
        job = self.state.jobs.get(jid)
        ctl = self.state.cluster.controllers.get(job.group_id) if job is not None and job.active else None
        pool = ctl.absent().get(jid) if isinstance(ctl, GroupController) else None
        if pool is None:
            self._absent_at.pop(jid, None)  # it rejoined, moved or left
            return
        lease = self.lease_s(self.state.planning_spec(jid), pool, 0.0)
        absent_s = now - at - self._not_serving_after(at)
        if absent_s > lease:
            log.warning("job %s absent from its turns for %.1fs: failed as hung", jid, absent_s)
            self._absent_at.pop(jid, None)
            self._depart(jid, JobStatus.FAILED, f"hung: did not ask for its {pool} turn for {absent_s:.0f}s "
                                                f"(past its lease of {lease:.0f}s)")

    def _rejoin(self, job_id: str) -> None:
        """An absent member asks again: it rejoins its group's rotation (a `turn` record)."""
        job = self.state.jobs[job_id]
        ctl = self.state.cluster.controllers.get(job.group_id)
        if isinstance(ctl, GroupController) and job_id in ctl.absent():
            log.info("job %s asks again: it rejoins its group's turns", job_id)
            self._record(Turn(job_id=job_id, absent=False))
            self._absent_at.pop(job_id, None)
