"""The job side of the live plane: the shim's permit client for the scheduler actor.

It carries each job's token on every call, sends heartbeats from a background
thread, and rides out a restart of the scheduler actor: Ray restarts it, the
new instance replays the journal, and the client resends what the old one may
not have applied (releases are idempotent to resend: the service answers
"holds no permit" for one it already applied) and then retries the call.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from typing import Any

from rollmux.core.group_controller import Grant
from rollmux.shim import PhaseTimings

_GRANT_FIELDS = set(Grant.__dataclass_fields__)


def _grant(d: dict) -> Grant:
    return Grant(**{**{k: v for k, v in d.items() if k in _GRANT_FIELDS}, "nodes": tuple(d["nodes"])})


def _actor_died(exc: BaseException) -> bool:
    """Is this the scheduler actor going away (retry), not a refusal by it (raise)?"""
    import ray.exceptions as rex
    return isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError)) and not isinstance(exc, rex.RayTaskError)


class RayPermitClient:
    """Permits from the scheduler actor for the jobs registered here."""

    def __init__(self, handle: Any, heartbeat_s: float | None = None, retry_for_s: float = 120.0) -> None:
        self.handle = handle
        self.tokens: dict[str, str] = {}
        self.nodes: dict[str, list[str]] = {}  # job -> Ray node ids its workers run on
        self._last_grant: dict[str, int] = {}  # job -> newest grant_no received
        self.retry_for_s = retry_for_s
        self._releases: list[tuple[Any, tuple]] = []  # sent, not yet confirmed: (ref, args)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.retries = 0
        if heartbeat_s:
            threading.Thread(target=self._beat, args=(heartbeat_s,), name="rollmux-heartbeat", daemon=True).start()

    def submit(self, record: dict) -> dict:
        """Submit a job and keep its token; returns the service's answer."""
        out = self._call("submit", record)
        self.tokens[out["job_id"]] = out["token"]
        return out

    def register(self, job_id: str, token: str) -> None:
        """Act for a job submitted elsewhere."""
        self.tokens[job_id] = token

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Block until the permit is granted."""
        return _grant(self.acquire_dict(job_id, phase))

    def set_nodes(self, job_id: str, node_ids: list[str]) -> None:
        """The Ray nodes the job's workers run on (sent with heartbeats: if one dies, the
        service re-admits the job); sent at once as well."""
        self.nodes[job_id] = list(node_ids)
        self._call("heartbeat", job_id, self.tokens.get(job_id), self.nodes[job_id])

    def acquire_dict(self, job_id: str, phase: str) -> dict:
        """The permit as the service sent it (with the job's placement and epoch)."""
        # last_grant lets the service tell a lost reply from an acquire that overtook its release.
        d = self._call("acquire", job_id, phase, self.tokens.get(job_id), self._last_grant.get(job_id))
        self._last_grant[job_id] = max(d.get("grant_no", 0), self._last_grant.get(job_id, 0))
        return d

    def tail_started(self, job_id: str) -> None:
        """Report a tail-bound rollout."""
        self._call("tail_started", job_id, self.tokens.get(job_id))

    def release(self, timings: PhaseTimings) -> None:
        """Release without waiting for the round trip: no later request of this job depends
        on it (the service orders it before the job's next grant); `drain` before `finish`."""
        args = (timings.job_id, timings.phase, asdict(timings), self.tokens.get(timings.job_id))
        ref = self.handle.release.remote(*args)
        with self._lock:
            self._releases.append((ref, args))

    def drain(self) -> None:
        """Wait until every release sent so far has been applied (raises a refusal, if any)."""
        import ray
        with self._lock:
            sent, self._releases = self._releases, []
        for ref, args in sent:
            try:
                ray.get(ref)
            except Exception as exc:
                if not _actor_died(exc):
                    raise
                self._resend(args)

    def finish(self, job_id: str) -> None:
        """Leave the scheduler: drain releases, then tell the service the job is done."""
        self.drain()
        self._call("finish", job_id, self.tokens.get(job_id))
        self.tokens.pop(job_id, None)

    def readmit(self, job_id: str, reason: str) -> dict:
        """The job lost its workers: be placed again like a new arrival."""
        self.drain()
        return self._call("readmit", job_id, reason, self.tokens.get(job_id))

    def close(self) -> None:
        """Stop heartbeats."""
        self._stop.set()

    # -- internals ------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> Any:
        import ray
        deadline = time.monotonic() + self.retry_for_s
        while True:
            try:
                return ray.get(getattr(self.handle, method).remote(*args))
            except Exception as exc:
                if not _actor_died(exc) or time.monotonic() > deadline:
                    raise
            self.retries += 1
            time.sleep(0.2)  # Ray is restarting the actor; it replays its journal
            self.drain()      # releases the old instance may have lost go first

    def _resend(self, args: tuple) -> None:
        from rollmux.live.service import ServiceError
        try:
            self._call("release", *args)
        except ServiceError as exc:
            if "holds no" not in str(exc):  # applied before the restart: nothing to do
                raise

    def _beat(self, every_s: float) -> None:
        import ray
        wait = every_s
        while not self._stop.wait(wait):
            wait = every_s
            for job_id, token in list(self.tokens.items()):
                try:
                    ray.get(self.handle.heartbeat.remote(job_id, token, self.nodes.get(job_id)),
                            timeout=every_s * 4)
                except Exception:  # noqa: BLE001 -- a restarting service: beat again soon
                    wait = min(every_s, 0.1)


class CorePermitClient:
    """The same calls on an in-process `SchedulerCore` (tests, benchmarks, `rollmux chaos`)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.tokens: dict[str, str] = {}

    def submit(self, record: dict) -> dict:
        """Submit a job and keep its token."""
        out = self.core.submit(record)
        self.tokens[out["job_id"]] = out["token"]
        return out

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Block until the permit is granted."""
        return _grant(self.core.acquire(job_id, phase, self.tokens.get(job_id)))

    def tail_started(self, job_id: str) -> None:
        """Report a tail-bound rollout."""
        self.core.tail_started(job_id, self.tokens.get(job_id))

    def release(self, timings: PhaseTimings) -> None:
        """Release with the measured timings."""
        self.core.release(timings.job_id, timings.phase, asdict(timings), self.tokens.get(timings.job_id))

    def heartbeat(self, job_id: str, nodes: list[str] | None = None) -> dict:
        """Tell the service the job is alive (and where its workers run)."""
        return self.core.heartbeat(job_id, self.tokens.get(job_id), nodes)

    def finish(self, job_id: str) -> None:
        """The job is done."""
        self.core.finish(job_id, self.tokens.get(job_id))

    def readmit(self, job_id: str, reason: str) -> dict:
        """The job lost its workers: be placed again."""
        return self.core.readmit(job_id, reason, self.tokens.get(job_id))
