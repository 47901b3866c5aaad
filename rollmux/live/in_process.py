"""The scheduler core's synchronous API, for in-process callers (tests, benchmarks, chaos).

A mixin of `SchedulerCore`: each call posts the operation to the scheduler
thread and blocks for its committed result. A job passes its own token; the
embedding program acts as the admin by passing none to `submit`.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

ADMIN = "<admin>"  # the caller identity of the admin token (never a job id: job ids are validated names)


class InProcessApi:
    """Blocking wrappers around `request` (a mixin of SchedulerCore)."""

    def request(self, op: str, *args: Any) -> Future: ...
    def caller(self, token: Any, job_id: Any = None, route: str | None = None) -> str: ...
    def parse_job(self, record: Any) -> Any: ...

    # -- the synchronous API (in-process callers: tests, benchmarks, chaos) ---------------------
    def submit(self, record: dict, token: str | None = None) -> dict:
        """Validate and place a job as the admin; returns its token and where it went."""
        return self.request("submit", self._sync_caller(token, None, admin=True), self.parse_job(record)).result()

    def acquire(self, job_id: str, phase: str, token: str | None = None, last_grant: int | None = None) -> dict:
        """Block until the job may run `phase`; returns the permit (with the job's placement)."""
        return self.request("acquire", self._sync_caller(token, job_id), job_id, phase, last_grant).result().result()

    def release(self, job_id: str, phase: str, timings: dict, token: str | None = None) -> dict:
        """The job ended a phase with these measured timings; a train phase ends an iteration."""
        return self.request("release", self._sync_caller(token, job_id), job_id, phase, timings,
                            timings.get("grant_no") if isinstance(timings, dict) else None).result()

    def tail_started(self, job_id: str, token: str | None = None) -> None:
        """The job's rollout is tail-bound."""
        self.request("progress", self._sync_caller(token, job_id), job_id, 1, 1).result()

    def heartbeat(self, job_id: str, token: str | None = None, nodes: list[str] | None = None) -> dict:
        """The job is alive (and its workers run on these Ray nodes); returns its placement."""
        return self.request("heartbeat", self._sync_caller(token, job_id), job_id, nodes).result()

    def finish(self, job_id: str, token: str | None = None) -> None:
        """The job is done: it leaves its group (an empty group releases its nodes)."""
        self.request("finish", self._sync_caller(token, job_id), job_id).result()

    def readmit(self, job_id: str, reason: str, token: str | None = None) -> dict:
        """The job lost its workers: reclaim its permits and place it again like a new arrival."""
        return self.request("heartbeat", self._sync_caller(token, job_id), job_id, None, reason).result()

    def nodes_lost(self, dead: set[str]) -> list[str]:
        """Ray nodes died: every job with workers there is re-admitted."""
        return self.request("nodes_lost", set(dead)).result()

    def node_up(self, node_id: str, pool: str) -> None:
        """A node of `pool` is alive: it adds capacity and serves the queue (live/inventory.py)."""
        self.request("node_up", node_id, pool).result()

    def node_down(self, node_id: str) -> list[str]:
        """A node is gone: the jobs bound to it are placed again; returns them."""
        return self.request("node_down", node_id).result()

    def status(self) -> dict:
        """Groups, members, whose turn it is on each node, and each job's iteration time vs SLO."""
        return self.request("status", ADMIN).result()

    def dump(self) -> dict:
        """The whole state as a journal snapshot would hold it (JSON-native)."""
        return self.request("dump").result()

    def _sync_caller(self, token: Any, job_id: Any, admin: bool = False) -> str:
        """In-process callers: a job passes its token; the admin (the embedding program) none."""
        if admin and token is None:
            return ADMIN
        return self.caller(token, job_id)
