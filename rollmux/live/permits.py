"""The permit protocol of the scheduler service (DESIGN §8): acquire, release, progress, heartbeat.

A mixin of `SchedulerCore` (it uses the core's state, `_record`, `_reply`, `_refuse`, `_move`
and the leases of `Supervision`). Every operation here runs on the scheduler thread, after
the core's operation table (`OPS`) has checked that the caller's token is the job's own and
that the job is still scheduled. A grant, a release, a tail and what a release measured are
each journaled as a record (core/records.py) before they take effect.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from rollmux.core.colo_model import colocated_phases, group_gpus
from rollmux.core.records import Grant, Memory, Observe, Release, Tail
from rollmux.core.vocabulary import Phase, Pool
from rollmux.live.journal import JournalError
from rollmux.live.refusals import Conflict, ServiceError
from rollmux.live.wire import MAX_HOST_BYTES, TIMING_FIELDS, timings_problem
from rollmux.shim import PHASES

HOST_POOLS = tuple(p.value for p in Pool)
GB = 1e9              # host_gb is in GB (10^9 bytes), as the job record declares it
MEMORY_STEP = 0.01    # a measured rise of host memory under 1% is not journaled again
ROLLOUT, TRAIN = Phase.ROLLOUT, Phase.TRAIN
log = logging.getLogger("rollmux.service")


class Permits:
    """Phase permits and what their releases measure (a mixin of SchedulerCore)."""

    state: Any
    telemetry: Any
    tail_threshold: float
    _gen: int
    _waiting: dict[tuple[str, str], Future]
    _replies: list  # (future, value, error) held until their batch commits (the core's)
    _after_release: dict[tuple[str, str], Future]
    _timeline: deque[dict]
    _open: dict[tuple[str, str], list[dict]]
    _tail_sent: set[str]
    _nodes_of: dict[str, set[str]]

    def _record(self, record) -> Any: ...
    def _reply(self, fut: Any, value: Any, exc: BaseException | None = None) -> None: ...
    def _refuse(self, op: str, job_id: Any, why: str, exc: type[ServiceError] = ..., field: str | None = None
                ) -> ServiceError: ...
    def _move(self, job_id: str, why: str) -> None: ...
    def _placement(self, job_id: str) -> dict: ...
    def _rejoin(self, job_id: str) -> None: ...
    # (and `lease_s`, `_lease_starts` of Supervision, which comes first in SchedulerCore's bases)

    def _op_acquire(self, caller: str, job_id: str, phase: Any, last_grant: Any = None) -> Future:
        """A future permit. Asking again while waiting re-attaches to the same request (long polls).

        `last_grant`: the newest `grant_no` the caller has received. If the job still holds
        this phase, a newer held permit means the reply was lost (it is returned again); an
        older one means its release is still on the way, so the request waits for it."""
        job = self.state.jobs[job_id]
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
        if phase == Phase.INIT and job.inited == job.epoch > 0:
            raise self._refuse("acquire", job_id, f"phase 'init' was already granted for this placement "
                               f"(epoch {job.epoch}); a job inits again only after it is moved", Conflict)
        self._waiting[(job_id, phase)] = fut
        fut.asked_at = time.monotonic()
        if job.group_id is not None:
            self._request(job_id, phase)
        return fut

    def _request(self, job_id: str, phase: str) -> None:
        job = self.state.jobs[job_id]
        self._rejoin(job_id)  # an absent member that asks again is back in its group's turns
        ctl = self.state.cluster.controllers[job.group_id]
        gen = self._gen

        def on_grant(grant) -> None:
            if gen != self._gen:  # a controller from before a rebuild
                return
            fut = self._waiting.pop((job_id, phase))
            try:
                self._record(self._grant_record(job_id, phase, grant, ctl.group.member(job_id)))
            except JournalError:  # unwinds to `request`, which rolls back and fails this waiter too (503)
                self._replies.append((fut, None, None))
                raise
            permit = job.held[phase]
            self._opened(permit)
            self._lease_starts(job_id, permit)
            if self.telemetry is not None and hasattr(fut, "asked_at"):
                self.telemetry.permit_wait(time.monotonic() - fut.asked_at)
            self._reply(fut, permit)
        ctl.request(job_id, phase, on_grant)

    def _grant_record(self, job_id: str, phase: str, grant, m) -> Grant:
        """The `grant` record of a controller's grant to member `m`: where it runs and its lease
        (with a node inventory, which nodes those are: live/nodemap.py)."""
        ids = {}
        if self.state.inventory and grant.pool in (Pool.ROLLOUT, Pool.TRAIN):
            ids = {"node_ids": self.state.node_ids(grant.group_id, grant.pool, grant.nodes),
                   "train_held_ids": self.state.node_ids(grant.group_id, Pool.TRAIN, grant.train_held)}
        return Grant(**ids,
            group_id=grant.group_id, job_id=job_id, phase=grant.phase, pool=grant.pool, nodes=list(grant.nodes),
            switch_s=grant.switch_s, granted_at=grant.granted_at, tail_share=grant.tail_share,
            epoch=self.state.jobs[job_id].epoch, units=grant.units,
            # JSON-native, as a replay reads them back from the journal (tuples would differ)
            workers=[list(w) for w in grant.workers], keep=[list(k) for k in grant.keep],
            train_held=list(grant.train_held), at=time.time(), grant_no=self.state.grants + 1,
            lease_s=self.lease_s(self.state.planning_spec(job_id), phase, grant.switch_s,
                                 self._phase_scale(job_id, phase)),
            rollout_nodes=list(m.rollout_nodes), train_nodes=list(m.train_nodes),
            # elastic rollout (core/elastic.py): its rollout runs this much longer on these
            # nodes than on its declared count (1.0: the declared count)
            rollout_factor=m.rollout_factor)

    def _phase_scale(self, job_id: str, phase: str) -> float:
        """How much longer than declared the job's `phase` runs where it is placed: a co-located
        job's phases follow the veRL model (core/colo_model.py); a disaggregated one's rollout
        its elastic factor (core/elastic.py), its other phases 1."""
        cs = self.state.cluster
        gid = self.state.jobs[job_id].group_id
        if gid in cs.groups and phase == ROLLOUT:
            return cs.groups[gid].member(job_id).rollout_factor
        if gid not in cs.colocated or phase not in (ROLLOUT, TRAIN):
            return 1.0
        rollout, train, _ = colocated_phases(self.state.planning_spec(job_id), cs.cluster, 1.0, 1.0,
                                             self.state.cfg.colocation.speed, group_gpus(cs.colocated[gid], cs.cluster))
        return rollout if phase == ROLLOUT else train

    def _opened(self, grant: dict) -> None:
        """A phase interval per node starts (the dashboard's timeline)."""
        # An init holds its training nodes too; a sync holds none.
        held = ([(grant["pool"], n) for n in grant["nodes"]]
                + [(Pool.TRAIN, n) for n in grant.get("train_held", ())])
        rows = [{"group_id": grant["group_id"], "pool": pool, "node": n, "job_id": grant["job_id"],
                 "phase": grant["phase"], "start": grant["at"], "end": None} for pool, n in held]
        self._timeline.extend(rows)
        self._open[(grant["job_id"], grant["phase"])] = rows

    def _closed(self, job_id: str, phase: str) -> None:
        for row in self._open.pop((job_id, phase), []):
            row["end"] = time.time()

    def _op_release(self, caller: str, job_id: str, phase: Any, timings: Any, grant_no: Any = None) -> dict:
        """The job ended `phase` with these measured timings (a train release ends an iteration)."""
        job = self.state.jobs[job_id]
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
        problem = timings_problem(timings)
        if problem is not None:
            raise self._refuse("release", job_id, problem[1], field=problem[0])
        host_gb = self._host_gb(job_id, timings.get("host_bytes"))
        self._record(Release(job_id=job_id, phase=phase, timings={k: float(timings[k]) for k in TIMING_FIELDS}))
        self._measured(job_id, phase, host_gb)
        self._closed(job_id, phase)
        self._released(phase, held, timings)
        if phase == ROLLOUT:
            self._tail_sent.discard(job_id)
        self._resume_after_release(job_id, phase)
        if phase == TRAIN and self.state.jobs[job_id].migrate:
            self._move(job_id, "regroup")
        return {}

    def _released(self, phase: str, held: dict, timings: dict) -> None:
        """Telemetry of a release: the phase's length, and for a phase that onloads its switch."""
        if self.telemetry is None:
            return
        self.telemetry.phase_done(phase, float(timings["run_s"]))
        if phase in (ROLLOUT, TRAIN):
            self.telemetry.context_switch("cold" if held.get("switch_s", 0) > self.state.cluster.intra.warm_switch_s
                                          else "warm", float(timings["onload_s"]))

    def _host_gb(self, job_id: str, host_bytes: Any) -> dict[str, float] | None:
        """A release's measured host memory (bytes per node, by pool) in GB, or the refusal."""
        if host_bytes is None:
            return None
        if not isinstance(host_bytes, dict) or any(
                p not in HOST_POOLS or isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_HOST_BYTES
                for p, n in host_bytes.items()):
            raise self._refuse("release", job_id, f"host_bytes must map rollout/train to integers in "
                               f"0..{MAX_HOST_BYTES}", field="timings.host_bytes")
        return {p: n / GB for p, n in host_bytes.items()}

    def _measured(self, job_id: str, phase: str, host_gb: dict[str, float] | None) -> None:
        """Feed what a release measured to the scheduler: host memory that rose (a `memory`
        record), and at an iteration's end its phase times (`observe`: the drift repair)."""
        job = self.state.jobs[job_id]
        seen = job.host_measured
        if host_gb and any(p not in seen or gb > seen[p] * (1 + MEMORY_STEP) for p, gb in host_gb.items()):
            self._record(Memory(job_id=job_id, host_gb={p: max(gb, seen.get(p, 0.0)) for p, gb in host_gb.items()}))
        rollout_s = job.last_run.get(ROLLOUT)
        # Drift repair watches every job's iterations; a job measured as it runs is profiled by them.
        watched = self.state.cfg.regroup.repair or job_id in self.state.cluster.profiling.jobs
        if phase == TRAIN and watched and rollout_s is not None and job.group_id is not None and not job.migrate:
            self._record(Observe(job_id=job_id, rollout_s=rollout_s, train_s=job.last_run[TRAIN], at=time.time(),
                                 rollout_factor=job.last_factor, sync_s=job.last_run.get(Phase.SYNC)))

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
        job = self.state.jobs[job_id]
        for name, v in (("done", done), ("total", total)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise self._refuse("progress", job_id, f"{name} must be an integer >= 0", field=name)
        if done > total:
            raise self._refuse("progress", job_id, "done must not exceed total", field="done")
        grant = job.held.get(ROLLOUT)
        tail = (grant is not None and total > 0 and done / total >= self.tail_threshold
                and job_id not in self._tail_sent and grant.get("tail_share", 0) > 0)
        if tail:
            self._record(Tail(job_id=job_id))
            self._tail_sent.add(job_id)  # after the record: a failed one is tried again
        return {"tail": tail}

    def _op_heartbeat(self, caller: str, job_id: str, nodes: Any = None, readmit: Any = None) -> dict:
        """The job is alive (its workers run on these Ray nodes); `readmit`: it lost them, place it again."""
        if nodes is not None and (not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) for n in nodes)):
            raise self._refuse("heartbeat", job_id, "nodes must be a list of Ray node id strings", field="nodes")
        if readmit is not None and not isinstance(readmit, str):
            raise self._refuse("heartbeat", job_id, "readmit must be a reason string", field="readmit")
        if nodes is not None:
            self._nodes_of[job_id] = {str(n) for n in nodes}
        if readmit is not None:
            self._move(job_id, f"readmit: {readmit[:200]}")
        return self._placement(job_id)
